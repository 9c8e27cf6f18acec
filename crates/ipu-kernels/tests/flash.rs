//! The flash-attention kernels on the simulated device against a host computation.

mod common;

use common::run;
use ipu_kernels::{Elem, Kernel};
use ipu_sim::Device;

fn f32s(dev: &Device, addr: u32, n: usize) -> Vec<f32> {
    dev.read(0, addr, 4 * n as u32)
        .unwrap()
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn value(i: usize) -> f32 {
    ((i * 7919 % 1000) as f32 - 500.0) / 250.0
}

/// The vertex state of a `FlashCombine` of the sources `src` (`groups` groups of `rows` rows
/// each, the statistics after them) into f32 output groups of `gout` at `out`.
fn combine_state(
    out: u32,
    scratch: u32,
    rows: usize,
    gout: usize,
    groups: usize,
    src: &[u32],
) -> Vec<u32> {
    let mut state = vec![
        out,
        (rows * gout * 4) as u32,
        rows as u32,
        scratch,
        src.len() as u32,
    ];
    for &s in src {
        state.extend([s, (rows * 32) as u32, s + (groups * rows * 32) as u32]);
    }
    state
}

#[test]
fn combine_merges_two_sources_like_the_host() {
    // Two sources of 3 rows, dv = 16 (2 groups of 8 f32), f32 output in groups of 8.
    let (rows, dv, cols) = (3usize, 16usize, 8usize);
    let groups = dv / cols;
    let src = [0x60000u32, 0x61000];
    let mut mem = Vec::new();
    let mut o = vec![vec![0f32; (groups + 1) * rows * cols]; 2];
    for (j, oj) in o.iter_mut().enumerate() {
        for (i, x) in oj.iter_mut().enumerate() {
            *x = value(i + 100 * j);
        }
        for r in 0..rows {
            oj[(groups * rows + r) * cols] = value(r + 7 * j); // m
            oj[(groups * rows + r) * cols + 1] = 1.0 + r as f32 + j as f32; // l
        }
        mem.push((src[j], bytes(oj)));
    }
    let out = 0x62000u32;
    let state = combine_state(out, 0x63000, rows, cols, groups, &src);
    let kernel = Kernel::FlashCombine {
        p: Elem::F32,
        out: Elem::F32,
        cols: 8,
        gout: 8,
        dv: dv as u32,
        stage: 0,
    };
    let dev = run(kernel, &state, &mem);
    let got = f32s(&dev, out, groups * rows * cols);
    for r in 0..rows {
        let m: Vec<f32> = (0..2).map(|j| o[j][(groups * rows + r) * cols]).collect();
        let l: Vec<f32> = (0..2)
            .map(|j| o[j][(groups * rows + r) * cols + 1])
            .collect();
        let mx = m[0].max(m[1]);
        let w: Vec<f32> = m.iter().map(|x| (x - mx).exp()).collect();
        let big_l = w[0] * l[0] + w[1] * l[1];
        for d in 0..dv {
            let (g, lane) = (d / cols, d % cols);
            let want = (w[0] * o[0][(g * rows + r) * cols + lane]
                + w[1] * o[1][(g * rows + r) * cols + lane])
                / big_l;
            let have = got[(g * rows + r) * cols + lane];
            assert!(
                (want - have).abs() <= 1e-5 * want.abs().max(1.0),
                "row {r} d {d}: {have} vs {want}"
            );
        }
    }
}

#[test]
fn combine_merges_two_f16_sources_like_the_host() {
    // Two sources of 3 rows, dv = 32 (2 groups of 16 f16), f32 output in groups of 8; the
    // statistics group holds m and l as f32 words.
    let (rows, dv, cols) = (3usize, 32usize, 16usize);
    let groups = dv / cols;
    let src = [0x60000u32, 0x61000];
    let f16 = |x: f32| half::f16::from_f32(x).to_f32();
    let mut mem = Vec::new();
    let mut o = vec![vec![0f32; groups * rows * cols]; 2];
    let mut stats = vec![[0f32; 2]; 2 * rows];
    for (j, oj) in o.iter_mut().enumerate() {
        for (i, x) in oj.iter_mut().enumerate() {
            *x = f16(value(i + 100 * j));
        }
        let mut b: Vec<u8> = oj
            .iter()
            .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
            .collect();
        for r in 0..rows {
            let st = [value(r + 7 * j), 1.0 + r as f32 + j as f32];
            stats[j * rows + r] = st;
            let mut row = [0u8; 32];
            row[..4].copy_from_slice(&st[0].to_le_bytes());
            row[4..8].copy_from_slice(&st[1].to_le_bytes());
            b.extend_from_slice(&row);
        }
        mem.push((src[j], b));
    }
    let (out, gout) = (0x62000u32, 8usize);
    let state = combine_state(out, 0x63000, rows, gout, groups, &src);
    let kernel = Kernel::FlashCombine {
        p: Elem::F16,
        out: Elem::F32,
        cols: cols as u32,
        gout: gout as u32,
        dv: dv as u32,
        stage: 0,
    };
    let dev = run(kernel, &state, &mem);
    let got = f32s(&dev, out, dv * rows);
    for r in 0..rows {
        let (m, l): (Vec<f32>, Vec<f32>) = (0..2)
            .map(|j| (stats[j * rows + r][0], stats[j * rows + r][1]))
            .unzip();
        let mx = m[0].max(m[1]);
        let w: Vec<f32> = m.iter().map(|x| (x - mx).exp()).collect();
        let big_l = w[0] * l[0] + w[1] * l[1];
        for d in 0..dv {
            let (g, lane) = (d / cols, d % cols);
            let at = (g * rows + r) * cols + lane;
            let want = (w[0] * o[0][at] + w[1] * o[1][at]) / big_l;
            let have = got[((d / gout) * rows + r) * gout + d % gout];
            assert!(
                (want - have).abs() <= 1e-5 * want.abs().max(1.0),
                "row {r} d {d}: {have} vs {want}"
            );
        }
    }
}

#[test]
fn staged_combine_writes_what_the_general_one_writes() {
    // The row's own partial (its item has 5 rows; the merge takes rows 1..4) and three more
    // sources in one stage buffer, dv = 64 in groups of 8 f32: f32 output in groups of 8 and
    // f16 output in groups of 16, bit for bit the general kernel's.
    let (rows, dv, cols, own_rows) = (3usize, 64usize, 8usize, 5usize);
    let groups = dv / cols;
    let (own, stage_at) = (0x60000u32, 0x61000u32);
    let stage = ipu_kernels::flash::combine_stage(Elem::F32, groups as u32, rows as u32, 4);
    assert_eq!(stage as usize, (groups + 1) * rows * 32);
    let mut own_o = vec![0f32; (groups + 1) * own_rows * cols];
    for (i, x) in own_o.iter_mut().enumerate() {
        *x = value(i + 31);
    }
    for r in 0..own_rows {
        own_o[(groups * own_rows + r) * cols] = value(3 * r + 1);
        own_o[(groups * own_rows + r) * cols + 1] = 2.0 + r as f32;
    }
    let mut staged = vec![0f32; 3 * (groups + 1) * rows * cols];
    for (i, x) in staged.iter_mut().enumerate() {
        *x = value(i + 977);
    }
    for j in 0..3 {
        for r in 0..rows {
            let at = (j * (groups + 1) + groups) * rows + r;
            staged[at * cols] = value(5 * j + r + 2);
            staged[at * cols + 1] = 1.5 + (j + r) as f32;
        }
    }
    let mem = vec![(own, bytes(&own_o)), (stage_at, bytes(&staged))];
    for (out_ty, gout) in [(Elem::F32, 8usize), (Elem::F16, 16)] {
        let out = 0x62000u32;
        let ob = if out_ty == Elem::F32 { 4 } else { 2 };
        let mut state = vec![out, (rows * gout * ob) as u32, rows as u32, 0x63000, 4];
        let row1 = 32u32;
        state.extend([
            own + row1,
            (own_rows * 32) as u32,
            own + (groups * own_rows * 32) as u32 + row1,
        ]);
        for j in 0..3u32 {
            let base = stage_at + j * stage;
            state.extend([base, (rows * 32) as u32, base + (groups * rows * 32) as u32]);
        }
        let run_with = |stage: u32| {
            let kernel = Kernel::FlashCombine {
                p: Elem::F32,
                out: out_ty,
                cols: cols as u32,
                gout: gout as u32,
                dv: dv as u32,
                stage,
            };
            let dev = run(kernel, &state, &mem);
            dev.read(0, out, (rows * dv * ob) as u32).unwrap()
        };
        assert_eq!(run_with(stage), run_with(0), "{out_ty:?} output");
    }
}

fn f16_bits(dev: &Device, addr: u32, n: usize) -> Vec<u16> {
    dev.read(0, addr, 2 * n as u32)
        .unwrap()
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}

/// Runs `flash_softmax` (f16 probabilities, no running statistics) over `scores` of type `s`
/// laid out in groups of `cols` keys, `[cols, kb, rows, keys]`; returns the probabilities'
/// f16 bits and the statistics' f32 words (8 per row).
fn softmax_block(
    s: Elem,
    [cols, kb, rows, keys]: [usize; 4],
    scaled: bool,
    scale: f32,
    scores: Vec<u8>,
) -> (Vec<u16>, Vec<f32>) {
    let (s_addr, p_addr, st_addr) = (0x60000u32, 0x61000u32, 0x62000u32);
    let state = [
        s_addr,
        p_addr,
        st_addr,
        rows as u32,
        (keys / cols.max(kb)) as u32,
        (rows * 32) as u32,
        scale.to_bits(),
    ];
    // The group stride read from the state, and built into the loads; the maximum floored
    // or not (every row here sees a key): the same results.
    let [plain, baked, unfloored] =
        [(0, true), ((rows * 32) as u32, true), (0, false)].map(|(stride, floor)| {
            let kernel = Kernel::FlashSoftmax {
                s,
                a: Elem::F16,
                cols: cols as u32,
                kb: kb as u32,
                scaled,
                running: false,
                stride,
                floor,
            };
            let dev = run(kernel, &state, &[(s_addr, scores.clone())]);
            (
                f16_bits(&dev, p_addr, keys * rows),
                f32s(&dev, st_addr, rows * 8),
            )
        });
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (other, what) in [
        (&baked, "with the stride built in"),
        (&unfloored, "unfloored"),
    ] {
        assert_eq!(plain.0, other.0, "probabilities {what}");
        assert_eq!(bits(&plain.1), bits(&other.1), "statistics {what}");
    }
    plain
}

/// Checks `flash_softmax`'s f16 probabilities `p` (in groups of `g` keys) and statistics
/// against `p = f16(exp(f16(t - m)))` of the scaled scores `t(r, k)`, row 2 seeing only its
/// first 5 keys: the maximum exactly, every probability bit for bit, the sum to 1e-6.
fn check_f16_probabilities(
    (p, stats): (&[u16], &[f32]),
    [g, rows, keys]: [usize; 3],
    t: impl Fn(usize, usize) -> f32,
    what: &str,
) {
    let f16 = |x: f32| half::f16::from_f32(x).to_f32();
    for r in 0..rows {
        let seen = if r == 2 { 5 } else { keys };
        let m = (0..seen).map(|k| t(r, k)).fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(stats[r * 8], m, "{what} row {r} maximum");
        let mut l = 0f64;
        for k in 0..keys {
            // The shifted score rounded to f16, `exp` in f32, rounded to f16.
            let e = if k < seen {
                f16(f16(t(r, k) - m).exp())
            } else {
                0.0
            };
            l += e as f64;
            assert_eq!(
                p[((k / g) * rows + r) * g + k % g],
                half::f16::from_f32(e).to_bits(),
                "{what} row {r} key {k}"
            );
        }
        let got = stats[r * 8 + 1] as f64;
        assert!(
            (got - l).abs() <= 1e-6 * l,
            "{what} row {r} sum {got} vs {l}"
        );
    }
}

#[test]
fn softmax_block_gives_the_host_probabilities_and_statistics() {
    // 3 rows of f32 scores in groups of 8 keys, f16 probabilities in groups of 16: one
    // super-group of 16 keys (no `rpt` iteration), two, and five; scaled in the kernel and
    // already scaled (the pass that pairs its units' sums).
    let (rows, cols, kb) = (3usize, 8usize, 16usize);
    for keys in [16usize, 32, 80] {
        for scaled in [true, false] {
            let scale = if scaled { 0.125f32 } else { 1.0 };
            let score = |r: usize, k: usize| value(r * 131 + k * 17) * 4.0;
            let mut s = vec![0f32; keys * rows];
            for r in 0..rows {
                for k in 0..keys {
                    s[((k / cols) * rows + r) * cols + k % cols] = score(r, k);
                }
            }
            // Row 2 sees only its first 5 keys: the rest are -inf, as the causal mask leaves them.
            for k in 5..keys {
                s[((k / cols) * rows + 2) * cols + k % cols] = f32::NEG_INFINITY;
            }
            let what = format!("keys={keys} scaled={scaled}");
            let (p, stats) =
                softmax_block(Elem::F32, [cols, kb, rows, keys], scaled, scale, bytes(&s));
            let t = |r: usize, k: usize| {
                if scaled {
                    score(r, k) * scale
                } else {
                    score(r, k)
                }
            };
            check_f16_probabilities((&p, &stats), [kb, rows, keys], t, &what);
        }
    }
}

#[test]
fn f16_softmax_rounds_as_the_f16_expansion() {
    // 3 rows, 32 keys, f16 scores and probabilities in groups of 16 keys.
    let (rows, keys, g) = (3usize, 32usize, 16usize);
    let f16 = |x: f32| half::f16::from_f32(x).to_f32();
    let score = |r: usize, k: usize| f16(value(r * 131 + k * 17) * 4.0);
    for scaled in [false, true] {
        let scale = if scaled { 0.3f32 } else { 1.0 };
        let mut s = vec![0u16; keys * rows];
        for r in 0..rows {
            for k in 0..keys {
                // Row 2 sees only its first 5 keys, the rest -inf as the causal mask leaves them.
                let x = if r == 2 && k >= 5 {
                    f32::NEG_INFINITY
                } else {
                    score(r, k)
                };
                s[((k / g) * rows + r) * g + k % g] = half::f16::from_f32(x).to_bits();
            }
        }
        let s_bytes: Vec<u8> = s.iter().flat_map(|x| x.to_le_bytes()).collect();
        let (p, stats) = softmax_block(Elem::F16, [g, g, rows, keys], scaled, scale, s_bytes);
        let t = |r: usize, k: usize| {
            if scaled {
                f16(score(r, k) * scale)
            } else {
                score(r, k)
            }
        };
        check_f16_probabilities(
            (&p, &stats),
            [g, rows, keys],
            t,
            &format!("scaled={scaled}"),
        );
    }
}

#[test]
fn rescale_multiplies_each_row_by_its_factor() {
    // A worker's `rows` of a block of `all` rows, `groups` groups of 32 bytes, in f32 and in
    // f16: its rows scaled, the block's other rows untouched.
    for p in [Elem::F32, Elem::F16] {
        for (rows, groups, all) in [(3usize, 2usize, 3usize), (1, 1, 1), (1, 3, 4), (7, 8, 9)] {
            let o_addr = 0x60000u32;
            let st_addr = 0x61000u32;
            let per = if p == Elem::F32 { 8 } else { 16 };
            let o: Vec<f32> = (0..groups * all * per).map(|i| value(i) * 3.0).collect();
            let o_bytes: Vec<u8> = match p {
                Elem::F32 => bytes(&o),
                Elem::F16 => f16_of(&o),
            };
            let alpha: Vec<f32> = (0..rows).map(|r| [0.5f32, 0.123, 1.0][r % 3]).collect();
            // alpha as a pair, as `flash_softmax` stores it: for f32 partials in a run of
            // pairs, for f16 ones in the third and fourth words of 32-byte statistics rows.
            let (row_words, at) = if p == Elem::F32 { (2, 0) } else { (8, 2) };
            let mut st = vec![0f32; all * row_words];
            for (r, a) in alpha.iter().enumerate() {
                st[r * row_words + at] = *a;
                st[r * row_words + at + 1] = *a;
            }
            let state = [
                o_addr,
                st_addr,
                rows as u32,
                groups as u32,
                (all * 32) as u32,
            ];
            let dev = run(
                Kernel::FlashRescale { p },
                &state,
                &[(o_addr, o_bytes), (st_addr, bytes(&st))],
            );
            let what = format!("{p:?} rows={rows} groups={groups} of {all}");
            for g in 0..groups {
                for r in 0..all {
                    let factor = alpha.get(r).copied().unwrap_or(1.0);
                    for lane in 0..per {
                        let i = (g * all + r) * per + lane;
                        match p {
                            Elem::F32 => {
                                let got = f32s(&dev, o_addr + 4 * i as u32, 1)[0];
                                assert_eq!(got, o[i] * factor, "{what}: group {g} row {r}");
                            }
                            Elem::F16 => {
                                let got = f16_bits(&dev, o_addr + 2 * i as u32, 1)[0];
                                let x = half::f16::from_f32(o[i]).to_f32() * factor;
                                assert_eq!(
                                    got,
                                    half::f16::from_f32(x).to_bits(),
                                    "{what}: group {g} row {r}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

fn f16_of(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| half::f16::from_f32(*x).to_bits().to_le_bytes())
        .collect()
}

#[test]
fn mask_adds_to_scores_like_the_expansion() {
    // 3 rows, 2 groups of 32 bytes; masks with a row per query and one broadcast row.
    let (rows, groups) = (3usize, 2usize);
    let (s_addr, m_addr) = (0x60000u32, 0x61000u32);
    let scale = 0.3f32;
    for s_ty in [Elem::F32, Elem::F16] {
        let per = if s_ty == Elem::F32 { 8 } else { 16 };
        for scaled in [false, true] {
            for broadcast in [false, true] {
                let mrows = if broadcast { 1 } else { rows };
                let sc: Vec<f32> = (0..groups * rows * per).map(|i| value(i) * 5.0).collect();
                let mk: Vec<f32> = (0..groups * mrows * per)
                    .map(|i| if i % 5 == 0 { -1e4 } else { value(i + 3) })
                    .collect();
                let (sb, mb) = match s_ty {
                    Elem::F32 => (bytes(&sc), bytes(&mk)),
                    Elem::F16 => (f16_of(&sc), f16_of(&mk)),
                };
                let state = [
                    s_addr,
                    m_addr,
                    rows as u32,
                    groups as u32,
                    (rows * 32) as u32,
                    (mrows * 32) as u32,
                    if broadcast { 0 } else { 32 },
                    scale.to_bits(),
                ];
                let dev = run(
                    Kernel::FlashMask {
                        s: s_ty,
                        scaled,
                        broadcast,
                    },
                    &state,
                    &[(s_addr, sb), (m_addr, mb)],
                );
                for g in 0..groups {
                    for r in 0..rows {
                        for lane in 0..per {
                            let i = (g * rows + r) * per + lane;
                            let mi = (g * mrows + if broadcast { 0 } else { r }) * per + lane;
                            let what = format!("{s_ty:?} scaled={scaled} group {g} row {r}");
                            match s_ty {
                                Elem::F32 => {
                                    let x = if scaled { sc[i] * scale } else { sc[i] };
                                    let got = f32s(&dev, s_addr + 4 * i as u32, 1)[0];
                                    assert_eq!(got, x + mk[mi], "{what}");
                                }
                                Elem::F16 => {
                                    let h = |x: f32| half::f16::from_f32(x).to_f32();
                                    let x = if scaled {
                                        h(h(sc[i]) * scale)
                                    } else {
                                        h(sc[i])
                                    };
                                    let got = f16_bits(&dev, s_addr + 2 * i as u32, 1)[0];
                                    let want = half::f16::from_f32(x + h(mk[mi])).to_bits();
                                    assert_eq!(got, want, "{what}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn bool_mask_becomes_zero_or_the_lowest_finite_value() {
    let addr = 0x60000u32;
    let out = 0x61000u32;
    // Nonzero bytes are visible keys, whatever their value.
    let x: Vec<u8> = (0..24u32)
        .map(|i| [1u8, 0, 0, 7, 255, 0][i as usize % 6])
        .collect();
    for ty in [Elem::F32, Elem::F16] {
        let dev = run(
            Kernel::FlashMaskBool { ty },
            &[addr, out, x.len() as u32 / 4],
            &[(addr, x.clone())],
        );
        for (i, &b) in x.iter().enumerate() {
            match ty {
                Elem::F32 => {
                    let want = if b != 0 { 0.0 } else { f32::MIN };
                    let got = f32s(&dev, out + 4 * i as u32, 1)[0];
                    assert_eq!(got.to_bits(), want.to_bits(), "f32 element {i}");
                }
                Elem::F16 => {
                    let want = if b != 0 { 0 } else { half::f16::MIN.to_bits() };
                    let got = f16_bits(&dev, out + 2 * i as u32, 1)[0];
                    assert_eq!(got, want, "f16 element {i}");
                }
            }
        }
        // Nothing past the groups is written.
        let size = if ty == Elem::F32 { 4 } else { 2 };
        let past = dev.read(0, out + x.len() as u32 * size, 8).unwrap();
        assert!(
            past.iter().all(|&b| b == 0),
            "{ty:?}: written past the groups"
        );
    }
}
