//! Rows out of a ReadRows stream.
//!
//! Bigtable sends a row as a sequence of cell chunks that may be split anywhere: a row over
//! several responses, a cell's value over several chunks (`value_size` announces the whole
//! size on all but the last piece). A chunk names its row, family and qualifier only when they
//! change; `reset_row` drops the row being built (the server restarts it), `commit_row` ends
//! it. [`RowMerger`] folds chunks into rows and refuses every sequence the protocol forbids,
//! so a server or proxy bug is an error, never a wrong row.

use bytes::{Bytes, BytesMut};

use crate::store::{Row, StoredCell};

/// One cell chunk, as the merger needs it (decoupled from the generated type so the merger
/// and its tests stand alone).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// Set on the first chunk of a row.
    pub row_key: Bytes,
    /// Set when the family changes (then `qualifier` is set too).
    pub family: Option<String>,
    /// Set when the column changes.
    pub qualifier: Option<Bytes>,
    /// The cell's timestamp, on its first chunk.
    pub timestamp_micros: i64,
    /// Part or all of the value.
    pub value: Bytes,
    /// The whole value's size on every piece but the last of a split value; 0 otherwise.
    pub value_size: i32,
    /// Whether the chunk carries labels (Cellar never asks for them; a chunk that has them
    /// is still merged).
    pub has_labels: bool,
    /// Drop the row built so far.
    pub reset_row: bool,
    /// The row is complete.
    pub commit_row: bool,
}

