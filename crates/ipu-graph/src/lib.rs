//! ipu-graph
