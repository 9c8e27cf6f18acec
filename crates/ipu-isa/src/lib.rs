//! The tile instruction set: its definition ([`instr`]), the binary layouts of the tables the
//! supervisor walks ([`tables`]), the binary encoding ([`encoding`]), the text form
//! ([`text`]), the assembler ([`asm`]), assembled objects and their container ([`object`]) and
//! the disassembler ([`disasm`]). `docs/isa.md` is the specification all of them implement.

pub mod asm;
pub mod disasm;
pub mod encoding;
pub mod instr;
pub mod object;
pub mod tables;
pub mod text;

pub use asm::{AsmError, AsmOptions, Include, IncludeResolver, assemble, assemble_with};
pub use disasm::{
    DisasmError, DisasmOptions, disassemble, disassemble_object, disassemble_object_with,
    disassemble_with,
};
pub use encoding::{
    BUNDLE_FLAG, DecodeError, EncodeError, decode, decode_slot, encode, encode_bundle, encode_slot,
    validate,
};
pub use instr::*;
pub use object::{FlatImage, Object, ObjectError, Section};
pub use text::format_slot;

/// Every error of this crate, for callers that handle them together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsaError {
    /// An instruction that cannot be encoded.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// A word that does not decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// An assembly error.
    #[error(transparent)]
    Asm(#[from] AsmError),
    /// A disassembly error.
    #[error(transparent)]
    Disasm(#[from] DisasmError),
    /// A corrupt object container.
    #[error(transparent)]
    Object(#[from] ObjectError),
}
