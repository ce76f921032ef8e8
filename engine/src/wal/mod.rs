//! The write-ahead log: one segmented log per engine.
//!
//! Each record is one batch of edits to one region, framed as
//! `len u32 | crc32c u32 | first_seq u64 | payload`, where the CRC covers the sequence number
//! and the payload. Segments are files `wal/<id>.log` starting with a magic and version.
//! Recovery replays every segment in order; a damaged record at the very end of the last
//! segment is a torn write and is truncated away, anything else is reported as corruption.

mod record;
mod segment;

pub(crate) use record::{decode_batch, encode_batch, encode_regions, WalEdit};
pub(crate) use segment::Wal;
