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
