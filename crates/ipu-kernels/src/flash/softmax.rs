//! [`flash_softmax`]: a block of scores to probabilities and row statistics.

use ipu_isa::{APair, AluOp, ConvOp, FBinOp, FType, FUnOp, Instr, MReg, RedOp};

use super::*;
use crate::state::*;
use crate::types::Elem;

/// The arithmetic of one unit of four scores in the f32v2 pairs `$a{lo}:..`, `$a{hi}:..`:
/// `p = exp(s * scale - m)` in place (the scale in `$a8:9` when `scaled`, `m` in the pair
/// `$a{mx}:..`), and `p` added lane-wise to the sum in `$a10:11` (with `starts_sum`, the row's
/// first unit, moved into it: `0 + p` is `p`).
fn probabilities(scaled: bool, lo: u8, hi: u8, mx: u8, starts_sum: bool) -> Vec<Instr> {
    let v = FType::F32v2;
    let mut float = Vec::new();
    if scaled {
        float.push(fbin(v, FBinOp::Mul, lo, lo, 8));
        float.push(fbin(v, FBinOp::Mul, hi, hi, 8));
    }
    float.extend([
        fbin(v, FBinOp::Sub, lo, lo, mx),
        fbin(v, FBinOp::Sub, hi, hi, mx),
        fun(v, FUnOp::Exp, lo, lo),
        fun(v, FUnOp::Exp, hi, hi),
        if starts_sum {
            fun(v, FUnOp::Mov, 10, lo)
        } else {
            fbin(v, FBinOp::Add, 10, 10, lo)
        },
        fbin(v, FBinOp::Add, 10, 10, hi),
    ]);
    float
}

/// Bytes from a row's statistics to the word [`flash_softmax`]'s statistics pointer holds
/// (the sum's).
const ST_BIAS: i16 = 4;

/// Where pass 2 of f32 scores keeps the row's maximum (both lanes).
const PASS2_M: u8 = 14;

/// A Main-class op issued beside a run of float ops ([`co_issue`]): in the bundle at index
/// `earliest` or a later one (after the float op whose result it reads), by the bundle at
/// index `latest` (before the float op that reads its result), after the ops before it in the
/// list that share its `chain`.
#[derive(Debug, Clone, Copy)]
struct Beside {
    op: Instr,
    earliest: usize,
    latest: usize,
    chain: u8,
}

impl Beside {
    fn new(op: Instr, chain: u8) -> Beside {
        Beside {
            op,
            earliest: 0,
            latest: usize::MAX,
            chain,
        }
    }

    fn from(self, earliest: usize) -> Beside {
        Beside { earliest, ..self }
    }

    fn by(self, latest: usize) -> Beside {
        Beside { latest, ..self }
    }
}

/// Places `mains` beside `floats` float ops, a bundle each: in each bundle the first op of
/// the list that may go there. Returns each bundle's Main op and those left over, in list
/// order, to issue alone after the bundles.
fn co_issue(floats: usize, mains: &[Beside]) -> (Vec<Option<Instr>>, Vec<Instr>) {
    let mut placed: Vec<Option<usize>> = vec![None; mains.len()];
    let mut per = vec![None; floats];
    for (i, slot) in per.iter_mut().enumerate() {
        let ready = |j: usize| {
            placed[j].is_none()
                && mains[j].earliest <= i
                && (0..j)
                    .all(|e| mains[e].chain != mains[j].chain || placed[e].is_some_and(|b| b < i))
        };
        if let Some(j) = (0..mains.len()).find(|&j| ready(j)) {
            placed[j] = Some(i);
            *slot = Some(mains[j].op);
        }
    }
    for (b, at) in mains.iter().zip(&placed) {
        assert!(
            b.latest == usize::MAX || at.is_some_and(|i| i <= b.latest),
            "flash_softmax: {:?} misses its bundle",
            b.op
        );
    }
    let left = mains
        .iter()
        .zip(&placed)
        .filter(|(_, at)| at.is_none())
        .map(|(b, _)| b.op)
        .collect();
    (per, left)
}

/// Issue slots of `float` ops in bundles (`exp` and the other transcendental ops take two).
fn float_slots(floats: &[Instr]) -> u32 {
    floats
        .iter()
        .map(|f| match f {
            Instr::FUn { op, .. } => op.slots(),
            _ => 1,
        })
        .sum()
}

/// Emits `floats` in bundles with `mains` beside them ([`co_issue`]) from an 8-byte boundary,
/// the ops left over alone after them, ending on an even word.
fn emit_co_issued(c: &mut Code, floats: &[Instr], mains: &[Beside]) {
    let (per, left) = co_issue(floats.len(), mains);
    for (&f, main) in floats.iter().zip(per) {
        c.bundle(main.unwrap_or(Instr::Nop), f);
    }
    c.main_ops_ending(&left, false);
}

/// Issue slots of [`emit_co_issued`].
fn co_issued_slots(floats: &[Instr], mains: &[Beside]) -> u32 {
    float_slots(floats) + co_issue(floats.len(), mains).1.len() as u32
}

