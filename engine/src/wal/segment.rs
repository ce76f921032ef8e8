//! WAL segments: appending with the four durability levels, group commit, rolling, recovery
//! and removal of segments whose edits are all flushed.
//!
//! A roll does not wait for the closed segment to reach the disk: its `fdatasync` (and the
//! directory's, which makes the new segment's name durable) runs on a thread of its own
//! ([`Closing`]), so the write that fills a segment is not held up for the tens of
//! milliseconds 64 MiB take to sync. A later segment may then reach the disk before the
//! closed one's tail. Recovery allows for that in the last two segments only (a roll first
//! makes sure the segment closed before is synced): a tear in the second-to-last ends the log,
//! and the last is dropped. Nothing in it was made durable, because a sync of the log
//! ([`Wal::sync_to`]) first syncs the closed segments whose own sync has not finished. A cut
//! that falls between two records would look like a clean end, so each segment a roll creates
//! records in its header how long the closed one was.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

use crate::descriptor::Durability;
use crate::fs::{sync_dir, FileSystem, WriteFile};
use crate::{Error, Result};

const SEGMENT_MAGIC: &[u8; 8] = b"CELLRWAL";
/// Version 2 adds the previous segment's length to the header; version 1 segments still read.
const SEGMENT_VERSION: u32 = 2;
const OLDEST_SEGMENT_VERSION: u32 = 1;
/// Extension of the copy that replaces a segment at recovery.
const REWRITE: &str = "rewrite";
/// Magic and version.
const SEGMENT_PREAMBLE: usize = 12;
/// The preamble, then the length the previous segment had when a roll created this one (0 in
/// a segment created at an open, after every earlier one was made durable).
const SEGMENT_HEADER: usize = 20;
const RECORD_HEADER: usize = 20;
/// AsyncWal records are written out once this many bytes are buffered.
const ASYNC_BUFFER: usize = 64 * 1024;
/// Upper bound on one record's payload; larger lengths are treated as damage.
const MAX_RECORD: usize = 256 * 1024 * 1024;
/// A segment is preallocated ahead of its appends in steps that double from the first to the
/// largest: an append inside the preallocated length leaves the file's size alone, so a synced
/// write's `fdatasync` has no size change to commit (on ext4, a journal commit saved on most
/// synced writes).
const PREALLOCATE_FIRST: u64 = 1 << 20;
const PREALLOCATE_LARGEST: u64 = 16 << 20;
/// The unit in which unsynced appends to a preallocated segment reach the disk: any of these
/// blocks may be lost at a power loss while later ones persist.
const DISK_BLOCK: usize = 4096;
/// The unit a disk writes atomically: a block may be torn between its sectors.
const SECTOR: usize = 512;

/// A record read back during recovery.
#[derive(Debug)]
pub(crate) struct WalRecord {
    pub first_seq: u64,
    /// Sequence numbers the record reserved: `first_seq..first_seq + count`.
    pub count: u32,
    pub payload: Bytes,
}

struct Inner {
    file: Arc<dyn WriteFile>,
    id: u64,
    /// Bytes written to the segment.
    size: u64,
    /// The segment file's length: `size` plus what is preallocated ahead of it.
    allocated: u64,
    /// AsyncWal records not yet handed to the OS.
    buf: Vec<u8>,
    next_seq: u64,
    /// Highest sequence number handed to the OS.
    written_seq: u64,
    /// Closed segments: (id, highest sequence number in it).
    closed: Vec<(u64, u64)>,
    cur_max_seq: u64,
    /// Set by the first failed write or sync; the log then refuses writes. After a failed
    /// write, records buffered with it (AsyncWal) are lost while later ones could land, and
    /// after a failed fsync the kernel may have dropped the dirty pages while a retried fsync
    /// reports success: either way only a reopen, which replays what the log really holds,
    /// knows the state again.
    failed: Option<String>,
}

/// A closed segment whose sync has not finished.
struct Unsynced {
    id: u64,
    path: PathBuf,
    file: Arc<dyn WriteFile>,
}

/// Closed segments whose sync runs on a thread of its own, and the first such sync that
/// failed.
#[derive(Default)]
struct Closing {
    state: Mutex<ClosingState>,
    /// Set with `state.failed`, for appends to check without the lock.
    failed: AtomicBool,
    /// Held by a test to keep the syncs from running, as a power loss right after a roll
    /// finds them.
    #[cfg(test)]
    paused: Mutex<()>,
}

#[derive(Default)]
struct ClosingState {
    unsynced: Vec<Unsynced>,
    failed: Option<String>,
}

