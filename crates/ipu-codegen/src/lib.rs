//! ipu-codegen
