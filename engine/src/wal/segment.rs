//! WAL segments: appending with the four durability levels, group commit, rolling, recovery
//! and removal of segments whose edits are all flushed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

use super::roll::{RollSync, RollWaiter};
use crate::descriptor::Durability;
use crate::fs::{sync_dir, FileSystem, WriteFile};
use crate::{Error, Result};

const SEGMENT_MAGIC: &[u8; 8] = b"CELLRWAL";
/// Version 2 headers name the segment before and its length and carry a checksum; version 1
/// segments still read.
const SEGMENT_VERSION: u32 = 2;
/// Extension of the copy that replaces the last segment at recovery.
const REWRITE: &str = "rewrite";
/// Magic and version: what every version's header starts with.
const HEADER_START: usize = 12;
/// A version 2 header: magic, version, flags, the previous segment's id and length (0 and 0 for
/// none, so recovery sees a segment that a power loss cut between two records), and a CRC32C
/// of the bytes before it.
const SEGMENT_HEADER: usize = HEADER_START + 4 + 16 + 4;
/// Header flag: a roll created the segment and left the previous one's fsync to a thread, so
/// that one may be torn. Recovery creates segments after syncing the ones before.
const ROLLED: u32 = 1;
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
/// A segment a flush of every region started rolls by size only at this many times the
/// segment limit: the next such flush closes it, and its sync can wait until the catalog
/// write after that flush deletes it. A roll by size in between would have to sync it.
const FLUSH_ROLLED_LIMIT: u64 = 4;
/// The unit in which unsynced appends to a preallocated segment reach the disk: any of these
/// blocks may be lost at a power loss while later ones persist.
const DISK_BLOCK: usize = 4096;
/// The unit a disk writes atomically: a block may be torn between its sectors.
const SECTOR: usize = 512;

/// Why a roll failed.
enum Roll {
    /// The new segment could not be made; the current one is as it was and takes appends.
    NotStarted(Error),
    /// The previous roll's syncs or cutting the current segment back failed.
    Failed(Error),
}

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
    /// The syncs finishing the latest roll, while they may still run or wait to be needed.
    rolling: Option<RollSync>,
    /// A flush of every region started the segment ([`Wal::roll_for_flush`]): the next flush
    /// closes it, so it rolls by size only once it is [`FLUSH_ROLLED_LIMIT`] times the limit.
    flush_rolled: bool,
    /// Set by the first failed write or sync; the log then refuses writes. After a failed
    /// write, records buffered with it (AsyncWal) are lost while later ones could land, and
    /// after a failed fsync the kernel may have dropped the dirty pages while a retried fsync
    /// reports success: either way only a reopen, which replays what the log really holds,
    /// knows the state again.
    failed: Option<String>,
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

/// The segment whose length a header records: (id, length in bytes).
type Predecessor = (u64, u64);

/// What a whole, intact version 2 header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    previous: Option<Predecessor>,
    /// See [`ROLLED`].
    rolled: bool,
}

