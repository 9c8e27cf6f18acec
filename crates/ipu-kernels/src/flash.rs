//! Worker kernels of the fused flash-attention lowering (`lower::flash`). They work on the
//! AMP's own layouts, so scores never change layout between the two matmuls:
//!
//! - scores `S` (partials type) are `[keys / cols][R][cols]`: row `r`'s keys of group `j` are
//!   the 32 bytes at `(j R + r) 32`;
//! - probabilities `P` (operand type) are `[keys / kb][R][kb]`, the AMP's input layout for the
//!   `P V` product: again 32 bytes per row and group;
//! - a tile's partial result is `[Gv + 1][R][cols]` (partials type): the `Gv = dv / cols`
//!   groups of the unnormalised output `O`, then one group whose first two f32 words per row are
//!   the row's maximum `m` and sum `l`.
//!
//! [`flash_softmax`] turns a block of scores into probabilities and statistics; [`flash_combine`]
//! merges the partial results of the key blocks of the same rows and normalises them. The
//! arithmetic is f32 (f16 data is widened on load and narrowed on store), but for f16
//! probabilities, whose `exp` takes the shifted score rounded to f16 (see [`flash_softmax`]),
//! and f16 scores, which compute as the expansion's f16 operations round.

use ipu_isa::{AddrMode, AluOp, ConvOp, DataReg, FBinOp, FType, FUnOp, Instr, MReg, RedOp, Width};

use crate::Elem;
use crate::code::*;
use crate::state::*;

/// Bytes per row of one column group in every flash layout (8 f32 or 16 f16).
pub const GROUP_ROW_BYTES: u32 = 32;

/// f32 bits of `-inf`.
const NEG_INF: u32 = 0xFF80_0000;
/// f32 bits of the most negative finite value: a row whose every key is masked has maximum
/// `-inf`; subtracting this instead keeps `exp(-inf - x) = 0` and never forms `-inf + inf`.
const NEG_MAX: u32 = 0xFF7F_FFFF;
/// f32 bits of the most negative finite f16 (-65504): the same floor for f16 arithmetic.
const NEG_MAX_F16: u32 = 0xC77F_E000;

/// Loads four elements of `ty` at `ptr` (advancing it) as two f32v2 pairs in `$a{dst}:..`,
/// `$a{dst+2}:..` (`$a12:13` is scratch for f16).
fn ld4(c: &mut Code, ty: Elem, dst: u8, ptr: MReg) {
    match ty {
        Elem::F32 => {
            c.op(ld64step(ap(dst), ptr, 8));
            c.op(ld64step(ap(dst + 2), ptr, 8));
        }
        Elem::F16 => {
            c.op(ld64step(ap(12), ptr, 8));
            widen4(c, dst, 12);
        }
    }
}

/// Stores the pairs `$a{src}:..` and `$a{src+2}:..` at `ptr` (advancing it) as four elements
/// of `ty` (`$a12:13` is scratch for f16).
fn st4(c: &mut Code, ty: Elem, src: u8, ptr: MReg) {
    match ty {
        Elem::F32 => {
            c.op(st64step(ap(src), ptr, 8));
            c.op(st64step(ap(src + 2), ptr, 8));
        }
        Elem::F16 => {
            narrow4(c, 12, src);
            c.op(st64step(ap(12), ptr, 8));
        }
    }
}

/// Slots of [`ld4`] and of [`st4`], the same: two 64-bit moves for f32, one and two
/// conversions for f16.
fn ld4_st4_slots(ty: Elem) -> u32 {
    match ty {
        Elem::F32 => 2,
        Elem::F16 => 3,
    }
}

