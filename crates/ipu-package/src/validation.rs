//! What a package must be before it is written or returned by the reader: the manifest
//! against its target and images, its programs, its tensors and their pages.

use ipu_target::{Target, TargetKind};

use crate::format::{
    Manifest, Package, PackageError, RANK_MAX, TENSOR_ALIGN, TensorRole, element_bytes, page_of,
};

/// The FP8 scales a tensor may carry (`ipu_numerics::SCALE_MIN..=SCALE_MAX`).
const FP8_SCALES: std::ops::RangeInclusive<i32> = -32..=31;

/// Programs: unique names, a `run`, entries in executable memory, and a phase count a program
/// can have: at least one, and at most one per supervisor instruction that executable memory
/// holds (every phase ends at a sync instruction).
fn validate_programs(m: &Manifest, target: &Target) -> Result<(), PackageError> {
    let bad = |m: String| Err(PackageError::Manifest(m));
    let phases_max = (target.executable_end - target.executable_base) / 4;
    let mut names = std::collections::BTreeSet::new();
    for p in &m.programs {
        if !names.insert(p.name.as_str()) {
            return bad(format!("program {:?} appears twice", p.name));
        }
        if !target.in_executable(p.entry, 4) || p.entry % 4 != 0 {
            return bad(format!(
                "program {:?} entry {:#x} is not in executable memory",
                p.name, p.entry
            ));
        }
        if p.phases == 0 || p.phases > phases_max {
            return bad(format!(
                "program {:?} has {} phases (1..={phases_max} on {})",
                p.name, p.phases, m.target
            ));
        }
    }
    if !names.contains("run") {
        return bad("no `run` program".into());
    }
    Ok(())
}

/// Tensors: known dtypes and scales, bytes that are the storage size of the shape, unique
/// names, at least one output, each role in its page, and every page packed as the compiler
/// packs it (each tensor at the next 8-byte boundary after the previous, the page ending at
/// the last one's aligned end), no page larger than the tiles in use can hold. A deleted,
/// duplicated, moved or role-swapped tensor breaks one of these.
fn validate_tensors(m: &Manifest, target: &Target) -> Result<(), PackageError> {
    let bad = |m: String| Err(PackageError::Manifest(m));
    let device_bytes = u64::from(m.tiles_used) * u64::from(target.memory_bytes());
    let mut names = std::collections::BTreeSet::new();
    let mut ends = vec![0u64; m.host_pages.len()];
    for t in &m.tensors {
        let name = &t.name;
        if !names.insert(name.as_str()) {
            return bad(format!("tensor {name:?} appears twice"));
        }
        let Some(eb) = element_bytes(&t.dtype) else {
            return bad(format!("tensor {name:?} has unknown dtype {:?}", t.dtype));
        };
        let fp8 = eb == 1;
        if (fp8 && !FP8_SCALES.contains(&t.scale)) || (!fp8 && t.scale != 0) {
            return bad(format!(
                "tensor {name:?} of dtype {} has scale {} (FP8 scales are -32..=31, others 0)",
                t.dtype, t.scale
            ));
        }
        if t.shape.is_empty() || t.shape.len() > RANK_MAX || t.shape.contains(&0) {
            return bad(format!(
                "tensor {name:?} has rank {} or an empty dimension (ranks 1..={RANK_MAX}, dimensions at least 1)",
                t.shape.len()
            ));
        }
        if t.group == 0 || t.group % 4 != 0 {
            return bad(format!(
                "tensor {name:?} has column group {} (a positive multiple of 4 is required)",
                t.group
            ));
        }
        // The storage size, in checked arithmetic: a corrupt shape must not overflow.
        let (n, last) = (t.shape.len(), t.shape[t.shape.len() - 1] as u64);
        let storage = t.shape[..n - 1]
            .iter()
            .try_fold(last.div_ceil(t.group as u64) * t.group as u64, |a, &d| {
                a.checked_mul(d as u64)
            })
            .and_then(|e| e.checked_mul(eb as u64));
        if storage != Some(t.bytes) {
            return bad(format!(
                "tensor {name:?} of shape {:?} and group {} holds {} bytes, not the {} it declares",
                t.shape,
                t.group,
                storage.map_or("more than 2^64".into(), |b| b.to_string()),
                t.bytes
            ));
        }
        if t.page != page_of(t.role) {
            return bad(format!(
                "tensor {name:?} of role {:?} is in page {}; that role's page is {}",
                t.role,
                t.page,
                page_of(t.role)
            ));
        }
        let Some(end) = ends.get_mut(t.page as usize) else {
            return bad(format!("tensor {name:?} names missing page {}", t.page));
        };
        if t.offset != *end {
            return bad(format!(
                "tensor {name:?} is at offset {} of page {}; the previous tensor ends at {}",
                t.offset, t.page, *end
            ));
        }
        *end = (t.offset + t.bytes).div_ceil(TENSOR_ALIGN) * TENSOR_ALIGN;
    }
    if !m.tensors.iter().any(|t| t.role == TensorRole::Output) {
        return bad("no output tensor".into());
    }
    for b in &m.index_bounds {
        if !m
            .tensors
            .iter()
            .any(|t| t.name == b.input && t.role == TensorRole::Input)
        {
            return bad(format!(
                "index bound of {:?} names no input tensor",
                b.input
            ));
        }
        if b.entries == 0 {
            return bad(format!("index bound of {:?} has no entries", b.input));
        }
    }
    for (page, (&size, &end)) in m.host_pages.iter().zip(&ends).enumerate() {
        if size != end {
            return bad(format!(
                "page {page} has {size} bytes but its tensors end at {end}"
            ));
        }
        if size > device_bytes {
            return bad(format!(
                "page {page} of {size} bytes exceeds the {device_bytes} bytes of the {} tiles in use",
                m.tiles_used
            ));
        }
    }
    Ok(())
}

