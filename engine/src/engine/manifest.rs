//! The manifest: what the catalog on disk lists ([`Durable`]), the catalog writes that change
//! it, and what may go once it is written: log segments every region's files cover, and files
//! no region and no manifest on disk lists.
//!
//! Every operation that writes the catalog or decides from it takes a [`DdlGuard`], which only
//! [`Manifest::lock`] (and [`Manifest::try_lock_for`]) make: "the caller holds `ddl`" is
//! checked by the compiler.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};

use crate::cache::BlockCache;
use crate::catalog::{CatalogState, FileEntry, RegionEntry, TableEntry};
use crate::fs::{sync_dir, FileSystem};
use crate::sst::SstReader;
use crate::tables::Tables;
use crate::wal::Wal;
use crate::write_path::WritePath;
use crate::Result;

/// Proof that `ddl` is held: schema changes, catalog writes, splits, log trimming and file
/// deletion take it. Made only by locking the manifest's `ddl` mutex; released when dropped.
pub(crate) struct DdlGuard<'a> {
    manifest: &'a Manifest,
    _held: MutexGuard<'a, ()>,
}

/// The catalog's file and the state it holds on disk; owns the `ddl` lock.
pub(crate) struct Manifest {
    /// The `MANIFEST` file.
    path: PathBuf,
    /// Serializes schema changes and catalog writes; the first lock in the engine's order.
    ddl: Mutex<()>,
    /// What the manifest on disk lists; see [`Durable`].
    durable: Mutex<Durable>,
}

impl Manifest {
    /// The manifest of the directory `dir`, which holds `catalog`.
    pub fn new(dir: &Path, catalog: &CatalogState) -> Manifest {
        Manifest { path: dir.join("MANIFEST"), ddl: Mutex::new(()), durable: Mutex::new(Durable::of(catalog)) }
    }

    /// Takes `ddl`, waiting as long as it takes.
    pub fn lock(&self) -> DdlGuard<'_> {
        DdlGuard { manifest: self, _held: self.ddl.lock() }
    }

    /// Takes `ddl` if it can be had within `wait`.
    pub fn try_lock_for(&self, wait: Duration) -> Option<DdlGuard<'_>> {
        self.ddl.try_lock_for(wait).map(|held| DdlGuard { manifest: self, _held: held })
    }

    /// A guard of this manifest's `ddl`, not another engine's.
    fn check(&self, ddl: &DdlGuard<'_>) {
        debug_assert!(std::ptr::eq(ddl.manifest, self), "a ddl guard of another engine");
    }

    /// Writes the catalog of `tables`: the regions, their files and flushed sequence numbers,
    /// `next_region_id` and the log's last sequence number (syncing the log first unless every
    /// region is flushed to one sequence number).
    pub fn persist(
        &self,
        ddl: &DdlGuard<'_>,
        tables: &Tables,
        next_region_id: u64,
        wal: &Wal,
        fs: &dyn FileSystem,
    ) -> Result<()> {
        self.check(ddl);
        let tables = tables.read();
        let mut state = CatalogState { tables: Vec::with_capacity(tables.len()), next_region_id, last_seq: 0 };
        for t in tables.values() {
            let regions = t
                .regions()
                .iter()
                .map(|r| {
                    // Files and flushed sequence number from one snapshot.
                    let stores = r.stores();
                    let files = stores
                        .families
                        .iter()
                        .flat_map(|s| s.files.iter().map(|f| FileEntry { family: s.desc.name.clone(), id: f.id() }))
                        .collect();
                    RegionEntry {
                        id: r.id,
                        start: r.start.to_vec(),
                        end: r.end.to_vec(),
                        flushed_seq: stores.flushed_seq,
                        files,
                    }
                })
                .collect();
            state.tables.push(TableEntry { descriptor: t.descriptor(), enabled: t.is_enabled(), regions });
        }
        drop(tables);
        // Recovery must stay a prefix of the writes: a power loss must not keep a listed file's
        // writes while losing earlier writes of another region still only in the log's
        // unsynced tail. When every region's files hold exactly the writes up to one sequence
        // number (after a flush of every region), no region's file runs ahead of another's
        // log, whatever part of the log survives. Otherwise the log is synced first, up to the
        // sequence number read here, after the regions.
        let mut flushed = state.tables.iter().flat_map(|t| &t.regions).map(|r| r.flushed_seq);
        let uniform = flushed.next().is_none_or(|first| flushed.all(|seq| seq == first));
        state.last_seq = wal.last_seq();
        if !uniform {
            wal.sync_to(state.last_seq)?;
        }
        let listed = Durable::of(&state);
        let stored = state.store(fs, &self.path);
        let mut durable = self.durable.lock();
        match stored {
            Ok(()) => *durable = listed,
            Err(_) => durable.merge(listed),
        }
        stored
    }

    /// Deletes log segments whose edits are all in SSTables the manifest lists.
    pub fn trim_wal(&self, ddl: &DdlGuard<'_>, tables: &Tables, writes: &WritePath) -> Result<()> {
        self.check(ddl);
        let wal = writes.wal();
        let keep_from = {
            let _gate = writes.quiesce();
            let durable = self.durable.lock();
            let mut oldest_unflushed = wal.last_seq();
            for t in tables.read().values() {
                for r in t.regions() {
                    // One snapshot: a flush swaps its file in and empties its memstore at once.
                    let stores = r.stores();
                    let in_memstore = stores.families.iter().any(|s| !s.active.is_empty() || s.frozen.is_some());
                    let in_unlisted_file =
                        stores.families.iter().flat_map(|s| &s.files).any(|f| !durable.listed.contains(&f.id()));
                    match durable.flushed.get(&r.id) {
                        // A recovery replays this region's log from the manifest's sequence
                        // number: keep it while rows past it are in a memstore, or only in a
                        // file that a flush has not yet written to the catalog.
                        Some(&seq) if in_memstore || in_unlisted_file => {
                            oldest_unflushed = oldest_unflushed.min(seq);
                        }
                        Some(_) => {}
                        None if in_memstore => oldest_unflushed = oldest_unflushed.min(r.flushed_seq()),
                        None => {}
                    }
                }
            }
            oldest_unflushed + 1
        };
        wal.remove_segments_below(keep_from)
    }

    /// Deletes replaced files that neither a region (split siblings share files) nor the
    /// manifest on disk lists any more; the caller has written the catalog.
    ///
    /// A file kept only because the manifest still lists it was dropped from memory by a
    /// compaction whose catalog write is pending: that compaction deletes it afterwards.
    pub fn delete_files(
        &self,
        ddl: &DdlGuard<'_>,
        tables: &Tables,
        files: impl Iterator<Item = Arc<SstReader>>,
        cache: &BlockCache,
        fs: &dyn FileSystem,
        sst_dir: &Path,
    ) {
        self.check(ddl);
        let mut live: HashSet<u64> = tables
            .read()
            .values()
            .flat_map(|t| t.regions())
            .flat_map(|r| r.stores().families.iter().flat_map(|s| s.files.iter().map(|f| f.id())).collect::<Vec<_>>())
            .collect();
        live.extend(self.durable.lock().files.iter().copied());
        let mut seen = HashSet::new();
        for f in files.filter(|f| !live.contains(&f.id()) && seen.insert(f.id())) {
            cache.evict_file(f.id());
            // A failed removal leaves an orphan that the next open deletes.
            let _ = fs.remove(f.path());
        }
        let _ = sync_dir(fs, sst_dir);
    }
}

