//! The WAL segment format: the segment header, record framing and checksums.
//!
//! A segment is a file `wal/<id>.log`, its id written as 16 decimal digits; ids grow by one
//! per segment. Every integer is little-endian. A segment starts with a header:
//!
//! - version 2, which this build writes: `magic "CELLRWAL" | version u32 = 2 | flags u32 |
//!   previous id u64 | previous length u64 | crc32c u32`, [`SEGMENT_HEADER`] bytes, the CRC32C
//!   covering the bytes before it. The previous segment's id and length (`0` and `0` for none)
//!   say how long that segment was when this one was created, and the flag [`ROLLED`] says a
//!   roll created it (so the previous one may be torn).
//! - version 1: `magic | version u32 = 1`, [`HEADER_START`] bytes. Such segments still read.
//! - a higher version is a newer build's, refused rather than taken for damage.
//!
//! Records follow the header back to back, each framed as
//! `len u32 | crc32c u32 | first_seq u64 | count u32 | payload` ([`RECORD_HEADER`] bytes before
//! the payload), where `len` is the payload's length (1 to [`MAX_RECORD`]), the record reserved
//! sequence numbers `first_seq..first_seq + count`, and the CRC32C covers `first_seq`, `count`
//! and the payload. The payload is one encoded batch ([`super::record`]). Past the last record a
//! segment may hold zeros it was preallocated with.

use std::path::{Path, PathBuf};

pub(super) const SEGMENT_MAGIC: &[u8; 8] = b"CELLRWAL";
/// Version 2 headers name the segment before and its length and carry a checksum; version 1
/// segments still read.
pub(super) const SEGMENT_VERSION: u32 = 2;
/// Magic and version: what every version's header starts with.
pub(super) const HEADER_START: usize = 12;
/// A version 2 header: magic, version, flags, the previous segment's id and length (0 and 0 for
/// none, so recovery sees a segment that a power loss cut between two records), and a CRC32C
/// of the bytes before it.
pub(super) const SEGMENT_HEADER: usize = HEADER_START + 4 + 16 + 4;
/// Header flag: a roll created the segment and left the previous one's fsync to a thread, so
/// that one may be torn. Recovery creates segments after syncing the ones before.
pub(super) const ROLLED: u32 = 1;
pub(super) const RECORD_HEADER: usize = 20;
/// Upper bound on one record's payload; larger lengths are treated as damage.
pub(super) const MAX_RECORD: usize = 256 * 1024 * 1024;

pub(super) fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:016}.log"))
}

pub(super) fn record_crc(seq_and_count: &[u8], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(seq_and_count), payload)
}

pub(super) fn frame(first_seq: u64, count: u32, payload: &[u8], out: &mut Vec<u8>) {
    let mut head = [0u8; 12];
    head[..8].copy_from_slice(&first_seq.to_le_bytes());
    head[8..].copy_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&record_crc(&head, payload).to_le_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(payload);
}

/// The segment whose length a header records: (id, length in bytes).
pub(super) type Predecessor = (u64, u64);

/// What a whole, intact version 2 header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Header {
    pub previous: Option<Predecessor>,
    /// See [`ROLLED`].
    pub rolled: bool,
}

pub(super) fn segment_header(header: Header) -> [u8; SEGMENT_HEADER] {
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
pub(super) enum HeaderState {
    /// A version 1 header: written by a build that synced every segment before the next.
    Version1,
    Whole(Header),
    /// A version this build does not know (a newer build's): never taken for damage.
    Unsupported(u32),
    /// Cut, zeroed or damaged: a header a power loss took part of.
    Damaged,
}

pub(super) fn read_header_state(data: &[u8]) -> HeaderState {
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
