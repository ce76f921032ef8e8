//! The log's segment type: appending with the four durability levels, writing out buffered
//! records, and removal of segments whose edits are all flushed. The segment format is in
//! [`super::format`], recovery in [`super::recovery`], group commit in [`super::group_commit`]
//! and rolling to a new segment in [`super::roll`].

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use super::format::{frame, segment_header, segment_path, Header};
#[cfg(doc)]
use super::roll::FLUSH_ROLLED_LIMIT;
use super::roll::{Roll, RollSync};
use crate::descriptor::Durability;
use crate::fs::{sync_dir, FileSystem, WriteFile};
use crate::{Error, Result};

/// AsyncWal records are written out once this many bytes are buffered.
const ASYNC_BUFFER: usize = 64 * 1024;
/// A segment is preallocated ahead of its appends in steps that double from the first to the
/// largest: an append inside the preallocated length leaves the file's size alone, so a synced
/// write's `fdatasync` has no size change to commit (on ext4, a journal commit saved on most
/// synced writes).
const PREALLOCATE_FIRST: u64 = 1 << 20;
const PREALLOCATE_LARGEST: u64 = 16 << 20;

pub(super) struct Inner {
    pub(super) file: Arc<dyn WriteFile>,
    pub(super) id: u64,
    /// Bytes written to the segment.
    pub(super) size: u64,
    /// The segment file's length: `size` plus what is preallocated ahead of it.
    pub(super) allocated: u64,
    /// AsyncWal records not yet handed to the OS.
    pub(super) buf: Vec<u8>,
    pub(super) next_seq: u64,
    /// Highest sequence number handed to the OS.
    pub(super) written_seq: u64,
    /// Closed segments, oldest first.
    pub(super) closed: Vec<Closed>,
    pub(super) cur_max_seq: u64,
    /// The syncs finishing the latest roll, while they may still run or wait to be needed.
    pub(super) rolling: Option<RollSync>,
    /// A flush of every region started the segment ([`Wal::roll_for_flush`]): the next flush
    /// closes it, so it rolls by size only once it is [`FLUSH_ROLLED_LIMIT`] times the limit.
    pub(super) flush_rolled: bool,
    /// Set by the first failed write or sync; the log then refuses writes. After a failed
    /// write, records buffered with it (AsyncWal) are lost while later ones could land, and
    /// after a failed fsync the kernel may have dropped the dirty pages while a retried fsync
    /// reports success: either way only a reopen, which replays what the log really holds,
    /// knows the state again.
    pub(super) failed: Option<String>,
}

/// A closed segment.
#[derive(Debug, Clone, Copy)]
pub(super) struct Closed {
    pub id: u64,
    /// The highest sequence number in it.
    pub max_seq: u64,
    /// Its length.
    pub bytes: u64,
}

/// The engine's write-ahead log.
pub(crate) struct Wal {
    pub(super) fs: Arc<dyn FileSystem>,
    pub(super) dir: PathBuf,
    pub(super) inner: Mutex<Inner>,
    /// Highest sequence number known to be on stable storage.
    pub(super) synced: AtomicU64,
    /// Held by the one writer fsyncing (the leader); the others wait on `sync_done` and find
    /// their records covered, or one of them leads the next fsync (group commit).
    pub(super) leader: Mutex<()>,
    pub(super) sync_wait: Mutex<()>,
    pub(super) sync_done: Condvar,
    pub(super) segment_limit: u64,
}

impl Wal {
    /// Creates segment `id` with `header` and syncs it and its directory entry.
    pub(super) fn create_segment(
        fs: &dyn FileSystem,
        dir: &Path,
        id: u64,
        header: Header,
    ) -> Result<Arc<dyn WriteFile>> {
        let f = Self::start_segment(fs, dir, id, header)?;
        let path = segment_path(dir, id);
        f.sync_all().map_err(|e| Error::io(&path, e))?;
        sync_dir(fs, dir)?;
        Ok(f)
    }

