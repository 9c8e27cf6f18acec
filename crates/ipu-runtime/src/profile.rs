//! The execution profile of a session: per-tile counters, the device's sampled records and
//! the calls made, serialisable as JSON.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::RuntimeError;
use crate::device::{EntryConflicts, ProfileMark, ProfileSample, TileCounters};
use crate::session::CallReport;

/// Version of the profile's JSON layout; bumped when a field changes meaning or goes away.
pub const PROFILE_FORMAT_VERSION: u32 = 1;

/// The profile of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// [`PROFILE_FORMAT_VERSION`].
    pub format_version: u32,
    /// The package's model.
    pub model: String,
    /// The target's name.
    pub target: String,
    /// The device's name.
    pub device: String,
    /// The target's tile clock, to turn cycles into seconds.
    pub clock_hz: u64,
    /// Counters of every active tile, accumulated over the session's calls (startup
    /// included).
    pub tiles: Vec<TileCounters>,
    /// Every call of the session in order, the startup call first.
    pub calls: Vec<CallReport>,
    /// The device's sampled records (marks, phase boundaries) in the order they were taken.
    pub samples: Vec<ProfileSample>,
    /// The marks the programs recorded, in the order they were taken.
    pub marks: Vec<ProfileMark>,
    /// Bank conflicts per worker entry address (the kernel), all tiles and calls.
    #[serde(default)]
    pub entry_conflicts: Vec<EntryConflicts>,
}

impl Profile {
    /// Tiles profiled.
    pub fn tile_count(&self) -> usize {
        self.tiles.len()
    }

    /// Sampled records.
    pub fn sample_count(&self) -> usize {
        self.samples.len()
    }

    /// The profile as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        // Serialising plain data with string keys cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Parses a profile written by [`Profile::write`].
    pub fn from_json(text: &str) -> Result<Profile, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Writes the profile as JSON to `path`, atomically: the bytes go to a temporary file in
    /// the same directory which is then renamed, so a complete-looking file is always whole.
    pub fn write(&self, path: &Path) -> Result<(), RuntimeError> {
        write_atomically(path, self.to_json().as_bytes())
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), RuntimeError> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| RuntimeError::Io { path: p, source }
    };
    let name = path.file_name().ok_or_else(|| RuntimeError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"),
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp: PathBuf = path.with_file_name(tmp_name);
    let result = (|| {
        let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(io(path))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
