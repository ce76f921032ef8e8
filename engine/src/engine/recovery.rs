//! Opening an engine: the directory and its lock, the manifest, the regions' files, the
//! removal of files no manifest lists, and the replay of the write-ahead log.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;

use super::manifest::Manifest;
use super::{Engine, EngineInner, EngineOptions};
use crate::background::{Background, Lifeline, Maintainer};
use crate::cache::BlockCache;
use crate::catalog::{CatalogState, RegionEntry};
use crate::descriptor::TableDescriptor;
use crate::fs::{sync_dir, FileSystem};
use crate::memstore::MemAccount;
use crate::region::Region;
use crate::sst::reader::sst_path;
use crate::sst::SstReader;
use crate::tables::TableState;
use crate::wal::{decode_batch, Wal};
use crate::write_path::{Limits, WritePath};
use crate::{Error, Result};

/// Builds a region from its catalog entry. Files shared by split siblings are opened once
/// (`open_files` maps file id to reader).
fn region_from_entry(
    fs: &dyn FileSystem,
    entry: &RegionEntry,
    desc: &TableDescriptor,
    sst_dir: &Path,
    cache: &Arc<BlockCache>,
    open_files: &mut HashMap<u64, Arc<SstReader>>,
    account: &Arc<MemAccount>,
) -> Result<Region> {
    let mut files = Vec::new();
    for fam in &desc.families {
        let mut readers = Vec::new();
        for f in entry.files.iter().filter(|f| f.family == fam.name) {
            let reader = match open_files.get(&f.id) {
                Some(r) => r.clone(),
                None => {
                    let path = sst_path(sst_dir, f.id);
                    let r = Arc::new(SstReader::open(fs, &path, f.id, cache.clone(), fam.in_memory)?);
                    open_files.insert(f.id, r.clone());
                    r
                }
            };
            readers.push(reader);
        }
        files.push(readers);
    }
    let range = (Bytes::from(entry.start.clone()), Bytes::from(entry.end.clone()));
    Ok(Region::new(entry.id, range, &desc.families, files, entry.flushed_seq, account))
}