    /// Creates segment `id` and writes `header`, without syncing either.
    pub(super) fn start_segment(
        fs: &dyn FileSystem,
        dir: &Path,
        id: u64,
        header: Header,
    ) -> Result<Arc<dyn WriteFile>> {
        let path = segment_path(dir, id);
        let f = fs.create_new(&path).map_err(|e| Error::io(&path, e))?;
        f.write_all(&segment_header(header)).map_err(|e| Error::io(&path, e))?;
        Ok(f)
    }

    /// Reserves `count` sequence numbers and logs `payload` (unless `SkipWal`). Returns the
    /// first reserved sequence number. `FsyncWal` callers must then call [`Wal::sync_to`].
    pub fn append(&self, count: u32, payload: &[u8], durability: Durability) -> Result<u64> {
        let mut inner = self.inner.lock();
        if inner.failed.is_none() {
            if let Some(why) = inner.rolling.as_ref().and_then(RollSync::failure) {
                self.set_failed(&mut inner, why);
            }
        }
        if let Some(why) = &inner.failed {
            return Err(Error::ReadOnly(why.clone()));
        }
        let first = inner.next_seq;
        let count = count.max(1);
        let last = first + u64::from(count) - 1;
        if durability == Durability::SkipWal {
            inner.next_seq = last + 1;
            return Ok(first);
        }
        let mut framed = std::mem::take(&mut inner.buf);
        frame(first, count, payload, &mut framed);
        let must_write = durability != Durability::AsyncWal || framed.len() >= ASYNC_BUFFER;
        inner.next_seq = last + 1;
        inner.cur_max_seq = last;
        if !must_write {
            inner.buf = framed;
            return Ok(first);
        }
        let written = self.write_out(&mut inner, &framed, last);
        // Keep the buffer for the next write (one allocation per log, not per write) unless a
        // large batch grew it.
        if framed.capacity() <= ASYNC_BUFFER * 2 {
            framed.clear();
            inner.buf = framed;
        }
        written.map(|()| first)
    }

    /// Hands `bytes` to the OS. On failure, cuts the segment back so no partial record stays
    /// (best effort: recovery treats a damaged tail as torn) and fails the log.
    pub(super) fn write_out(&self, inner: &mut Inner, bytes: &[u8], last_seq: u64) -> Result<()> {
        let before = inner.size;
        let end = before + bytes.len() as u64;
        let limit = self.roll_size(inner);
        if end > inner.allocated {
            let step = inner.allocated.clamp(PREALLOCATE_FIRST, PREALLOCATE_LARGEST);
            let len = (inner.allocated + step).min(limit).max(end);
            if let Err(e) = inner.file.preallocate(len) {
                let path = segment_path(&self.dir, inner.id);
                self.set_failed(inner, format!("preallocating the log segment {} failed: {e}", path.display()));
                return Err(Error::io(path, e));
            }
            inner.allocated = len;
        }
        if let Err(e) = inner.file.write_all(bytes) {
            let _ = inner.file.set_len(before);
            let path = segment_path(&self.dir, inner.id);
            self.set_failed(inner, format!("writing the log segment {} failed: {e}", path.display()));
            return Err(Error::io(path, e));
        }
        inner.size += bytes.len() as u64;
        inner.written_seq = inner.written_seq.max(last_seq);
        if inner.size >= limit {
            if let Err(Roll::NotStarted(e) | Roll::Failed(e)) = self.roll(inner, false) {
                self.set_failed(inner, format!("starting a new log segment failed: {e}"));
                return Err(e);
            }
        }
        Ok(())
    }

    /// Writes buffered AsyncWal records to the OS.
    pub fn flush_buffer(&self) -> Result<()> {
        let mut inner = self.inner.lock();
        if inner.buf.is_empty() {
            return Ok(());
        }
        let buf = std::mem::take(&mut inner.buf);
        let last = inner.cur_max_seq;
        self.write_out(&mut inner, &buf, last)
    }