/// The float ops of a row of f32 scores between its two passes, and the Main ops beside them:
/// pass 1's last `max`; the maximum reduced, scaled, merged with the running one (its load
/// beside), stored, floored, and broadcast for pass 2; with `running` the rescaling factor
/// `exp(m_old - m_new)` as a pair (stored through the factors' pointer `$m15`); beside them
/// too, pass 2's group pointers and its first unit's loads. Registers: pass 1's maximum in
/// `$a4:5` (its last `max` reads `$a2:3`), the running maximum in `$a6`, the floor in `$a7` or
/// `$a5`, the factor's pair in `$a6:7`.
fn between_passes_f32(
    q1: u32,
    scaled: bool,
    running: bool,
    floored_max: bool,
    [s_groups, p_groups]: [u32; 2],
    baked: bool,
) -> (Vec<Instr>, Vec<Beside>) {
    let (s, p, st, stride) = (m(1), m(2), m(3), m(6));
    let (ps, pp, floor, factors) = ([m(8), m(9)], [m(10), m(11)], m(0), m(15));
    let f32 = FType::F32;
    let mut floats = vec![
        fbin(FType::F32v2, FBinOp::Max, 4, 4, 2 * ((q1 - 1) % 2) as u8),
        fbin(f32, FBinOp::Max, 4, 4, 5),
    ];
    if scaled {
        floats.push(fbin(f32, FBinOp::Mul, 4, 4, 8));
    }
    // The float op that completes the row's maximum in $a4.
    let done = floats.len() - 1;
    // The list's order is the order of preference: the loads the float ops wait for, pass 2's
    // pointers and first loads, the stores. Chains: the statistics' (0: the running maximum's
    // load before its store), pass 2's scores (1: the pointers before the loads) and
    // probabilities (2).
    let (mut first, mut last) = (Vec::new(), Vec::new());
    if running {
        // m_new = max(m_old, m); alpha = exp(max(m_old, -MAX) - max(m_new, -MAX)) with -MAX the
        // floor (without `floored_max` every maximum is finite: no floor).
        first.push(Beside::new(ld32a(a(6), st, -ST_BIAS), 0).by(done));
        if floored_max {
            first.push(Beside::new(mov_a(7, floor), 3).by(done + 1));
        }
        floats.push(fbin(f32, FBinOp::Max, 4, 4, 6));
        last.push(Beside::new(st32_a(4, st, -ST_BIAS), 0).from(done + 2));
        let m_new = if floored_max {
            floats.push(fbin(f32, FBinOp::Max, 6, 6, 7));
            floats.push(fbin(f32, FBinOp::Max, 5, 4, 7));
            5
        } else {
            4
        };
        floats.push(fbin(f32, FBinOp::Sub, 6, 6, m_new));
        floats.push(fun(f32, FUnOp::Exp, 6, 6));
        floats.push(bcast(6, 6));
        last.push(Beside::new(st64step(ap(6), factors, 8), 0).from(floats.len()));
        floats.push(bcast(PASS2_M, m_new));
    } else if floored_max {
        // The maximum stored, then floored (the floor's move beside the `max` that last reads
        // $a5).
        first.push(Beside::new(mov_a(5, floor), 0).from(1).by(done));
        first.push(
            Beside::new(st32_a(4, st, -ST_BIAS), 0)
                .from(done + 1)
                .by(done + 1),
        );
        floats.push(fbin(f32, FBinOp::Max, 4, 4, 5));
        floats.push(bcast(PASS2_M, 4));
    } else {
        last.push(Beside::new(st32_a(4, st, -ST_BIAS), 0).from(done + 1));
        floats.push(bcast(PASS2_M, 4));
    }
    let mut mains = first;
    // Pass 2's pointers (with the stride built in, `D` ($m7) back from where pass 1 left the
    // row's), then its first unit's scores (`Pass2::loads`).
    let ps_ops = if baked {
        let mut ops = vec![alu(AluOp::Sub, ps[0], s, m(7))];
        if s_groups == 2 {
            ops.push(alu(AluOp::Add, ps[1], ps[0], stride));
        }
        ops
    } else {
        group_pointer_ops(ps, s, stride, s_groups)
    };
    mains.extend(
        ps_ops
            .into_iter()
            .chain([ld64step(ap(0), ps[0], 8), ld64step(ap(2), ps[0], 8)])
            .map(|op| Beside::new(op, 1)),
    );
    mains.extend(
        group_pointer_ops(pp, p, stride, p_groups)
            .into_iter()
            .map(|op| Beside::new(op, 2)),
    );
    mains.extend(last);
    (floats, mains)
}

/// Pass 2 of [`flash_softmax`] for f32 scores, and for f16 scores with f16 probabilities
/// (`half`): units of four keys software-pipelined over the whole row. For f32 scores unit `k`
/// computes in one register quad (`$a0:3` or `$a4:7`, alternating; `m` is in `$a14:15`, and
/// f16 probabilities narrow into `$a12:13` with one `f32v4tof16`) while the scores of unit
/// `k + 1` load into the other and the probabilities of unit `k - 1` store, all co-issued with
/// its arithmetic; the group pointers advance beside them. Every float op is the second half of
/// a bundle, so no `nop` aligns them: the row costs its float slots plus a fixed few. The
/// super-groups but the last run in an `rpt` whose body is the units `1..units` of one
/// super-group and unit 0 of the next.
struct Pass2<'a> {
    scaled: bool,
    a_ty: Elem,
    /// f16 scores and probabilities: a unit is one f16v4 pair (`$a0:1` or `$a4:5`, with `$a2`
    /// or `$a3` for its lanes' f32 sum), computed as the expansion's f16 operations round,
    /// the row's maximum in `$a6:7`.
    half: bool,
    /// Units of four keys per super-group.
    units: u32,
    /// The score and probability pointer of a unit of a super-group.
    sptr: &'a dyn Fn(u32) -> MReg,
    pptr: &'a dyn Fn(u32) -> MReg,
    adv_s: MReg,
    adv_p: MReg,
    /// The super-groups less one: the `rpt` count.
    sgroups: MReg,
    /// f32 scores (`Some((running, baked))`): the first unit's scores already loaded
    /// ([`between_passes_f32`]), the row's pointers advanced beside the lead units (with the
    /// stride built in, the scores' back from where pass 1 left it), and the row's end (its
    /// sum, merged with the running one, stored) beside the last stores.
    fused: Option<(bool, bool)>,
}

