//! The streamed form of an `rpt` body: which bodies [`super::streams`] can run as one loop
//! (every slot only computes, its main half a paced form through distinct pointer registers,
//! its float half an `amp` or a decoded register operation), and what the loop needs to know
//! of them, found once when the body is first resolved.

use ipu_isa::{APair, MReg};

use crate::memory::Decoded;

use super::decode::{FloatOp, MainOp};

/// A slot of a streamed body: its float half and its paced accesses.
#[derive(Clone, Copy, Debug)]
pub(super) struct StreamSlot {
    pub(super) float: FloatOp,
    /// `(destination pair, pointer register)` of each load (`loads` valid).
    pub(super) load: [(u8, u8); 2],
    pub(super) loads: u8,
    /// `(source pair, pointer register)` of the store.
    pub(super) store: Option<(u8, u8)>,
}

/// How one race-check list (reads or writes) records a body's accesses after the first
/// iteration.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum Record {
    /// Access by access.
    Each,
    /// The list sees one stream, through this register.
    One(u8),
    /// The list sees two streams, strictly alternating through these registers (the first
    /// first in every iteration).
    Two(u8, u8),
}

/// Bodies of at most this many slots are streamed (the AMP rounds have four).
const STREAM_SLOTS_MAX: usize = 8;

/// A body resolved for `Tile::run_rpt_streams`.
#[derive(Clone, Debug)]
pub(super) struct StreamBody {
    pub(super) slots: [StreamSlot; STREAM_SLOTS_MAX],
    pub(super) len: usize,
    /// Accesses per iteration through each pointer register.
    pub(super) uses: [u32; 16],
    /// Whether each pointer register is stored through.
    pub(super) stored: [bool; 16],
    pub(super) reads: Record,
    pub(super) writes: Record,
    /// Slots with two loads (each can conflict once).
    pub(super) pairs: u32,
    pub(super) amp: bool,
}

/// How a list of the pointer registers of a list's accesses in one iteration can be recorded
/// (`other`: the registers of the other list, which must not share a stream with it).
fn record(regs: &[u8], other: &[u8]) -> Record {
    if regs.is_empty() || regs.iter().any(|r| other.contains(r)) {
        return Record::Each;
    }
    if regs.iter().all(|&r| r == regs[0]) {
        return Record::One(regs[0]);
    }
    let (x, y) = (regs[0], regs[1]);
    let alternates =
        x != y && regs.len().is_multiple_of(2) && regs.chunks(2).all(|c| c[0] == x && c[1] == y);
    if alternates {
        Record::Two(x, y)
    } else {
        Record::Each
    }
}

/// The streamed form of `buf`, when every slot only computes, its main half is a paced form
/// (or none, or `nop`) whose pointers are distinct registers, and its float half is an `amp` or a decoded
/// register operation.
pub(super) fn stream_body(buf: &[(u32, Decoded)]) -> Option<StreamBody> {
    if buf.is_empty() || buf.len() > STREAM_SLOTS_MAX {
        return None;
    }
    let none = StreamSlot {
        float: FloatOp::None,
        load: [(0, 0); 2],
        loads: 0,
        store: None,
    };
    let mut b = StreamBody {
        slots: [none; STREAM_SLOTS_MAX],
        len: buf.len(),
        uses: [0; 16],
        stored: [false; 16],
        reads: Record::Each,
        writes: Record::Each,
        pairs: 0,
        amp: false,
    };
    // The pointer registers of the reads and the writes of one iteration, in order.
    let (mut reads, mut writes) = ([0u8; 2 * STREAM_SLOTS_MAX], [0u8; STREAM_SLOTS_MAX]);
    let (mut nr, mut nw) = (0, 0);
    for (k, (_, d)) in buf.iter().enumerate() {
        if !d.op.data {
            return None;
        }
        let (loads, store, pointers): (&[APair], Option<APair>, &[MReg]) = match &d.op.main {
            MainOp::None => (&[], None, &[]),
            MainOp::LdSt64Pace { d, s, p } => (std::slice::from_ref(d), Some(*s), p),
            MainOp::Ld2xSt64Pace { d, s, p } => (d, Some(*s), p),
            MainOp::Ld2x64Pace { d, p } => (d, None, p),
            MainOp::Nop => (&[], None, &[]),
            _ => return None,
        };
        let mut regs = [0u8; 3];
        for (r, p) in regs.iter_mut().zip(pointers) {
            *r = p.0 & 15;
        }
        let regs = &regs[..pointers.len()];
        if (1..regs.len()).any(|i| regs[..i].contains(&regs[i])) {
            return None;
        }
        let s = &mut b.slots[k];
        s.float = match d.op.float {
            FloatOp::Other => return None,
            FloatOp::Amp { .. } => {
                b.amp = true;
                d.op.float
            }
            f => f,
        };
        for (i, l) in loads.iter().enumerate() {
            s.load[i] = (l.0, regs[i]);
            reads[nr] = regs[i];
            nr += 1;
        }
        s.loads = loads.len() as u8;
        if let Some(st) = store {
            let p = regs[loads.len()];
            s.store = Some((st.0, p));
            writes[nw] = p;
            nw += 1;
            b.stored[p as usize] = true;
        }
        for &r in regs {
            b.uses[r as usize] += 1;
        }
        if loads.len() == 2 {
            b.pairs += 1;
        }
    }
    b.reads = record(&reads[..nr], &writes[..nw]);
    b.writes = record(&writes[..nw], &reads[..nr]);
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_of_paced_streams_are_recognised_and_others_are_not() {
        assert_eq!(record(&[1, 1, 1], &[3]), Record::One(1));
        assert_eq!(record(&[1, 2, 1, 2], &[3]), Record::Two(1, 2));
        assert_eq!(record(&[1, 2, 2, 1], &[3]), Record::Each);
        assert_eq!(record(&[1, 2, 1], &[3]), Record::Each);
        assert_eq!(
            record(&[1, 3], &[3]),
            Record::Each,
            "a register in both lists"
        );
        assert_eq!(record(&[], &[3]), Record::Each);
    }
}
