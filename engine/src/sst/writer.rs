//! Writes an SSTable from cells given in key order.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::cell::KeyView;
use crate::descriptor::{BloomType, Compression, FamilyDescriptor};
use crate::fs::{Appender, FileSystem};
use crate::sst::block::{frame, uncompressed_frame_crc, BlockBuilder, EntryKeys};
use crate::sst::bloom::{row_col_hash, row_hash, Bloom};
use crate::sst::format::{encode_key, Footer, Handle, IndexBuilder, SstMeta, FORMAT_VERSION};
use crate::sst::reader::encode_bloom_block;
use crate::{Error, Result};

/// Streams cells into a new SSTable file.
pub(crate) struct SstWriter {
    path: PathBuf,
    out: BufWriter<Appender>,
    offset: u64,
    block: BlockBuilder,
    block_size: usize,
    compression: Compression,
    bloom: BloomType,
    hashes: Vec<u64>,
    last_row: Vec<u8>,
    index: IndexBuilder,
    /// The first row of every block, back to back, and where each ends: the middle one becomes
    /// the file's split point. Kept compact because a large file has hundreds of thousands.
    first_rows: Vec<u8>,
    first_row_ends: Vec<usize>,
    /// The last key of the latest finished block.
    last_block_key: Vec<u8>,
    /// The block's size when the current row's first cell went into it; 0 if the row began
    /// in an earlier block.
    row_start: usize,
    meta: SstMeta,
    key_buf: Vec<u8>,
    empty: bool,
    /// The format version the file is written in (older ones only in tests of reading them).
    version: u32,
}

impl SstWriter {
    /// Creates the file at `path` (which must not exist).
    pub fn create(fs: &dyn FileSystem, path: &Path, family: &FamilyDescriptor) -> Result<SstWriter> {
        let file = fs.create_new(path).map_err(|e| Error::io(path, e))?;
        Ok(SstWriter {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(256 * 1024, Appender::new(file)),
            offset: 0,
            block: BlockBuilder::new(EntryKeys::of_version(FORMAT_VERSION)),
            block_size: family.block_size as usize,
            compression: family.compression,
            bloom: family.bloom,
            hashes: Vec::new(),
            last_row: Vec::new(),
            index: IndexBuilder::new(FORMAT_VERSION),
            first_rows: Vec::new(),
            first_row_ends: Vec::new(),
            last_block_key: Vec::new(),
            row_start: 0,
            meta: SstMeta { min_ts: u64::MAX, ..SstMeta::default() },
            key_buf: Vec::new(),
            empty: true,
            version: FORMAT_VERSION,
        })
    }

    /// Writes the file in an older format version: the files earlier builds left behind.
    #[cfg(test)]
    pub fn in_version(mut self, version: u32) -> SstWriter {
        assert!(self.empty, "the version is chosen before the first cell");
        self.block = BlockBuilder::new(EntryKeys::of_version(version));
        self.index = IndexBuilder::new(version);
        self.version = version;
        self
    }

    /// Appends a cell; keys must arrive in strictly increasing order.
    pub fn add(&mut self, key: &KeyView<'_>, value: &[u8], ttl_ms: Option<u64>) -> Result<()> {
        self.key_buf.clear();
        encode_key(&mut self.key_buf, key);
        if self.empty {
            self.meta.first_key = Bytes::copy_from_slice(&self.key_buf);
            self.empty = false;
        }
        let new_row = self.last_row != key.row || self.meta.cell_count == 0;
        if new_row {
            if self.block.size() >= self.block_size {
                self.finish_block(true)?;
            }
            self.row_start = if self.block.is_empty() { 0 } else { self.block.size() };
            self.last_row.clear();
            self.last_row.extend_from_slice(key.row);
        }
        if self.block.is_empty() {
            self.first_rows.extend_from_slice(key.row);
            self.first_row_ends.push(self.first_rows.len());
        }
        match self.bloom {
            BloomType::None => {}
            BloomType::Row => {
                if new_row {
                    self.hashes.push(row_hash(key.row));
                }
            }
            BloomType::RowCol => {
                if new_row {
                    self.hashes.push(row_hash(key.row));
                }
                self.hashes.push(row_col_hash(key.row, key.qualifier));
            }
        }
        self.block.add(&self.key_buf, value, ttl_ms);
        self.meta.cell_count += 1;
        if key.kind.is_delete() {
            self.meta.delete_count += 1;
        }
        self.meta.min_ts = self.meta.min_ts.min(key.ts);
        self.meta.max_ts = self.meta.max_ts.max(key.ts);
        self.meta.max_seq = self.meta.max_seq.max(key.seq);
        // A full block ends before the next row rather than inside a row under half a block,
        // so a Get of such a row reads one block, not two. A larger row is cut between its
        // cells once the block is full and half a block of the row is in it, so a block
        // stays within one and a half times its size (and a cell).
        let size = self.block.size();
        if size >= self.block_size && size - self.row_start >= self.block_size / 2 {
            // The row may go on in the next block (unless this was its last cell).
            self.finish_block(false)?;
        }
        Ok(())
    }