impl Package {
    /// Validates the package's own consistency against its target.
    pub fn validate(&self) -> Result<Target, PackageError> {
        let m = &self.manifest;
        let kind = TargetKind::from_name(&m.target)
            .ok_or_else(|| PackageError::Manifest(format!("unknown target {:?}", m.target)))?;
        let target = kind.target();
        if m.tile_count != target.tiles {
            return Err(PackageError::Manifest(format!(
                "tile_count {} but target {} has {} tiles",
                m.tile_count, m.target, target.tiles
            )));
        }
        if self.tiles.len() != target.tiles as usize {
            return Err(PackageError::Manifest(format!(
                "{} tile entries for {} tiles",
                self.tiles.len(),
                target.tiles
            )));
        }
        if m.tiles_used == 0 || m.tiles_used > target.tiles {
            return Err(PackageError::Manifest(format!(
                "tiles_used {} out of range",
                m.tiles_used
            )));
        }
        for (i, img) in self.tiles.shared.iter().enumerate() {
            let mut end = 0u64;
            for s in &img.segments {
                if !target.in_memory(s.address, s.bytes.len() as u32)
                    || s.bytes.len() > target.memory_bytes() as usize
                {
                    return Err(PackageError::Manifest(format!(
                        "shared image {i}: segment at {:#x} of {} bytes is outside tile memory",
                        s.address,
                        s.bytes.len()
                    )));
                }
                if (s.address as u64) < end {
                    return Err(PackageError::Manifest(format!(
                        "shared image {i}: segment at {:#x} overlaps the previous one",
                        s.address
                    )));
                }
                end = s.address as u64 + s.bytes.len() as u64;
            }
        }
        for (t, entry) in self.tiles.tiles.iter().enumerate() {
            let Some(img) = self.tiles.shared.get(entry.image as usize) else {
                return Err(PackageError::Manifest(format!(
                    "tile {t} names shared image {} of {}",
                    entry.image,
                    self.tiles.shared.len()
                )));
            };
            let image_bytes = img.bytes();
            let mut end = 0u64;
            for (k, p) in entry.patches.iter().enumerate() {
                let (offset, len) = (u64::from(p.offset), p.bytes.len() as u64);
                if len == 0 || offset < end || offset + len > image_bytes {
                    return Err(PackageError::Manifest(format!(
                        "tile {t}: patch {k} of {len} bytes at image offset {offset} is empty, overlaps the previous one or ends past the {image_bytes} bytes of its image"
                    )));
                }
                end = offset + len;
            }
        }
        validate_programs(m, &target)?;
        validate_tensors(m, &target)?;
        let constant_pages: std::collections::BTreeSet<u32> = m
            .tensors
            .iter()
            .filter(|t| t.role == TensorRole::Constant)
            .map(|t| t.page)
            .collect();
        match (constant_pages.len(), constant_pages.first()) {
            (0, _) if !self.constants.is_empty() => {
                return Err(PackageError::Manifest(format!(
                    "{} bytes of constants but no constant tensor",
                    self.constants.len()
                )));
            }
            (0, _) => {}
            (1, Some(&page)) => {
                let size = m.host_pages[page as usize];
                if self.constants.len() as u64 != size {
                    return Err(PackageError::Manifest(format!(
                        "constants page {page} has {size} bytes but the package carries {}",
                        self.constants.len()
                    )));
                }
            }
            _ => {
                return Err(PackageError::Manifest(format!(
                    "constant tensors in pages {constant_pages:?}: they share one page"
                )));
            }
        }
        for w in &m.register_writes {
            if w.tile >= target.tiles {
                return Err(PackageError::Manifest(format!(
                    "register write to tile {} beyond the chip",
                    w.tile
                )));
            }
        }
        Ok(target)
    }

    /// Checks that the package was built for `target`.
    pub fn check_target(&self, target: &Target) -> Result<(), PackageError> {
        if self.manifest.target != target.kind.name() {
            return Err(PackageError::WrongTarget {
                expected: target.kind.name().into(),
                found: self.manifest.target.clone(),
            });
        }
        Ok(())
    }
}
