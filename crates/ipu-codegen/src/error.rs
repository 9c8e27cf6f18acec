//! The compiler's errors: each names the user's operation and the figures a user needs.

use std::fmt;

/// Errors of the compiler. Each names the user's operation (the graph value it computes, never
/// an internal intermediate) and the figures a user needs; `kind` (via [`CodegenError::kind`]
/// and the `serde` form, `{"kind": "does_not_fit", ...}`) is what tools match on.
#[derive(Debug, Clone, PartialEq, thiserror::Error, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CodegenError {
    /// The options are invalid.
    #[error("{message}")]
    Options {
        /// What is wrong.
        message: String,
    },
    /// The graph is not valid.
    #[error("invalid graph: {message}")]
    Graph {
        /// The verifier's message.
        message: String,
    },
    /// An operation or type the device lowering does not handle.
    #[error("{op}: unsupported: {reason}")]
    Unsupported {
        /// The user's operation (or value).
        op: String,
        /// Why.
        reason: String,
    },
    /// The graph does not fit in tile memory.
    #[error(
        "{}does not fit in tile memory: {detail} ({}{region} memory: {need_bytes} bytes needed, {available_bytes} available, {} bytes over)",
        op.as_ref().map(|o| format!("{o}: ")).unwrap_or_default(),
        tile.map(|t| format!("tile {t}, ")).unwrap_or_default(),
        need_bytes.saturating_sub(*available_bytes)
    )]
    DoesNotFit {
        /// The user's operation the memory is for (none for program-wide code).
        op: Option<String>,
        /// The tile, when one tile is at fault (planning refusals concern the busiest tile of a
        /// mapping, not a fixed one).
        tile: Option<u32>,
        /// The memory region.
        region: MemoryRegion,
        /// Bytes needed.
        need_bytes: u64,
        /// Bytes available.
        available_bytes: u64,
        /// What needs the memory, in words.
        detail: String,
    },
    /// A checker found a broken invariant: a compiler bug.
    #[error("internal compiler error: {message}")]
    Internal {
        /// The broken invariant.
        message: String,
    },
}

/// The part of tile memory a [`CodegenError::DoesNotFit`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryRegion {
    /// Anywhere in data memory (standard and interleaved).
    Any,
    /// Interleaved memory (AMP weights, 128-bit loads).
    Interleaved,
    /// Executable (non-interleaved) memory, for code.
    Executable,
}

impl fmt::Display for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemoryRegion::Any => "data",
            MemoryRegion::Interleaved => "interleaved",
            MemoryRegion::Executable => "executable",
        })
    }
}

impl CodegenError {
    /// The error's kind in snake case, as in the JSON form.
    pub fn kind(&self) -> &'static str {
        match self {
            CodegenError::Options { .. } => "options",
            CodegenError::Graph { .. } => "graph",
            CodegenError::Unsupported { .. } => "unsupported",
            CodegenError::DoesNotFit { .. } => "does_not_fit",
            CodegenError::Internal { .. } => "internal",
        }
    }

    /// A compiler bug.
    pub fn internal(message: impl Into<String>) -> CodegenError {
        CodegenError::Internal {
            message: message.into(),
        }
    }

    /// An unsupported operation.
    pub fn unsupported(op: impl Into<String>, reason: impl Into<String>) -> CodegenError {
        CodegenError::Unsupported {
            op: op.into(),
            reason: reason.into(),
        }
    }
}

impl From<ipu_kernels::code::CodeError> for CodegenError {
    fn from(e: ipu_kernels::code::CodeError) -> CodegenError {
        CodegenError::internal(e.to_string())
    }
}