fn segment_header(header: Header) -> [u8; SEGMENT_HEADER] {
    let (id, len) = header.previous.unwrap_or((0, 0));
    let mut out = [0u8; SEGMENT_HEADER];
    out[..8].copy_from_slice(SEGMENT_MAGIC);
    out[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&(if header.rolled { ROLLED } else { 0 }).to_le_bytes());
    out[16..24].copy_from_slice(&id.to_le_bytes());
    out[24..32].copy_from_slice(&len.to_le_bytes());
    let crc = crc32c::crc32c(&out[..32]);
    out[32..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// How a segment's first bytes read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeaderState {
    /// A version 1 header: written by a build that synced every segment before the next.
    Version1,
    Whole(Header),
    /// A version this build does not know (a newer build's): never taken for damage.
    Unsupported(u32),
    /// Cut, zeroed or damaged: a header a power loss took part of.
    Damaged,
}

fn read_header_state(data: &[u8]) -> HeaderState {
    let word = |at: usize| data.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
    let long = |at: usize| data.get(at..at + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
    if data.get(..8) != Some(&SEGMENT_MAGIC[..]) {
        return HeaderState::Damaged;
    }
    match word(8) {
        Some(1) => HeaderState::Version1,
        Some(SEGMENT_VERSION) if data.len() >= SEGMENT_HEADER => {
            if word(32) != Some(crc32c::crc32c(&data[..32])) {
                return HeaderState::Damaged;
            }
            let (flags, id, len) = (word(12).unwrap_or(0), long(16).unwrap_or(0), long(24).unwrap_or(0));
            HeaderState::Whole(Header { previous: (id != 0).then_some((id, len)), rolled: flags & ROLLED != 0 })
        }
        // Zeros where the version goes are a header cut short.
        Some(version) if version > SEGMENT_VERSION => HeaderState::Unsupported(version),
        _ => HeaderState::Damaged,
    }
}

/// A segment whose creation did not finish: part of its magic and version, then nothing or
/// zeros; or all of them and part of the rest of a version 2 header.
fn unfinished(data: &[u8]) -> bool {
    let start = &segment_header(Header { previous: None, rolled: false })[..HEADER_START];
    let written = data.iter().zip(start).take_while(|(a, b)| a == b).count();
    if written < HEADER_START {
        return data[written..].iter().all(|&b| b == 0);
    }
    data.len() < SEGMENT_HEADER
}

/// Whether the damaged record at `record` shows a block that never (or only partly) reached
/// the disk: in some [`DISK_BLOCK`] the record's bytes are zeros up to the block's end, from
/// the record's start or from a [`SECTOR`] boundary inside the record. A power loss leaves that
/// in a preallocated segment when a later block of unsynced appends persisted and an earlier
/// one did not (or kept only its first sectors); everything from the damaged record on was
/// unsynced (a sync covers every byte written before it), so it is the log's torn tail.
///
/// A record a disk corrupts in the last segment whose value holds such a run of zeros would be
/// taken for one too, and the log would end before it; damage without one stays an error.
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

/// Parses one segment; returns its records and how it ended, or a corruption error. Damage
/// that a power loss explains is a torn tail only in a segment that `may_be_torn`.
fn parse_segment(path: &Path, data: &[u8], may_be_torn: bool) -> Result<(Vec<WalRecord>, Ending)> {
    let mut records = Vec::new();
    let header_len = match read_header_state(data) {
        HeaderState::Version1 => HEADER_START,
        HeaderState::Whole(_) => SEGMENT_HEADER,
        HeaderState::Unsupported(version) => {
            return Err(Error::corrupt(path, 8, format!("unsupported WAL version {version}")))
        }
        // A roll creates a segment without syncing it, so a power loss may keep later blocks
        // of it and lose, cut or tear its header.
        HeaderState::Damaged if may_be_torn => return Ok((records, Ending::Torn(0))),
        HeaderState::Damaged if data.len() < HEADER_START => {
            return Err(Error::corrupt(path, 0, "WAL segment header missing"))
        }
        HeaderState::Damaged if &data[..8] != SEGMENT_MAGIC => {
            return Err(Error::corrupt(path, 0, "bad WAL segment magic"))
        }
        HeaderState::Damaged => return Err(Error::corrupt(path, 0, "WAL segment header damaged")),
    };
    let data_all = Bytes::copy_from_slice(data);
    let mut pos = header_len;
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
            // A record that runs past the end of the last segment is a torn append.
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

/// The first bytes of the segment at `path`, as many as a header takes; `None` if they cannot
/// be read (the segment is then read whole, and fails there if it must).
fn read_header(fs: &dyn FileSystem, path: &Path) -> Option<Vec<u8>> {
    let mut header = vec![0; SEGMENT_HEADER];
    let file = fs.open(path).ok()?;
    file.read_exact_at(&mut header, 0).ok()?;
    Some(header)
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
        // Segments are created with ids one past the newest; one dropped below keeps its id.
        let next_id = ids.last().map_or(1, |l| l + 1);
        // The last segment may always be torn. A roll's fsync of the segment it closed runs
        // beside the appends to the next (see `RollSync`), and each roll waits for the one
        // before, so the segment before the last may be torn too if a roll created the last
        // (its header says so, or a power loss took part of its header); the last segment's
        // blocks may then have persisted after that tear. Older segments ended at their last
        // record and were synced, and are read strictly; so is the one before a segment that
        // recovery or a version 1 build created, after syncing it.
        let mut newest = None;
        let mut predecessor_may_be_torn = false;
        if let Some(&id) = ids.last() {
            let path = segment_path(dir, id);
            let data = fs.read(&path).map_err(|e| Error::io(&path, e))?;
            if unfinished(&data) {
                // Its creation never finished, so no record went into it. The segment before
                // it is now the last.
                fs.remove(&path).map_err(|e| Error::io(&path, e))?;
                sync_dir(&*fs, dir)?;
                ids.pop();
            } else {
                let before = ids.len().checked_sub(2).map(|k| ids[k]);
                predecessor_may_be_torn = match read_header_state(&data) {
                    HeaderState::Version1 | HeaderState::Unsupported(_) => false,
                    HeaderState::Whole(h) => h.rolled && h.previous.map(|(named, _)| named) == before,
                    HeaderState::Damaged => true,
                };
                newest = Some(data);
            }
        }
        let may_be_torn_from = ids.len().saturating_sub(if predecessor_may_be_torn { 2 } else { 1 });
        // The highest sequence number logged so far.
        let mut logged = 0;
        let mut closed = Vec::new();
        // The last segment as rewritten: the new segment's predecessor.
        let mut last_kept = None;
        let mut i = 0;
        while i < ids.len() {
            let id = ids[i];
            let path = segment_path(dir, id);
            let read_before = if i + 1 == ids.len() { newest.take() } else { None };
            let data = match read_before {
                Some(data) => data,
                None => fs.read(&path).map_err(|e| Error::io(&path, e))?,
            };
            let may_be_torn = i >= may_be_torn_from;
            let (records, mut ending) = parse_segment(&path, &data, may_be_torn)?;
            for r in records {
                logged = logged.max(r.first_seq + u64::from(r.count.max(1)) - 1);
                replay(r)?;
            }
            let end = match ending {
                Ending::Torn(at) => at,
                Ending::Clean => data.len() as u64,
            };
            // The next segment's header says how long this one was when it rolled: a power loss
            // can cut a segment whose roll fsync had not finished between two records.
            let next_header = match ids.get(i + 1) {
                Some(_) if i + 2 == ids.len() && newest.is_some() => newest.as_deref().map(read_header_state),
                Some(&next) => read_header(&*fs, &segment_path(dir, next)).as_deref().map(read_header_state),
                None => None,
            };
            let recorded = match next_header {
                Some(HeaderState::Whole(Header { previous: Some((named, len)), .. })) if named == id => Some(len),
                _ => None,
            };
            if let Some(rolled_at) = recorded {
                if end < rolled_at && may_be_torn {
                    ending = Ending::Torn(end);
                } else if end != rolled_at {
                    let why = format!("the segment ends at byte {end}, but the next one's header says {rolled_at}");
                    return Err(Error::corrupt(&path, end, why));
                }
            }
            if let (Ending::Torn(_), true) = (&ending, i + 1 < ids.len()) {
                // A tear in the second-to-last segment: the roll's fsync had not finished, so
                // no record after the tear was made durable by a sync or a flush, and the log
                // ends there. The newest segment goes before the torn one is cut back, or a
                // power loss in between would leave a gap in the log followed by records.
                for &later in &ids[i + 1..] {
                    let later = segment_path(dir, later);
                    fs.remove(&later).map_err(|e| Error::io(&later, e))?;
                }
                sync_dir(&*fs, dir)?;
                ids.truncate(i + 1);
            }
            if may_be_torn {
                // The last two segments may hold records a previous run handed to the OS
                // without an fsync (SyncWal, AsyncWal, a roll whose fsync had not ended or
                // failed, a clean close, a failed fsync). They were replayed, and new records
                // will follow them in a newer segment: make them durable first, or a power loss
                // could keep the new segment and cut these short, and an older segment is read
                // strictly. An fsync of such a file cannot be trusted after one failed (the
                // kernel may have dropped the pages), so the records go to a fresh file that
                // replaces it. A torn tail is left out.
                let fresh = path.with_extension(REWRITE);
                let f = fs.create_new(&fresh).map_err(|e| Error::io(&fresh, e))?;
                // A header the power loss took is written anew.
                let header = segment_header(Header { previous: None, rolled: false });
                let kept: &[u8] = if end < HEADER_START as u64 { &header } else { &data[..end as usize] };
                last_kept = Some((id, kept.len() as u64));
                f.write_all(kept).map_err(|e| Error::io(&fresh, e))?;
                f.sync_all().map_err(|e| Error::io(&fresh, e))?;
                fs.rename(&fresh, &path).map_err(|e| Error::io(&path, e))?;
                sync_dir(&*fs, dir)?;
            }
            // The highest sequence number up to and including this segment: never below an
            // older segment's, so an empty segment is not removed before the ones it follows.
            closed.push((id, logged));
            i += 1;
        }
        let last_seq = logged.max(min_last_seq);
        let id = next_id;
        let file = Self::create_segment(&*fs, dir, id, Header { previous: last_kept, rolled: false })?;
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
                rolling: None,
                flush_rolled: false,
                failed: None,
            }),
            synced: AtomicU64::new(last_seq),
            leader: Mutex::new(()),
            sync_wait: Mutex::new(()),
            sync_done: Condvar::new(),
            segment_limit,
        })
    }

    /// Creates segment `id` with `header` and syncs it and its directory entry.
    fn create_segment(fs: &dyn FileSystem, dir: &Path, id: u64, header: Header) -> Result<Arc<dyn WriteFile>> {
        let f = Self::start_segment(fs, dir, id, header)?;
        let path = segment_path(dir, id);
        f.sync_all().map_err(|e| Error::io(&path, e))?;
        sync_dir(fs, dir)?;
        Ok(f)
    }

    /// Creates segment `id` and writes `header`, without syncing either.
    fn start_segment(fs: &dyn FileSystem, dir: &Path, id: u64, header: Header) -> Result<Arc<dyn WriteFile>> {
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
            inner.failed = inner.rolling.as_ref().and_then(RollSync::failure);
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
        let before = inner.size;
        let end = before + bytes.len() as u64;
        let limit = self.roll_size(inner);
        if end > inner.allocated {
            let step = inner.allocated.clamp(PREALLOCATE_FIRST, PREALLOCATE_LARGEST);
            let len = (inner.allocated + step).min(limit).max(end);
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
        if inner.size >= limit {
            if let Err(Roll::NotStarted(e) | Roll::Failed(e)) = self.roll(inner, false) {
                inner.failed = Some(format!("starting a new log segment failed: {e}"));
                return Err(e);
            }
        }
        Ok(())
    }

    /// The size at which the current segment rolls.
    fn roll_size(&self, inner: &Inner) -> u64 {
        if inner.flush_rolled {
            self.segment_limit.saturating_mul(FLUSH_ROLLED_LIMIT)
        } else {
            self.segment_limit
        }
    }

    /// Closes the current segment and starts the next. The closed one's fsync runs on a
    /// thread (see [`RollSync`]) while appends go on into the new one, or, with `defer`, waits
    /// until something needs it.
    fn roll(&self, inner: &mut Inner, defer: bool) -> std::result::Result<(), Roll> {
        // Only the last two segments may be torn by a power loss: the segment the previous
        // roll closed must be durable before this roll closes another.
        if let Some(previous) = inner.rolling.take() {
            previous.finish().map_err(Roll::Failed)?;
        }
        let id = inner.id + 1;
        let header = Header { previous: Some((inner.id, inner.size)), rolled: true };
        let file = Self::start_segment(&*self.fs, &self.dir, id, header).map_err(|e| {
            // Best effort: a file left half made would be in the way of the next roll.
            let _ = self.fs.remove(&segment_path(&self.dir, id));
            Roll::NotStarted(e)
        })?;
        // Only the last segments may end in zeros (recovery reads them as a torn tail). None
        // is left here: preallocation never passes the roll size, and the write that reaches
        // it extends the file to exactly its own end; a roll before that cuts the file back to
        // its last record (made durable with the records, by the closed segment's fdatasync).
        let path = segment_path(&self.dir, inner.id);
        if inner.allocated != inner.size {
            inner.file.set_len(inner.size).map_err(|e| Roll::Failed(Error::io(&path, e)))?;
            inner.allocated = inner.size;
        }
        let closed = std::mem::replace(&mut inner.file, file);
        inner.closed.push((inner.id, inner.cur_max_seq));
        let named = (inner.id, path);
        let mut rolling = RollSync::defer(&self.fs, &self.dir, closed, named);
        if !defer {
            rolling.begin();
        }
        inner.rolling = Some(rolling);
        inner.id = id;
        inner.size = SEGMENT_HEADER as u64;
        inner.allocated = SEGMENT_HEADER as u64;
        inner.flush_rolled = defer;
        Ok(())
    }

    /// Makes the segment the latest roll closed durable, if it is not: a flush of every region
    /// calls this before it stops the writers to roll the log ([`Wal::roll_for_flush`]), so
    /// that roll has no fsync to wait for.
    pub fn settle_closed(&self) -> Result<()> {
        let rolled = self.inner.lock().rolling.as_mut().map(RollSync::waiter);
        self.wait_for_roll(rolled)
    }

    /// Closes the current segment at a flush of every region, the caller holding the writers
    /// off: the closed segment holds exactly the records that flush writes to files. Its fsync
    /// is deferred until something needs it, and once the catalog names the flush's files the
    /// segment is deleted unsynced. Nothing happens if no record was logged since the last
    /// roll.
    pub fn roll_for_flush(&self) -> Result<()> {
        let mut inner = self.inner.lock();
        if let Some(why) = &inner.failed {
            return Err(Error::ReadOnly(why.clone()));
        }
        if !inner.buf.is_empty() {
            let buf = std::mem::take(&mut inner.buf);
            let last = inner.cur_max_seq;
            self.write_out(&mut inner, &buf, last)?;
        }
        if inner.size == SEGMENT_HEADER as u64 {
            inner.flush_rolled = true;
            return Ok(());
        }
        let rolled = self.roll(&mut inner, true);
        match rolled {
            // No new segment (a full disk): appends go on in this one, which a later flush
            // closes. Nothing about the log changed.
            Err(Roll::NotStarted(_)) => Ok(()),
            Err(Roll::Failed(e)) => {
                inner.failed = Some(format!("closing a log segment failed: {e}"));
                Err(e)
            }
            Ok(()) => Ok(()),
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
        let (file, written, id, rolled) = {
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
            (inner.file.clone(), inner.written_seq, inner.id, inner.rolling.as_mut().map(RollSync::waiter))
        };
        // Records before the current segment are durable once the latest roll's syncs are:
        // each roll waited for the one before it.
        self.wait_for_roll(rolled)?;
        if let Err(e) = file.sync_data() {
            let path = segment_path(&self.dir, id);
            // Never retried: after a failed fsync the kernel may have dropped the dirty pages,
            // and a second fsync could succeed without them.
            self.inner.lock().failed = Some(format!("fsync of the log segment {} failed: {e}", path.display()));
            return Err(Error::io(path, e));
        }
        // A roll may have closed the segment while it was being synced. The roll's thread then
        // fsyncs the same file, and if that fsync failed, it took the error this one would
        // have reported: the kernel tells each failure once. So the rolls since must have
        // succeeded too (each waits for the one before, so the latest one speaks for all).
        let rolled_since = {
            let mut inner = self.inner.lock();
            if inner.id != id {
                if let Some(why) = &inner.failed {
                    let e = std::io::Error::other(format!("the log failed while this write was made durable: {why}"));
                    return Err(Error::io(segment_path(&self.dir, id), e));
                }
                inner.rolling.as_mut().map(RollSync::waiter)
            } else {
                None
            }
        };
        self.wait_for_roll(rolled_since)?;
        self.synced.fetch_max(written, Ordering::AcqRel);
        Ok(())
    }

    /// Waits for a roll's syncs, if there is one; if they failed, fails the log too.
    fn wait_for_roll(&self, roll: Option<RollWaiter>) -> Result<()> {
        match roll.map(|r| r.wait()) {
            Some(Err(e)) => {
                self.inner.lock().failed.get_or_insert_with(|| e.to_string());
                Err(e)
            }
            _ => Ok(()),
        }
    }

    /// Makes the log refuse writes until the engine is reopened, for `reason`.
    pub fn fail(&self, reason: String) {
        self.inner.lock().failed.get_or_insert(reason);
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
        let doomed: Vec<(u64, u64)> = {
            let mut inner = self.inner.lock();
            let (gone, kept): (Vec<_>, Vec<_>) = inner.closed.iter().partition(|(_, max)| *max < seq);
            inner.closed = kept;
            gone
        };
        let mut removed = Vec::new();
        let mut failed = None;
        for &(id, _) in &doomed {
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
        let mut closed: Vec<(u64, u64)> = doomed.into_iter().filter(|(id, _)| !removed.contains(id)).collect();
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
mod tests {
    use super::*;

    /// The records a log on `fs` holds, read back by opening it.
    fn records_in(fs: Arc<dyn FileSystem>, dir: &Path) -> Result<Vec<(u64, Vec<u8>)>> {
        let mut seen = Vec::new();
        Wal::open(fs, dir, 1 << 20, 0, |r| {
            seen.push((r.first_seq, r.payload.to_vec()));
            Ok(())
        })?;
        Ok(seen)
    }

    fn reopen(dir: &Path) -> Result<Vec<(u64, Vec<u8>)>> {
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

    /// The length of the segment [`five_records`] writes.
    const FIVE_RECORDS: u64 = (SEGMENT_HEADER + 5 * (RECORD_HEADER + 3_000)) as u64;

    /// The header a roll from segment `id`, `len` bytes long, gives the next segment.
    fn rolled_from(id: u64, len: u64) -> Header {
        Header { previous: Some((id, len)), rolled: true }
    }

    /// Follows segment 1 (`len` bytes when it rolled) with two whole segments that rolls
    /// created, so segment 1 is third from last and read strictly, and checks that recovery
    /// reports its damage.
    fn assert_reported_behind_two_rolls(dir: &Path, len: u64) {
        write_segment(dir, 2, rolled_from(1, len), 6, &[b"two"]);
        write_segment(dir, 3, rolled_from(2, (SEGMENT_HEADER + RECORD_HEADER + 3) as u64), 7, &[b"three"]);
        let err = reopen(dir).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }

    /// A whole segment with one record per payload, sequence numbers from `first_seq`.
    fn write_segment(dir: &Path, id: u64, header: Header, first_seq: u64, payloads: &[&[u8]]) {
        let mut data = segment_header(header).to_vec();
        for (seq, payload) in (first_seq..).zip(payloads) {
            frame(seq, 1, payload, &mut data);
        }
        std::fs::write(segment_path(dir, id), data).unwrap();
    }

    /// Zeros the second 4 KiB block of segment 1 (written by [`five_records`]), as a power
    /// loss before the roll's fsync may leave it: only its first record stays readable.
    fn lose_a_block_of_the_first_segment(dir: &Path) {
        let first = segment_path(dir, 1);
        let mut data = std::fs::read(&first).unwrap();
        data[DISK_BLOCK..2 * DISK_BLOCK].fill(0);
        std::fs::write(&first, &data).unwrap();
    }

    fn segment_ids(dir: &Path) -> Vec<u64> {
        let mut ids: Vec<u64> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.unwrap().file_name().to_str()?.strip_suffix(".log")?.parse().ok())
            .collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn a_segment_followed_by_an_unfinished_one_may_be_torn() {
        let dir = tempfile::tempdir().unwrap();
        let records = five_records(dir.path());
        lose_a_block_of_the_first_segment(dir.path());
        // The roll into segment 2 created it, and the power went before its header landed.
        std::fs::write(segment_path(dir.path(), 2), &SEGMENT_MAGIC[..3]).unwrap();
        assert_eq!(reopen(dir.path()).unwrap(), records[..1]);
        assert_eq!(reopen(dir.path()).unwrap(), records[..1]);
    }

    #[test]
    fn a_tear_in_the_second_to_last_segment_ends_the_log_and_drops_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let records = five_records(dir.path());
        lose_a_block_of_the_first_segment(dir.path());
        // Segment 2's records reached the disk, but segment 1's fsync had not finished.
        write_segment(dir.path(), 2, rolled_from(1, FIVE_RECORDS), 6, &[b"after the tear"]);
        assert_eq!(reopen(dir.path()).unwrap(), records[..1]);
        // Segment 2 is gone (new segments take later ids); the log reads the same again.
        assert!(!segment_ids(dir.path()).contains(&2), "{:?}", segment_ids(dir.path()));
        assert_eq!(reopen(dir.path()).unwrap(), records[..1]);
    }

    #[test]
    fn a_segment_cut_between_two_records_before_its_roll_fsync_ends_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let records = five_records(dir.path());
        let first = segment_path(dir.path(), 1);
        let rolled_at = FIVE_RECORDS;
        // The roll into segment 2 recorded segment 1's length; the power loss then kept only
        // its first two records, while segment 2's record reached the disk.
        let cut = SEGMENT_HEADER + 2 * (RECORD_HEADER + 3_000);
        std::fs::OpenOptions::new().write(true).open(&first).unwrap().set_len(cut as u64).unwrap();
        write_segment(dir.path(), 2, rolled_from(1, rolled_at), 6, &[b"after the cut"]);
        assert_eq!(reopen(dir.path()).unwrap(), records[..2]);
        assert_eq!(reopen(dir.path()).unwrap(), records[..2]);
        // The same cut in an older segment is damage.
        let dir = tempfile::tempdir().unwrap();
        five_records(dir.path());
        std::fs::OpenOptions::new().write(true).open(segment_path(dir.path(), 1)).unwrap().set_len(cut as u64).unwrap();
        assert_reported_behind_two_rolls(dir.path(), rolled_at);
    }

    #[test]
    fn damage_before_a_segment_that_recovery_or_an_older_build_created_stays_an_error() {
        let mut version1 = segment_header(Header { previous: None, rolled: false })[..HEADER_START].to_vec();
        version1[8..12].copy_from_slice(&1u32.to_le_bytes());
        let recovery_made = segment_header(Header { previous: Some((1, FIVE_RECORDS)), rolled: false }).to_vec();
        for last_header in [version1, recovery_made] {
            let dir = tempfile::tempdir().unwrap();
            five_records(dir.path());
            lose_a_block_of_the_first_segment(dir.path());
            // Segment 1 was synced before segment 2 was created, so its damage is not a tear.
            let mut last = last_header;
            frame(6, 1, b"acknowledged", &mut last);
            std::fs::write(segment_path(dir.path(), 2), &last).unwrap();
            let err = reopen(dir.path()).unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        }
    }

    #[test]
    fn a_damaged_header_in_the_last_segment_is_a_tear() {
        let dir = tempfile::tempdir().unwrap();
        let records = five_records(dir.path());
        // Segment 2's header lost its last bytes (they read as zeros) while a record after it
        // persisted: the header's checksum no longer matches.
        let mut last = segment_header(rolled_from(1, FIVE_RECORDS)).to_vec();
        last[20..].fill(0);
        frame(6, 1, b"lost with the header", &mut last);
        std::fs::write(segment_path(dir.path(), 2), &last).unwrap();
        assert_eq!(reopen(dir.path()).unwrap(), records);
        assert_eq!(reopen(dir.path()).unwrap(), records);
        // In an older segment the same damage is reported.
        let dir = tempfile::tempdir().unwrap();
        five_records(dir.path());
        let first = segment_path(dir.path(), 1);
        let mut data = std::fs::read(&first).unwrap();
        data[20..HEADER_START + 20].fill(0);
        std::fs::write(&first, &data).unwrap();
        assert_reported_behind_two_rolls(dir.path(), FIVE_RECORDS);
    }

    #[test]
    fn a_newer_builds_segment_is_refused_not_taken_for_a_tear() {
        let dir = tempfile::tempdir().unwrap();
        five_records(dir.path());
        let first = segment_path(dir.path(), 1);
        let mut data = std::fs::read(&first).unwrap();
        data[8..12].copy_from_slice(&(SEGMENT_VERSION + 1).to_le_bytes());
        std::fs::write(&first, &data).unwrap();
        let err = reopen(dir.path()).unwrap_err();
        assert!(err.to_string().contains("unsupported WAL version 3"), "{err}");
        // Nothing was cut or rewritten.
        assert_eq!(std::fs::read(&first).unwrap(), data);
    }

    #[test]
    fn damage_in_an_older_segment_stays_an_error() {
        let dir = tempfile::tempdir().unwrap();
        five_records(dir.path());
        lose_a_block_of_the_first_segment(dir.path());
        // Segment 1 is third from last: the roll into segment 3 waited for its fsync.
        assert_reported_behind_two_rolls(dir.path(), FIVE_RECORDS);
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
        fs.set_rates(crate::fault::FaultRates { sync: 1.0, ..Default::default() });
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
            fs.set_rates(crate::fault::FaultRates { sync: 1.0, ..Default::default() });
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