    /// Makes the log refuse writes until the engine is reopened, for `reason` (unless it
    /// already does, for an earlier reason).
    pub fn fail(&self, reason: String) {
        self.fail_first(&mut self.inner.lock(), reason);
    }

    /// Makes the log refuse writes for `reason`, which replaces an earlier one. The first
    /// failure is logged: the engine turns read-only.
    pub(super) fn set_failed(&self, inner: &mut Inner, reason: String) {
        if inner.failed.is_none() {
            crate::observe::read_only(&self.dir, &reason);
        }
        inner.failed = Some(reason);
    }

    /// [`Wal::set_failed`] unless the log already failed.
    pub(super) fn fail_first(&self, inner: &mut Inner, reason: String) {
        if inner.failed.is_none() {
            self.set_failed(inner, reason);
        }
    }

    /// Why the log refuses writes, if it does.
    pub fn failure(&self) -> Option<String> {
        self.inner.lock().failed.clone()
    }

    /// Deletes closed segments whose every edit has a sequence number below `seq`.
    pub fn remove_segments_below(&self, seq: u64) -> Result<()> {
        // Deletions never race the latest roll's fsync of a segment they might remove; deferred
        // syncs of a segment they remove are dropped instead, once the removal is durable.
        let rolled = self.inner.lock().rolling.as_mut().filter(|r| !r.is_deferred()).map(RollSync::waiter);
        self.wait_for_roll(rolled)?;
        let doomed: Vec<Closed> = {
            let mut inner = self.inner.lock();
            let (gone, kept): (Vec<_>, Vec<_>) = inner.closed.iter().partition(|c| c.max_seq < seq);
            inner.closed = kept;
            gone
        };
        let mut removed = Vec::new();
        let mut failed = None;
        for &Closed { id, .. } in &doomed {
            let path = segment_path(&self.dir, id);
            match self.fs.remove(&path) {
                Ok(()) => removed.push(id),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => removed.push(id),
                Err(e) => {
                    failed = Some(Error::io(path, e));
                    break;
                }
            }
        }
        let synced = if removed.is_empty() { Ok(()) } else { sync_dir(&*self.fs, &self.dir) };
        let mut inner = self.inner.lock();
        // Segments still there stay listed (the oldest ones), for the next trim. A segment
        // whose removal may not last keeps its deferred syncs: should it come back after a
        // power loss, it must not come back torn in front of newer segments.
        let mut closed: Vec<Closed> = doomed.into_iter().filter(|c| !removed.contains(&c.id)).collect();
        closed.append(&mut inner.closed);
        inner.closed = closed;
        if synced.is_ok() {
            inner.rolling = inner.rolling.take().and_then(|r| r.cancel_if_removed(&removed));
        }
        match failed {
            Some(e) => Err(e),
            None => synced,
        }
    }

    /// The last sequence number handed out.
    pub fn last_seq(&self) -> u64 {
        self.inner.lock().next_seq - 1
    }

    /// Number of segment files, including the open one.
    pub fn segment_count(&self) -> usize {
        self.inner.lock().closed.len() + 1
    }

