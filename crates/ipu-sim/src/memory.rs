//! One tile's memory, allocated lazily a bank at a time, and the decoded-slot cache.
//!
//! Memory is a table of 16 KiB banks at the real addresses `[memory_base, memory_end)`; a bank
//! is allocated (zero-filled) on its first write, so an idle tile costs a few hundred bytes.
//! Reads of a never-written bank return zeros. Naturally aligned accesses of at most 16 bytes
//! never cross a bank boundary (the base is bank-aligned), so the hot paths touch one bank.

use std::sync::Arc;

use ipu_isa::Slot;

use crate::exec::Op;

/// Bytes per allocation unit: one memory bank (16 KiB on Mk2, see `ipu_target::BANK_BYTES`).
pub const PAGE_BYTES: u32 = 16 * 1024;
const PAGE_SHIFT: u32 = 14;
const _: () = assert!(1 << PAGE_SHIFT == PAGE_BYTES);
const _: () = assert!(ipu_target::MEMORY_BASE.is_multiple_of(PAGE_BYTES));
const _: () = assert!(ipu_target::BANK_BYTES == PAGE_BYTES);

static ZERO_PAGE: [u8; PAGE_BYTES as usize] = [0; PAGE_BYTES as usize];

/// A tile's memory.
#[derive(Clone, Debug)]
pub struct Memory {
    base: u32,
    end: u32,
    pages: Vec<Option<Box<[u8]>>>,
}

impl Memory {
    /// An empty (all-zero, unallocated) memory for `[base, end)`.
    pub fn new(base: u32, end: u32) -> Memory {
        let pages = (end - base).div_ceil(PAGE_BYTES) as usize;
        Memory {
            base,
            end,
            pages: vec![None; pages],
        }
    }

    /// Whether `[addr, addr + len)` lies in memory.
    #[inline(always)]
    pub fn contains(&self, addr: u32, len: u32) -> bool {
        addr >= self.base && (addr as u64 + len as u64) <= self.end as u64
    }

    /// Bytes currently allocated (touched banks).
    pub fn allocated_bytes(&self) -> usize {
        self.pages.iter().flatten().map(|p| p.len()).sum()
    }

    /// A slice of `len` bytes at `addr`. The caller has checked bounds and that the range does
    /// not cross a bank.
    #[inline(always)]
    pub fn slice(&self, addr: u32, len: u32) -> &[u8] {
        let off = addr - self.base;
        let page = (off >> PAGE_SHIFT) as usize;
        let at = (off & (PAGE_BYTES - 1)) as usize;
        match &self.pages[page] {
            Some(p) => &p[at..at + len as usize],
            None => &ZERO_PAGE[at..at + len as usize],
        }
    }

    /// A mutable slice of `len` bytes at `addr`, allocating its bank. Same preconditions as
    /// [`Memory::slice`].
    #[inline(always)]
    pub fn slice_mut(&mut self, addr: u32, len: u32) -> &mut [u8] {
        let off = addr - self.base;
        let page = (off >> PAGE_SHIFT) as usize;
        let at = (off & (PAGE_BYTES - 1)) as usize;
        let p = self.pages[page]
            .get_or_insert_with(|| vec![0u8; PAGE_BYTES as usize].into_boxed_slice());
        &mut p[at..at + len as usize]
    }

    /// Copies `out.len()` bytes from `addr` (any range inside memory; may cross banks).
    pub fn read_into(&self, addr: u32, out: &mut [u8]) {
        let mut a = addr;
        let mut done = 0usize;
        while done < out.len() {
            let room = (PAGE_BYTES - ((a - self.base) & (PAGE_BYTES - 1))) as usize;
            let n = room.min(out.len() - done);
            out[done..done + n].copy_from_slice(self.slice(a, n as u32));
            done += n;
            a += n as u32;
        }
    }

    /// Writes `bytes` at `addr` (any range inside memory; may cross banks).
    pub fn write_from(&mut self, addr: u32, bytes: &[u8]) {
        let mut a = addr;
        let mut done = 0usize;
        while done < bytes.len() {
            let room = (PAGE_BYTES - ((a - self.base) & (PAGE_BYTES - 1))) as usize;
            let n = room.min(bytes.len() - done);
            self.slice_mut(a, n as u32)
                .copy_from_slice(&bytes[done..done + n]);
            done += n;
            a += n as u32;
        }
    }

    /// Reads a little-endian word (aligned, in range: checked by the caller).
    #[inline(always)]
    pub fn word(&self, addr: u32) -> u32 {
        u32::from_le_bytes(self.slice(addr, 4).try_into().expect("4 bytes"))
    }
}

