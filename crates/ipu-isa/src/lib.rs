//! The tile instruction set: its definition ([`instr`]), the binary layouts of the tables the
//! supervisor walks ([`tables`]), and (to come) encoding, the assembler and the disassembler.

pub mod instr;
pub mod tables;

pub use instr::*;
