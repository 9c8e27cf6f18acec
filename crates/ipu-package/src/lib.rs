//! ipu-package
