//! [`flash_softmax`]: a block of scores to probabilities and row statistics.

use ipu_isa::{AluOp, ConvOp, FBinOp, FType, FUnOp, Instr, MReg, RedOp};

use super::*;
use crate::Elem;
use crate::state::*;

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
        pre.extend(self.loads(0, 0));
        c.main_ops_ending(&pre, false);
        // The lead units, the last one's last Main op alone after it: the `rpt` then starts on
        // an odd word and its body of bundles on an even one.
        let lead = self.lead();
        for k in 0..lead {
            let mut main = self.main(k, k, true, true);
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
        // The last super-group: no advances, no load after its last unit.
        for k in lead..n {
            c.bundles(&self.main(k, k, false, k + 1 < n), &self.float(k));
        }
        for op in self.stores(n - 1, n - 1) {
            c.op(op);
        }
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

    /// Issue slots of [`Pass2::emit`] over `super_groups`, after `pre` set-up ops.
    fn slots(scaled: bool, a_ty: Elem, half: bool, units: u32, super_groups: u32, pre: u32) -> u32 {
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
        // and the last stores.
        pre + loads + 1 + 1 + float + stores
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
    li(
        c,
        start,
        match s_ty {
            Elem::F32 => NEG_INF,
            Elem::F16 => 0xFC00_FC00,
        },
    );
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
    // to the same row of the next group, and no advance needs a slot of its own.
    let baked = stride_baked != 0;
    let load1 = |t: u32| {
        if baked {
            let inc = if t % 4 == 3 {
                (stride_baked as i32 - 24) as i16
            } else {
                8
            };
            return ld64step(ap(2 * (t % 2) as u8), ps0, inc);
        }
        let ptr = if t % q1 / 4 == 0 { ps0 } else { ps1 };
        ld64step(ap(2 * (t % 2) as u8), ptr, 8)
    };
    let max1 = |t: u32| fbin(v, FBinOp::Max, 4, 4, 2 * (t % 2) as u8);
    // f32 scores start the maximum at the first pair (a move, one float slot, after its
    // load); f16 ones at -inf (two moves).
    let mut pre = if s_ty == Elem::F32 {
        Vec::new()
    } else {
        vec![mov_a(4, start), mov_a(5, start)]
    };
    pre.extend(group_pointer_ops(
        [ps0, ps1],
        s,
        stride,
        if baked { 1 } else { s_groups },
    ));
    pre.push(load1(0));
    if s_ty == Elem::F32 {
        c.main_ops_ending(&pre, false);
        c.op(fun(FType::F32v2, FUnOp::Mov, 4, 0));
    } else {
        c.main_ops_ending(&pre, true);
    }
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
    c.op(max1(q1 - 1));
    if s_ty == Elem::F16 {
        widen4(c, 0, 4);
        c.op(fbin(FType::F32v2, FBinOp::Max, 4, 0, 2));
    }
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
    // Where the floored maximum the probabilities use is: $a4, or for a running row without
    // f16 probabilities from f16 scores $a7, which the rescaling factor floors already.
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
        // alpha as a pair, as `flash_rescale` loads it: f32 scores in the run of factors,
        // f16 ones at the statistics' third and fourth words.
        c.op(bcast(0, 5));
        c.op(if alpha_run {
            st64step(ap(0), tmp, 8)
        } else {
            st64_at(0, st, 8 - ST_BIAS)
        });
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
    } else if s_ty == Elem::F32 {
        c.op(bcast(PASS2_M, floored));
    } else {
        c.op(bcast(6, floored));
    }
    // Pass 2: p = exp(s * scale - m), summed in $a10:11.
    // The sum starts at zero; the f32 form's first unit moves its first pair into it instead.
    let mut pre = if s_ty == Elem::F32 {
        Vec::new()
    } else {
        vec![setzi(tmp, 0), mov_a(10, tmp), mov_a(11, tmp)]
    };
    pre.extend(group_pointer_ops([ps0, ps1], s, stride, s_groups));
    pre.extend(group_pointer_ops([pp0, pp1], p, stride, p_groups));
    let sptr = |u: u32| if 4 * u / cols == 0 { ps0 } else { ps1 };
    let pptr = |u: u32| if 4 * u / kb == 0 { pp0 } else { pp1 };
    if s_ty == Elem::F32 || half {
        // f16 probabilities from f32 scores pair units of four keys (a super-group of the
        // AMP's layouts holds at least 16 keys).
        assert!(
            half || a_ty == Elem::F32 || (lkeys / 4).is_multiple_of(2),
            "flash_softmax: f16 probabilities from f32 scores need super-groups of 8n keys"
        );
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
        c.op(if alpha_run {
            ld32a(a(13), tmp, -8)
        } else {
            ld32a(a(13), st, 8 - ST_BIAS)
        });
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
    // The maximum reduced (f16 lanes widened first), scaled (and rounded to f16), merged with
    // the running one, stored, floored and broadcast.
    let reduce = if s_ty == Elem::F16 { 3 } else { 0 }
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
    let pre2 = if s_ty == Elem::F32 { 0 } else { 3 } + s_groups + p_groups;
    let pass2 = match s_ty {
        _ if s_ty == Elem::F32 || half => Pass2::slots(scaled, a_ty, half, units, sg, pre2),
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