impl Closing {
    /// Notes how the sync of closed segment `id` ended.
    fn finished(&self, id: u64, outcome: Result<()>) {
        self.state.lock().unsynced.retain(|u| u.id != id);
        if let Err(e) = outcome {
            self.fail(&e);
        }
    }

    fn fail(&self, e: &Error) {
        self.state.lock().failed.get_or_insert_with(|| format!("syncing a closed log segment failed: {e}"));
        self.failed.store(true, Ordering::Release);
    }

    /// Syncs every segment closed so far whose sync has not finished (again, if its thread is
    /// at it), and the directory: after this, nothing a later segment holds can outlive them.
    fn sync_all(&self, fs: &dyn FileSystem, dir: &Path) -> std::result::Result<(), String> {
        let pending: Vec<(u64, PathBuf, Arc<dyn WriteFile>)> = {
            let state = self.state.lock();
            if let Some(why) = &state.failed {
                return Err(why.clone());
            }
            state.unsynced.iter().map(|u| (u.id, u.path.clone(), u.file.clone())).collect()
        };
        if pending.is_empty() {
            return Ok(());
        }
        for (id, path, file) in pending {
            let synced = file.sync_data().map_err(|e| Error::io(&path, e));
            let failed = synced.is_err();
            self.finished(id, synced);
            if failed {
                break;
            }
        }
        if let Err(e) = sync_dir(fs, dir) {
            self.fail(&e);
        }
        self.state.lock().failed.clone().map_or(Ok(()), Err)
    }

    fn failure(&self) -> Option<String> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        self.state.lock().failed.clone()
    }
}

/// The engine's write-ahead log.
pub(crate) struct Wal {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    inner: Mutex<Inner>,
    /// Highest sequence number known to be on stable storage.
    synced: AtomicU64,
    /// Held by the one writer fsyncing (the leader); the others wait on `sync_done` and find
    /// their records covered, or one of them leads the next fsync (group commit).
    leader: Mutex<()>,
    sync_wait: Mutex<()>,
    sync_done: Condvar,
    segment_limit: u64,
    closing: Arc<Closing>,
}

fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:016}.log"))
}

fn record_crc(seq_and_count: &[u8], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(seq_and_count), payload)
}

fn frame(first_seq: u64, count: u32, payload: &[u8], out: &mut Vec<u8>) {
    let mut head = [0u8; 12];
    head[..8].copy_from_slice(&first_seq.to_le_bytes());
    head[8..].copy_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&record_crc(&head, payload).to_le_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(payload);
}

/// Why a segment's record stream ended.
enum Ending {
    Clean,
    /// Damage at this offset: a torn write, from which the rest of the segment is dropped.
    Torn(u64),
}

fn preamble(version: u32) -> [u8; SEGMENT_PREAMBLE] {
    let mut preamble = [0u8; SEGMENT_PREAMBLE];
    preamble[..8].copy_from_slice(SEGMENT_MAGIC);
    preamble[8..].copy_from_slice(&version.to_le_bytes());
    preamble
}

fn segment_header(previous_len: u64) -> [u8; SEGMENT_HEADER] {
    let mut header = [0u8; SEGMENT_HEADER];
    header[..SEGMENT_PREAMBLE].copy_from_slice(&preamble(SEGMENT_VERSION));
    header[SEGMENT_PREAMBLE..].copy_from_slice(&previous_len.to_le_bytes());
    header
}

fn header_len(version: u32) -> usize {
    if version == 1 {
        SEGMENT_PREAMBLE
    } else {
        SEGMENT_HEADER
    }
}

/// A segment whose creation did not finish: part of its header, then nothing or zeros.
fn unfinished(data: &[u8]) -> bool {
    (OLDEST_SEGMENT_VERSION..=SEGMENT_VERSION).any(|version| {
        let header = preamble(version);
        let written = data.iter().zip(&header).take_while(|(a, b)| a == b).count();
        let rest_zeros = data[written..].iter().all(|&b| b == 0);
        rest_zeros && (written < SEGMENT_PREAMBLE || data.len() < header_len(version))
    })
}

/// The length a segment's header says the previous segment had when a roll created this one;
/// `None` if it does not say (an older version, or a segment created at an open).
fn previous_len(data: &[u8]) -> Option<u64> {
    let header = data.get(..SEGMENT_HEADER)?;
    let claim = u64::from_le_bytes(header[SEGMENT_PREAMBLE..].try_into().ok()?);
    (header[..SEGMENT_PREAMBLE] == preamble(SEGMENT_VERSION) && claim > 0).then_some(claim)
}

