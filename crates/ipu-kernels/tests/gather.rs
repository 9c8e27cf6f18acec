//! The lookup kernels on the device: every row each index selects (or zeros), the merge of
//! parts, and their cycle models, exact for the counts of found and missed indices.

mod common;

use common::{STATE, run};
use ipu_kernels::*;
use ipu_target::INTERLEAVED_BASE;

const TABLE: u32 = INTERLEAVED_BASE;
const IDS: u32 = INTERLEAVED_BASE + 0x8000;
const OUT: u32 = INTERLEAVED_BASE + 0x10000;
const STAGE: u32 = INTERLEAVED_BASE + 0x18000;

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect()
}

#[test]
fn gather_rows_copies_the_part_s_rows_and_zeros_the_rest() {
    // A part of rows 10..17 of a 40-entry table, rows of `row_words` words.
    let (first, rows, entries) = (10u32, 7u32, 40u32);
    for row_words in [1u32, 4, 8] {
        let table: Vec<u32> = (0..rows * row_words).map(|i| 0x1000_0000 | i).collect();
        let ids: Vec<i32> = vec![10, 3, 16, 17, -30, -24, -25, 9, 12, 100, -41, 15, i32::MIN];
        let found = ids
            .iter()
            .filter(|&&i| {
                let i = if i < 0 {
                    i64::from(i) + 40
                } else {
                    i64::from(i)
                };
                (10..17).contains(&i)
            })
            .count() as u32;
        let state = [
            TABLE,
            IDS,
            OUT,
            ids.len() as u32,
            first,
            rows,
            row_words,
            entries,
        ];
        let mem = vec![
            (TABLE, table.iter().flat_map(|w| w.to_le_bytes()).collect()),
            (IDS, ids.iter().flat_map(|w| w.to_le_bytes()).collect()),
            (OUT, vec![0xEE; 4 * (ids.len() + 1) * row_words as usize]),
        ];
        let dev = run(Kernel::GatherRows, &state, &mem);
        let out = words(
            &dev.read(0, OUT, 4 * (ids.len() as u32 + 1) * row_words)
                .unwrap(),
        );
        for (k, &i) in ids.iter().enumerate() {
            let i = if i < 0 {
                i64::from(i) + 40
            } else {
                i64::from(i)
            };
            for w in 0..row_words as usize {
                let want = if (10..17).contains(&i) {
                    table[(i as usize - 10) * row_words as usize + w]
                } else {
                    0
                };
                assert_eq!(out[k * row_words as usize + w], want, "index {k} word {w}");
            }
        }
        // Nothing past the last row is written.
        let past = &out[ids.len() * row_words as usize..];
        assert!(past.iter().all(|&w| w == 0xEEEE_EEEE));
        assert_eq!(found, 7);
        assert_eq!(
            dev.counters()[0].worker_slots,
            u64::from(gather_rows_slots(
                found,
                ids.len() as u32 - found,
                row_words
            )),
            "row_words={row_words}"
        );
        let _ = STATE;
    }
    let dev = run(Kernel::GatherRows, &[TABLE, IDS, OUT, 0, 0, 1, 1, 1], &[]);
    assert_eq!(
        dev.counters()[0].worker_slots,
        u64::from(gather_rows_slots(0, 0, 1))
    );
}

#[test]
fn or_words_merges_every_source() {
    for (n, sources) in [(1u32, 1u32), (5, 3), (16, 2), (0, 2), (7, 15)] {
        let stride = 4 * n + 8;
        let mut stage = vec![0u32; (stride / 4 * sources) as usize];
        for s in 0..sources {
            for w in 0..n {
                stage[(s * stride / 4 + w) as usize] = (0x100 << s) | w;
            }
        }
        let mem = vec![
            (OUT, vec![0xEE; 4 * (n as usize + 1)]),
            (STAGE, stage.iter().flat_map(|w| w.to_le_bytes()).collect()),
        ];
        let dev = run(Kernel::OrWords, &[OUT, STAGE, n, sources, stride], &mem);
        let got = words(&dev.read(0, OUT, 4 * (n + 1)).unwrap());
        for w in 0..n {
            let want = (0..sources).fold(0, |acc, s| acc | stage[(s * stride / 4 + w) as usize]);
            assert_eq!(got[w as usize], want, "n={n} sources={sources} word {w}");
        }
        assert_eq!(got[n as usize], 0xEEEE_EEEE, "nothing past the result");
        assert_eq!(
            dev.counters()[0].worker_slots,
            u64::from(or_words_slots(n, sources)),
            "n={n} sources={sources}"
        );
    }
}

