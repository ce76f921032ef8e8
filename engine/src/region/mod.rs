//! A region: one key range `[start, end)` of a table, with a memstore and a list of SSTables
//! per family, an MVCC read point, and its own write lock.
//!
//! A region's stores are published as an immutable [`RegionStores`] snapshot behind an `Arc`:
//! readers clone the `Arc` and never block writers; flushes and compactions build a new
//! snapshot and swap it in.
//!
//! Readers pin their read points ([`ReadPins`]) so that writes can drop the memstore versions
//! no reader can see any more (see [`crate::memstore`]).
//!
//! How a region's files change — split points, flushes (freeze, write, install) and
//! compactions — is in `files`.

mod files;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::cache::BlockCache;
use crate::cell::KeyView;
use crate::compaction::CompactionPolicy;
use crate::descriptor::FamilyDescriptor;
use crate::fs::{sync_dir, FileSystem};
use crate::memstore::{MemAccount, Memstore, Pruning};
use crate::read::cursor::CellCursor;
use crate::read::pins::{ReadPin, ReadPins};
use crate::retention::{write_retained, Retention};
use crate::sst::reader::sst_path;
use crate::sst::{SstReader, SstWriter};
use crate::wal::WalEdit;
use crate::{Error, Result};

/// What a read sees of one region: its stores and the MVCC read point, pinned while the
/// snapshot lives so writers keep every version it can see.
pub(crate) struct ReadSnapshot {
    pub stores: Arc<RegionStores>,
    pub read_point: u64,
    pub _pin: ReadPin,
}

/// One family of a region.
#[derive(Clone)]
pub(crate) struct Store {
    pub name: Bytes,
    pub desc: FamilyDescriptor,
    pub active: Arc<Memstore>,
    /// The memstore being flushed, still readable until its file is installed.
    pub frozen: Option<Arc<Memstore>>,
    /// SSTables, newest first.
    pub files: Vec<Arc<SstReader>>,
}

impl Store {
    fn new(desc: FamilyDescriptor, account: &Arc<MemAccount>) -> Store {
        Store {
            name: Bytes::from(desc.name.clone()),
            desc,
            active: Arc::new(Memstore::new(account)),
            frozen: None,
            files: Vec::new(),
        }
    }
}

/// SSTables written from a region's frozen memstores, by family (`None`: the memstore held
/// nothing to keep), not yet in its stores; and the bytes those memstores held.
pub(crate) struct FrozenFiles(Vec<(Bytes, Option<Arc<SstReader>>)>, u64);

/// What one flush of a region wrote, for its log event and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Flushed {
    /// Bytes the flushed memstores held.
    pub memstore_bytes: u64,
    /// Bytes of the files written.
    pub file_bytes: u64,
}

impl Flushed {
    fn add(self, other: Flushed) -> Flushed {
        Flushed {
            memstore_bytes: self.memstore_bytes + other.memstore_bytes,
            file_bytes: self.file_bytes + other.file_bytes,
        }
    }
}

/// What one compaction of a region did.
#[derive(Default)]
pub(crate) struct Compacted {
    /// The files it replaced, which the caller deletes once neither a region nor the manifest
    /// on disk lists them. Empty: it merged nothing.
    pub replaced: Vec<Arc<SstReader>>,
    /// Bytes of the files it wrote.
    pub output_bytes: u64,
    /// It applied the full retention rules to some family.
    pub major: bool,
}

/// The published state of a region's families, sorted by family name.
#[derive(Clone)]
pub(crate) struct RegionStores {
    pub families: Vec<Store>,
    /// Every write up to this sequence number is in the files; none after it is. Kept with
    /// the files, so a catalog write reads both from one snapshot.
    pub flushed_seq: u64,
}

impl RegionStores {
    pub fn family(&self, name: &[u8]) -> Option<&Store> {
        self.families.iter().find(|s| s.name.as_ref() == name)
    }

    /// Bytes held in the memstores, frozen ones included.
    fn memstore_bytes(&self) -> usize {
        self.families.iter().map(|s| s.active.size() + s.frozen.as_ref().map_or(0, |f| f.size())).sum()
    }
}

/// Request counters of a region.
#[derive(Debug, Default)]
pub(crate) struct RegionCounters {
    pub reads: AtomicU64,
    pub writes: AtomicU64,
}

