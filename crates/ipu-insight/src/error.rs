//! The crate's error type.

use std::path::PathBuf;

/// Errors of reading runs, drawing them and keeping them.
#[derive(Debug, thiserror::Error)]
pub enum InsightError {
    /// A file of the run directory is missing or unreadable.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The profile does not describe a `run` call this crate can lay out.
    #[error("profile: {0}")]
    Profile(String),
    /// The database refused.
    #[error("run database {0}")]
    Db(String),
}
