//! ipu-sim
