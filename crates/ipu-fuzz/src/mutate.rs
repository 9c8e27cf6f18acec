//! The stable driver's mutations: a seeded generator (xorshift64*) and the usual byte-level
//! edits — flips, interesting values, inserted, deleted and duplicated runs, splices with
//! another corpus entry. No coverage feedback: it explores around the committed corpora, which
//! the coverage-guided campaigns grew.

/// A seeded pseudo-random generator (Vigna's xorshift64*; any seed but 0 works, 0 is mapped).
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn bits(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.bits() % n as u64) as usize
    }
}

/// Values that often sit on a boundary.
const INTERESTING: &[u64] = &[
    0,
    1,
    0x7F,
    0x80,
    0xFF,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x7FFF_FFFF,
    0x8000_0000,
    0xFFFF_FFFF,
    u64::MAX,
];

/// Longest input the mutations make.
pub const INPUT_BYTES_MAX: usize = 1 << 20;

/// `input` after one to eight edits, splicing from `other` where an edit asks for it.
pub fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(8) {
        let len = v.len();
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                v[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                v[i] = rng.bits() as u8;
            }
            2 if len > 0 => {
                let x = INTERESTING[rng.below(INTERESTING.len())];
                let width = [1usize, 2, 4, 8][rng.below(4)].min(len);
                let i = rng.below(len - width + 1);
                v[i..i + width].copy_from_slice(&x.to_le_bytes()[..width]);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                v.drain(i..i + n);
            }
            4 => {
                let i = rng.below(len + 1);
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.bits() as u8).collect();
                v.splice(i..i, bytes);
            }
            5 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(256));
                let at = rng.below(len + 1);
                let run: Vec<u8> = v[i..i + n].to_vec();
                v.splice(at..at, run);
            }
            6 if !other.is_empty() => {
                let i = rng.below(other.len());
                let n = 1 + rng.below((other.len() - i).min(512));
                let at = rng.below(len + 1);
                v.splice(at..at, other[i..i + n].iter().copied());
            }
            7 if len > 0 => {
                // An ASCII digit or punctuation: text formats mutate better by characters.
                let i = rng.below(len);
                v[i] = b"0123456789-+.,:;()[]{}%@=\n "[rng.below(27)];
            }
            _ if len > 1 => {
                let cut = rng.below(len);
                v.truncate(cut.max(1));
            }
            _ => v.push(rng.bits() as u8),
        }
    }
    v.truncate(INPUT_BYTES_MAX);
    v
}
