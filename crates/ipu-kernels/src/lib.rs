//! Worker kernels, generated as machine code and specialised per use (element type, operation,
//! FP8 format and scale). Every kernel starts with its vertex state address in `$m0`, reads
//! its state words, does its work and `exit`s. Their cycle models (`*_slots`) are what the
//! planner and the final costing use; the simulator measures the real figure.
//!
//! Reads may run up to [`OVERREAD_BYTES`] past the end of an input range (software pipelining
//! loads ahead); storage placement gives every buffer that much slack.
//!
//! Where things live: [`Kernel`] and its dispatch ([`generate`], [`Kernel::state_kind`]) in
//! `kernel`; the plain types the generators read ([`Elem`], [`BinOp`], [`UnOp`],
//! [`CastType`]) and the shared sizes in `types`; the vertex states in [`state`]; the code
//! layout in [`code`]; each family's generators and cycle models in its own module (`basic`,
//! `unary`, `convert`, `map`, `gather`, [`rows`], [`flash`]). This file only declares the
//! modules and re-exports their public items.

mod basic;
pub mod code;
mod convert;
pub mod flash;
mod gather;
mod kernel;
mod map;
pub mod rows;
pub mod state;
mod types;
mod unary;

pub use basic::*;
pub use convert::{ConvType, convert_slots, int_binary_slots};
pub use gather::{
    gather_columns_bound_slots, gather_columns_slots, gather_rows_bound_slots, gather_rows_slots,
    or_words_slots,
};
pub use ipu_numerics::ByteType;
pub use ipu_numerics::MapFn;
pub use ipu_numerics::UnaryFn;
pub use kernel::{Kernel, generate};
pub use map::{map_slots, map_supported};
pub use state::*;
pub use types::{BinOp, CastType, Elem, OVERREAD_BYTES, UnOp, vector_elements};
pub use unary::{scale_halves_slots, unary_slots};