/// A chunk sequence the ReadRows protocol does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid ReadRows chunk: {0}")]
pub(crate) struct ChunkError(pub &'static str);

/// The most a split value's announced size reserves up front: the size comes from the server,
/// and a bogus one must not make the client allocate gigabytes before the value is checked.
const MAX_RESERVE: usize = 1 << 20;

/// A cell whose value may still be arriving.
#[derive(Debug)]
struct OpenCell {
    timestamp_micros: i64,
    value: BytesMut,
    /// More pieces follow.
    split: bool,
    /// The whole value's size as announced by the pieces of a split value (0 if unsplit).
    size: usize,
}

#[derive(Debug)]
struct OpenRow {
    key: Bytes,
    cells: Vec<StoredCell>,
    family: Option<Bytes>,
    qualifier: Option<Bytes>,
    cell: Option<OpenCell>,
}

impl OpenRow {
    /// Moves the open cell, if complete, into the row.
    fn close_cell(&mut self) -> Result<(), ChunkError> {
        if let Some(cell) = self.cell.take() {
            let (Some(family), Some(qualifier)) = (&self.family, &self.qualifier) else {
                return Err(ChunkError("a cell without a family and qualifier"));
            };
            // Negative timestamps are refused as the cell starts; a millisecond is never negative.
            let timestamp =
                u64::try_from(cell.timestamp_micros / 1000).map_err(|_| ChunkError("a negative timestamp"))?;
            self.cells.push(StoredCell {
                family: family.clone(),
                qualifier: qualifier.clone(),
                timestamp,
                value: cell.value.freeze(),
            });
        }
        Ok(())
    }
}

/// Folds the chunks of one ReadRows stream (and of its retries) into rows.
#[derive(Debug)]
pub(crate) struct RowMerger {
    reverse: bool,
    /// The last committed row: the next must come after it in the scan's direction.
    last: Option<Bytes>,
    row: Option<OpenRow>,
}

impl RowMerger {
    /// A merger for a forward (`reverse == false`) or reversed scan.
    pub(crate) fn new(reverse: bool) -> Self {
        RowMerger { reverse, last: None, row: None }
    }

    /// Drops a row in progress: a broken stream is retried from after the last committed row,
    /// so the server sends that row again from its start.
    pub(crate) fn restart(&mut self) {
        self.row = None;
    }

    /// Takes the next chunk; returns the row it completes, if any.
    pub(crate) fn push(&mut self, chunk: Chunk) -> Result<Option<Row>, ChunkError> {
        if chunk.reset_row {
            return self.reset(&chunk).map(|()| None);
        }
        let commit = chunk.commit_row;
        let splitting = self.row.as_ref().and_then(|r| r.cell.as_ref()).is_some_and(|c| c.split);
        if splitting {
            self.continue_value(chunk)?;
        } else {
            self.start_cell(chunk)?;
        }
        if !commit {
            return Ok(None);
        }
        let Some(mut row) = self.row.take() else {
            return Err(ChunkError("a commit without a row"));
        };
        if row.cell.as_ref().is_some_and(|c| c.split) {
            return Err(ChunkError("a commit inside a split value"));
        }
        row.close_cell()?;
        // Bigtable sends families in its own order (the emulator: creation order); the store's
        // rows list cells by family, qualifier, newest first.
        row.cells.sort_by(|a, b| {
            (&a.family, &a.qualifier).cmp(&(&b.family, &b.qualifier)).then(b.timestamp.cmp(&a.timestamp))
        });
        self.last = Some(row.key.clone());
        Ok(Some(Row { key: row.key, cells: row.cells }))
    }

    /// Checks that the stream did not end inside a row.
    pub(crate) fn finish(&self) -> Result<(), ChunkError> {
        match self.row {
            Some(_) => Err(ChunkError("the stream ended inside a row")),
            None => Ok(()),
        }
    }

    fn reset(&mut self, chunk: &Chunk) -> Result<(), ChunkError> {
        if self.row.is_none() {
            return Err(ChunkError("a reset without a row"));
        }
        if !chunk.row_key.is_empty()
            || chunk.family.is_some()
            || chunk.qualifier.is_some()
            || chunk.timestamp_micros != 0
            || !chunk.value.is_empty()
            || chunk.value_size != 0
            || chunk.has_labels
            || chunk.commit_row
        {
            return Err(ChunkError("a reset that carries data"));
        }
        self.row = None;
        Ok(())
    }

    /// A piece of a split value: nothing but value bytes.
    fn continue_value(&mut self, chunk: Chunk) -> Result<(), ChunkError> {
        let other_row = self.row.as_ref().is_some_and(|r| !chunk.row_key.is_empty() && r.key != chunk.row_key);
        if other_row || chunk.family.is_some() || chunk.qualifier.is_some() {
            return Err(ChunkError("a new row or column inside a split value"));
        }
        if chunk.timestamp_micros != 0 || chunk.has_labels {
            return Err(ChunkError("a timestamp or labels inside a split value"));
        }
        let cell = self.row.as_mut().and_then(|r| r.cell.as_mut()).ok_or(ChunkError("no open cell"))?;
        // Every piece but the last announces the whole value's size; the pieces must add up to it.
        let announced = usize::try_from(chunk.value_size).map_err(|_| ChunkError("a negative value size"))?;
        if announced > 0 && announced != cell.size {
            return Err(ChunkError("a split value whose announced size changes"));
        }
        cell.value.extend_from_slice(&chunk.value);
        cell.split = announced > 0;
        if cell.value.len() > cell.size || (!cell.split && cell.value.len() != cell.size) {
            return Err(ChunkError("a split value that does not add up to its announced size"));
        }
        Ok(())
    }

    /// A chunk that starts a cell, and maybe a row, family or column.
    fn start_cell(&mut self, chunk: Chunk) -> Result<(), ChunkError> {
        // A chunk may repeat its row's key (the emulator does on every chunk); a different key
        // before the commit is an error.
        let continues = self.row.as_ref().is_some_and(|r| r.key == chunk.row_key);
        if !chunk.row_key.is_empty() && !continues {
            if self.row.is_some() {
                return Err(ChunkError("a new row before the last one was committed"));
            }
            if let Some(last) = &self.last {
                let in_order = if self.reverse { chunk.row_key < *last } else { chunk.row_key > *last };
                if !in_order {
                    return Err(ChunkError("rows out of order"));
                }
            }
            if chunk.family.is_none() || chunk.qualifier.is_none() {
                return Err(ChunkError("a new row without a family and qualifier"));
            }
            self.row =
                Some(OpenRow { key: chunk.row_key, cells: Vec::new(), family: None, qualifier: None, cell: None });
        }
        let row = self.row.as_mut().ok_or(ChunkError("a cell without a row"))?;
        row.close_cell()?;
        if let Some(family) = chunk.family {
            if chunk.qualifier.is_none() {
                return Err(ChunkError("a new family without a qualifier"));
            }
            row.family = Some(Bytes::from(family.into_bytes()));
        }
        if let Some(qualifier) = chunk.qualifier {
            if row.family.is_none() {
                return Err(ChunkError("a qualifier without a family"));
            }
            row.qualifier = Some(qualifier);
        }
        if row.qualifier.is_none() {
            return Err(ChunkError("a cell without a qualifier"));
        }
        let size = usize::try_from(chunk.value_size).map_err(|_| ChunkError("a negative value size"))?;
        // Checked here, not as the cell closes: -999..-1 microseconds would truncate to 0 ms.
        if chunk.timestamp_micros < 0 {
            return Err(ChunkError("a negative timestamp"));
        }
        if chunk.value.len() > size && size > 0 {
            return Err(ChunkError("a split value that does not add up to its announced size"));
        }
        let mut value = BytesMut::with_capacity(size.min(MAX_RESERVE).max(chunk.value.len()));
        value.extend_from_slice(&chunk.value);
        row.cell = Some(OpenCell { timestamp_micros: chunk.timestamp_micros, value, split: size > 0, size });
        Ok(())
    }
}

#[cfg(test)]
#[path = "merge_cases.rs"]
mod cases;

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn cell(family: &str, qualifier: &[u8], timestamp: u64, value: &[u8]) -> StoredCell {
        StoredCell {
            family: Bytes::copy_from_slice(family.as_bytes()),
            qualifier: Bytes::copy_from_slice(qualifier),
            timestamp,
            value: Bytes::copy_from_slice(value),
        }
    }

    /// Splits `row` into chunks the way a server may: each cell's value cut at `cuts`
    /// (fractions), the family and qualifier only where they change, the row key on the first
    /// chunk or (`repeat_key`, as the emulator does) on every chunk.
    fn chunks_of(row: &Row, cuts: &[u8], repeat_key: bool) -> Vec<Chunk> {
        let mut out = Vec::new();
        let mut cut = cuts.iter().cycle();
        let (mut family, mut qualifier): (Option<&Bytes>, Option<&Bytes>) = (None, None);
        for (i, c) in row.cells.iter().enumerate() {
            let size = c.value.len();
            // value_size > 0 marks a split, so an empty value is never split.
            let pieces = if size == 0 { 1 } else { usize::from(*cut.next().unwrap_or(&1) % 4) + 1 };
            let bounds: Vec<usize> = (0..=pieces).map(|p| size * p / pieces).collect();
            for p in 0..pieces {
                let mut chunk = Chunk { value: c.value.slice(bounds[p]..bounds[p + 1]), ..Chunk::default() };
                if repeat_key || (i == 0 && p == 0) {
                    chunk.row_key = row.key.clone();
                }
                if p == 0 {
                    if family != Some(&c.family) {
                        chunk.family = Some(String::from_utf8(c.family.to_vec()).unwrap());
                        chunk.qualifier = Some(c.qualifier.clone());
                    } else if qualifier != Some(&c.qualifier) {
                        chunk.qualifier = Some(c.qualifier.clone());
                    }
                    chunk.timestamp_micros = i64::try_from(c.timestamp).unwrap() * 1000;
                }
                if p + 1 < pieces {
                    chunk.value_size = i32::try_from(size).unwrap();
                }
                out.push(chunk);
            }
            family = Some(&c.family);
            qualifier = Some(&c.qualifier);
        }
        if let Some(last) = out.last_mut() {
            last.commit_row = true;
        }
        out
    }

    fn merge(chunks: Vec<Chunk>, reverse: bool) -> Result<Vec<Row>, ChunkError> {
        let mut merger = RowMerger::new(reverse);
        let mut rows = Vec::new();
        for chunk in chunks {
            rows.extend(merger.push(chunk)?);
        }
        merger.finish()?;
        Ok(rows)
    }

    fn arb_row() -> impl Strategy<Value = Row> {
        let cells = (
            prop::sample::select(vec!["a", "b", "f"]),
            prop::collection::vec(any::<u8>(), 0..4),
            0u64..50,
            prop::collection::vec(any::<u8>(), 0..40),
        );
        (prop::collection::vec(any::<u8>(), 1..6), prop::collection::vec(cells, 1..8)).prop_map(|(key, cells)| {
            let mut cells: Vec<StoredCell> = cells.into_iter().map(|(f, q, ts, v)| cell(f, &q, ts, &v)).collect();
            cells.sort_by(|a, b| {
                (&a.family, &a.qualifier).cmp(&(&b.family, &b.qualifier)).then(b.timestamp.cmp(&a.timestamp))
            });
            cells.dedup_by(|a, b| a.family == b.family && a.qualifier == b.qualifier && a.timestamp == b.timestamp);
            Row { key: Bytes::from(key), cells }
        })
    }

    proptest! {
        /// Rows split into random chunk sequences, with restarted rows (a reset after a random
        /// prefix of a row's chunks) in between, merge back into exactly the rows sent.
        #[test]
        fn random_chunkings_merge_back(
            rows in prop::collection::btree_map(prop::collection::vec(any::<u8>(), 1..6), arb_row(), 0..6),
            cuts in prop::collection::vec(any::<u8>(), 1..10),
            resets in prop::collection::vec(any::<u8>(), 1..10),
            reverse in any::<bool>(),
            repeat_key in any::<bool>(),
        ) {
            let mut rows: Vec<Row> = rows.into_iter().map(|(key, mut row)| { row.key = Bytes::from(key); row }).collect();
            if reverse {
                rows.reverse();
            }
            let mut chunks = Vec::new();
            for (i, row) in rows.iter().enumerate() {
                let full = chunks_of(row, &cuts, repeat_key);
                let reset = resets[i % resets.len()];
                if reset % 3 == 0 {
                    // The server sends part of the row, resets it, then sends it whole.
                    let sent = usize::from(reset) % full.len();
                    let mut partial: Vec<Chunk> = full[..sent].to_vec();
                    if let Some(c) = partial.last_mut() { c.commit_row = false; }
                    if !partial.is_empty() {
                        chunks.extend(partial);
                        chunks.push(Chunk { reset_row: true, ..Chunk::default() });
                    }
                }
                chunks.extend(full);
            }
            prop_assert_eq!(merge(chunks, reverse).unwrap(), rows);
        }

        /// A stream cut anywhere before a row's commit is an error, never a partial row.
        #[test]
        fn truncated_streams_fail(
            row in arb_row(),
            cuts in prop::collection::vec(any::<u8>(), 1..10),
            cut in any::<prop::sample::Index>(),
            repeat_key in any::<bool>(),
        ) {
            let chunks = chunks_of(&row, &cuts, repeat_key);
            let keep = cut.index(chunks.len());
            prop_assert!(merge(chunks[..keep].to_vec(), false).is_err() || keep == 0);
        }
    }

    #[test]
    fn cells_sort_by_family_whatever_order_the_server_sends() {
        let chunks = vec![
            Chunk {
                row_key: Bytes::from_static(b"r"),
                family: Some("z".into()),
                qualifier: Some(Bytes::from_static(b"q")),
                timestamp_micros: 1000,
                value: Bytes::from_static(b"1"),
                ..Chunk::default()
            },
            Chunk {
                family: Some("a".into()),
                qualifier: Some(Bytes::from_static(b"q")),
                timestamp_micros: 2000,
                value: Bytes::from_static(b"2"),
                commit_row: true,
                ..Chunk::default()
            },
        ];
        let rows = merge(chunks, false).unwrap();
        assert_eq!(rows[0].cells, vec![cell("a", b"q", 2, b"2"), cell("z", b"q", 1, b"1")]);
    }

    #[test]
    fn protocol_violations_are_errors() {
        let start = Chunk {
            row_key: Bytes::from_static(b"r"),
            family: Some("f".into()),
            qualifier: Some(Bytes::from_static(b"q")),
            value: Bytes::from_static(b"v"),
            ..Chunk::default()
        };
        let commit = Chunk { commit_row: true, ..start.clone() };
        let cases: Vec<(&str, Vec<Chunk>)> = vec![
            ("reset without a row", vec![Chunk { reset_row: true, ..Chunk::default() }]),
            (
                "reset with data",
                vec![start.clone(), Chunk { reset_row: true, value: Bytes::from_static(b"x"), ..Chunk::default() }],
            ),
            (
                "new row before commit",
                vec![start.clone(), Chunk { row_key: Bytes::from_static(b"s"), ..start.clone() }],
            ),
            ("repeated row", vec![commit.clone(), commit.clone()]),
            ("row without family", vec![Chunk { family: None, ..start.clone() }]),
            ("cell without row", vec![Chunk { row_key: Bytes::new(), ..start.clone() }]),
            ("rows out of order", vec![Chunk { row_key: Bytes::from_static(b"s"), ..commit.clone() }, commit.clone()]),
            ("commit inside a split value", vec![Chunk { value_size: 5, commit_row: true, ..start.clone() }]),
            ("row key inside a split value", vec![Chunk { value_size: 5, ..start.clone() }, commit.clone()]),
            ("stream ends inside a row", vec![start.clone()]),
            ("negative timestamp", vec![Chunk { timestamp_micros: -1000, ..commit.clone() }]),
        ];
        for (what, chunks) in cases {
            assert!(merge(chunks, false).is_err(), "{what} was accepted");
        }
        // Reversed scans want descending keys.
        let s = Chunk { row_key: Bytes::from_static(b"s"), ..commit.clone() };
        assert!(merge(vec![s.clone(), commit.clone()], true).is_ok());
        assert!(merge(vec![commit, s], true).is_err());
    }
}