impl Pass2<'_> {
    /// The register pairs of the unit at position `k` of the row.
    fn set(&self, k: u32) -> (u8, u8) {
        match (self.half, k.is_multiple_of(2)) {
            (false, true) => (0, 2),
            (false, false) => (4, 6),
            (true, true) => (0, 2),
            (true, false) => (4, 3),
        }
    }

    fn float(&self, k: u32) -> Vec<Instr> {
        if self.half {
            let (d, t) = self.set(k);
            let mut float = Vec::new();
            if self.scaled {
                float.extend([
                    conv(ConvOp::F16v2ToF32v2, 12, d),
                    conv(ConvOp::F16v2ToF32v2, 14, d + 1),
                    fbin(FType::F32v2, FBinOp::Mul, 12, 12, 8),
                    fbin(FType::F32v2, FBinOp::Mul, 14, 14, 8),
                    conv(ConvOp::F32v2ToF16v2, d, 12),
                    conv(ConvOp::F32v2ToF16v2, d + 1, 14),
                ]);
            }
            float.extend([
                fbin(FType::F16v4, FBinOp::Sub, d, d, 6),
                fun(FType::F16v4, FUnOp::Exp, d, d),
                Instr::FReduce {
                    ty: FType::F16v4,
                    op: RedOp::Sum,
                    d: a(t),
                    a: ap(d),
                },
                fbin(FType::F32, FBinOp::Add, 10, 10, t),
            ]);
            return float;
        }
        let (lo, hi) = self.set(k);
        if self.a_ty == Elem::F32 {
            return probabilities(self.scaled, lo, hi, PASS2_M, k == 0);
        }
        // f16 probabilities: the shifted scores narrow first and `exp` runs on f16v4, four
        // keys in two slots; the sum is of the f16 probabilities `P v` multiplies.
        let v = FType::F32v2;
        let mut float = Vec::new();
        if self.scaled {
            float.push(fbin(v, FBinOp::Mul, lo, lo, 8));
            float.push(fbin(v, FBinOp::Mul, hi, hi, 8));
        }
        float.extend([
            fbin(v, FBinOp::Sub, lo, lo, PASS2_M),
            fbin(v, FBinOp::Sub, hi, hi, PASS2_M),
            conv(ConvOp::F32v4ToF16v4, 12, lo),
            fun(FType::F16v4, FUnOp::Exp, 12, 12),
        ]);
        let sum = |d: u8| Instr::FReduce {
            ty: FType::F16v4,
            op: RedOp::Sum,
            d: a(d),
            a: ap(12),
        };
        // The row's first two units start the sums `$a10` and `$a11` with their lane sums;
        // they run before the `rpt` (`Pass2::lead`).
        if k < 2 {
            float.push(sum(10 + k as u8));
        } else if self.scaled {
            // `$a8:9` holds the scale: a unit's lane sum goes to its own quad's first register
            // (free once narrowed), then into the sum of its parity.
            let acc = 10 + (k % 2) as u8;
            float.push(sum(lo));
            float.push(fbin(FType::F32, FBinOp::Add, acc, acc, lo));
        } else if k.is_multiple_of(2) {
            float.push(sum(8));
        } else {
            // Two units' lane sums in `$a8:9`, added to `$a10:11` as a pair.
            float.push(sum(9));
            float.push(fbin(v, FBinOp::Add, 10, 10, 8));
        }
        float
    }

    /// The loads of unit `u` of a super-group, at position `k` of the row.
    fn loads(&self, u: u32, k: u32) -> Vec<Instr> {
        let (lo, hi) = self.set(k);
        let ptr = (self.sptr)(u);
        if self.half {
            return vec![ld64step(ap(lo), ptr, 8)];
        }
        vec![ld64step(ap(lo), ptr, 8), ld64step(ap(hi), ptr, 8)]
    }

    /// The stores of unit `u` of a super-group, at position `k` of the row.
    fn stores(&self, u: u32, k: u32) -> Vec<Instr> {
        let (lo, hi) = self.set(k);
        let ptr = (self.pptr)(u);
        if self.half {
            return vec![st64step(ap(lo), ptr, 8)];
        }
        match self.a_ty {
            Elem::F16 => vec![st64step(ap(12), ptr, 8)],
            Elem::F32 => vec![st64step(ap(lo), ptr, 8), st64step(ap(hi), ptr, 8)],
        }
    }

    /// The Main-class ops of unit `u` of a super-group at position `k` of the row: the stores
    /// of the unit before, the loads of the next (`next`), and with `advance` each pointer's
    /// advance to the next super-group after its last access in this one.
    fn main(&self, u: u32, k: u32, advance: bool, next: bool) -> Vec<Instr> {
        let n = self.units;
        let mut ops = Vec::new();
        if k > 0 {
            let pu = (u + n - 1) % n;
            ops.extend(self.stores(pu, k - 1));
            if advance && (pu + 1 == n || (self.pptr)(pu + 1) != (self.pptr)(pu)) {
                let ptr = (self.pptr)(pu);
                ops.push(alu(AluOp::Add, ptr, ptr, self.adv_p));
            }
        }
        if next {
            let nu = (u + 1) % n;
            ops.extend(self.loads(nu, k + 1));
            if advance && (nu + 1 == n || (self.sptr)(nu + 1) != (self.sptr)(nu)) {
                let ptr = (self.sptr)(nu);
                ops.push(alu(AluOp::Add, ptr, ptr, self.adv_s));
            }
        }
        ops
    }

    /// Emits the pass after the Main-class set-up `pre`.
    fn emit(&self, c: &mut Code, mut pre: Vec<Instr>) {
        let n = self.units;
        if self.fused.is_none() {
            pre.extend(self.loads(0, 0));
        }
        c.main_ops_ending(&pre, false);
        // The lead units, the last one's last Main op alone after it: the `rpt` then starts on
        // an odd word and its body of bundles on an even one. Fused, the row's pointers
        // advance in the lead's free Main halves.
        let lead = self.lead();
        let mut extra = self.lead_extra().into_iter();
        for k in 0..lead {
            let mut main = self.main(k, k, true, true);
            let room = self.float(k).len().saturating_sub(main.len());
            main.extend(extra.by_ref().take(room));
            if k + 1 == lead {
                let last = main.pop().unwrap_or(Instr::Nop);
                c.bundles(&main, &self.float(k));
                c.op(last);
            } else {
                c.bundles(&main, &self.float(k));
            }
        }
        let body: Vec<_> = (lead..lead + n)
            .map(|k| (self.main(k % n, k, true, true), self.float(k)))
            .collect();
        let issues: usize = body.iter().map(|(_, f)| f.len()).sum();
        c.rpt_bundles(Instr::Rpt {
            count: self.sgroups,
            body: issues as u8,
        });
        for (main, float) in &body {
            c.bundles(main, float);
        }
        assert!(
            extra.next().is_none(),
            "flash_softmax: no room for the row's pointers"
        );
        // The last super-group: no advances, no load after its last unit; fused and running,
        // its last unit loads the running sum and the factor into the quad the unit before
        // it has finished with.
        for k in lead..n {
            let mut main = self.main(k, k, false, k + 1 < n);
            if k + 1 == n {
                main.extend(self.last_extra());
            }
            c.bundles(&main, &self.float(k));
        }
        let stores = self.stores(n - 1, n - 1);
        let Some((running, _)) = self.fused else {
            for op in stores {
                c.op(op);
            }
            return;
        };
        // The row's end beside the last stores: the sum's lanes added, merged with the running
        // one (`l_old * alpha + sum`), stored, stepping the statistics pointer.
        let float = self.end_float(running);
        for i in 0..stores.len().max(float.len()) {
            match (stores.get(i), float.get(i)) {
                (Some(&s), Some(&f)) => {
                    c.bundle(s, f);
                }
                (Some(&op), None) | (None, Some(&op)) => {
                    c.op(op);
                }
                (None, None) => {}
            }
        }
        c.op(st32step_a(a(10), m(3), GROUP_ROW_BYTES as i16));
    }

    /// The fused form's Main ops in the lead: the row's scores and probabilities pointers to
    /// the next row (pass 2's group pointers already hold this row's).
    fn lead_extra(&self) -> Vec<Instr> {
        match self.fused {
            Some((_, baked)) => vec![
                if baked {
                    alu(AluOp::Sub, m(1), m(1), m(12))
                } else {
                    alu_imm(AluOp::Add, m(1), m(1), GROUP_ROW_BYTES as i16)
                },
                alu_imm(AluOp::Add, m(2), m(2), GROUP_ROW_BYTES as i16),
            ],
            None => Vec::new(),
        }
    }

    /// The fused running form's Main ops in the last unit: the running sum (statistics' second
    /// word) and the factor (the pair stored last through `$m15`) into the quad of the unit
    /// before.
    fn last_extra(&self) -> Vec<Instr> {
        if !matches!(self.fused, Some((true, _))) {
            return Vec::new();
        }
        let (lo, _) = self.set(self.units - 2);
        vec![ld32a(a(lo), m(3), 4 - ST_BIAS), ld32a(a(lo + 1), m(15), -8)]
    }

    /// The fused form's float ops at the row's end.
    fn end_float(&self, running: bool) -> Vec<Instr> {
        let mut float = vec![fbin(FType::F32, FBinOp::Add, 10, 10, 11)];
        if running {
            let (lo, _) = self.set(self.units - 2);
            float.push(fbin(FType::F32, FBinOp::Mac, 10, lo, lo + 1));
        }
        float
    }

    /// Units of the row's first super-group before the `rpt`: those whose arithmetic starts
    /// the row's sums (two for f16 probabilities from f32 scores, else one).
    fn lead(&self) -> u32 {
        if !self.half && self.a_ty == Elem::F16 {
            2
        } else {
            1
        }
    }

    /// Issue slots of [`Pass2::emit`] over `super_groups`, after `pre` set-up ops; `fused`
    /// as [`Pass2::fused`], with the row's end but its `brnzdec`.
    fn slots(
        (scaled, a_ty, half): (bool, Elem, bool),
        units: u32,
        super_groups: u32,
        pre: u32,
        fused: Option<bool>,
    ) -> u32 {
        let n = super_groups * units;
        // The row's float slots, its first unit's loads and its last unit's stores.
        let (float, loads, stores) = match (half, a_ty) {
            // f16v4: subtract, `exp` (two slots), sum and add, with the scale's widening,
            // multiplications and narrowing when scaled.
            (true, _) => ((5 + if scaled { 6 } else { 0 }) * n, 1, 1),
            // The subtractions, `exp`s (two slots each) and additions, with the scale's
            // multiplications when scaled.
            (false, Elem::F32) => ((8 + if scaled { 2 } else { 0 }) * n, 2, 2),
            // The subtractions, the narrowing, one f16v4 `exp` (two slots), the lane sum and,
            // scaled, the multiplications and an addition a unit; unscaled, an addition every
            // second unit (`units` is even: [`flash_softmax`] checks it). The first two units
            // store their lane sums as the row's sums: one slot less each scaled, the pair's
            // addition less unscaled.
            (false, Elem::F16) => (if scaled { 9 * n - 2 } else { 6 * n + n / 2 - 1 }, 2, 1),
        };
        // The set-up and the first loads, the lead's last Main op alone, the `rpt`, the units
        // and the last stores; fused, the first loads are before, and the row's end (one or
        // two float ops beside the last stores, the sum's store) after.
        match fused {
            None => pre + loads + 1 + 1 + float + stores,
            Some(running) => 1 + 1 + float + stores.max(1 + u32::from(running)) + 1,
        }
    }
}

