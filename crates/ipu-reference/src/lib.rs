//! ipu-reference