/// What the manifest on disk lists: its files and each region's flushed sequence number.
///
/// Flushes and compactions change a region's files in memory before they take `ddl` to write
/// the catalog, so the in-memory state runs ahead of the manifest: it may already have
/// dropped a compaction's inputs, or moved a flush's rows from the memstore to a file the
/// manifest does not name yet. Whatever a crash would recover from must stay until a manifest
/// that no longer needs it is durable: a file is deleted only when neither a region nor the
/// manifest lists it, and a log segment only when the manifest's flushed sequence numbers
/// cover its edits. Updated by every catalog write; read under `ddl`.
#[derive(Default)]
struct Durable {
    /// Files a manifest that may be on disk lists: none of them may be deleted.
    files: HashSet<u64>,
    /// Files every manifest that may be on disk lists: the log may go once rows are in them.
    listed: HashSet<u64>,
    /// Region id to the flushed sequence number the manifest records for it.
    flushed: HashMap<u64, u64>,
}

impl Durable {
    fn of(catalog: &CatalogState) -> Durable {
        let regions = || catalog.tables.iter().flat_map(|t| &t.regions);
        let files: HashSet<u64> = regions().flat_map(|r| r.files.iter().map(|f| f.id)).collect();
        Durable { listed: files.clone(), files, flushed: regions().map(|r| (r.id, r.flushed_seq)).collect() }
    }

    /// After a failed catalog write, either manifest may be the one on disk: keep the files
    /// of both, count as listed only those both list, and keep the older flushed sequence
    /// numbers.
    fn merge(&mut self, other: Durable) {
        self.files.extend(other.files);
        self.listed.retain(|f| other.listed.contains(f));
        for (region, seq) in other.flushed {
            self.flushed.entry(region).and_modify(|s| *s = (*s).min(seq)).or_insert(seq);
        }
    }
}