/// Scores to probabilities, per row: `m = max_k(s_k) * scale`, `p_k = exp(s_k * scale - m)`
/// stored as `a_ty` in the `P` layout, `l = sum_k p_k` (in f32, two lanes then added);
/// `m` and `l` are stored at the row's statistics. f16 probabilities from f32 scores are
/// `p_k = f16(exp(f16(s_k * scale - m)))`: the shifted score narrows first and `exp` runs on
/// f16v4 (four keys in two slots, against two f32v2 `exp`s of two slots each), and `l` is the
/// f32 sum of those f16 `p_k`, the values `P v` multiplies (each unit's four lanes summed, then
/// added into two lanes). Keys are visited in super-groups of
/// `max(cols, kb)` keys (`cols`: the score layout's group, `kb`: the probability layout's).
///
/// State: S (row 0, group 0), P (row 0, group 0), statistics (row 0), rows, super-groups,
/// group stride (bytes, `R * 32`), scale (f32 bits).
///
/// Without `scaled`, the scores arrive already scaled (`q` was multiplied by a power-of-two
/// scale, exactly): the multiplications by the scale are left out.
///
/// f16 scores and probabilities compute four keys at a time in f16, as the expansion's f16
/// operations round: `t = f16(s * scale)` (in f32, then narrowed), `m` the f16 maximum,
/// `p = f16(exp(f16(t - m)))`, and `l` the f32 sum of the f16 `p`, four lanes at a time.
///
/// With `running`, the row's statistics already hold the maximum and sum of earlier keys: the
/// new maximum is the larger, the rescaling factor `alpha = exp(m_old - m_new)` is stored after
/// them (third word, for `flash_rescale`), and the sum becomes `l_old * alpha + sum`.
///
/// With `floored_max`, a row's maximum is floored at the lowest finite value before the
/// probabilities and the factor use it, so a row that sees no key (all `-inf`: a causal or
/// mask operand's) gets probabilities 0 and a factor 1, not NaN; without it (no row can see
/// no key: every maximum is finite, and the floor would change nothing) the floor's slots are
/// left out. f16 probabilities from f16 scores always floor.
///
/// For f32 scores a row costs its float slots and few more: the Main ops between the passes
/// (the running maximum's load, the statistics' stores, pass 2's pointers and first loads) issue
/// beside the float ops there ([`between_passes_f32`]), the row's pointer advances beside pass
/// 2's first units, the running sum's and factor's loads beside its last, and the row's end
/// beside its last stores; pass 1 loads its first pair into the maximum itself and, with the
/// stride built in, walks the row's own pointer.
#[allow(clippy::too_many_arguments)]
pub fn flash_softmax(
    c: &mut Code,
    s_ty: Elem,
    a_ty: Elem,
    cols: u32,
    kb: u32,
    scaled: bool,
    running: bool,
    stride_baked: u32,
    floored_max: bool,
) {
    // The factors' pointer (f32 scores, running) is word 8, loaded into `$m15` (free then).
    load_state(c, FlashSoftmaxState::WORDS - 1);
    let alpha_run = running && s_ty == Elem::F32;
    if alpha_run {
        c.op(ld32m(m(15), m(0), 28));
    }
    let (s, p, st, rows, sgroups, stride) = (m(1), m(2), m(3), m(4), m(5), m(6));
    let (ps0, ps1, pp0, pp1, cnt, adv_s, adv_p) = (m(8), m(9), m(10), m(11), m(12), m(13), m(14));
    let tmp = m(15);
    let lkeys = cols.max(kb);
    let s_groups = lkeys / cols;
    let p_groups = lkeys / kb;
    let end = c.label();
    loop_counts(c, &[rows, sgroups], end);
    // The statistics pointer points at the row's sum, the last store of a row, which then
    // steps it to the next row.
    c.op(alu_imm(AluOp::Add, st, st, ST_BIAS));
    // Pointer advances per super-group, after walking 32 bytes of each group.
    c.op(alu(AluOp::Add, adv_s, stride, stride));
    if s_groups == 1 {
        c.op(mov_m(adv_s, stride));
    }
    c.op(alu_imm(AluOp::Sub, adv_s, adv_s, GROUP_ROW_BYTES as i16));
    c.op(alu(AluOp::Add, adv_p, stride, stride));
    if p_groups == 1 {
        c.op(mov_m(adv_p, stride));
    }
    c.op(alu_imm(AluOp::Sub, adv_p, adv_p, GROUP_ROW_BYTES as i16));
    // $a8:9 = scale pair.
    c.op(mov_a(8, m(7)));
    c.op(bcast(8, 8));
    // The maximum's start (`-inf`) in $m7 and its floor in $m0, for every row.
    let half = s_ty == Elem::F16 && a_ty == Elem::F16;
    let (start, floor) = (m(7), m(0));
    let baked = stride_baked != 0;
    match s_ty {
        Elem::F16 => li(c, start, 0xFC00_FC00),
        // f32 scores with the stride built in: pass 1 walks the row's scores with `$m1`
        // itself, which it leaves `D` bytes on (every group's stride), in $m7; pass 2's
        // pointers start `D` back, and the row's pointer goes to the next row `D - 32` back
        // ($m12).
        Elem::F32 if baked => {
            let (d, back) = (m(7), m(12));
            c.op(alu_imm(AluOp::Add, d, sgroups, 1));
            c.op(alu(AluOp::Mul, d, d, stride));
            if s_groups == 2 {
                c.op(alu(AluOp::Add, d, d, d));
            }
            c.op(alu_imm(AluOp::Sub, back, d, GROUP_ROW_BYTES as i16));
        }
        Elem::F32 => {}
    }
    li(c, floor, if half { NEG_MAX_F16 } else { NEG_MAX });
    let row = c.label();
    c.bind(row);
    // Pass 1: the maximum of the raw scores in $a4:5 (lane-wise), then reduced. The loads
    // alternate between $a0:1 and $a2:3, each one's `max` co-issued with the next load, in an
    // `rpt` over all super-groups but the last (a group pointer advances after its group's
    // fourth load); the last super-group follows without the advances.
    let v = s_ty.vector_type();
    let q1 = 4 * s_groups;
    // With the stride built in, one pointer walks the groups: each group's fourth load jumps
    // to the same row of the next group, and no advance needs a slot of its own. For f32
    // scores that pointer is the row's own `$m1`.
    let walk = if s_ty == Elem::F32 { s } else { ps0 };
    let load_to = |t: u32, d: APair| {
        if baked {
            let inc = if t % 4 == 3 {
                (stride_baked as i32 - 24) as i16
            } else {
                8
            };
            return ld64step(d, walk, inc);
        }
        let ptr = if t % q1 / 4 == 0 { ps0 } else { ps1 };
        ld64step(d, ptr, 8)
    };
    let load1 = |t: u32| load_to(t, ap(2 * (t % 2) as u8));
    let max1 = |t: u32| fbin(v, FBinOp::Max, 4, 4, 2 * (t % 2) as u8);
    if s_ty == Elem::F32 {
        // f32 scores: the first pair loads into the maximum $a4:5 itself and the second into
        // $a2:3; the `rpt`'s body is the bundles of loads 2..q1 + 2 of a super-group, each
        // with the `max` of the pair before, so the first super-group's body loads the next
        // one's first two pairs; the last super-group's loads 2..q1 follow, its last pair's
        // `max` between the passes.
        let mut pre = if baked {
            Vec::new()
        } else {
            group_pointer_ops([ps0, ps1], s, stride, s_groups)
        };
        pre.push(load_to(0, ap(4)));
        pre.push(load1(1));
        c.main_ops_ending(&pre, true);
        c.rpt_bundles(Instr::Rpt {
            count: sgroups,
            body: (q1 + if baked { 0 } else { s_groups }) as u8,
        });
        for t in 2..q1 + 2 {
            c.bundle(load1(t), max1(t - 1));
            if t % 4 == 3 && !baked {
                let ptr = if t / 4 == 0 { ps0 } else { ps1 };
                c.bundle(alu(AluOp::Add, ptr, ptr, adv_s), FLOAT_NOP);
            }
        }
        for t in 2..q1 {
            c.bundle(load1(t), max1(t - 1));
        }
        // Between the passes, the float ops with the Main ops beside them; pass 2 fused with
        // the row's end.
        let (floats, mains) = between_passes_f32(
            q1,
            scaled,
            running,
            floored_max,
            [s_groups, p_groups],
            baked,
        );
        emit_co_issued(c, &floats, &mains);
        let sptr = |u: u32| if 4 * u / cols == 0 { ps0 } else { ps1 };
        let pptr = |u: u32| if 4 * u / kb == 0 { pp0 } else { pp1 };
        assert!(
            a_ty == Elem::F32 || (lkeys / 4).is_multiple_of(2),
            "flash_softmax: f16 probabilities from f32 scores need super-groups of 8n keys"
        );
        Pass2 {
            scaled,
            a_ty,
            half,
            units: lkeys / 4,
            sptr: &sptr,
            pptr: &pptr,
            adv_s,
            adv_p,
            sgroups,
            fused: Some((running, baked)),
        }
        .emit(c, Vec::new());
        close_rows_and_exit(c, rows, row, end);
        return;
    }
    // f16 scores start the maximum at -inf (two moves).
    let mut pre = vec![mov_a(4, start), mov_a(5, start)];
    pre.extend(group_pointer_ops(
        [ps0, ps1],
        s,
        stride,
        if baked { 1 } else { s_groups },
    ));
    pre.push(load1(0));
    c.main_ops_ending(&pre, true);
    c.rpt_bundles(Instr::Rpt {
        count: sgroups,
        body: (q1 + if baked { 0 } else { s_groups }) as u8,
    });
    for t in 1..=q1 {
        c.bundle(load1(t), max1(t - 1));
        if t % 4 == 3 && !baked {
            let ptr = if t / 4 == 0 { ps0 } else { ps1 };
            c.bundle(alu(AluOp::Add, ptr, ptr, adv_s), FLOAT_NOP);
        }
    }
    for t in 1..q1 {
        c.bundle(load1(t), max1(t - 1));
    }
    // f16 scores from here.
    c.op(max1(q1 - 1));
    widen4(c, 0, 4);
    c.op(fbin(FType::F32v2, FBinOp::Max, 4, 0, 2));
    c.op(fbin(FType::F32, FBinOp::Max, 4, 4, 5));
    // m = max * scale (scale > 0, so the maximum of the scaled scores).
    if scaled {
        c.op(fbin(FType::F32, FBinOp::Mul, 4, 4, 8));
        if half {
            // The f16 maximum of the scaled scores: stored as the one the probabilities use.
            c.op(conv(ConvOp::F32v2ToF16v2, 6, 4));
            c.op(conv(ConvOp::F16v2ToF32v2, 4, 6));
        }
    }
    // Where the floored maximum the probabilities use is: $a4, or for a running row of f32
    // probabilities $a7, which the rescaling factor floors already.
    let mut floored = 4;
    if running && !half {
        // m_new = max(m_old, m); alpha = exp(max(m_old, -MAX) - max(m_new, -MAX)), with
        // -MAX the floor in $m0 (without `floored_max`, every maximum is finite: no floor).
        c.op(ld32a(a(5), st, -ST_BIAS));
        c.op(fbin(FType::F32, FBinOp::Max, 4, 4, 5));
        if floored_max {
            c.op(mov_a(6, floor));
            c.op(fbin(FType::F32, FBinOp::Max, 5, 5, 6));
            c.op(fbin(FType::F32, FBinOp::Max, 7, 4, 6));
            c.op(fbin(FType::F32, FBinOp::Sub, 5, 5, 7));
            floored = 7;
        } else {
            c.op(fbin(FType::F32, FBinOp::Sub, 5, 5, 4));
        }
        c.op(fun(FType::F32, FUnOp::Exp, 5, 5));
        // alpha as a pair, as `flash_rescale` loads it: at the statistics' third and fourth
        // words.
        c.op(bcast(0, 5));
        c.op(st64_at(0, st, 8 - ST_BIAS));
        c.op(st32_a(4, st, -ST_BIAS));
    } else {
        if running {
            // As above, with the f32 floor, the one in $m0 being f16's.
            c.op(ld32a(a(5), st, -ST_BIAS));
            c.op(fbin(FType::F32, FBinOp::Max, 4, 4, 5));
            li(c, tmp, NEG_MAX);
            c.op(mov_a(6, tmp));
            c.op(fbin(FType::F32, FBinOp::Max, 5, 5, 6));
            c.op(fbin(FType::F32, FBinOp::Max, 7, 4, 6));
            c.op(fbin(FType::F32, FBinOp::Sub, 5, 5, 7));
            c.op(fun(FType::F32, FUnOp::Exp, 5, 5));
            c.op(bcast(6, 5));
            c.op(st64_at(6, st, 8 - ST_BIAS));
        }
        c.op(st32_a(4, st, -ST_BIAS));
        if floored_max || half {
            c.op(mov_a(5, floor));
            c.op(fbin(FType::F32, FBinOp::Max, 4, 4, 5));
        }
    }
    if half {
        // m in all four f16 lanes of $a6:7 (exact: the maximum of f16 values, or the floor).
        c.op(conv(ConvOp::F32v2ToF16v2, 6, 4));
        c.op(Instr::Bcast {
            ty: FType::F16v4,
            d: ap(6),
            a: a(6),
        });
    } else {
        c.op(bcast(6, floored));
    }
    // Pass 2: p = exp(s * scale - m), summed in $a10:11 from zero.
    let mut pre = vec![setzi(tmp, 0), mov_a(10, tmp), mov_a(11, tmp)];
    pre.extend(group_pointer_ops([ps0, ps1], s, stride, s_groups));
    pre.extend(group_pointer_ops([pp0, pp1], p, stride, p_groups));
    let sptr = |u: u32| if 4 * u / cols == 0 { ps0 } else { ps1 };
    let pptr = |u: u32| if 4 * u / kb == 0 { pp0 } else { pp1 };
    if half {
        let g = Pass2 {
            scaled,
            a_ty,
            half,
            units: lkeys / 4,
            sptr: &sptr,
            pptr: &pptr,
            adv_s,
            adv_p,
            sgroups,
            fused: None,
        };
        g.emit(c, pre);
    } else {
        for op in pre {
            c.op(op);
        }
        c.op(mov_m(cnt, sgroups));
        let pass2 = c.label();
        c.bind(pass2);
        for u in 0..lkeys / 4 {
            ld4(c, s_ty, 0, sptr(u));
            for f in probabilities(scaled, 0, 2, 6, false) {
                c.op(f);
            }
            st4(c, a_ty, 0, pptr(u));
        }
        for g in 0..s_groups {
            let ptr = if g == 0 { ps0 } else { ps1 };
            c.op(alu(AluOp::Add, ptr, ptr, adv_s));
        }
        for g in 0..p_groups {
            let ptr = if g == 0 { pp0 } else { pp1 };
            c.op(alu(AluOp::Add, ptr, ptr, adv_p));
        }
        c.branch(Instr::Brnzdec { a: cnt, target: 0 }, pass2);
    }
    c.op(fbin(FType::F32, FBinOp::Add, 10, 10, 11));
    if running {
        c.op(ld32a(a(12), st, 4 - ST_BIAS));
        c.op(ld32a(a(13), st, 8 - ST_BIAS));
        c.op(fbin(FType::F32, FBinOp::Mac, 10, 12, 13));
    }
    // The sum, stepping the statistics pointer to the next row.
    c.op(st32step_a(a(10), st, GROUP_ROW_BYTES as i16));
    c.op(alu_imm(AluOp::Add, s, s, GROUP_ROW_BYTES as i16));
    c.op(alu_imm(AluOp::Add, p, p, GROUP_ROW_BYTES as i16));
    close_rows_and_exit(c, rows, row, end);
}