/// What a compaction merges.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CompactionScope<'a> {
    /// Every file of each family, applying the full retention rules.
    Major,
    /// Every file of each family that has two or more, keeping delete markers (a minor
    /// compaction asked for by the user).
    All,
    /// The run of files the policy selects in each family (the background's compactions):
    /// minor, keeping delete markers (and every version, when newer files are left out),
    /// unless the run is every file of the family and the memstores hold no marker, which
    /// applies the full retention rules as a major one does (with the policy's leave).
    Selected(&'a CompactionPolicy),
}

/// Where flushes and compactions put files.
pub(crate) struct FileContext<'a> {
    pub fs: &'a dyn FileSystem,
    pub sst_dir: &'a Path,
    pub cache: &'a Arc<BlockCache>,
    pub next_file_id: &'a AtomicU64,
}

impl FileContext<'_> {
    fn allocate(&self) -> u64 {
        self.next_file_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Writes the retained cells of `cursor` to a new file; `None` if nothing was retained.
    fn write_file<C: CellCursor + ?Sized>(
        &self,
        cursor: &mut C,
        desc: &FamilyDescriptor,
        mode: Retention,
    ) -> Result<Option<Arc<SstReader>>> {
        let id = self.allocate();
        let path = sst_path(self.sst_dir, id);
        let result = (|| {
            let mut w = SstWriter::create(self.fs, &path, desc)?;
            let kept = write_retained(cursor, desc, mode, &mut w)?;
            w.finish()?;
            Ok::<_, Error>(kept)
        })();
        match result {
            Ok(0) => {
                let _ = self.fs.remove(&path);
                Ok(None)
            }
            Ok(_) => {
                // The catalog will name this file: its directory entry must be durable first.
                sync_dir(self.fs, self.sst_dir)?;
                let reader = SstReader::open(self.fs, &path, id, self.cache.clone(), desc.in_memory)?;
                Ok(Some(Arc::new(reader)))
            }
            Err(e) => {
                let _ = self.fs.remove(&path);
                Err(e)
            }
        }
    }
}

/// A key range of a table.
pub(crate) struct Region {
    pub id: u64,
    pub start: Bytes,
    /// Exclusive end; empty means "to the end of the table".
    pub end: Bytes,
    /// Serializes writes (and read-modify-writes) to this region.
    pub write_lock: Mutex<()>,
    /// Serializes flushes. Compactions take `compacting` instead, so a long compaction never
    /// holds up the flush that writes wait for (it only removes files, flushes only add the
    /// newest); splits and schema changes take both ([`Region::maintenance`]).
    pub flushing: Mutex<()>,
    /// Serializes compactions.
    pub compacting: Mutex<()>,
    /// A write asked for a flush of the memstores that now take writes; cleared when they are
    /// frozen, so the writes that arrive before the flush starts do not ask again.
    flush_asked: AtomicBool,
    visible_seq: AtomicU64,
    /// Odd while a write spanning several regions publishes (see [`Region::publish_together`]).
    publishing: AtomicU64,
    /// The sequence number the frozen memstores hold writes up to, while there are any.
    frozen_seq: AtomicU64,
    /// Set once the region has been split: writers that routed here re-route.
    retired: AtomicBool,
    stores: RwLock<Arc<RegionStores>>,
    /// The read points open readers hold.
    pins: Arc<ReadPins>,
    account: Arc<MemAccount>,
    pub counters: RegionCounters,
}

