//! Where an assembly error is: the public error type and the source position that makes it.

use std::rc::Rc;

/// An assembly error at a source position. Displays as `file:line:column: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct AsmError {
    /// Source file name.
    pub file: String,
    /// Line, from 1.
    pub line: u32,
    /// Column (in characters), from 1.
    pub column: u32,
    /// What is wrong.
    pub message: String,
}

/// A source position.
#[derive(Debug, Clone)]
pub(super) struct Loc {
    pub(super) file: Rc<str>,
    pub(super) line: u32,
    /// The line's text, to turn byte offsets into character columns.
    pub(super) text: Rc<str>,
}

impl Loc {
    pub(super) fn err(&self, byte_col: usize, message: impl Into<String>) -> AsmError {
        let column = self
            .text
            .get(..byte_col)
            .map_or(byte_col, |s| s.chars().count()) as u32
            + 1;
        AsmError {
            file: self.file.to_string(),
            line: self.line,
            column,
            message: message.into(),
        }
    }
}

pub(super) type PResult<T> = Result<T, (usize, String)>;
