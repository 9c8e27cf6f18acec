//! One tile's memory and the decoded-slot cache.
//!
//! Memory is one private anonymous mapping for the real addresses `[memory_base,
//! memory_end)`, made on a tile's first write: the host zero-fills its pages as they are first
//! touched, so only the pages a tile touches cost host memory, and an access is one slice of
//! it.

use std::sync::Arc;

use ipu_isa::Slot;

use crate::exec::decode::Op;

/// Bytes of one memory bank (16 KiB on Mk2, see `ipu_target::BANK_BYTES`), the unit of
/// `Memory::nonzero_bank_bytes`.
pub const PAGE_BYTES: u32 = 16 * 1024;
const _: () = assert!(ipu_target::MEMORY_BASE.is_multiple_of(PAGE_BYTES));
const _: () = assert!(ipu_target::BANK_BYTES == PAGE_BYTES);

/// Zero-filled bytes in a private anonymous mapping of their own: the host zero-fills its
/// pages only when first touched (4 KiB at a time), so an idle tile costs address space only.
/// (An allocator may hand back recycled memory and clear all of it at once: 918 MB for the
/// 1472 tiles of a GC200, where the programs touch about half.)
struct Zeroed {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: `Zeroed` owns its mapping alone, as a `Box<[u8]>` owns its allocation.
unsafe impl Send for Zeroed {}
// SAFETY: shared references only read.
unsafe impl Sync for Zeroed {}

impl Zeroed {
    fn new(len: usize) -> Zeroed {
        let len = len.max(1);
        // SAFETY: a fresh private anonymous mapping, read-write, at an address of the
        // system's choosing; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        let layout = std::alloc::Layout::from_size_align(len, 1).expect("a tile memory's size");
        if p == libc::MAP_FAILED {
            std::alloc::handle_alloc_error(layout);
        }
        let ptr = std::ptr::NonNull::new(p.cast())
            .unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Zeroed { ptr, len }
    }
}

impl std::ops::Deref for Zeroed {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` holds `len` initialised (zeroed, then written) bytes owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for Zeroed {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Zeroed {
    fn drop(&mut self) {
        // SAFETY: mapped with this length in `new`, and no reference outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

impl Clone for Zeroed {
    fn clone(&self) -> Zeroed {
        let mut z = Zeroed::new(self.len);
        z.copy_from_slice(self);
        z
    }
}

impl std::fmt::Debug for Zeroed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes", self.len)
    }
}

/// What a memory nothing has written reads as (the host maps these zero pages on demand).
static ZEROS: [u8; ipu_target::MEMORY_BYTES as usize] = [0; ipu_target::MEMORY_BYTES as usize];

/// A tile's memory.
#[derive(Clone, Debug)]
pub struct Memory {
    base: u32,
    end: u32,
    /// `[base, end)`, mapped on the first write (until then it reads as [`ZEROS`]), so that
    /// the tiles a program leaves idle cost nothing.
    bytes: Option<Zeroed>,
}

impl Memory {
    /// An all-zero memory for `[base, end)`.
    pub fn new(base: u32, end: u32) -> Memory {
        let len = (end - base) as usize;
        Memory {
            base,
            end,
            bytes: (len > ZEROS.len()).then(|| Zeroed::new(len)),
        }
    }

    /// Whether `[addr, addr + len)` lies in memory.
    #[inline(always)]
    pub fn contains(&self, addr: u32, len: u32) -> bool {
        addr >= self.base && (addr as u64 + len as u64) <= self.end as u64
    }

    /// Bytes of the banks that hold a byte other than zero.
    pub fn nonzero_bank_bytes(&self) -> usize {
        let Some(bytes) = &self.bytes else {
            return 0;
        };
        bytes
            .chunks(PAGE_BYTES as usize)
            .filter(|b| b.iter().any(|&x| x != 0))
            .map(|b| b.len())
            .sum()
    }

    /// A slice of `len` bytes at `addr`. The caller has checked bounds.
    #[inline(always)]
    pub fn slice(&self, addr: u32, len: u32) -> &[u8] {
        let at = (addr - self.base) as usize;
        match &self.bytes {
            Some(b) => &b[at..at + len as usize],
            None => &ZEROS[at..at + len as usize],
        }
    }

    /// A mutable slice of `len` bytes at `addr`. The caller has checked bounds.
    #[inline(always)]
    pub fn slice_mut(&mut self, addr: u32, len: u32) -> &mut [u8] {
        let at = (addr - self.base) as usize;
        let len_all = (self.end - self.base) as usize;
        let b = self.bytes.get_or_insert_with(|| Zeroed::new(len_all));
        &mut b[at..at + len as usize]
    }

    /// Copies `out.len()` bytes from `addr` (any range inside memory).
    pub fn read_into(&self, addr: u32, out: &mut [u8]) {
        out.copy_from_slice(self.slice(addr, out.len() as u32));
    }

    /// Writes `bytes` at `addr` (any range inside memory).
    pub fn write_from(&mut self, addr: u32, bytes: &[u8]) {
        self.slice_mut(addr, bytes.len() as u32)
            .copy_from_slice(bytes);
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
        assert_eq!(m.nonzero_bank_bytes(), 0);
        assert_eq!(m.word(0x80000), 0);
        let data: Vec<u8> = (0..40000u32).map(|i| i as u8).collect();
        m.write_from(0x4FFF0, &data);
        let mut back = vec![0u8; data.len()];
        m.read_into(0x4FFF0, &mut back);
        assert_eq!(back, data);
        assert_eq!(m.nonzero_bank_bytes(), 4 * PAGE_BYTES as usize);
    }
}
