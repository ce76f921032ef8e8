//! The write-ahead log: one segmented log per engine.
//!
//! Each record is one batch of edits to one region, framed as
//! `len u32 | crc32c u32 | first_seq u64 | count u32 | payload`, where the CRC covers the
//! sequence numbers and the payload ([`mod@format`] specifies the format). Segments are files
//! `wal/<id>.log` starting with a magic and version; a version 2 header also records the
//! previous segment's id and length, whether a roll created the segment, and its own CRC32C.
//! Segments are preallocated ahead of their appends, never past the segment size, so a rolled
//! segment ends at its last record (a segment closed
//! earlier, at a flush of every region, is cut back to it). A roll's fsync of the closed
//! segment runs on a thread of its own ([`roll`]), or, at a flush of every region, waits until
//! something needs it (the segment is usually deleted first), so a power loss can tear the last
//! segment and, when a roll created that one, the segment before it. Recovery replays every
//! segment in order; in a segment that may be torn, a damaged record or header that a block of
//! unsynced appends lost at a power loss explains is a torn write, and so is a segment shorter
//! than the next one's header records: the log ends there and a segment after it is dropped.
//! Anything else is reported as corruption ([`recovery`]). Writers that need their records
//! durable share one fsync ([`group_commit`]).

mod format;
mod group_commit;
mod record;
mod recovery;
mod roll;
mod segment;

pub(crate) use record::{decode_batch, encode_batch, encode_regions, WalEdit};
pub(crate) use segment::Wal;