impl Engine {
    /// Opens (creating if needed) the engine in `dir`, replaying its write-ahead log.
    ///
    /// # Errors
    /// [`Error::Io`] if the directory cannot be used or another process has it open;
    /// [`Error::Corrupt`] naming the file and offset if the manifest, an SSTable footer or the
    /// middle of the log is damaged. A torn record at the end of the log is truncated.
    pub fn open(dir: impl AsRef<Path>, opts: EngineOptions) -> Result<Engine> {
        let dir = dir.as_ref().to_path_buf();
        let sst_dir = dir.join("sst");
        let fs = opts.fs.clone();
        for d in [&dir, &sst_dir] {
            fs.create_dir_all(d).map_err(|e| Error::io(d, e))?;
        }
        sync_dir(&*fs, &dir)?;
        let lock_path = dir.join("LOCK");
        let lock = fs.lock(&lock_path).map_err(|e| {
            let e = match e.kind() {
                std::io::ErrorKind::WouldBlock => {
                    std::io::Error::new(std::io::ErrorKind::WouldBlock, format!("data directory is in use: {e}"))
                }
                _ => e,
            };
            Error::io(&lock_path, e)
        })?;
        let catalog = CatalogState::load(&*fs, &dir.join("MANIFEST"))?;
        let cache = Arc::new(BlockCache::new(opts.block_cache_bytes));
        let account = MemAccount::new(opts.memstore_flush_bytes, opts.global_memstore_bytes);

        let mut tables = BTreeMap::new();
        let mut regions_by_id: HashMap<u64, Arc<Region>> = HashMap::new();
        let mut referenced = HashSet::new();
        let mut open_files = HashMap::new();
        for t in &catalog.tables {
            let mut regions = Vec::new();
            for r in &t.regions {
                referenced.extend(r.files.iter().map(|f| f.id));
                let region =
                    Arc::new(region_from_entry(&*fs, r, &t.descriptor, &sst_dir, &cache, &mut open_files, &account)?);
                regions_by_id.insert(region.id, region.clone());
                regions.push(region);
            }
            tables
                .insert(t.descriptor.name.clone(), Arc::new(TableState::new(t.descriptor.clone(), t.enabled, regions)));
        }
        let max_file_id = remove_orphan_files(&*fs, &sst_dir, &referenced)?;

        let wal_dir = dir.join("wal");
        let wal = Wal::open(fs.clone(), &wal_dir, opts.wal_segment_bytes, catalog.last_seq, |record| {
            let batches = decode_batch(&record.payload).ok_or_else(|| {
                Error::corrupt(
                    &wal_dir,
                    0,
                    format!("WAL record at sequence {} has a malformed payload", record.first_seq),
                )
            })?;
            for (region_id, edits) in batches {
                if let Some(region) = regions_by_id.get(&region_id) {
                    let flushed = region.flushed_seq();
                    let fresh: Vec<_> =
                        edits.into_iter().filter(|e| record.first_seq + u64::from(e.seq_offset) > flushed).collect();
                    region.apply(record.first_seq, &fresh);
                    // Published record by record (no reader is open yet), so each write drops
                    // the versions it hides just as it did when first applied.
                    if let Some(last) = fresh.iter().map(|e| record.first_seq + u64::from(e.seq_offset)).max() {
                        region.publish(last);
                    }
                }
            }
            Ok(())
        })?;
        let last_seq = wal.last_seq();
        for region in regions_by_id.values() {
            region.publish(last_seq);
        }
        let wal = Arc::new(wal);
        let threads = opts.background_threads;
        let background = Arc::new(Background::default());
        let tables = Arc::new(RwLock::new(tables));
        let limits = Limits {
            memstore_flush_bytes: opts.memstore_flush_bytes,
            memstore_block_multiplier: opts.memstore_block_multiplier,
            blocking_files: opts.blocking_files,
            global_memstore_bytes: opts.global_memstore_bytes,
            max_wal_segments: opts.max_wal_segments,
            write_stall_timeout: opts.write_stall_timeout,
        };
        let writes = WritePath::new(limits, opts.clock.clone(), wal, account, background.clone(), tables.clone());
        let nice = opts.background_nice;
        let inner = EngineInner {
            manifest: Manifest::new(&dir, &catalog),
            dir,
            sst_dir,
            opts,
            cache,
            tables,
            writes: Arc::new(writes),
            next_file_id: AtomicU64::new(max_file_id + 1),
            next_region_id: AtomicU64::new(catalog.next_region_id.max(1)),
            background: background.clone(),
            #[cfg(feature = "metrics")]
            publisher: crate::observe::Publisher::default(),
            _lock: lock,
        };
        let inner = Arc::new(inner);
        let maintainer: Arc<dyn Maintainer> = inner.clone();
        let life = Arc::new(Lifeline::start(Arc::downgrade(&maintainer), background, threads, nice));
        drop(maintainer);
        // Regions left with files shared after a split, or grown past their size, get their
        // compaction or split now.
        for (name, state) in inner.tables.read().iter() {
            for r in state.regions() {
                inner.request_follow_ups(name, state, &r);
            }
        }
        Ok(Engine { life, inner })
    }
}

/// Deletes SSTables the catalog does not list (left by a crash mid-flush or mid-compaction);
/// returns the highest file id seen.
fn remove_orphan_files(fs: &dyn FileSystem, sst_dir: &Path, referenced: &HashSet<u64>) -> Result<u64> {
    let mut max_id = referenced.iter().copied().max().unwrap_or(0);
    let mut removed = false;
    for name in fs.list(sst_dir).map_err(|e| Error::io(sst_dir, e))? {
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".sst")).and_then(|n| n.parse::<u64>().ok()) else {
            continue;
        };
        max_id = max_id.max(id);
        if !referenced.contains(&id) {
            let path = sst_dir.join(&name);
            fs.remove(&path).map_err(|e| Error::io(&path, e))?;
            removed = true;
        }
    }
    if removed {
        sync_dir(fs, sst_dir)?;
    }
    Ok(max_id)
}