    fn write_framed(&mut self, raw: &[u8], compression: Compression) -> Result<Handle> {
        let len = if compression == Compression::None {
            let crc = uncompressed_frame_crc(raw).to_le_bytes();
            let out = &mut self.out;
            out.write_all(&[0])
                .and_then(|()| out.write_all(raw))
                .and_then(|()| out.write_all(&crc))
                .map_err(|e| Error::io(&self.path, e))?;
            1 + raw.len() + crc.len()
        } else {
            let framed = frame(raw, compression);
            self.out.write_all(&framed).map_err(|e| Error::io(&self.path, e))?;
            framed.len()
        };
        let handle = Handle { offset: self.offset, len: len as u32 };
        self.offset += len as u64;
        Ok(handle)
    }

    /// Writes the block and its index entry; `row_ends` if its last row has no cells after it.
    fn finish_block(&mut self, row_ends: bool) -> Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        self.last_block_key.clear();
        self.last_block_key.extend_from_slice(self.block.last_key());
        let raw = self.block.finish();
        let handle = self.write_framed(&raw, self.compression)?;
        self.block.reuse(raw);
        self.index.add(&self.last_block_key, handle, row_ends);
        self.row_start = 0;
        Ok(())
    }

    /// Writes bloom, index, meta and footer, and syncs the file to disk.
    pub fn finish(mut self) -> Result<(SstMeta, u64)> {
        self.finish_block(true)?;
        if self.meta.cell_count == 0 {
            self.meta.min_ts = 0;
        }
        self.meta.last_key = Bytes::copy_from_slice(&self.last_block_key);
        let mid = self.first_row_ends.len() / 2;
        if let Some(&end) = self.first_row_ends.get(mid) {
            let start = if mid == 0 { 0 } else { self.first_row_ends[mid - 1] };
            self.meta.mid_row = Bytes::copy_from_slice(&self.first_rows[start..end]);
        }
        let bloom = if self.bloom == BloomType::None || self.hashes.is_empty() {
            Handle::default()
        } else {
            let encoded = encode_bloom_block(self.bloom, &Bloom::build(&self.hashes));
            self.write_framed(&encoded, Compression::None)?
        };
        let index = std::mem::replace(&mut self.index, IndexBuilder::new(self.version)).finish();
        let index = self.write_framed(&index, Compression::None)?;
        let meta = self.write_framed(&self.meta.encode(), Compression::None)?;
        let footer = Footer { index, bloom, meta, version: self.version };
        self.out.write_all(&footer.encode()).map_err(|e| Error::io(&self.path, e))?;
        self.offset += footer.encode().len() as u64;
        let file = self.out.into_inner().map_err(|e| Error::io(&self.path, e.into_error()))?.into_file();
        file.sync_all().map_err(|e| Error::io(&self.path, e))?;
        Ok((self.meta, self.offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::CellType;
    use crate::fs::testing::{contiguous_steps, WritebackLog};
    use crate::fs::WRITEBACK_STEP;

    /// A file of several MiB starts its writeback step by step as it is written, so its final
    /// fsync finds at most the last steps' bytes still to write.
    #[test]
    fn a_large_file_starts_its_writeback_as_it_grows() {
        let dir = tempfile::tempdir().unwrap();
        let fs = WritebackLog::default();
        let path = dir.path().join("1.sst");
        let mut w = SstWriter::create(&fs, &path, &FamilyDescriptor::new("f")).unwrap();
        for i in 0..30_000u32 {
            let row = format!("row{i:08}");
            let key =
                KeyView { row: row.as_bytes(), qualifier: b"q", ts: 1, kind: CellType::Put, seq: u64::from(i) + 1 };
            w.add(&key, &[7u8; 100], None).unwrap();
        }
        let (_, size) = w.finish().unwrap();
        assert!(size > 3 * WRITEBACK_STEP, "{size} bytes");
        let ranges = fs.ranges.lock().clone();
        assert!(contiguous_steps(&ranges), "{ranges:?}");
        let started: u64 = ranges.iter().map(|(_, len)| len).sum();
        assert!(started + 2 * WRITEBACK_STEP > size, "{started} of {size} bytes: {ranges:?}");
    }
}