/// A decoded issue slot: the slot, its size in bytes and its cost in barrel slots.
#[derive(Clone, Copy, Debug)]
pub struct Decoded {
    /// The slot.
    pub slot: Slot,
    /// 4 or 8.
    pub bytes: u32,
    /// Barrel slots it occupies (2 for a transcendental helper, else 1).
    pub cost: u32,
    /// The slot as a worker runs it.
    pub op: Op,
}

const CACHE_PAGE_WORDS: usize = 256;
const CACHE_PAGE_SHIFT: u32 = 8;
const CACHE_PAGE_BYTES: u32 = 4 * CACHE_PAGE_WORDS as u32;

/// One page of decoded slots, shared by the tiles whose code there is the same until one of
/// them changes it (copy on write).
type CachePage = [Option<Decoded>; CACHE_PAGE_WORDS];

/// What decides a decoded page's contents: the page's index, its bytes and the 4 after it (a
/// bundle in its last word reads them), and which of its words were decoded.
type PageKey = (u32, Box<[u8]>, [u64; 4]);

/// Decoded pages by their [`PageKey`].
#[derive(Default)]
pub struct CodeShare {
    pages: ahash::AHashMap<PageKey, Arc<CachePage>>,
}

impl CodeShare {
    /// Distinct pages decoded so far.
    pub fn distinct_pages(&self) -> usize {
        self.pages.len()
    }
}

/// The decoded-slot cache of a tile, keyed by pc, covering the executable range. Allocated a
/// page of 256 words (1 KiB of code) at a time, so only the code a tile runs costs memory.
/// Stores into the executable range invalidate the words they touch.
#[derive(Clone, Debug)]
pub struct CodeCache {
    base: u32,
    end: u32,
    /// Incremented by every invalidation that touches the executable range.
    epoch: u64,
    /// Above every slot ever cached (the highest pc cached, plus 8): a store at or above it
    /// cannot forget one.
    top: u32,
    pages: Vec<Option<Arc<CachePage>>>,
}

impl CodeCache {
    /// An empty cache for the executable range `[base, end)`.
    pub fn new(base: u32, end: u32) -> CodeCache {
        let words = ((end - base) / 4) as usize;
        CodeCache {
            base,
            end,
            epoch: 0,
            top: 0,
            pages: vec![None; words.div_ceil(CACHE_PAGE_WORDS)],
        }
    }

    /// The cached slot at `pc` (4-aligned, inside the executable range).
    #[inline(always)]
    pub fn get(&self, pc: u32) -> Option<&Decoded> {
        let w = (pc - self.base) >> 2;
        match &self.pages[(w >> CACHE_PAGE_SHIFT) as usize] {
            Some(p) => p[(w as usize) & (CACHE_PAGE_WORDS - 1)].as_ref(),
            None => None,
        }
    }

    /// The cached slot at any `pc` (none outside the executable range or misaligned).
    pub fn lookup(&self, pc: u32) -> Option<&Decoded> {
        if pc & 3 != 0 || pc < self.base || pc >= self.end {
            return None;
        }
        self.get(pc)
    }

    /// Caches `d` at `pc`.
    pub fn put(&mut self, pc: u32, d: Decoded) {
        let w = (pc - self.base) >> 2;
        let page = self.pages[(w >> CACHE_PAGE_SHIFT) as usize]
            .get_or_insert_with(|| Arc::new([None; CACHE_PAGE_WORDS]));
        Arc::make_mut(page)[(w as usize) & (CACHE_PAGE_WORDS - 1)] = Some(d);
        self.top = self.top.max(pc.saturating_add(8));
    }