#[test]
fn gather_columns_reads_a_transposed_part_s_columns_and_zeros_the_rest() {
    // A part of entries 16..40 of a 40-entry table held as blocks of `group` entries: each
    // block `elems` rows (the column group's valid ones) of `group` elements.
    let ids: Vec<i32> = vec![
        16,
        3,
        39,
        40,
        -1,
        -24,
        -25,
        15,
        31,
        100,
        -41,
        20,
        i32::MIN,
        32,
    ];
    let (first, rows, entries) = (16u32, 24u32, 40u32);
    for (eb, group) in [(4u32, 8u32), (2, 16)] {
        let row_words = group * eb / 4;
        for elems in [group, 7, 3, 1] {
            let (words, tail) = if eb == 2 {
                (elems / 2, elems % 2)
            } else {
                (elems, 0)
            };
            let pad = row_words - words - tail;
            let blocks = rows.div_ceil(group);
            let block = elems * group * eb;
            let n_el = (blocks * elems * group) as usize;
            // Element `k` of the part: a distinct nonzero pattern.
            let el = |k: usize| -> u32 {
                if eb == 2 {
                    0x8000 | k as u32
                } else {
                    0x4000_0000 | k as u32
                }
            };
            let bytes: Vec<u8> = (0..n_el)
                .flat_map(|k| el(k).to_le_bytes()[..eb as usize].to_vec())
                .collect();
            let state = [
                TABLE,
                IDS,
                OUT,
                ids.len() as u32,
                first,
                rows,
                words,
                tail,
                pad,
                entries,
                block,
            ];
            let mem = vec![
                (TABLE, bytes),
                (IDS, ids.iter().flat_map(|w| w.to_le_bytes()).collect()),
                (OUT, vec![0xEE; 4 * (ids.len() + 1) * row_words as usize]),
            ];
            let kernel = Kernel::GatherColumns {
                elem_bytes: eb as u8,
                group: group as u8,
            };
            let dev = run(kernel, &state, &mem);
            let out = words_of(
                &dev.read(0, OUT, 4 * (ids.len() as u32 + 1) * row_words)
                    .unwrap(),
            );
            let mut found = 0;
            for (k, &i) in ids.iter().enumerate() {
                let i = if i < 0 {
                    i64::from(i) + 40
                } else {
                    i64::from(i)
                };
                let r = i - i64::from(first);
                let inside = (0..i64::from(rows)).contains(&r);
                found += u32::from(inside);
                // The row's elements, then zeros, packed little-endian into words.
                let mut want = vec![0u8; 4 * row_words as usize];
                if inside {
                    let r = r as u32;
                    for h in 0..elems {
                        let at = (((r / group) * elems + h) * group + r % group) as usize;
                        let b = el(at).to_le_bytes();
                        let o = (h * eb) as usize;
                        want[o..o + eb as usize].copy_from_slice(&b[..eb as usize]);
                    }
                }
                let want = words_of(&want);
                let got = &out[k * row_words as usize..(k + 1) * row_words as usize];
                assert_eq!(got, &want[..], "eb={eb} elems={elems} index {k}");
            }
            // Nothing past the last row is written.
            let past = &out[ids.len() * row_words as usize..];
            assert!(past.iter().all(|&w| w == 0xEEEE_EEEE));
            assert_eq!(found, 7);
            assert_eq!(
                dev.counters()[0].worker_slots,
                u64::from(gather_columns_slots(
                    eb,
                    found,
                    ids.len() as u32 - found,
                    (words, tail, pad)
                )),
                "eb={eb} elems={elems}"
            );
        }
        let kernel = Kernel::GatherColumns {
            elem_bytes: eb as u8,
            group: group as u8,
        };
        let dev = run(kernel, &[TABLE, IDS, OUT, 0, 0, 1, 1, 0, 0, 1, 4], &[]);
        assert_eq!(
            dev.counters()[0].worker_slots,
            u64::from(gather_columns_slots(eb, 0, 0, (1, 0, 0)))
        );
    }
}

fn words_of(bytes: &[u8]) -> Vec<u32> {
    words(bytes)
}