/// The group stride to build into [`flash_softmax`] (`Kernel::FlashSoftmax::stride`) for
/// scores whose groups are `group_stride` bytes apart: itself where a load's increment can
/// reach the next group, else 0.
pub fn baked_stride(group_stride: u32) -> u32 {
    if (GROUP_ROW_BYTES..=i16::MAX as u32 + 24).contains(&group_stride) {
        group_stride
    } else {
        0
    }
}

/// Issue slots of [`flash_softmax`] over `rows` rows of `super_groups` super-groups: exact (its
/// pass 2 for f16 scores and f32 probabilities, which no lowering uses, goes a unit at a time).
#[allow(clippy::too_many_arguments)]
pub fn flash_softmax_slots(
    s_ty: Elem,
    a_ty: Elem,
    cols: u32,
    kb: u32,
    scaled: bool,
    running: bool,
    rows: u32,
    super_groups: u32,
    stride_baked: bool,
    floored_max: bool,
) -> u32 {
    // The state's words but the factors' pointer, which only the running form of f32 scores
    // loads.
    let words = FlashSoftmaxState::WORDS as u32 - 1 + u32::from(running && s_ty == Elem::F32);
    // The state's loads, the count checks, `exit`.
    if rows == 0 {
        return words + 1 + 1;
    }
    if super_groups == 0 {
        return words + 2 + 1;
    }
    let lkeys = cols.max(kb);
    let (s_groups, p_groups) = (lkeys / cols, lkeys / kb);
    let units = lkeys / 4;
    let half = s_ty == Elem::F16 && a_ty == Elem::F16;
    let sg = super_groups;
    // Once: the state, the loop counts, the pointer advances, the scale pair, the maximum's
    // start and floor, `exit`.
    let fixed = words + 4 + 1 + 4 + u32::from(s_groups == 1) + u32::from(p_groups == 1) + 2 + 4 + 1;
    // Pass 1: the set-up and first load, the `rpt` over all super-groups but the last (a load
    // and a `max` per slot, each group pointer's advance), the last super-group.
    let q1 = 4 * s_groups;
    let start = if s_ty == Elem::F32 { 1 } else { 2 };
    let pass1 = if stride_baked {
        start + 1 + 1 + 1 + sg * q1
    } else {
        start + s_groups + 1 + 1 + (sg - 1) * (q1 + s_groups) + q1
    };
    if s_ty == Elem::F32 {
        // Once: no `-inf` start, and with the stride built in, `D` and `D - 32`.
        let fixed = fixed - 2
            + if stride_baked {
                3 + u32::from(s_groups == 2)
            } else {
                0
            };
        // Pass 1: the group pointers (without the stride built in), the first two loads, the
        // `rpt` over all super-groups but the last, the last super-group's loads 2..q1 (its
        // last `max` is among the float ops between the passes); pass 2 with the row's end,
        // and the `brnzdec`.
        let pass1 = if stride_baked {
            2 + 1 + (sg - 1) * q1 + q1 - 2
        } else {
            s_groups + 2 + 1 + (sg - 1) * (q1 + s_groups) + q1 - 2
        };
        let (floats, mains) = between_passes_f32(
            q1,
            scaled,
            running,
            floored_max,
            [s_groups, p_groups],
            stride_baked,
        );
        let between = co_issued_slots(&floats, &mains);
        let pass2 = Pass2::slots((scaled, a_ty, false), units, sg, 0, Some(running));
        return fixed + rows * (pass1 + between + pass2 + 1);
    }
    // f16 scores: the maximum reduced (its lanes widened first), scaled (and rounded to f16),
    // merged with the running one, stored, floored and broadcast.
    let reduce = 3
        + 1
        + if scaled {
            1 + if half { 2 } else { 0 }
        } else {
            0
        }
        + match (running, half, floored_max) {
            // Merged, the factor floored with $m0's floor, stored; m stored; the floored
            // maximum is the factor's.
            (true, false, true) => 10 + 1,
            // Merged, the factor stored; m stored.
            (true, false, false) => 7 + 1,
            // Merged with the f32 floor loaded, the factor stored; m stored, floored.
            (true, true, _) => 12 + 3,
            // m stored, floored.
            (false, true, _) | (false, false, true) => 3,
            // m stored.
            (false, false, false) => 1,
        }
        + if half { 2 } else { 1 };
    let pre2 = 3 + s_groups + p_groups;
    let pass2 = match s_ty {
        _ if half => Pass2::slots((scaled, a_ty, half), units, sg, pre2, None),
        // f16v4: subtract, `exp` (two slots), sum and add, with the scale's widening,
        // multiplications and narrowing when scaled; the first load and the last store alone.
        _ => {
            let unit = ld4_st4_slots(s_ty) + 8 + if scaled { 2 } else { 0 } + ld4_st4_slots(a_ty);
            pre2 + 1 + sg * (units * unit + s_groups + p_groups + 1)
        }
    };
    // The row's sum, merged with the running one, stored (stepping the statistics pointer);
    // the other two pointers to the next row.
    let tail = 1 + if running { 3 } else { 0 } + 1 + 2 + 1;
    fixed + rows * (pass1 + reduce + pass2 + tail)
}