    /// Fills the pages that hold the words starting in `ranges` with `decode` of each such
    /// word (None where it does not decode), from `share` when a tile already had the same
    /// page. Pages this tile has already cached slots in are left to fill lazily.
    pub fn share(
        &mut self,
        mem: &Memory,
        ranges: &[(u32, u32)],
        share: &mut CodeShare,
        decode: impl Fn(u32) -> Option<Decoded>,
    ) {
        let mut masks: std::collections::BTreeMap<u32, [u64; 4]> = Default::default();
        for &(addr, len) in ranges {
            let lo = addr.max(self.base).next_multiple_of(4);
            let hi = (addr as u64 + len as u64).min(self.end as u64) as u32;
            let mut pc = lo;
            while pc < hi {
                let w = (pc - self.base) >> 2;
                let bit = w as usize & (CACHE_PAGE_WORDS - 1);
                masks.entry(w >> CACHE_PAGE_SHIFT).or_default()[bit / 64] |= 1 << (bit % 64);
                pc += 4;
            }
        }
        for (page, mask) in masks {
            if self.pages[page as usize].is_some() {
                continue;
            }
            let start = self.base + page * CACHE_PAGE_BYTES;
            let end = (start as u64 + CACHE_PAGE_BYTES as u64 + 4).min(mem.end as u64) as u32;
            let mut bytes = vec![0u8; (end - start) as usize];
            mem.read_into(start, &mut bytes);
            let key = (page, bytes.into_boxed_slice(), mask);
            let shared = share
                .pages
                .entry(key)
                .or_insert_with(|| {
                    let mut p: CachePage = [None; CACHE_PAGE_WORDS];
                    for (i, slot) in p.iter_mut().enumerate() {
                        if mask[i / 64] >> (i % 64) & 1 == 1 {
                            *slot = decode(start + 4 * i as u32);
                        }
                    }
                    Arc::new(p)
                })
                .clone();
            let last = (0..CACHE_PAGE_WORDS)
                .rev()
                .find(|&i| mask[i / 64] >> (i % 64) & 1 == 1)
                .expect("a page with a word in a range");
            self.top = self.top.max(start + 4 * last as u32 + 8);
            self.pages[page as usize] = Some(shared);
        }
    }

    /// Forgets every slot that may cover a byte of `[addr, addr + len)` (including a bundle
    /// that starts in the word before).
    #[inline(always)]
    pub fn invalidate(&mut self, addr: u32, len: u32) {
        if addr >= self.end || (addr as u64 + len as u64) <= self.base as u64 || len == 0 {
            return;
        }
        let lo = addr.saturating_sub(4).max(self.base);
        let hi = (addr as u64 + len as u64).min(self.end as u64) as u32;
        let w = (lo - self.base) >> 2;
        let w_end = (hi - self.base).div_ceil(4);
        // A store into data usually lands on a page of the cache that holds no code.
        let (p0, p1) = (w >> CACHE_PAGE_SHIFT, (w_end - 1) >> CACHE_PAGE_SHIFT);
        if p1 <= p0 + 1 && self.pages[p0 as usize].is_none() && self.pages[p1 as usize].is_none() {
            return;
        }
        self.forget(w, w_end);
    }

    /// Whether a store into `[addr, addr + len)` could forget a cached slot (a page of the
    /// cache it touches holds slots; conservative).
    pub fn may_forget(&self, addr: u32, len: u32) -> bool {
        if addr >= self.top || addr >= self.end || (addr as u64 + len as u64) <= self.base as u64 {
            return false;
        }
        let lo = addr.saturating_sub(4).max(self.base);
        let hi = (addr as u64 + len as u64).min(self.end as u64) as u32;
        let (w, w_end) = ((lo - self.base) >> 2, (hi - self.base).div_ceil(4));
        (w >> CACHE_PAGE_SHIFT..=(w_end - 1) >> CACHE_PAGE_SHIFT)
            .any(|p| self.pages[p as usize].is_some())
    }

    /// Forgets the cached slots of words `[w, w_end)`.
    fn forget(&mut self, mut w: u32, w_end: u32) {
        let mut removed = false;
        while w < w_end {
            if let Some(p) = &mut self.pages[(w >> CACHE_PAGE_SHIFT) as usize] {
                let i = (w as usize) & (CACHE_PAGE_WORDS - 1);
                // A shared page is copied only when a slot of it goes.
                if p[i].is_some() {
                    Arc::make_mut(p)[i] = None;
                    removed = true;
                }
            }
            w += 1;
        }
        // Only a removed slot can make a copy taken from the cache stale: stores into data
        // that shares the executable range leave the epoch (and running `rpt` bodies) alone.
        if removed {
            self.epoch += 1;
        }
    }

    /// Changes whenever a cached slot is forgotten.
    #[inline(always)]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Above every slot ever cached: stores at or above it need no invalidation.
    #[inline(always)]
    pub fn top(&self) -> u32 {
        self.top
    }

    /// The end of the range the cache covers.
    #[inline(always)]
    pub fn end(&self) -> u32 {
        self.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lazy_banks_and_cross_bank_copies() {
        let mut m = Memory::new(0x4C000, 0xE8000);
        assert_eq!(m.allocated_bytes(), 0);
        assert_eq!(m.word(0x80000), 0);
        let data: Vec<u8> = (0..40000u32).map(|i| i as u8).collect();
        m.write_from(0x4FFF0, &data);
        let mut back = vec![0u8; data.len()];
        m.read_into(0x4FFF0, &mut back);
        assert_eq!(back, data);
        assert_eq!(m.allocated_bytes(), 4 * PAGE_BYTES as usize);
    }
}
