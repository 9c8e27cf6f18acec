//! Traps: what goes wrong inside an instruction, raised before the executor knows which
//! context and pc to name in the fault.

use crate::fault::FaultKind;

/// A trap inside an instruction: the fault kind and address.
/// Boxed so that every `R<T>` stays two words and comes back in registers (a `FaultKind` is
/// 72 bytes); the box is only allocated when something faults.
pub(super) type Trap = Box<(FaultKind, Option<u32>)>;
pub(super) type R<T> = Result<T, Trap>;

/// A trap of `kind` at `addr`.
#[cold]
#[inline(never)]
pub(super) fn trap(kind: FaultKind, addr: Option<u32>) -> Trap {
    Box::new((kind, addr))
}
