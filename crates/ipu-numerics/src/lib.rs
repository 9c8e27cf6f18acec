//! ipu-numerics
