//! ipu-runtime