/// Waits a moment for a write publishing across regions. The publisher holds the regions'
/// write locks and does no I/O in the window: it is only ever descheduled, so yield to it after
/// a short spin.
fn wait_for_publisher(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

impl Region {
    pub fn new(
        id: u64,
        (start, end): (Bytes, Bytes),
        families: &[FamilyDescriptor],
        files: Vec<Vec<Arc<SstReader>>>,
        flushed_seq: u64,
        account: &Arc<MemAccount>,
    ) -> Region {
        let mut stores =
            RegionStores { families: families.iter().map(|d| Store::new(d.clone(), account)).collect(), flushed_seq };
        for (s, f) in stores.families.iter_mut().zip(files) {
            s.files = f;
        }
        Region {
            id,
            start,
            end,
            write_lock: Mutex::new(()),
            flushing: Mutex::new(()),
            compacting: Mutex::new(()),
            flush_asked: AtomicBool::new(false),
            visible_seq: AtomicU64::new(flushed_seq),
            publishing: AtomicU64::new(0),
            frozen_seq: AtomicU64::new(0),
            retired: AtomicBool::new(false),
            stores: RwLock::new(Arc::new(stores)),
            pins: Arc::default(),
            account: account.clone(),
            counters: RegionCounters::default(),
        }
    }

    pub fn stores(&self) -> Arc<RegionStores> {
        self.stores.read().clone()
    }

    /// A consistent view for a read: the pin, then the read point, then the stores, so every
    /// write at or below the read point is in a memstore or file of the snapshot, and stays
    /// there while the snapshot lives.
    pub fn snapshot(&self) -> ReadSnapshot {
        let pin = self.pins.pin(&self.visible_seq);
        ReadSnapshot { read_point: self.read_point(), stores: self.stores(), _pin: pin }
    }

    /// Snapshots of several regions at one instant (see [`Region::read_points`]).
    pub fn snapshots(regions: &[&Region]) -> Vec<ReadSnapshot> {
        let pins: Vec<_> = regions.iter().map(|r| r.pins.pin(&r.visible_seq)).collect();
        let points = Region::read_points(regions);
        regions
            .iter()
            .zip(points)
            .zip(pins)
            .map(|((r, read_point), pin)| ReadSnapshot { read_point, stores: r.stores(), _pin: pin })
            .collect()
    }

    /// The sequence number new readers see up to. A read point is never taken while a write
    /// spanning several regions publishes: a reader that saw its edits in one region must see
    /// them in every other (a seqlock on `publishing`; sequentially consistent so the order
    /// holds across regions and threads).
    fn read_point(&self) -> u64 {
        let mut spins = 0u32;
        loop {
            let before = self.publishing.load(Ordering::SeqCst);
            if before.is_multiple_of(2) {
                let seq = self.visible_seq.load(Ordering::SeqCst);
                if self.publishing.load(Ordering::SeqCst) == before {
                    return seq;
                }
            }
            wait_for_publisher(&mut spins);
        }
    }

    /// Read points of several regions taken at one instant: a write spanning several of them is
    /// seen in all or in none (what a scan across regions needs; one region's read point alone
    /// only orders it after reads that came before).
    fn read_points(regions: &[&Region]) -> Vec<u64> {
        let mut spins = 0u32;
        loop {
            let before: Vec<u64> = regions.iter().map(|r| r.publishing.load(Ordering::SeqCst)).collect();
            if before.iter().all(|p| p.is_multiple_of(2)) {
                let seqs = regions.iter().map(|r| r.visible_seq.load(Ordering::SeqCst)).collect();
                if regions.iter().zip(&before).all(|(r, &p)| r.publishing.load(Ordering::SeqCst) == p) {
                    return seqs;
                }
            }
            wait_for_publisher(&mut spins);
        }
    }

    pub fn flushed_seq(&self) -> u64 {
        self.stores().flushed_seq
    }

    /// What writers have published up to; for writers holding the write lock (readers take
    /// [`Region::snapshot`]).
    pub fn visible_seq(&self) -> u64 {
        self.visible_seq.load(Ordering::Acquire)
    }

    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    pub fn set_retired(&self, retired: bool) {
        self.retired.store(retired, Ordering::Release);
    }

    /// True if `row` falls in this region.
    pub fn contains(&self, row: &[u8]) -> bool {
        // The open ends are tested first, not compared: comparing with an empty `Bytes` still
        // calls `memcmp`, whose masked load at the empty slice's dangling address takes a slow
        // fault-suppression assist on some CPUs (about 100 ns on this project's bench VM).
        (self.start.is_empty() || row >= self.start.as_ref()) && (self.end.is_empty() || row < self.end.as_ref())
    }

    /// Orders edits as their cells sort in the memstores (by family, row and column; a
    /// column's edits keep their order, so which of two equal cells wins does not change).
    /// Applied in this order, each insert lands next to the one before it and starts from
    /// there instead of searching the memstore again.
    pub fn order_for_apply(edits: &mut [WalEdit<'_>]) {
        edits.sort_by(|a, b| (a.family, a.row, a.qualifier).cmp(&(b.family, b.row, b.qualifier)));
    }

    /// Inserts logged edits with sequence numbers from `first_seq`, dropping the versions they
    /// make invisible to every reader. Caller holds the write lock (or is replaying the log
    /// alone); families were validated.
    pub fn apply(&self, first_seq: u64, edits: &[WalEdit<'_>]) {
        let stores = self.stores();
        // Readers that pin from now on pin at least today's visible sequence number: it cannot
        // move while the caller holds the write lock. So one answer serves the whole batch.
        let oldest = std::cell::OnceCell::new();
        let oldest_reader = || *oldest.get_or_init(|| self.pins.oldest(self.visible_seq()));
        // Writers order edits by family, row and column (`order_for_apply`): a write's edits
        // of one row of one family go in together.
        for cells in edits.chunk_by(|a, b| a.family == b.family && a.row == b.row) {
            let Some(store) = stores.family(cells[0].family) else { continue };
            let pruning = Pruning { max_versions: store.desc.max_versions, oldest_reader: &oldest_reader };
            let keyed = cells.iter().map(|e| {
                let seq = first_seq + u64::from(e.seq_offset);
                let key = KeyView { row: e.row, qualifier: e.qualifier, ts: e.ts, kind: e.kind, seq };
                (key, e.value, e.ttl_ms)
            });
            store.active.insert_row(keyed, Some(&pruning));
        }
    }

    /// Makes every write up to `seq` visible to new readers.
    pub fn publish(&self, seq: u64) {
        self.visible_seq.fetch_max(seq, Ordering::AcqRel);
    }

    /// Makes every write up to `seq` visible in all of `regions` at once: no reader sees it in
    /// one and not in another. The caller holds every region's write lock.
    pub fn publish_together(regions: &[&Region], seq: u64) {
        for r in regions {
            r.publishing.fetch_add(1, Ordering::SeqCst);
        }
        for r in regions {
            r.visible_seq.fetch_max(seq, Ordering::SeqCst);
        }
        for r in regions {
            r.publishing.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Bytes held in memstores.
    pub fn memstore_size(&self) -> usize {
        self.pressure().0
    }

    /// Bytes a flush of the region would write, unless one is under way (`None`): its frozen
    /// memstores are about to be written out, and flushing the region again would write only
    /// what arrived since. Memstores a failed flush left frozen count: the next flush retries
    /// them.
    pub fn flushable_memstore_size(&self) -> Option<usize> {
        let stores = self.stores();
        let under_way = stores.families.iter().any(|s| s.frozen.is_some()) && self.flushing.is_locked();
        (!under_way).then(|| stores.memstore_bytes())
    }

    /// True the first time a write asks for a flush of the memstores taking writes now.
    pub fn ask_flush(&self) -> bool {
        !self.flush_asked.swap(true, Ordering::AcqRel)
    }

    /// Lets the next write ask again: the flush asked for failed before it froze anything.
    pub fn forget_flush_ask(&self) {
        self.flush_asked.store(false, Ordering::Release);
    }

    /// True if any memstore holds data.
    pub fn has_unflushed(&self) -> bool {
        self.stores().families.iter().any(|s| !s.active.is_empty() || s.frozen.is_some())
    }

    /// Estimated bytes of this region's data in SSTables: whole files it owns, and the blocks
    /// overlapping its range of files it shares with a sibling after a split.
    pub fn file_size(&self) -> u64 {
        let stores = self.stores();
        stores
            .families
            .iter()
            .flat_map(|s| &s.files)
            .map(|f| {
                if f.within(&self.start, &self.end) {
                    f.size()
                } else {
                    f.blocks_overlapping(&self.start, &self.end).iter().map(|(_, n)| n).sum()
                }
            })
            .sum()
    }

    /// Number of SSTables.
    pub fn file_count(&self) -> usize {
        self.stores().families.iter().map(|s| s.files.len()).sum()
    }

    /// Replaces the family descriptors (add or modify); memstores and files are kept for
    /// families that remain.
    pub fn set_families(&self, families: &[FamilyDescriptor]) {
        let _m = self.maintenance();
        let _w = self.write_lock.lock();
        let mut guard = self.stores.write();
        let mut next = RegionStores { families: Vec::new(), flushed_seq: guard.flushed_seq };
        for desc in families {
            let store = match guard.family(desc.name.as_bytes()) {
                Some(existing) => Store { desc: desc.clone(), ..existing.clone() },
                None => Store::new(desc.clone(), &self.account),
            };
            next.families.push(store);
        }
        *guard = Arc::new(next);
    }

    /// The two daughters of a split at `at`: they share this region's files (each reads only
    /// its own range) and start with empty memstores. The caller has flushed this region while
    /// holding its write lock.
    pub fn daughters(&self, at: &Bytes, ids: (u64, u64)) -> (Region, Region) {
        let stores = self.stores();
        let descs: Vec<FamilyDescriptor> = stores.families.iter().map(|s| s.desc.clone()).collect();
        let files: Vec<Vec<Arc<SstReader>>> = stores.families.iter().map(|s| s.files.clone()).collect();
        let seq = self.visible_seq();
        let lower = Region::new(ids.0, (self.start.clone(), at.clone()), &descs, files.clone(), seq, &self.account);
        let upper = Region::new(ids.1, (at.clone(), self.end.clone()), &descs, files, seq, &self.account);
        (lower, upper)
    }

    /// Memstore bytes and the most files any family holds, from one snapshot (checked before
    /// every write).
    pub fn pressure(&self) -> (usize, usize) {
        let stores = self.stores();
        (stores.memstore_bytes(), stores.families.iter().map(|s| s.files.len()).max().unwrap_or(0))
    }

    /// True if a background compaction under `policy` would merge files of some family.
    pub fn wants_compaction(&self, policy: &CompactionPolicy) -> bool {
        let stores = self.stores();
        stores.families.iter().any(|s| self.compaction_run(&s.files, CompactionScope::Selected(policy)).is_some())
    }

    /// True if some file extends past this region's range (shared with a split sibling).
    pub fn has_shared_files(&self) -> bool {
        let stores = self.stores();
        stores.families.iter().flat_map(|s| &s.files).any(|f| !f.within(&self.start, &self.end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(id: u64) -> Region {
        Region::new(id, (Bytes::new(), Bytes::new()), &[], Vec::new(), 0, &MemAccount::new(0, usize::MAX))
    }

    #[test]
    fn a_flush_is_asked_for_once_until_the_memstores_freeze() {
        let r = region(1);
        assert!(r.ask_flush());
        assert!(!r.ask_flush(), "writes before the flush starts do not ask again");
        assert_eq!(r.freeze_locked(), None, "nothing to freeze");
        assert!(r.ask_flush(), "the memstores taking writes after it may ask");
    }

    /// A reader never takes its read point while a write spanning several regions is half
    /// published, nor a scan its read points: they wait, then see the write.
    #[test]
    fn a_read_point_waits_for_a_publish_across_regions() {
        let (a, b) = (region(1), region(2));
        // Mid-publish: both regions entered, `a` already published, `b` not yet.
        a.publishing.fetch_add(1, Ordering::SeqCst);
        b.publishing.fetch_add(1, Ordering::SeqCst);
        a.visible_seq.fetch_max(7, Ordering::SeqCst);
        std::thread::scope(|s| {
            let reader = s.spawn(|| (a.read_point(), b.read_point()));
            // A scan's read points, taken together, wait too (even of regions it reads first).
            let scan = s.spawn(|| Region::snapshots(&[&a, &b]).iter().map(|s| s.read_point).collect::<Vec<_>>());
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!reader.is_finished(), "a reader took a read point in the middle of a publish");
            assert!(!scan.is_finished(), "a scan took read points in the middle of a publish");
            b.visible_seq.fetch_max(7, Ordering::SeqCst);
            a.publishing.fetch_add(1, Ordering::SeqCst);
            b.publishing.fetch_add(1, Ordering::SeqCst);
            assert_eq!(reader.join().unwrap(), (7, 7));
            assert_eq!(scan.join().unwrap(), [7, 7]);
        });
        Region::publish_together(&[&a, &b], 9);
        assert_eq!((a.read_point(), b.read_point()), (9, 9));
    }
}
