//! The tile instruction set: its definition ([`instr`]), the binary layouts of the tables the
//! supervisor walks ([`tables`]), the binary encoding ([`encoding`]), the text form
//! ([`text`]), the assembler ([`asm`]), the object container ([`object`]) and the disassembler
//! ([`disasm`]). `docs/isa.md` is the specification all of them implement.

pub mod encoding;
pub mod instr;
pub mod tables;

pub use encoding::{
    BUNDLE_FLAG, DecodeError, EncodeError, decode, decode_slot, encode, encode_bundle, encode_slot,
    validate,
};
pub use instr::*;
