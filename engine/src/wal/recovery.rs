//! Recovery: reading the segments back at open, deciding where the log ends (a torn tail a
//! power loss explains, or corruption), and opening a fresh segment after them.

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

use super::format::{
    read_header_state, record_crc, segment_header, segment_path, Header, HeaderState, HEADER_START, MAX_RECORD,
    RECORD_HEADER, SEGMENT_HEADER, SEGMENT_MAGIC,
};
use super::segment::{Closed, Inner, Wal};
use crate::fs::{sync_dir, FileSystem};
use crate::{Error, Result};

/// Extension of the copy that replaces the last segment at recovery.
pub(super) const REWRITE: &str = "rewrite";
/// The unit in which unsynced appends to a preallocated segment reach the disk: any of these
/// blocks may be lost at a power loss while later ones persist.
pub(super) const DISK_BLOCK: usize = 4096;
/// The unit a disk writes atomically: a block may be torn between its sectors.
pub(super) const SECTOR: usize = 512;

/// A record read back during recovery.
#[derive(Debug)]
pub(crate) struct WalRecord {
    pub first_seq: u64,
    /// Sequence numbers the record reserved: `first_seq..first_seq + count`.
    pub count: u32,
    pub payload: Bytes,
}

/// Why a segment's record stream ended.
pub(super) enum Ending {
    Clean,
    /// Damage at this offset: a torn write, from which the rest of the segment is dropped.
    Torn(u64),
}

/// A segment whose creation did not finish: part of its magic and version, then nothing or
/// zeros; or all of them and part of the rest of a version 2 header.
pub(super) fn unfinished(data: &[u8]) -> bool {
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
pub(super) fn lost_block(data: &[u8], record: std::ops::Range<usize>) -> bool {
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
pub(super) fn parse_segment(path: &Path, data: &[u8], may_be_torn: bool) -> Result<(Vec<WalRecord>, Ending)> {
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
pub(super) fn read_header(fs: &dyn FileSystem, path: &Path) -> Option<Vec<u8>> {
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
            let mut bytes = data.len() as u64;
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
                bytes = kept.len() as u64;
                f.write_all(kept).map_err(|e| Error::io(&fresh, e))?;
                f.sync_all().map_err(|e| Error::io(&fresh, e))?;
                fs.rename(&fresh, &path).map_err(|e| Error::io(&path, e))?;
                sync_dir(&*fs, dir)?;
            }
            // The highest sequence number up to and including this segment: never below an
            // older segment's, so an empty segment is not removed before the ones it follows.
            closed.push(Closed { id, max_seq: logged, bytes });
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::Durability;
    use crate::wal::format::{frame, SEGMENT_VERSION};
    use crate::wal::segment::tests::{five_records, only_segment, reopen};

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
}