/// Whether the damaged record at `record` shows a block that never (or only partly) reached
/// the disk: in some [`DISK_BLOCK`] the record's bytes are zeros up to the block's end, from
/// the record's start or from a [`SECTOR`] boundary inside the record. A power loss leaves that
/// in a preallocated segment when a later block of unsynced appends persisted and an earlier
/// one did not (or kept only its first sectors); everything from the damaged record on was
/// unsynced (a sync covers every byte written before it), so it is the log's torn tail.
///
/// A record a disk corrupts in the last two segments whose value holds such a run of zeros
/// would be taken for one too, and the log would end before it; damage without one stays an
/// error.
fn lost_block(data: &[u8], record: std::ops::Range<usize>) -> bool {
    let first = record.start / DISK_BLOCK * DISK_BLOCK;
    (first..record.end).step_by(DISK_BLOCK).any(|block| {
        let (start, end) = (block.max(record.start), (block + DISK_BLOCK).min(data.len()));
        // Where the zeros that end the block begin.
        let zeros = data[start..end].iter().rposition(|&b| b != 0).map_or(start, |i| start + i + 1);
        let lost_from = if zeros == start { start } else { zeros.next_multiple_of(SECTOR) };
        lost_from < end && lost_from < record.end
    })
}

/// Parses one segment; returns its records and how it ended, or a corruption error. With
/// `may_be_torn` (a segment a power loss may have cut: see the module docs), damage such a
/// loss explains ends the segment as a torn tail.
fn parse_segment(path: &Path, data: &[u8], may_be_torn: bool) -> Result<(Vec<WalRecord>, Ending)> {
    let mut records = Vec::new();
    if data.len() < SEGMENT_PREAMBLE {
        return Err(Error::corrupt(path, 0, "WAL segment header missing"));
    }
    if &data[..8] != SEGMENT_MAGIC {
        return Err(Error::corrupt(path, 0, "bad WAL segment magic"));
    }
    let version = u32::from_le_bytes([data[8], data[9], data[10], data[11]]);
    if !(OLDEST_SEGMENT_VERSION..=SEGMENT_VERSION).contains(&version) {
        return Err(Error::corrupt(path, 8, format!("unsupported WAL version {version}")));
    }
    if data.len() < header_len(version) {
        return Err(Error::corrupt(path, 0, "WAL segment header missing"));
    }
    let data_all = Bytes::copy_from_slice(data);
    let mut pos = header_len(version);
    while pos < data.len() {
        let rest = &data[pos..];
        let damaged =
            |reason: &str| -> Result<(Vec<WalRecord>, Ending)> { Err(Error::corrupt(path, pos as u64, reason)) };
        // Everything after `pos` is zero: a preallocated or partially persisted tail.
        let zero_tail = rest.iter().all(|&b| b == 0);
        if rest.len() < RECORD_HEADER {
            return if may_be_torn {
                Ok((records, Ending::Torn(pos as u64)))
            } else {
                damaged("truncated WAL record header")
            };
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
        let first_seq = u64::from_le_bytes(rest[8..16].try_into().unwrap_or([0; 8]));
        let count = u32::from_le_bytes(rest[16..20].try_into().unwrap_or([0; 4]));
        let end = RECORD_HEADER + len;
        // Where a block lost at a power loss would show in this record.
        let spans = pos..pos + if len <= MAX_RECORD { end.min(rest.len()) } else { RECORD_HEADER };
        if len == 0 || len > MAX_RECORD || end > rest.len() {
            // A record that runs past the end of a segment is a torn append.
            let runs_off_end = len <= MAX_RECORD && end > rest.len();
            return if may_be_torn && (runs_off_end || zero_tail || lost_block(data, spans)) {
                Ok((records, Ending::Torn(pos as u64)))
            } else {
                damaged("WAL record length is invalid")
            };
        }
        let payload = &rest[RECORD_HEADER..end];
        let actual = record_crc(&rest[8..20], payload);
        if actual != crc {
            let after_zero = rest[end..].iter().all(|&b| b == 0);
            return if may_be_torn && (after_zero || lost_block(data, spans)) {
                Ok((records, Ending::Torn(pos as u64)))
            } else {
                damaged("WAL record checksum mismatch in the middle of the log")
            };
        }
        let start = pos + RECORD_HEADER;
        records.push(WalRecord { first_seq, count, payload: data_all.slice(start..start + len) });
        pos += end;
    }
    Ok((records, Ending::Clean))
}

impl Wal {
    /// Replays every segment in `dir` through `replay`, truncates a torn tail, and opens a
    /// fresh segment for appends. Sequence numbers continue after the larger of the highest
    /// logged one and `min_last_seq`.
    pub fn open(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        segment_limit: u64,
        min_last_seq: u64,
        mut replay: impl FnMut(WalRecord) -> Result<()>,
    ) -> Result<Wal> {
        fs.create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let mut ids: Vec<u64> = Vec::new();
        for name in fs.list(dir).map_err(|e| Error::io(dir, e))? {
            if Path::new(&name).extension().is_some_and(|e| e == REWRITE) {
                // A rewrite a crash interrupted; the segment it copied is still in place.
                let path = dir.join(&name);
                fs.remove(&path).map_err(|e| Error::io(&path, e))?;
                continue;
            }
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".log")).and_then(|n| n.parse().ok()) else {
                continue;
            };
            ids.push(id);
        }
        ids.sort_unstable();
        let mut last_seq = min_last_seq;
        let mut closed = Vec::new();
        let mut read_ahead = None;
        for (i, &id) in ids.iter().enumerate() {
            let path = segment_path(dir, id);
            let data = match read_ahead.take() {
                Some(data) => data,
                None => fs.read(&path).map_err(|e| Error::io(&path, e))?,
            };
            // Only the segment being written and the one closed before it can have been cut
            // by a power loss: a roll syncs the segment closed before it.
            let may_be_torn = i + 2 >= ids.len();
            // A segment whose creation did not reach the disk holds no record.
            let (records, mut ending) = if unfinished(&data) {
                if !may_be_torn {
                    return Err(Error::corrupt(&path, 0, "WAL segment header missing in the middle of the log"));
                }
                (Vec::new(), Ending::Torn(0))
            } else {
                parse_segment(&path, &data, may_be_torn)?
            };
            // A cut between two records reads as a clean end: the next segment's header says
            // where this one ended, and that it came right after it.
            if let (Ending::Clean, Some(&next_id)) = (&ending, ids.get(i + 1)) {
                let next_path = segment_path(dir, next_id);
                let next = fs.read(&next_path).map_err(|e| Error::io(&next_path, e))?;
                if let Some(claimed) = previous_len(&next) {
                    if claimed != data.len() as u64 || next_id != id + 1 {
                        if !may_be_torn {
                            let reason = format!(
                                "WAL segment {next_id} was begun after a segment {claimed} bytes long; \
                                 segment {id} has {} bytes",
                                data.len()
                            );
                            return Err(Error::corrupt(&path, data.len() as u64, reason));
                        }
                        ending = Ending::Torn(data.len() as u64);
                    }
                }
                read_ahead = Some(next);
            }
            let mut seg_max = 0;
            for r in records {
                seg_max = seg_max.max(r.first_seq + u64::from(r.count.max(1)) - 1);
                replay(r)?;
            }
            last_seq = last_seq.max(seg_max);
            let end = match ending {
                Ending::Torn(at) => {
                    // The log ends here. The segments after this one were begun before its
                    // tail was synced, so no record in them was made durable: they go first,
                    // before this one is cut, so a crash in between cannot bring them back
                    // behind a segment that no longer ends torn.
                    for &later in &ids[i + 1..] {
                        let later = segment_path(dir, later);
                        fs.remove(&later).map_err(|e| Error::io(&later, e))?;
                    }
                    sync_dir(&*fs, dir)?;
                    at as usize
                }
                Ending::Clean => data.len(),
            };
            if end == 0 {
                fs.remove(&path).map_err(|e| Error::io(&path, e))?;
                sync_dir(&*fs, dir)?;
            } else {
                Self::make_durable(&*fs, dir, &path, &data[..end])?;
                closed.push((id, seg_max));
            }
            if matches!(ending, Ending::Torn(_)) {
                break;
            }
        }
        let id = ids.last().map_or(1, |l| l + 1);
        let file = Self::create_segment(&*fs, dir, id, None)?;
        Ok(Wal {
            fs,
            dir: dir.to_path_buf(),
            inner: Mutex::new(Inner {
                file,
                id,
                size: SEGMENT_HEADER as u64,
                allocated: SEGMENT_HEADER as u64,
                buf: Vec::new(),
                next_seq: last_seq + 1,
                written_seq: last_seq,
                closed,
                cur_max_seq: 0,
                failed: None,
            }),
            synced: AtomicU64::new(last_seq),
            leader: Mutex::new(()),
            sync_wait: Mutex::new(()),
            sync_done: Condvar::new(),
            segment_limit,
            closing: Arc::default(),
        })
    }

    /// Makes a replayed segment's records durable before new records follow them in a later
    /// segment, or a power loss could keep the new segment and cut this one short. They may
    /// have been handed to the OS without an fsync (SyncWal, AsyncWal, a roll whose sync a
    /// crash cut short), and an fsync of this file cannot be trusted after one failed (the
    /// kernel may have dropped the pages), so they go to a fresh file that replaces it. A
    /// torn tail is left out.
    fn make_durable(fs: &dyn FileSystem, dir: &Path, path: &Path, records: &[u8]) -> Result<()> {
        let fresh = path.with_extension(REWRITE);
        let f = fs.create_new(&fresh).map_err(|e| Error::io(&fresh, e))?;
        f.write_all(records).map_err(|e| Error::io(&fresh, e))?;
        f.sync_all().map_err(|e| Error::io(&fresh, e))?;
        fs.rename(&fresh, path).map_err(|e| Error::io(path, e))?;
        sync_dir(fs, dir)
    }

    /// Creates segment `id` with its header. A roll passes the closed segment's length
    /// (`closed_len`) and does not sync the new segment: its name reaches the disk with the
    /// closed segment's sync, and its records with the sync that covers them (recovery drops a
    /// segment whose header never made it). One created at an open is synced, with the
    /// directory.
    fn create_segment(fs: &dyn FileSystem, dir: &Path, id: u64, closed_len: Option<u64>) -> Result<Arc<dyn WriteFile>> {
        let path = segment_path(dir, id);
        let f = fs.create_new(&path).map_err(|e| Error::io(&path, e))?;
        f.write_all(&segment_header(closed_len.unwrap_or(0))).map_err(|e| Error::io(&path, e))?;
        if closed_len.is_none() {
            f.sync_all().map_err(|e| Error::io(&path, e))?;
            sync_dir(fs, dir)?;
        }
        Ok(f)
    }

    /// Reserves `count` sequence numbers and logs `payload` (unless `SkipWal`). Returns the
    /// first reserved sequence number. `FsyncWal` callers must then call [`Wal::sync_to`].
    pub fn append(&self, count: u32, payload: &[u8], durability: Durability) -> Result<u64> {
        let mut inner = self.inner.lock();
        if inner.failed.is_none() {
            inner.failed = self.closing.failure();
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
    fn write_out(&self, inner: &mut Inner, bytes: &[u8], last_seq: u64) -> Result<()> {
        if let Some(why) = self.closing.failure() {
            return Err(Error::ReadOnly(inner.failed.get_or_insert(why).clone()));
        }
        let before = inner.size;
        let end = before + bytes.len() as u64;
        if end > inner.allocated {
            let step = inner.allocated.clamp(PREALLOCATE_FIRST, PREALLOCATE_LARGEST);
            let len = (inner.allocated + step).min(self.segment_limit).max(end);
            if let Err(e) = inner.file.preallocate(len) {
                let path = segment_path(&self.dir, inner.id);
                inner.failed = Some(format!("preallocating the log segment {} failed: {e}", path.display()));
                return Err(Error::io(path, e));
            }
            inner.allocated = len;
        }
        if let Err(e) = inner.file.write_all(bytes) {
            let _ = inner.file.set_len(before);
            let path = segment_path(&self.dir, inner.id);
            inner.failed = Some(format!("writing the log segment {} failed: {e}", path.display()));
            return Err(Error::io(path, e));
        }
        inner.size += bytes.len() as u64;
        inner.written_seq = inner.written_seq.max(last_seq);
        if inner.size >= self.segment_limit {
            if let Err(e) = self.roll(inner) {
                inner.failed = Some(format!("starting a new log segment failed: {e}"));
                return Err(e);
            }
        }
        Ok(())
    }

    fn roll(&self, inner: &mut Inner) -> Result<()> {
        // Only the segment being written may end in zeros (recovery reads them as its torn
        // tail). None is left here: preallocation never passes the segment limit, and the
        // write that reaches it extends the file to exactly its own end.
        debug_assert_eq!(inner.allocated, inner.size, "a rolled segment ends at its last record");
        // At most one closed segment waits for its sync, so a power loss can cut only the
        // last two (recovery reads the others strictly). Its thread has had a whole segment's
        // time to finish.
        if let Err(why) = self.closing.sync_all(&*self.fs, &self.dir) {
            return Err(Error::io(segment_path(&self.dir, inner.id), std::io::Error::other(why)));
        }
        let id = inner.id + 1;
        let file = Self::create_segment(&*self.fs, &self.dir, id, Some(inner.size))?;
        self.sync_closed(inner.id, inner.file.clone());
        inner.closed.push((inner.id, inner.cur_max_seq));
        inner.file = file;
        inner.id = id;
        inner.size = SEGMENT_HEADER as u64;
        inner.allocated = SEGMENT_HEADER as u64;
        Ok(())
    }

    /// Syncs the closed segment `file` and the directory (which holds the next segment's
    /// name) on a thread of its own; inline if no thread can be started, or the file system
    /// asks for it.
    fn sync_closed(&self, id: u64, file: Arc<dyn WriteFile>) {
        let path = segment_path(&self.dir, id);
        let sync = |fs: &dyn FileSystem, dir: &Path, path: &Path, file: &dyn WriteFile| {
            file.sync_data().map_err(|e| Error::io(path, e)).and_then(|()| sync_dir(fs, dir))
        };
        let unsynced = Unsynced { id, path: path.clone(), file: file.clone() };
        self.closing.state.lock().unsynced.push(unsynced);
        let (fs, dir, closing) = (self.fs.clone(), self.dir.clone(), self.closing.clone());
        let (on_thread, at) = (file.clone(), path.clone());
        let spawned = self.fs.syncs_in_background().then(|| {
            std::thread::Builder::new().name("cellar-wal-sync".into()).spawn(move || {
                #[cfg(test)]
                let _paused = closing.paused.lock();
                closing.finished(id, sync(&*fs, &dir, &at, &*on_thread));
            })
        });
        if !matches!(spawned, Some(Ok(_))) {
            self.closing.finished(id, sync(&*self.fs, &self.dir, &path, &*file));
        }
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

    /// Makes every record up to `seq` durable with one `fdatasync` shared by all waiters.
    pub fn sync_to(&self, seq: u64) -> Result<()> {
        loop {
            if self.synced.load(Ordering::Acquire) >= seq {
                return Ok(());
            }
            if let Some(leader) = self.leader.try_lock() {
                let synced = self.sync_as_leader(seq);
                drop(leader);
                // Wake the writers that waited for this fsync: most find their records
                // covered, and one of the others leads the next.
                let _wait = self.sync_wait.lock();
                self.sync_done.notify_all();
                return synced;
            }
            let mut wait = self.sync_wait.lock();
            // The leader notifies while holding `sync_wait`, after giving up the lead: if it
            // still leads now, its notification comes after this wait begins.
            if self.synced.load(Ordering::Acquire) < seq && self.leader.is_locked() {
                self.sync_done.wait(&mut wait);
            }
        }
    }

    /// One fsync covering every record written so far; the caller leads (holds `leader`).
    fn sync_as_leader(&self, seq: u64) -> Result<()> {
        if self.synced.load(Ordering::Acquire) >= seq {
            return Ok(());
        }
        let (file, written, id) = {
            let mut inner = self.inner.lock();
            if let Some(why) = &inner.failed {
                // The caller's records are logged (perhaps applied) but cannot be made durable.
                let e = std::io::Error::other(format!("the log failed before this write was made durable: {why}"));
                return Err(Error::io(segment_path(&self.dir, inner.id), e));
            }
            if !inner.buf.is_empty() {
                let buf = std::mem::take(&mut inner.buf);
                let last = inner.cur_max_seq;
                self.write_out(&mut inner, &buf, last)?;
            }
            (inner.file.clone(), inner.written_seq, inner.id)
        };
        // The closed segments first: records synced in this one must not follow a segment
        // whose tail a power loss could still cut.
        if let Err(why) = self.closing.sync_all(&*self.fs, &self.dir) {
            let mut inner = self.inner.lock();
            let why = inner.failed.get_or_insert(why).clone();
            let e = std::io::Error::other(format!("the log failed before this write was made durable: {why}"));
            return Err(Error::io(segment_path(&self.dir, id), e));
        }
        if let Err(e) = file.sync_data() {
            let path = segment_path(&self.dir, id);
            // Never retried: after a failed fsync the kernel may have dropped the dirty pages,
            // and a second fsync could succeed without them.
            self.inner.lock().failed = Some(format!("fsync of the log segment {} failed: {e}", path.display()));
            return Err(Error::io(path, e));
        }
        self.synced.fetch_max(written, Ordering::AcqRel);
        Ok(())
    }

    /// Makes the log refuse writes until the engine is reopened, for `reason`.
    pub fn fail(&self, reason: String) {
        self.inner.lock().failed.get_or_insert(reason);
    }

    /// Why the log refuses writes, if it does.
    pub fn failure(&self) -> Option<String> {
        self.inner.lock().failed.clone().or_else(|| self.closing.failure())
    }

    /// Deletes closed segments whose every edit has a sequence number below `seq`.
    pub fn remove_segments_below(&self, seq: u64) -> Result<()> {
        let doomed: Vec<u64> = {
            let mut inner = self.inner.lock();
            let (gone, kept): (Vec<_>, Vec<_>) = inner.closed.iter().partition(|(_, max)| *max < seq);
            inner.closed = kept;
            gone.into_iter().map(|(id, _)| id).collect()
        };
        for id in &doomed {
            let path = segment_path(&self.dir, *id);
            match self.fs.remove(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(path, e)),
            }
        }
        if !doomed.is_empty() {
            sync_dir(&*self.fs, &self.dir)?;
        }
        Ok(())
    }

    /// The last sequence number handed out.
    pub fn last_seq(&self) -> u64 {
        self.inner.lock().next_seq - 1
    }

    /// Number of segment files, including the open one.
    pub fn segment_count(&self) -> usize {
        self.inner.lock().closed.len() + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reopen(dir: &Path) -> Result<Vec<(u64, Vec<u8>)>> {
        let mut seen = Vec::new();
        Wal::open(Arc::new(crate::fs::OsFs), dir, 1 << 20, 0, |r| {
            seen.push((r.first_seq, r.payload.to_vec()));
            Ok(())
        })?;
        Ok(seen)
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

    #[test]
    fn recovery_drops_unfinished_segments_and_interrupted_rewrites() {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::open(Arc::new(crate::fs::OsFs), dir.path(), 1 << 20, 0, |_| Ok(())).unwrap();
        wal.append(1, b"kept", Durability::SyncWal).unwrap();
        drop(wal);
        // The reopen cuts segment 1 to its record and starts segment 2, as a roll would.
        assert_eq!(reopen(dir.path()).unwrap(), vec![(1, b"kept".to_vec())]);
        // A newer segment whose header never fully reached the disk, and a rewrite a crash cut.
        std::fs::write(segment_path(dir.path(), 9), &SEGMENT_MAGIC[..5]).unwrap();
        std::fs::write(dir.path().join(format!("0000000000000001.{REWRITE}")), b"partial").unwrap();
        assert_eq!(reopen(dir.path()).unwrap(), vec![(1, b"kept".to_vec())]);
        let mut names: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        // The first reopen removed both; the log it left reads whole again.
        assert!(
            !names.iter().any(|n| n.ends_with(REWRITE)) && !names.contains(&"0000000000000009.log".into()),
            "{names:?}"
        );
        assert_eq!(reopen(dir.path()).unwrap(), vec![(1, b"kept".to_vec())]);
    }

    /// Five records of 3 000 bytes each in one segment, handed to the OS and not synced (as a
    /// power loss may leave them); returns their payloads.
    fn five_records(dir: &Path) -> Vec<(u64, Vec<u8>)> {
        let wal = Wal::open(Arc::new(crate::fs::OsFs), dir, 1 << 20, 0, |_| Ok(())).unwrap();
        let records: Vec<(u64, Vec<u8>)> = (1..=5u8).map(|i| (u64::from(i), vec![i; 3_000])).collect();
        for (_, payload) in &records {
            wal.append(1, payload, Durability::SyncWal).unwrap();
        }
        records
    }

    fn only_segment(dir: &Path) -> PathBuf {
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

    /// The second 4 KiB block (the end of record 2 and the start of record 3) never reached
    /// the disk, or only its first two sectors did, while the blocks after it did.
    #[test]
    fn a_block_lost_in_the_middle_of_the_last_segment_ends_the_log_there() {
        for lost in [DISK_BLOCK..2 * DISK_BLOCK, DISK_BLOCK + 2 * SECTOR..2 * DISK_BLOCK] {
            let dir = tempfile::tempdir().unwrap();
            let records = five_records(dir.path());
            let path = only_segment(dir.path());
            let mut data = std::fs::read(&path).unwrap();
            data[lost.clone()].fill(0);
            std::fs::write(&path, &data).unwrap();
            assert_eq!(reopen(dir.path()).unwrap(), records[..1], "lost {lost:?}");
        }
    }

    /// Forty 900-byte records in segments of 10 000 bytes, handed to the OS; their payloads
    /// and the segments' paths, oldest first.
    fn rolled_log(dir: &Path) -> (Vec<(u64, Vec<u8>)>, Vec<PathBuf>) {
        let wal = Wal::open(Arc::new(crate::fs::OsFs), dir, 10_000, 0, |_| Ok(())).unwrap();
        let written: Vec<(u64, Vec<u8>)> = (1..=40u8).map(|i| (u64::from(i), vec![i; 900])).collect();
        for (_, payload) in &written {
            wal.append(1, payload, Durability::SyncWal).unwrap();
        }
        drop(wal);
        let mut segments: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        segments.sort();
        assert!(segments.len() >= 4, "{segments:?}");
        (written, segments)
    }

    fn records_in(segment: &Path) -> usize {
        parse_segment(segment, &std::fs::read(segment).unwrap(), true).unwrap().0.len()
    }

    /// A roll does not wait for the closed segment's sync, so a power loss can cut it short
    /// while the segment after it persisted: mid-record, or exactly between two records (the
    /// next segment's header says how long it was). The log ends at the cut; the last
    /// segment, which no sync covered, is dropped, and stays dropped.
    #[test]
    fn a_cut_in_the_segment_closed_last_ends_the_log_and_drops_the_last() {
        for cut_between_records in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let (written, segments) = rolled_log(dir.path());
            let [.., closed, last] = &segments[..] else { unreachable!() };
            let before: usize = segments[..segments.len() - 2].iter().map(|s| records_in(s)).sum();
            let in_closed = records_in(closed);
            let data = std::fs::read(closed).unwrap();
            let cut = if cut_between_records { data.len() - (RECORD_HEADER + 900) } else { data.len() - 100 };
            std::fs::write(closed, &data[..cut]).unwrap();
            let kept = before + in_closed - 1;
            assert_eq!(reopen(dir.path()).unwrap(), written[..kept], "cut between records: {cut_between_records}");
            assert!(!last.exists(), "{} was not dropped", last.display());
            assert_eq!(reopen(dir.path()).unwrap(), written[..kept]);
        }
    }

    /// Segments before the last two were synced before a later one was begun: a cut there is
    /// damage, not a power loss, and the log refuses to open rather than drop what follows.
    #[test]
    fn a_cut_in_an_older_segment_is_corruption() {
        for cut_between_records in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let (_, segments) = rolled_log(dir.path());
            let data = std::fs::read(&segments[0]).unwrap();
            let cut = if cut_between_records { data.len() - (RECORD_HEADER + 900) } else { data.len() - 100 };
            std::fs::write(&segments[0], &data[..cut]).unwrap();
            let err = reopen(dir.path()).unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }), "{err}");
            assert!(segments.iter().all(|s| s.exists()), "nothing is dropped");
        }
    }

    /// Power losses at random points of a log that rolls every few records, some records
    /// synced: what recovery replays is always a prefix of what was written, with every record
    /// a sync covered, whichever closed segments' syncs had run.
    #[test]
    fn after_a_power_loss_the_log_is_a_prefix_holding_every_synced_record() {
        for seed in 0..40 {
            let fs = crate::fault::FaultFs::new(seed);
            fs.set_background_syncs(true);
            let dir = Path::new("/wal");
            let wal = Wal::open(Arc::new(fs.clone()), dir, 8_000, 0, |_| Ok(())).unwrap();
            // Half the seeds lose the power before any closed segment's own sync ran.
            let paused = wal.closing.clone();
            let _paused = (seed % 2 == 0).then(|| paused.paused.lock());
            let written: Vec<(u64, Vec<u8>)> = (1..=60u8).map(|i| (u64::from(i), vec![i; 700])).collect();
            let synced_upto = (fs.random() % 60) as usize;
            for (i, (_, payload)) in written.iter().enumerate() {
                let durability = if i + 1 == synced_upto { Durability::FsyncWal } else { Durability::SyncWal };
                let seq = wal.append(1, payload, durability).unwrap();
                if durability == Durability::FsyncWal {
                    wal.sync_to(seq).unwrap();
                }
            }
            let after = fs.power_loss();
            drop(wal);
            let mut seen = Vec::new();
            Wal::open(Arc::new(after.clone()), dir, 8_000, 0, |r| {
                seen.push((r.first_seq, r.payload.to_vec()));
                Ok(())
            })
            .unwrap();
            assert!(seen.len() >= synced_upto, "seed {seed}: {} records, {synced_upto} synced", seen.len());
            assert_eq!(seen, written[..seen.len()], "seed {seed}");
        }
    }

    #[test]
    fn damage_that_no_lost_block_explains_stays_an_error() {
        let dir = tempfile::tempdir().unwrap();
        five_records(dir.path());
        let path = only_segment(dir.path());
        let mut data = std::fs::read(&path).unwrap();
        data[SEGMENT_HEADER + RECORD_HEADER + 3_000 + RECORD_HEADER + 10] ^= 0x40;
        std::fs::write(&path, &data).unwrap();
        let err = reopen(dir.path()).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
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
}
