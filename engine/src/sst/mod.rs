//! SSTables: immutable sorted files of one family's cells, HFile-like.
//!
//! Layout: data blocks, then a bloom block, an index block, a meta block and a fixed-size
//! footer. Every block is framed as `[codec u8][payload][crc32c u32]`; the footer carries its
//! own checksum, the format version and a magic number. See [`format`] for the byte layouts.

pub(crate) mod block;
pub(crate) mod bloom;
pub(crate) mod format;
pub(crate) mod reader;
pub(crate) mod writer;

pub(crate) use reader::{SstCursor, SstReader};
pub(crate) use writer::SstWriter;