    /// Bytes of the segment files: the closed ones' lengths and the open one's, preallocated
    /// space included.
    pub fn bytes(&self) -> u64 {
        let inner = self.inner.lock();
        inner.closed.iter().map(|c| c.bytes).sum::<u64>() + inner.allocated
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        // No thread outlives the log; a clean close leaves every closed segment durable.
        if let Some(rolling) = self.inner.get_mut().rolling.take() {
            let _ = rolling.finish();
        }
    }
}
#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::wal::format::*;
    use crate::wal::recovery::*;

    /// The records a log on `fs` holds, read back by opening it.
    pub(in crate::wal) fn records_in(fs: Arc<dyn FileSystem>, dir: &Path) -> Result<Vec<(u64, Vec<u8>)>> {
        let mut seen = Vec::new();
        Wal::open(fs, dir, 1 << 20, 0, |r| {
            seen.push((r.first_seq, r.payload.to_vec()));
            Ok(())
        })?;
        Ok(seen)
    }

    pub(in crate::wal) fn reopen(dir: &Path) -> Result<Vec<(u64, Vec<u8>)>> {
        records_in(Arc::new(crate::fs::OsFs), dir)
    }

    #[test]
    fn records_survive_reopen_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::open(Arc::new(crate::fs::OsFs), dir.path(), 1 << 20, 0, |_| Ok(())).unwrap();
        assert_eq!(wal.append(2, b"one", Durability::SyncWal).unwrap(), 1);
        assert_eq!(wal.append(1, b"skip", Durability::SkipWal).unwrap(), 3);
        let s = wal.append(1, b"two", Durability::FsyncWal).unwrap();
        wal.sync_to(s).unwrap();
        wal.append(1, b"three", Durability::AsyncWal).unwrap();
        wal.flush_buffer().unwrap();
        drop(wal);
        assert_eq!(
            reopen(dir.path()).unwrap(),
            vec![(1, b"one".to_vec()), (4, b"two".to_vec()), (5, b"three".to_vec())]
        );
    }

    /// Five records of 3 000 bytes each in one segment, handed to the OS and not synced (as a
    /// power loss may leave them); returns their payloads.
    pub(in crate::wal) fn five_records(dir: &Path) -> Vec<(u64, Vec<u8>)> {
        let wal = Wal::open(Arc::new(crate::fs::OsFs), dir, 1 << 20, 0, |_| Ok(())).unwrap();
        let records: Vec<(u64, Vec<u8>)> = (1..=5u8).map(|i| (u64::from(i), vec![i; 3_000])).collect();
        for (_, payload) in &records {
            wal.append(1, payload, Durability::SyncWal).unwrap();
        }
        records
    }

    pub(in crate::wal) fn only_segment(dir: &Path) -> PathBuf {
        let segments: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(segments.len(), 1, "{segments:?}");
        segments.into_iter().next().unwrap()
    }

    #[test]
    fn a_segment_is_preallocated_ahead_of_its_records_and_read_back_without_the_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let records = five_records(dir.path());
        let path = only_segment(dir.path());
        let written = (SEGMENT_HEADER + 5 * (RECORD_HEADER + 3_000)) as u64;
        assert!(std::fs::metadata(&path).unwrap().len() > written, "the segment is longer than its records");
        assert_eq!(reopen(dir.path()).unwrap(), records);
        // The reopen left the segment cut to its records, and a second reopen agrees.
        assert_eq!(std::fs::metadata(&path).unwrap().len(), written);
        assert_eq!(reopen(dir.path()).unwrap(), records);
    }

    #[test]
    fn rolled_segments_end_at_their_last_record() {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::open(Arc::new(crate::fs::OsFs), dir.path(), 10_000, 0, |_| Ok(())).unwrap();
        for i in 0..40u8 {
            wal.append(1, &[i; 900], Durability::SyncWal).unwrap();
        }
        assert!(wal.segment_count() >= 3);
        drop(wal);
        let mut segments: Vec<PathBuf> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
        segments.sort();
        for closed in &segments[..segments.len() - 1] {
            let data = std::fs::read(closed).unwrap();
            let (records, ending) = parse_segment(closed, &data, false).unwrap();
            assert!(matches!(ending, Ending::Clean) && !records.is_empty(), "{}", closed.display());
        }
        assert_eq!(reopen(dir.path()).unwrap().len(), 40);
    }

    /// The records a power loss left, read back through a fresh log on the rebooted disk.
    fn recover(fs: &crate::fault::FaultFs, dir: &Path) -> Vec<(u64, Vec<u8>)> {
        records_in(Arc::new(fs.clone()), dir).unwrap()
    }

    #[test]
    fn a_power_loss_leaves_a_prefix_that_holds_every_synced_record() {
        let dir = Path::new("/wal");
        for seed in 0..300 {
            let fs = crate::fault::FaultFs::new(seed);
            // Segments of three 4 KiB blocks: rolls every few records, and torn blocks.
            let wal = Wal::open(Arc::new(fs.clone()), dir, 3 * DISK_BLOCK as u64, 0, |_| Ok(())).unwrap();
            let mut written = Vec::new();
            let mut synced = 0;
            for _ in 0..20 + fs.random() % 60 {
                let payload = vec![(written.len() % 251) as u8 + 1; 200 + (fs.random() % 2_500) as usize];
                let fsync = fs.random().is_multiple_of(8);
                let durability = if fsync { Durability::FsyncWal } else { Durability::SyncWal };
                let seq = wal.append(1, &payload, durability).unwrap();
                written.push((seq, payload));
                if fsync {
                    wal.sync_to(seq).unwrap();
                    synced = written.len();
                }
            }
            let rebooted = fs.power_loss();
            drop(wal);
            let found = recover(&rebooted, dir);
            assert!(found.len() >= synced, "seed {seed}: {} records back, {synced} were synced", found.len());
            assert!(found[..] == written[..found.len()], "seed {seed}: not a prefix of what was written");
        }
    }

    /// A file system whose file syncs wait while `held` is set (except on the roll thread, if
    /// `roll_thread_free`).
    #[derive(Debug, Clone)]
    struct HeldSyncs {
        fs: crate::fault::FaultFs,
        held: Arc<(parking_lot::Mutex<bool>, Condvar)>,
        roll_thread_free: bool,
    }

    impl HeldSyncs {
        fn new(fs: &crate::fault::FaultFs, roll_thread_free: bool) -> HeldSyncs {
            HeldSyncs {
                fs: fs.clone(),
                held: Arc::new((parking_lot::Mutex::new(false), Condvar::new())),
                roll_thread_free,
            }
        }

        fn hold(&self, held: bool) {
            *self.held.0.lock() = held;
            self.held.1.notify_all();
        }
    }

    struct HeldFile {
        file: Arc<dyn WriteFile>,
        held: Arc<(parking_lot::Mutex<bool>, Condvar)>,
        roll_thread_free: bool,
    }

    impl HeldFile {
        fn wait(&self) {
            if self.roll_thread_free && std::thread::current().name() == Some("cellar-log-roll") {
                return;
            }
            let mut held = self.held.0.lock();
            while *held {
                self.held.1.wait(&mut held);
            }
        }
    }

    impl WriteFile for HeldFile {
        fn write_all(&self, buf: &[u8]) -> std::io::Result<()> {
            self.file.write_all(buf)
        }
        fn sync_data(&self) -> std::io::Result<()> {
            self.wait();
            self.file.sync_data()
        }
        fn sync_all(&self) -> std::io::Result<()> {
            self.wait();
            self.file.sync_all()
        }
        fn set_len(&self, len: u64) -> std::io::Result<()> {
            self.file.set_len(len)
        }
        fn preallocate(&self, len: u64) -> std::io::Result<()> {
            self.file.preallocate(len)
        }
    }

    impl FileSystem for HeldSyncs {
        fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
            self.fs.create_dir_all(dir)
        }
        fn list(&self, dir: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
            self.fs.list(dir)
        }
        fn read(&self, path: &Path) -> std::io::Result<Vec<u8>> {
            self.fs.read(path)
        }
        fn open(&self, path: &Path) -> std::io::Result<Arc<dyn crate::fs::ReadFile>> {
            self.fs.open(path)
        }
        fn create_new(&self, path: &Path) -> std::io::Result<Arc<dyn WriteFile>> {
            let file = self.fs.create_new(path)?;
            Ok(Arc::new(HeldFile { file, held: self.held.clone(), roll_thread_free: self.roll_thread_free }))
        }
        fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
            self.fs.rename(from, to)
        }
        fn remove(&self, path: &Path) -> std::io::Result<()> {
            self.fs.remove(path)
        }
        fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
            self.fs.sync_dir(dir)
        }
        fn lock(&self, path: &Path) -> std::io::Result<Box<dyn std::any::Any + Send + Sync>> {
            self.fs.lock(path)
        }
    }

    #[test]
    fn a_roll_leaves_its_fsync_to_a_thread_that_synced_writes_wait_for() {
        let dir = Path::new("/wal");
        let fs = crate::fault::FaultFs::new(7);
        let held = HeldSyncs::new(&fs, false);
        let wal = Wal::open(Arc::new(held.clone()), dir, 2 * DISK_BLOCK as u64, 0, |_| Ok(())).unwrap();
        held.hold(true);
        // Three records of 3 000 bytes fill the first segment: the roll returns at once,
        // its fsync held.
        let written: Vec<(u64, Vec<u8>)> =
            (1..=4u8).map(|i| (wal.append(1, &[i; 3_000], Durability::SyncWal).unwrap(), vec![i; 3_000])).collect();
        assert_eq!(wal.segment_count(), 2);
        std::thread::scope(|s| {
            let synced = s.spawn(|| wal.sync_to(written[3].0));
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert!(!synced.is_finished(), "a synced write returned before the closed segment was synced");
            held.hold(false);
            synced.join().unwrap().unwrap();
        });
        // Whatever else the power loss takes, the synced records are all there.
        let rebooted = fs.power_loss();
        drop(wal);
        assert_eq!(recover(&rebooted, dir), written);
    }

    #[test]
    fn a_failed_roll_fsync_fails_the_log() {
        let dir = Path::new("/wal");
        let fs = crate::fault::FaultFs::new(3);
        let wal = Wal::open(Arc::new(fs.clone()), dir, 2 * DISK_BLOCK as u64, 0, |_| Ok(())).unwrap();
        fs.set_rates(crate::fault::FaultRates::default().sync(1.0));
        // The third record fills the segment; the roll itself returns, its fsync fails later.
        let seqs: Vec<u64> = (0..3).map(|_| wal.append(1, &[9; 3_000], Durability::SyncWal).unwrap()).collect();
        assert_eq!(wal.segment_count(), 2);
        let err = wal.sync_to(seqs[2]).unwrap_err();
        assert!(err.to_string().contains("log roll") || err.to_string().contains("log segment"), "{err}");
        // From then on the log refuses writes, whatever their durability.
        let refused = wal.append(1, b"later", Durability::SyncWal).unwrap_err();
        assert!(matches!(refused, Error::ReadOnly(_)), "{refused}");
    }

    #[test]
    fn a_synced_write_whose_segment_rolled_during_its_fsync_fails_with_the_roll() {
        let dir = Path::new("/wal");
        let fs = crate::fault::FaultFs::new(11);
        let held = HeldSyncs::new(&fs, true);
        let wal = Wal::open(Arc::new(held.clone()), dir, 2 * DISK_BLOCK as u64, 0, |_| Ok(())).unwrap();
        let synced_write = wal.append(1, &[1; 3_000], Durability::FsyncWal).unwrap();
        held.hold(true);
        std::thread::scope(|s| {
            // The synced write's fsync of segment 1 waits; meanwhile other writes roll the
            // segment, and the roll thread's fsync of it fails (taking the error report).
            let leader = s.spawn(|| wal.sync_to(synced_write));
            std::thread::sleep(std::time::Duration::from_millis(50));
            fs.set_rates(crate::fault::FaultRates::default().sync(1.0));
            wal.append(1, &[2; 3_000], Durability::SyncWal).unwrap();
            wal.append(1, &[3; 3_000], Durability::SyncWal).unwrap();
            assert_eq!(wal.segment_count(), 2);
            std::thread::sleep(std::time::Duration::from_millis(50));
            fs.set_rates(crate::fault::FaultRates::default());
            held.hold(false);
            // Its own fsync now succeeds, but the segment's pages never reached the disk.
            let outcome = leader.join().unwrap();
            assert!(outcome.is_err(), "a synced write was acknowledged after its segment's fsync failed");
        });
    }

    #[test]
    fn rolls_and_removes_flushed_segments() {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::open(Arc::new(crate::fs::OsFs), dir.path(), 100, 0, |_| Ok(())).unwrap();
        for _ in 0..10 {
            wal.append(1, &[7u8; 60], Durability::SyncWal).unwrap();
        }
        assert!(wal.segment_count() >= 5);
        wal.remove_segments_below(6).unwrap();
        drop(wal);
        let seqs: Vec<u64> = reopen(dir.path()).unwrap().into_iter().map(|(s, _)| s).collect();
        assert!(seqs.iter().all(|&s| s >= 5) && seqs.contains(&10), "{seqs:?}");
    }

    /// The inode a [`crate::fault::FaultFs`] trace says `path` was created as, and the number
    /// of syncs of it the trace shows.
    fn syncs_in_trace(trace: &[String], path: &Path) -> usize {
        let created = format!("create {} = inode ", path.display());
        let inode = trace.iter().find_map(|l| l.strip_prefix(&created)).expect("the segment's creation is traced");
        trace.iter().filter(|l| l.starts_with(&format!("sync inode {inode}:"))).count()
    }

    /// A segment closed at a flush of every region is synced only when something needs it:
    /// removed once the flush's files are listed, its records never reach the disk; a synced
    /// write after the roll makes them durable first.
    #[test]
    fn a_segment_closed_for_a_flush_is_synced_only_when_needed() {
        let dir = Path::new("/wal");
        for synced_write in [false, true] {
            let fs = crate::fault::FaultFs::new(5);
            fs.start_trace();
            let wal = Wal::open(Arc::new(fs.clone()), dir, 1 << 20, 0, |_| Ok(())).unwrap();
            let flushed = wal.append(1, &[1; 3_000], Durability::SyncWal).unwrap();
            wal.roll_for_flush().unwrap();
            assert_eq!(wal.segment_count(), 2);
            let after = wal.append(1, &[2; 3_000], Durability::SyncWal).unwrap();
            if synced_write {
                wal.sync_to(after).unwrap();
            }
            wal.remove_segments_below(flushed + 1).unwrap();
            assert_eq!(wal.segment_count(), 1);
            // Its header was synced when the log was opened; its record only for the write.
            let syncs = syncs_in_trace(&fs.trace(), &segment_path(dir, 1));
            assert_eq!(syncs, if synced_write { 2 } else { 1 }, "synced write: {synced_write}");
            drop(wal);
            assert_eq!(records_in(Arc::new(fs), dir).unwrap(), vec![(after, vec![2; 3_000])]);
        }
    }

    /// After a roll at a flush, the segment rolls by size only at four times the limit: the
    /// next flush closes it, and a roll in between would have to sync the one before. After
    /// a roll by size, the limit is back.
    #[test]
    fn a_segment_a_flush_started_rolls_by_size_late() {
        let dir = Path::new("/wal");
        let fs = crate::fault::FaultFs::new(6);
        let limit = 4 * DISK_BLOCK;
        let wal = Wal::open(Arc::new(fs.clone()), dir, limit as u64, 0, |_| Ok(())).unwrap();
        let appends_until_roll = |segments: usize| {
            let mut appended = 0;
            while wal.segment_count() == segments {
                wal.append(1, &[7; 1_000], Durability::SyncWal).unwrap();
                appended += 1;
            }
            appended
        };
        wal.append(1, &[7; 1_000], Durability::SyncWal).unwrap();
        wal.roll_for_flush().unwrap();
        assert_eq!(wal.segment_count(), 2);
        let late = appends_until_roll(2);
        assert!(late * 1_000 >= 4 * limit - 1_000, "rolled after {late} KB");
        let on_time = appends_until_roll(3);
        assert!(on_time * 1_000 < limit + 1_000, "rolled after {on_time} KB");
        drop(wal);
        assert_eq!(records_in(Arc::new(fs), dir).unwrap().len(), 1 + late + on_time);
    }
}