/// Points `ptrs[0]` at `base` and, when `groups` is 2, `ptrs[1]` at `base + stride` (the
/// same row of the next group).
fn group_pointer_ops(ptrs: [MReg; 2], base: MReg, stride: MReg, groups: u32) -> Vec<Instr> {
    let mut ops = vec![alu_imm(AluOp::Add, ptrs[0], base, 0)];
    if groups == 2 {
        ops.push(alu(AluOp::Add, ptrs[1], base, stride));
    }
    ops
}

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
        let (float, loads, stores) = if half {
            // f16v4: subtract, `exp` (two slots), sum and add, with the scale's widening,
            // multiplications and narrowing when scaled.
            (5 + if scaled { 6 } else { 0 }, 1, 1)
        } else {
            match a_ty {
                // The subtractions, `exp`s (two slots each) and additions, with the scale's
                // multiplications when scaled.
                Elem::F32 => (8 + if scaled { 2 } else { 0 }, 2, 2),
                // The subtractions, the narrowing, one f16v4 `exp` (two slots), the lane sum
                // and, scaled, the multiplications and an addition a unit; unscaled, an
                // addition every second unit (`units` is even: [`flash_softmax`] checks it).
                // The first two units store their lane sums as the row's sums: one slot less
                // each scaled, the pair's addition less unscaled.
                Elem::F16 => {
                    let n = super_groups * units;
                    let float = if scaled { 9 * n - 2 } else { 6 * n + n / 2 - 1 };
                    return pre + 2 + 1 + 1 + float + 1;
                }
            }
        };
        // The set-up and the first loads, unit 0's Main op alone, the `rpt`, the units and
        // the last stores.
        pre + loads + 1 + 1 + super_groups * units * float + stores
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
) {
    load_state(c, FlashSoftmaxState::WORDS);
    let (s, p, st, rows, sgroups, stride) = (m(1), m(2), m(3), m(4), m(5), m(6));
    let (ps0, ps1, pp0, pp1, cnt, adv_s, adv_p) = (m(8), m(9), m(10), m(11), m(12), m(13), m(14));
    let tmp = m(15);
    let lkeys = cols.max(kb);
    let s_groups = lkeys / cols;
    let p_groups = lkeys / kb;
    let end = c.label();
    loop_counts(c, &[rows, sgroups], end);
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
    if running {
        // m_new = max(m_old, m); alpha = exp(max(m_old, -MAX) - max(m_new, -MAX)).
        c.op(ld32a(a(5), st, 0));
        c.op(fbin(FType::F32, FBinOp::Max, 4, 4, 5));
        li(c, tmp, NEG_MAX);
        c.op(mov_a(6, tmp));
        c.op(fbin(FType::F32, FBinOp::Max, 5, 5, 6));
        c.op(fbin(FType::F32, FBinOp::Max, 7, 4, 6));
        c.op(fbin(FType::F32, FBinOp::Sub, 5, 5, 7));
        c.op(fun(FType::F32, FUnOp::Exp, 5, 5));
        // alpha as a pair (third and fourth words), as `flash_rescale` loads it.
        c.op(bcast(6, 5));
        c.op(st64_at(6, st, 8));
    }
    c.op(st32_a(4, st, 0));
    c.op(mov_a(5, floor));
    c.op(fbin(FType::F32, FBinOp::Max, 4, 4, 5));
    if half {
        // m in all four f16 lanes of $a6:7 (exact: the maximum of f16 values, or the floor).
        c.op(conv(ConvOp::F32v2ToF16v2, 6, 4));
        c.op(Instr::Bcast {
            ty: FType::F16v4,
            d: ap(6),
            a: a(6),
        });
    } else if s_ty == Elem::F32 {
        c.op(bcast(PASS2_M, 4));
    } else {
        c.op(bcast(6, 4));
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
        c.op(ld32a(a(12), st, 4));
        c.op(ld32a(a(13), st, 8));
        c.op(fbin(FType::F32, FBinOp::Mac, 10, 12, 13));
    }
    c.op(st32_a(10, st, 4));
    c.op(alu_imm(AluOp::Add, s, s, GROUP_ROW_BYTES as i16));
    c.op(alu_imm(AluOp::Add, p, p, GROUP_ROW_BYTES as i16));
    c.op(alu_imm(AluOp::Add, st, st, GROUP_ROW_BYTES as i16));
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
) -> u32 {
    let words = FlashSoftmaxState::WORDS as u32;
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
    let fixed = words + 4 + 4 + u32::from(s_groups == 1) + u32::from(p_groups == 1) + 2 + 4 + 1;
    // Pass 1: the set-up and first load, the `rpt` over all super-groups but the last (a load
    // and a `max` per slot, each group pointer's advance), the last super-group.
    let q1 = 4 * s_groups;
    let pass1 = if stride_baked {
        2 + 1 + 1 + 1 + sg * q1
    } else {
        2 + s_groups + 1 + 1 + (sg - 1) * (q1 + s_groups) + q1
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
        + if running { 12 } else { 0 }
        + 1
        + 1
        + 1
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
    // The row's sum, merged with the running one, stored; the pointers to the next row.
    let tail = 1 + if running { 3 } else { 0 } + 1 + 3 + 1;
    fixed + rows * (pass1 + reduce + pass2 + tail)
}

/// Adds a mask to a block of scores in place, both in the scores' layout `[groups][R][cols]`
/// (partials type): `s = s * scale + mask` with `scaled` (two roundings, as the expansion's
/// `scale` and `add`), `s = s + mask` without (the scores arrive scaled). The mask's rows
/// advance by `mask_row_step` bytes: 32 for a mask with a row per query, 0 for one row
/// broadcast over the queries. f32 arithmetic for f32 scores; f16 scores are widened for the
/// multiplication, narrowed, and added as f16v4 (one rounding, as the expansion's f16 `add`).
///
/// State: S (row 0, group 0), mask (row 0, group 0), rows, groups, S group stride (bytes),
/// mask group stride (bytes), mask row step (bytes), scale (f32 bits).
pub fn flash_mask(c: &mut Code, s_ty: Elem, scaled: bool, broadcast: bool) {
    if !scaled {
        return flash_mask_stream(c, s_ty, broadcast);
    }
    load_state(c, FlashMaskState::WORDS);
    let (s, mk, rows, groups, s_stride, m_stride, m_step) =
        (m(1), m(2), m(3), m(4), m(5), m(6), m(7));
    let (ps, pm, g) = (m(9), m(10), m(11));
    let end = c.label();
    loop_counts(c, &[rows, groups], end);
    c.op(alu_imm(
        AluOp::Sub,
        s_stride,
        s_stride,
        GROUP_ROW_BYTES as i16,
    ));
    c.op(alu_imm(
        AluOp::Sub,
        m_stride,
        m_stride,
        GROUP_ROW_BYTES as i16,
    ));
    if scaled {
        c.op(mov_a(8, m(8)));
        c.op(bcast(8, 8));
    }
    let row = c.label();
    c.bind(row);
    c.op(mov_m(ps, s));
    c.op(mov_m(pm, mk));
    c.op(mov_m(g, groups));
    let group = c.label();
    c.bind(group);
    for _ in 0..GROUP_ROW_BYTES / 8 {
        match s_ty {
            Elem::F32 => {
                c.op(ld64_at(0, ps, 0));
                c.op(ld64step(ap(2), pm, 8));
                if scaled {
                    c.op(fbin(FType::F32v2, FBinOp::Mul, 0, 0, 8));
                }
                c.op(fbin(FType::F32v2, FBinOp::Add, 0, 0, 2));
                c.op(st64step(ap(0), ps, 8));
            }
            Elem::F16 => {
                c.op(ld64_at(12, ps, 0));
                c.op(ld64step(ap(14), pm, 8));
                if scaled {
                    widen4(c, 0, 12);
                    c.op(fbin(FType::F32v2, FBinOp::Mul, 0, 0, 8));
                    c.op(fbin(FType::F32v2, FBinOp::Mul, 2, 2, 8));
                    narrow4(c, 12, 0);
                }
                c.op(fbin(FType::F16v4, FBinOp::Add, 12, 12, 14));
                c.op(st64step(ap(12), ps, 8));
            }
        }
    }
    c.op(alu(AluOp::Add, ps, ps, s_stride));
    c.op(alu(AluOp::Add, pm, pm, m_stride));
    c.branch(Instr::Brnzdec { a: g, target: 0 }, group);
    c.op(alu_imm(AluOp::Add, s, s, GROUP_ROW_BYTES as i16));
    c.op(alu(AluOp::Add, mk, mk, m_step));
    close_rows_and_exit(c, rows, row, end);
}

/// [`flash_mask`] without the scaling (`s = s + mask`), a group at a time: a group's rows are
/// one contiguous run of the scores (and, unless `broadcast`, of the mask), so each group is one
/// software pipeline of 64-bit vectors, a vector's load (and its mask's) and the store of the
/// vector before in one paced issue beside the add of the vector between: one slot a vector.
/// A `broadcast` mask (one row for every query: its row step is 0) has its group's four vectors
/// in `$a8..$a15` for the group. The sum is in `$a4:5`, the scores in `$a0:1`, the mask's in
/// `$a2:3`.
fn flash_mask_stream(c: &mut Code, s_ty: Elem, broadcast: bool) {
    load_state(c, FlashMaskState::WORDS);
    let (s, mk, rows, groups, s_stride, m_stride) = (m(1), m(2), m(3), m(4), m(5), m(6));
    let (pst, cnt, adv_s, adv_m) = (m(9), m(12), m(13), m(14));
    let v = s_ty.vector_type();
    let add = |mask: u8| fbin(v, FBinOp::Add, 4, 0, mask);
    let end = c.label();
    c.branch(Instr::Brz { a: rows, target: 0 }, end);
    loop_counts(c, &[groups], end);
    // The scores' pointer walks a group's rows (32 bytes each) and then jumps to the next
    // group; so does the mask's, or it loads the group's single row.
    c.op(alu_imm(AluOp::Shl, adv_s, rows, 5));
    if broadcast {
        c.op(alu_imm(AluOp::Sub, adv_m, m_stride, GROUP_ROW_BYTES as i16));
        c.op(alu_imm(AluOp::Sub, cnt, rows, 1));
    } else {
        c.op(alu(AluOp::Sub, adv_m, m_stride, adv_s));
        c.op(alu_imm(AluOp::Shl, cnt, rows, 2));
        c.op(alu_imm(AluOp::Sub, cnt, cnt, 2));
    }
    c.op(alu(AluOp::Sub, adv_s, s_stride, adv_s));
    let group = c.label();
    c.bind(group);
    if broadcast {
        let m_of = |i: u32| 8 + 2 * (i % 4) as u8;
        let mut pre: Vec<Instr> = (0..4).map(|i| ld64step(ap(m_of(i)), mk, 8)).collect();
        pre.extend([mov_m(pst, s), ld64step(ap(0), s, 8)]);
        c.main_ops_ending(&pre, false);
        c.bundle(ld64step(ap(0), s, 8), add(m_of(0)));
        let paced = Instr::LdSt64Pace {
            d: ap(0),
            s: ap(4),
            p: [s, pst],
        };
        // The `rpt` starts on an even word here: one aligning `nop`, counted by the model.
        c.rpt_bundles(Instr::Rpt {
            count: cnt,
            body: 4,
        });
        for i in 1..=4 {
            c.bundle(paced, add(m_of(i)));
        }
        c.bundle(paced, add(m_of(1)));
        c.bundle(paced, add(m_of(2)));
        c.bundle(st64step(ap(4), pst, 8), add(m_of(3)));
    } else {
        let load = Instr::Ld2x64Pace {
            d: [ap(0), ap(2)],
            p: [s, mk],
        };
        c.main_ops_ending(&[mov_m(pst, s), load], false);
        c.bundle(load, add(2));
        c.rpt_bundles(Instr::Rpt {
            count: cnt,
            body: 1,
        });
        c.bundle(
            Instr::Ld2xSt64Pace {
                d: [ap(0), ap(2)],
                s: ap(4),
                p: [s, mk, pst],
            },
            add(2),
        );
        c.bundle(st64step(ap(4), pst, 8), add(2));
    }
    c.op(st64step(ap(4), pst, 8));
    c.op(alu(AluOp::Add, s, s, adv_s));
    c.op(alu(AluOp::Add, mk, mk, adv_m));
    c.branch(
        Instr::Brnzdec {
            a: groups,
            target: 0,
        },
        group,
    );
    exit_at(c, end);
}

/// Issue slots of [`flash_mask`] over `rows` rows of `groups` groups (`broadcast`: one mask row
/// for every query).
pub fn flash_mask_slots(s_ty: Elem, scaled: bool, broadcast: bool, rows: u32, groups: u32) -> u32 {
    if !scaled {
        let words = FlashMaskState::WORDS as u32;
        if rows == 0 {
            return words + 1 + 1;
        }
        if groups == 0 {
            return words + 1 + 1 + 1;
        }
        // The state, the checks, the group count's decrement, the jumps and the `rpt` count,
        // `exit`; per group the pipeline (one slot a vector), its set-up and ends, the aligning
        // `nop`, the `rpt`, the two jumps and the branch.
        let n = 4 * rows;
        return if broadcast {
            words + 1 + 2 + 4 + 1 + groups * (6 + 1 + 1 + 1 + (n - 4) + 3 + 1 + 3)
        } else {
            words + 1 + 2 + 5 + 1 + groups * (2 + 1 + 1 + 1 + (n - 2) + 1 + 1 + 3)
        };
    }
    // Per 64 bits: two loads, the add, the store, and the scaling (f16: widen, two
    // multiplications, narrow).
    let per = 4 + match (s_ty, scaled) {
        (_, false) => 0,
        (Elem::F32, true) => 1,
        (Elem::F16, true) => 6,
    };
    let fixed = 8 + 4 + 2 + if scaled { 2 } else { 0 } + 1;
    fixed + rows * (6 + groups * (4 * per + 3))
}

/// The lowest finite value of each partials type, as [`flash_mask_bool`] writes it for a
/// hidden key (f32 bits; an f16 in the low half).
const LOWEST_F32: u32 = 0xFF7F_FFFF;
/// See [`LOWEST_F32`].
const LOWEST_F16: u32 = 0xFBFF;

/// A boolean mask (a byte an element, nonzero where the key is visible) to the additive mask
/// in `ty`: exactly 0 for a visible key and the lowest finite value of `ty` for a hidden one,
/// what `(cast(m) - 1) * largest` gives (`docs/numerics.md`, flash attention with a mask).
/// An element at a time in the integer unit, in an `rpt` over groups of four: its byte loaded
/// (`ldz8`), compared with zero (1 where hidden) and multiplied by the lowest value's bits, the
/// word stored (f16: two elements' halves in one word). Four slots an element.
///
/// State ([`CastState`]): input (bytes), out, groups of four elements.
pub fn flash_mask_bool(c: &mut Code, ty: Elem) {
    load_state(c, CastState::WORDS);
    let (input, out, groups) = (m(1), m(2), m(3));
    let (lo, hi) = (m(10), m(11));
    let end = exit_if_zero(c, groups);
    match ty {
        Elem::F32 => li(c, lo, LOWEST_F32),
        Elem::F16 => {
            c.op(setzi(lo, LOWEST_F16));
            li(c, hi, LOWEST_F16 << 16);
        }
    }
    let byte = |d: MReg| Instr::Load {
        width: Width::B8,
        d: DataReg::M(d),
        base: input,
        mode: AddrMode::PostInc(1),
    };
    let store = |s: MReg| Instr::Store {
        width: Width::B32,
        s: DataReg::M(s),
        base: out,
        mode: AddrMode::PostInc(4),
    };
    let hidden = |d: MReg, k: MReg| [alu_imm(AluOp::CmpEq, d, d, 0), alu(AluOp::Mul, d, d, k)];
    rpt(c, groups, |c| {
        for pair in 0..2 {
            let (t0, t1) = (m(4 + 2 * pair), m(5 + 2 * pair));
            match ty {
                Elem::F32 => {
                    for t in [t0, t1] {
                        c.op(byte(t));
                        for op in hidden(t, lo) {
                            c.op(op);
                        }
                        c.op(store(t));
                    }
                }
                Elem::F16 => {
                    c.op(byte(t0));
                    c.op(byte(t1));
                    for op in hidden(t0, lo).into_iter().chain(hidden(t1, hi)) {
                        c.op(op);
                    }
                    c.op(alu(AluOp::Or, t0, t0, t1));
                    c.op(store(t0));
                }
            }
        }
    });
    exit_at(c, end);
}

/// Issue slots of [`flash_mask_bool`] over `groups` groups of four elements: the state, the
/// count check, the lowest value's bits (f16: a half each), the `rpt` and sixteen slots a
/// group, `exit`.
pub fn flash_mask_bool_slots(ty: Elem, groups: u32) -> u32 {
    if groups == 0 {
        return 3 + 1 + 1;
    }
    let consts = match ty {
        Elem::F32 => 2,
        Elem::F16 => 3,
    };
    3 + 1 + consts + 1 + 16 * groups + 1
}

/// Rescales the partial output of rows by their `alpha` (the third statistics word, which
/// [`flash_softmax`]'s running form stores as a pair in the third and fourth):
/// `O[g][r] *= alpha_r` for the `groups` groups of 32 bytes of `p_ty`.
///
/// State: O (row 0, group 0), statistics (row 0), rows, groups, group stride (bytes).
pub fn flash_rescale(c: &mut Code, p_ty: Elem) {
    if p_ty == Elem::F32 {
        flash_rescale_f32(c);
        return;
    }
    load_state(c, FlashRescaleState::WORDS);
    let (o, st, rows, groups, stride) = (m(1), m(2), m(3), m(4), m(5));
    let (po, g) = (m(6), m(7));
    let end = c.label();
    loop_counts(c, &[rows, groups], end);
    c.op(alu_imm(AluOp::Sub, stride, stride, GROUP_ROW_BYTES as i16));
    let row = c.label();
    c.bind(row);
    c.op(ld32a(a(0), st, 8));
    c.op(bcast(8, 0));
    c.op(mov_m(po, o));
    c.op(mov_m(g, groups));
    let group = c.label();
    c.bind(group);
    for _ in 0..4 {
        match p_ty {
            Elem::F32 => {
                c.op(ld64_at(4, po, 0));
                c.op(fbin(FType::F32v2, FBinOp::Mul, 4, 4, 8));
                c.op(st64step(ap(4), po, 8));
            }
            Elem::F16 => {
                c.op(ld64_at(12, po, 0));
                widen4(c, 4, 12);
                c.op(fbin(FType::F32v2, FBinOp::Mul, 4, 4, 8));
                c.op(fbin(FType::F32v2, FBinOp::Mul, 6, 6, 8));
                narrow4(c, 12, 4);
                c.op(st64step(ap(12), po, 8));
            }
        }
    }
    c.op(alu(AluOp::Add, po, po, stride));
    c.branch(Instr::Brnzdec { a: g, target: 0 }, group);
    c.op(alu_imm(AluOp::Add, o, o, GROUP_ROW_BYTES as i16));
    c.op(alu_imm(AluOp::Add, st, st, GROUP_ROW_BYTES as i16));
    close_rows_and_exit(c, rows, row, end);
}

/// [`flash_rescale`] of f32 partials: a group at a time, its rows one run of 32 bytes each,
/// software-pipelined over the run (each pair's load and the store of the pair before the
/// one it multiplies in one `ldst64pace`, beside the multiplication), with the row's `alpha`
/// pair loaded once per row from the statistics: five slots per row and group, against
/// fourteen a pair at a time. The `rpt` body is the step from one row to the next, so no load
/// reaches past the worker's rows.
fn flash_rescale_f32(c: &mut Code) {
    load_state(c, FlashRescaleState::WORDS);
    let (o, st, rows, groups, stride) = (m(1), m(2), m(3), m(4), m(5));
    let (pl, ps, pa) = (m(6), m(7), m(8));
    let end = c.label();
    // `rows` becomes the `rpt` count (rows - 1), `groups` the loop's.
    loop_counts(c, &[rows, groups], end);
    let mul = |r: u8| fbin(FType::F32v2, FBinOp::Mul, r, r, 8);
    let ldst = |d: u8, s: u8| Instr::LdSt64Pace {
        d: ap(d),
        s: ap(s),
        p: [pl, ps],
    };
    let alpha = ld64step(ap(8), pa, GROUP_ROW_BYTES as i16);
    let group = c.label();
    c.bind(group);
    // The group's run, the first row's alpha and first pair ($a0:1; pairs 1..3 in $a2:3,
    // $a4:5, $a6:7).
    c.main_ops_ending(
        &[
            mov_m(pl, o),
            mov_m(ps, o),
            alu_imm(AluOp::Add, pa, st, 8),
            alpha,
            ld64step(ap(0), pl, 8),
        ],
        false,
    );
    c.bundle(ld64step(ap(2), pl, 8), mul(0));
    c.bundle(ldst(4, 0), mul(2));
    c.bundle(ldst(6, 2), mul(4));
    // The next group's run (alone: the `rpt` then starts on an odd word and its body of
    // bundles on an even one).
    c.op(alu(AluOp::Add, o, o, stride));
    // From one row to the next: the last pair of the row multiplied, the next row's alpha
    // and pairs loaded and multiplied, each stored one bundle later.
    c.rpt_bundles(Instr::Rpt {
        count: rows,
        body: 5,
    });
    c.bundle(ldst(0, 4), mul(6));
    c.bundle(alpha, FLOAT_NOP);
    c.bundle(ldst(2, 6), mul(0));
    c.bundle(ldst(4, 0), mul(2));
    c.bundle(ldst(6, 2), mul(4));
    c.bundle(st64step(ap(4), ps, 8), mul(6));
    c.op(st64step(ap(6), ps, 8));
    c.branch(
        Instr::Brnzdec {
            a: groups,
            target: 0,
        },
        group,
    );
    exit_at(c, end);
}

/// Merges the partial results of `J` key blocks for some rows and normalises them:
/// `M = max_j m_j`, `w_j = exp(m_j - M)`, `L = sum_j w_j l_j`, `O = sum_j w_j O_j` (in f32, in
/// a scratch row), `out = O * (1 / L)` stored as `out_ty` in `[dv / gout][rows][gout]`.
///
/// State: out (row 0), out group stride (bytes), rows, scratch (`dv` f32), sources `J`,
/// then per source: its `O` (row 0, group 0), its group stride (bytes), its statistics (row
/// 0). Sources are rows of `Gv = dv / cols` groups of 32 bytes of `p_ty`.
pub fn flash_combine(c: &mut Code, p_ty: Elem, out_ty: Elem, cols: u32, gout: u32, dv: u32) {
    load_state(c, FlashCombineState::WORDS);
    let (out, ogs, rows, scratch, nsrc) = (m(1), m(2), m(3), m(4), m(5));
    let (q, base, gs, sp, cnt, po, pa, ro) = (m(6), m(7), m(8), m(9), m(10), m(11), m(12), m(13));
    let (tmp, g) = (m(14), m(15));
    let groups = dv / cols;
    let end = c.label();
    loop_counts(c, &[rows, nsrc], end);
    c.op(setzi(ro, 0));
    let row = c.label();
    c.bind(row);
    // Pass A: M in $a4, an `rpt` over the sources, each one's `max` co-issued with the load of
    // the next one's `m` (`$a0` starts at `-inf`, so the first `max` changes nothing).
    li(c, tmp, NEG_INF);
    c.op(mov_a(4, tmp));
    c.op(mov_a(0, tmp));
    c.op(alu_imm(
        AluOp::Add,
        q,
        m(0),
        (FlashCombineState::SOURCES_OFFSET + FlashCombineState::SOURCE_STATS) as i16,
    ));
    c.op(alu_imm(AluOp::Add, cnt, nsrc, 1));
    c.rpt_bundles(Instr::Rpt {
        count: cnt,
        body: 3,
    });
    c.op(Instr::Load {
        width: Width::B32,
        d: DataReg::M(sp),
        base: q,
        mode: AddrMode::PostInc(FlashCombineState::SOURCE_BYTES as i16),
    });
    c.op(alu(AluOp::Add, sp, sp, ro));
    c.bundle(ld32a(a(0), sp, 0), fbin(FType::F32, FBinOp::Max, 4, 4, 0));
    c.op(fbin(FType::F32, FBinOp::Max, 4, 4, 0));
    li(c, tmp, NEG_MAX);
    c.op(mov_a(5, tmp));
    c.op(fbin(FType::F32, FBinOp::Max, 4, 4, 5));
    // Pass B: per source, w = exp(m - M), L += w l, scratch (+)= w O.
    c.op(setzi(tmp, 0));
    c.op(mov_a(5, tmp));
    c.op(alu_imm(
        AluOp::Add,
        q,
        m(0),
        FlashCombineState::SOURCES_OFFSET as i16,
    ));
    let source = |c: &mut Code, first: bool| {
        // The source's `m` and `l` (one pair: statistics rows are 32-byte aligned), then its
        // weight and the sum's term beside the loads of its pointers.
        c.main_ops_ending(
            &[
                ld32m(sp, q, FlashCombineState::SOURCE_STATS as i16),
                alu(AluOp::Add, sp, sp, ro),
            ],
            false,
        );
        c.bundle(ld64_at(0, sp, 0), FLOAT_NOP);
        c.bundle(
            ld32m(base, q, FlashCombineState::SOURCE_O as i16),
            fbin(FType::F32, FBinOp::Sub, 0, 0, 4),
        );
        c.bundle(
            ld32m(gs, q, FlashCombineState::SOURCE_GROUP_STRIDE as i16),
            fun(FType::F32, FUnOp::Exp, 0, 0),
        );
        c.bundle(
            alu(AluOp::Add, base, base, ro),
            fbin(FType::F32, FBinOp::Mac, 5, 0, 1),
        );
        c.bundle(mov_m(pa, scratch), bcast(2, 0));
        // The statistics are read: `sp` now reads the running sum in step with `pa`.
        c.op(mov_m(sp, scratch));
        if !first {
            match p_ty {
                Elem::F32 => combine_source_f32(c, groups, [po, sp, pa], base, gs),
                Elem::F16 => combine_source_f16(c, groups, [po, sp, pa], base, gs),
            }
            c.op(alu_imm(
                AluOp::Add,
                q,
                q,
                FlashCombineState::SOURCE_BYTES as i16,
            ));
            return;
        }
        c.op(setzi(g, groups - 1));
        if p_ty == Elem::F32 || !first {
            // The loop's bundles start 8-byte aligned (a `nop` here, once per source).
            c.align_bundle();
        }
        let group = c.label();
        c.bind(group);
        c.op(mov_m(po, base));
        // Four elements per unit: 16 bytes of f32, 8 of f16.
        let units = GROUP_ROW_BYTES / if p_ty == Elem::F32 { 16 } else { 8 };
        if p_ty == Elem::F32 {
            combine_group_f32(c, first, [po, sp, pa]);
        }
        for _ in 0..if p_ty == Elem::F32 { 0 } else { units } {
            if first {
                // Four elements of O as f32 in $a6:7, $a8:9 (f16: widened from $a12:13).
                ld4(c, p_ty, 6, po);
                c.op(fbin(FType::F32v2, FBinOp::Mul, 6, 6, 2));
                c.op(fbin(FType::F32v2, FBinOp::Mul, 8, 8, 2));
                c.op(st64step(ap(6), pa, 8));
                c.op(st64step(ap(8), pa, 8));
            } else {
                // O and the running sum load together (`sp` walks the scratch row).
                match p_ty {
                    Elem::F32 => {
                        c.op(Instr::Ld2x64Pace {
                            d: [ap(6), ap(10)],
                            p: [po, sp],
                        });
                        c.op(Instr::Ld2x64Pace {
                            d: [ap(8), ap(14)],
                            p: [po, sp],
                        });
                    }
                    Elem::F16 => {
                        // Six issues, the second and fifth bundles: every unit starts on an
                        // odd word (after the group's pointer copy), so both stay aligned.
                        c.op(Instr::Ld2x64Pace {
                            d: [ap(12), ap(10)],
                            p: [po, sp],
                        });
                        c.bundle(ld64step(ap(14), sp, 8), conv(ConvOp::F16v2ToF32v2, 6, 12));
                        c.op(conv(ConvOp::F16v2ToF32v2, 8, 13));
                        c.op(fbin(FType::F32v2, FBinOp::Mac, 10, 6, 2));
                        c.bundle(
                            st64step(ap(10), pa, 8),
                            fbin(FType::F32v2, FBinOp::Mac, 14, 8, 2),
                        );
                        c.op(st64step(ap(14), pa, 8));
                        continue;
                    }
                }
                c.op(fbin(FType::F32v2, FBinOp::Mac, 10, 6, 2));
                c.op(fbin(FType::F32v2, FBinOp::Mac, 14, 8, 2));
                c.op(st64step(ap(10), pa, 8));
                c.op(st64step(ap(14), pa, 8));
            }
        }
        // The next group of the same rows.
        c.op(alu(AluOp::Add, base, base, gs));
        c.branch(Instr::Brnzdec { a: g, target: 0 }, group);
        c.op(alu_imm(
            AluOp::Add,
            q,
            q,
            FlashCombineState::SOURCE_BYTES as i16,
        ));
    };
    source(c, true);
    let sources_done = c.label();
    c.branch(Instr::Brz { a: nsrc, target: 0 }, sources_done);
    // `nsrc` holds J - 1: J - 1 more sources, so the counter starts at J - 2.
    c.op(alu_imm(AluOp::Sub, cnt, nsrc, 1));
    let more = c.label();
    c.bind(more);
    source(c, false);
    c.branch(Instr::Brnzdec { a: cnt, target: 0 }, more);
    c.bind(sources_done);
    // Pass C: out = scratch * (1 / L).
    c.op(fun(FType::F32, FUnOp::Rcp, 0, 5));
    c.op(bcast(2, 0));
    c.op(mov_m(pa, scratch));
    c.op(mov_m(po, out));
    let out_bytes = if out_ty == Elem::F32 { 4 } else { 2 };
    let run_bytes = gout * out_bytes;
    c.op(alu_imm(AluOp::Sub, tmp, ogs, run_bytes as i16));
    c.op(setzi(g, dv / gout - 1));
    let og = c.label();
    c.bind(og);
    for _ in 0..gout / 4 {
        c.op(ld64step(ap(6), pa, 8));
        c.op(ld64step(ap(8), pa, 8));
        c.op(fbin(FType::F32v2, FBinOp::Mul, 6, 6, 2));
        c.op(fbin(FType::F32v2, FBinOp::Mul, 8, 8, 2));
        st4(c, out_ty, 6, po);
    }
    c.op(alu(AluOp::Add, po, po, tmp));
    c.branch(Instr::Brnzdec { a: g, target: 0 }, og);
    c.op(alu_imm(AluOp::Add, ro, ro, GROUP_ROW_BYTES as i16));
    c.op(alu_imm(AluOp::Add, out, out, run_bytes as i16));
    close_rows_and_exit(c, rows, row, end);
}

/// Issue slots of [`flash_rescale`] over `rows` rows of `groups` groups.
pub fn flash_rescale_slots(p_ty: Elem, rows: u32, groups: u32) -> u32 {
    match (rows, groups) {
        // The state, the count checks that find a zero, `exit`.
        (0, _) => 5 + 1 + 1,
        (_, 0) => 5 + 2 + 1,
        // The state, the count checks, `exit`, then per group: the run's pointers, the first
        // alpha and pair, three bundles, the next run's pointer, the `rpt` and five bundles a
        // further row, the last pair's bundle and store, the branch.
        _ if p_ty == Elem::F32 => 5 + 4 + 1 + groups * (5 + 3 + 1 + 1 + 5 * (rows - 1) + 2 + 1),
        // The state, the count checks and the stride, `exit`; per row its alpha and pointers;
        // per group four pairs of eight slots, the pointer and the branch.
        _ => 11 + rows * (7 + groups * (4 * 8 + 2)),
    }
}

/// One group row (four f32 pairs) of a source in [`flash_combine`]'s pass B, software
/// pipelined: pair `i` loads while pair `i - 1` computes and pair `i - 2` stores, the loads and
/// stores co-issued with the arithmetic (the paced forms load two pairs, or load one and store
/// one, in one issue). The first source scales `O` by `w` (`$a2:3`) into the scratch row
/// (`O` rotating through `$a6:7`, `$a8:9`, `$a10:11`); later ones add `w O` to the running
/// sum read from the scratch row by `sp` (`O` through `$a6:7`, `$a8:9`, the sums through
/// `$a10:11`, `$a12:13`, `$a14:15`). Six issues a group row against twelve one at a time; the
/// arithmetic is the same.
fn combine_group_f32(c: &mut Code, first: bool, [po, sp, pa]: [MReg; 3]) {
    let v = FType::F32v2;
    if first {
        let r = |i: usize| ap([6, 8, 10][i % 3]);
        let mul = |i: usize| fbin(v, FBinOp::Mul, r(i).0, r(i).0, 2);
        c.op(ld64step(r(0), po, 8));
        c.bundle(ld64step(r(1), po, 8), mul(0));
        c.bundle(
            Instr::LdSt64Pace {
                d: r(2),
                s: r(0),
                p: [po, pa],
            },
            mul(1),
        );
        c.bundle(
            Instr::LdSt64Pace {
                d: r(3),
                s: r(1),
                p: [po, pa],
            },
            mul(2),
        );
        c.bundle(st64step(r(2), pa, 8), mul(3));
        c.op(st64step(r(3), pa, 8));
    } else {
        let o = |i: usize| ap([6, 8][i % 2]);
        let l = |i: usize| ap([10, 12, 14][i % 3]);
        let mac = |i: usize| fbin(v, FBinOp::Mac, l(i).0, o(i).0, 2);
        c.op(Instr::Ld2x64Pace {
            d: [o(0), l(0)],
            p: [po, sp],
        });
        c.bundle(
            Instr::Ld2x64Pace {
                d: [o(1), l(1)],
                p: [po, sp],
            },
            mac(0),
        );
        for i in 2..4 {
            c.bundle(
                Instr::Ld2xSt64Pace {
                    d: [o(i), l(i)],
                    s: l(i - 2),
                    p: [po, sp, pa],
                },
                mac(i - 1),
            );
        }
        c.bundle(st64step(l(2), pa, 8), mac(3));
        c.op(st64step(l(3), pa, 8));
    }
}

/// The groups of a source after the first, f32 partials: `scratch += w O` four f32v2 units a
/// group, software-pipelined over all the source's groups (each unit's load and the store of
/// the unit two before co-issued with the multiply-add of the one before), the groups after
/// the first in an `rpt`. `po` walks a group's 32 bytes and then jumps to the next group's
/// (`gs`, the group stride, becomes the jump); `sp` and `pa` walk the scratch row.
fn combine_source_f32(c: &mut Code, groups: u32, [po, sp, pa]: [MReg; 3], base: MReg, gs: MReg) {
    let v = FType::F32v2;
    let o = |u: usize| ap([6, 8][u % 2]);
    let l = |u: usize| ap([10, 12, 14, 0][u % 4]);
    let mac = |u: usize| fbin(v, FBinOp::Mac, l(u).0, o(u).0, 2);
    let load = |u: usize| Instr::Ld2x64Pace {
        d: [o(u), l(u)],
        p: [po, sp],
    };
    let load_store = |u: usize| Instr::Ld2xSt64Pace {
        d: [o(u), l(u)],
        s: l(u + 2),
        p: [po, sp, pa],
    };
    let jump = alu(AluOp::Add, po, po, gs);
    c.main_ops_ending(
        &[
            mov_m(po, base),
            alu_imm(AluOp::Sub, gs, gs, GROUP_ROW_BYTES as i16),
        ],
        true,
    );
    // The first group: nothing to store before its third unit.
    c.op(load(0));
    c.bundle(load(1), mac(0));
    c.bundle(load_store(2), mac(1));
    c.bundle(load_store(3), mac(2));
    c.op(jump);
    c.rpt_bundles(Instr::Rpti {
        count: (groups - 1) as u16,
        body: 5,
    });
    for u in 0..4 {
        c.bundle(load_store(u), mac(u + 3));
    }
    c.op(jump);
    c.op(mac(3));
    c.op(st64step(l(2), pa, 8));
    c.op(st64step(l(3), pa, 8));
}

/// [`combine_source_f32`] for f16 partials: a unit is four f16 of `O` (`$a12:13`), widened
/// into `$a6:7` and `$a8:9`, and the four f32 of the running sum (`$a10:11`, `$a14:15`), five
/// bundles a unit: the paced load of `O` and the sum's first pair (storing the unit before's
/// second pair), the second pair's load with the first widening, the second widening (beside
/// the jump to the next group after a group's last unit), and the two multiply-adds, the first
/// pair's store beside the second.
fn combine_source_f16(c: &mut Code, groups: u32, [po, sp, pa]: [MReg; 3], base: MReg, gs: MReg) {
    let v = FType::F32v2;
    let jump = alu(AluOp::Add, po, po, gs);
    let unit = |c: &mut Code, first: bool, jump_here: bool| {
        let load = if first {
            Instr::Ld2x64Pace {
                d: [ap(12), ap(10)],
                p: [po, sp],
            }
        } else {
            Instr::Ld2xSt64Pace {
                d: [ap(12), ap(10)],
                s: ap(14),
                p: [po, sp, pa],
            }
        };
        c.bundles(
            &[
                load,
                ld64step(ap(14), sp, 8),
                if jump_here { jump } else { Instr::Nop },
                Instr::Nop,
                st64step(ap(10), pa, 8),
            ],
            &[
                FLOAT_NOP,
                conv(ConvOp::F16v2ToF32v2, 6, 12),
                conv(ConvOp::F16v2ToF32v2, 8, 13),
                fbin(v, FBinOp::Mac, 10, 6, 2),
                fbin(v, FBinOp::Mac, 14, 8, 2),
            ],
        );
    };
    let units = GROUP_ROW_BYTES / 8;
    c.main_ops_ending(
        &[
            mov_m(po, base),
            alu_imm(AluOp::Sub, gs, gs, GROUP_ROW_BYTES as i16),
        ],
        false,
    );
    // The first group: its first unit stores nothing; the jump alone leaves the `rpt` on an
    // odd word and its body of bundles on an even one.
    for u in 0..units {
        unit(c, u == 0, false);
    }
    c.op(jump);
    c.rpt_bundles(Instr::Rpti {
        count: (groups - 1) as u16,
        body: (5 * units) as u8,
    });
    for u in 0..units {
        unit(c, false, u + 1 == units);
    }
    c.op(st64step(ap(14), pa, 8));
}

/// Issue slots of [`flash_combine`] over `rows` rows of `sources` sources.
pub fn flash_combine_slots(
    p_ty: Elem,
    out_ty: Elem,
    cols: u32,
    gout: u32,
    dv: u32,
    rows: u32,
    sources: u32,
) -> u32 {
    let groups = dv / cols;
    let units = if p_ty == Elem::F32 { 2 } else { 4 };
    // The first source's loads and f16 widening per unit.
    let load_first = if p_ty == Elem::F32 { 2 } else { 3 };
    // The first source's group row: its loads, arithmetic and stores (f32: the pointer copy,
    // the six issues of `combine_group_f32`, the pointer update and the branch).
    let group_first = if p_ty == Elem::F32 {
        1 + 6 + 2
    } else {
        units * (load_first + 4) + 2
    };
    // A source's statistics, weight and pointers: two ops alone, five bundles, one op alone.
    let setup = 2 + 6 + 1;
    let per_source_first = setup + groups * group_first + 1;
    let per_source = if p_ty == Elem::F32 {
        // `combine_source_f32`: two set-up ops, the first group's five slots, the `rpt` and
        // five a further group, the last group's multiply-add and stores.
        setup + 2 + 5 + 1 + 5 * (groups - 1) + 3 + 2
    } else {
        // `combine_source_f16`: two set-up ops, five bundles a unit of four, the first group's
        // jump, the `rpt`, the last store.
        setup + 2 + 20 * groups + 1 + 1 + 1 + 2
    };
    let out_units = gout / 4;
    let store = if out_ty == Elem::F32 { 2 } else { 3 };
    let pass_c = 7 + (dv / gout) * (out_units * (4 + store) + 2);
    // Pass A: its set-up and `rpt`, three slots a source, the last `max`; the floor.
    let row = 12
        + sources * 3
        + 8
        + per_source_first
        + sources.saturating_sub(1) * per_source
        + pass_c
        + 3;
    12 + rows * row
}
