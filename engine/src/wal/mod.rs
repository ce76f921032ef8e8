//! The write-ahead log: one segmented log per engine.
//!
//! Each record is one batch of edits to one region, framed as
//! `len u32 | crc32c u32 | first_seq u64 | payload`, where the CRC covers the sequence number
//! and the payload. Segments are files `wal/<id>.log` starting with a magic and version.
//! Segments are preallocated ahead of their appends, never past the segment size, so a rolled
//! segment ends at its last record. Recovery replays every segment in order; in the last segment, a damaged record at
//! its end, or one that a block of unsynced appends lost at a power loss explains, is a torn
//! write, and the segment is cut before it; anything else is reported as corruption.

mod record;
mod segment;

pub(crate) use record::{decode_batch, encode_batch, encode_regions, WalEdit};
pub(crate) use segment::Wal;
