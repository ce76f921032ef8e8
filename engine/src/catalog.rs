//! The catalog: tables, their regions, and each region's files, persisted in one `MANIFEST`
//! file that is replaced atomically on every change.
//!
//! File layout: `magic u64 LE ("CELLARMF") | version u32 LE | payload_len u32 LE | crc32c u32
//! LE | payload`, the payload being the MessagePack encoding of [`CatalogState`].

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::descriptor::TableDescriptor;
use crate::fs::{write_atomic, FileSystem};
use crate::{Error, Result};

const MAGIC: u64 = u64::from_le_bytes(*b"CELLARMF");
const VERSION: u32 = 1;
const HEADER: usize = 20;

/// One SSTable of a region's family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FileEntry {
    pub family: String,
    pub id: u64,
}

/// A region and its files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RegionEntry {
    pub id: u64,
    pub start: Vec<u8>,
    /// Exclusive end; empty = unbounded.
    pub end: Vec<u8>,
    /// Every edit of this region with a sequence number up to this is in its files.
    pub flushed_seq: u64,
    /// Files, newest first within each family.
    pub files: Vec<FileEntry>,
}

/// A table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TableEntry {
    pub descriptor: TableDescriptor,
    pub enabled: bool,
    pub regions: Vec<RegionEntry>,
}

/// Everything the manifest records.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct CatalogState {
    pub tables: Vec<TableEntry>,
    pub next_region_id: u64,
    /// Highest sequence number known to be flushed anywhere; sequence numbers never restart
    /// below it even if every log segment was trimmed.
    pub last_seq: u64,
}

impl CatalogState {
    /// Reads the manifest at `path`; a missing file is an empty catalog.
    pub fn load(fs: &dyn FileSystem, path: &Path) -> Result<CatalogState> {
        let data = match fs.read(path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(CatalogState::default()),
            Err(e) => return Err(Error::io(path, e)),
        };
        let corrupt = |offset: u64, reason: &str| Error::corrupt(path, offset, reason);
        if data.len() < HEADER {
            return Err(corrupt(0, "manifest shorter than its header"));
        }
        let u32_at = |i: usize| u32::from_le_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
        if u64::from_le_bytes(data[..8].try_into().map_err(|_| corrupt(0, "header"))?) != MAGIC {
            return Err(corrupt(0, "bad manifest magic"));
        }
        if u32_at(8) != VERSION {
            return Err(corrupt(8, &format!("unsupported manifest version {}", u32_at(8))));
        }
        let len = u32_at(12) as usize;
        let payload = data.get(HEADER..HEADER + len).ok_or_else(|| corrupt(12, "manifest truncated"))?;
        if crc32c::crc32c(payload) != u32_at(16) {
            return Err(corrupt(HEADER as u64, "manifest checksum mismatch"));
        }
        rmp_serde::from_slice(payload).map_err(|e| corrupt(HEADER as u64, &format!("manifest payload: {e}")))
    }

    /// Writes the manifest atomically.
    pub fn store(&self, fs: &dyn FileSystem, path: &Path) -> Result<()> {
        let payload = rmp_serde::to_vec_named(self)
            .map_err(|e| Error::io(path, std::io::Error::other(format!("encoding manifest: {e}"))))?;
        let mut out = Vec::with_capacity(HEADER + payload.len());
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        out.extend_from_slice(&payload);
        write_atomic(fs, path, &out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::FamilyDescriptor;
    use crate::fs::OsFs;

    #[test]
    fn round_trips_and_detects_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("MANIFEST");
        assert_eq!(CatalogState::load(&OsFs, &path).unwrap(), CatalogState::default());
        let state = CatalogState {
            tables: vec![TableEntry {
                descriptor: TableDescriptor::new("t").family(FamilyDescriptor::new("f")),
                enabled: true,
                regions: vec![RegionEntry {
                    id: 1,
                    start: vec![],
                    end: vec![],
                    flushed_seq: 9,
                    files: vec![FileEntry { family: "f".into(), id: 3 }],
                }],
            }],
            next_region_id: 2,
            last_seq: 9,
        };
        state.store(&OsFs, &path).unwrap();
        assert_eq!(CatalogState::load(&OsFs, &path).unwrap(), state);
        let mut bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 3] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(CatalogState::load(&OsFs, &path), Err(Error::Corrupt { .. })));
    }
}
