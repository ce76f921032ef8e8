//! What a non-raw read sees of one row in one family, and what a raw read sees.
//!
//! For each column, newest first: a put is hidden if a marker masks it (see
//! [`crate::masking`]); a put at the same timestamp as a newer write is shadowed; only the
//! family's `max_versions` newest surviving versions exist at all; of those, versions past the
//! first `min_versions` vanish once expired; then the read's time range and version count pick
//! what is returned. Applying the family limits before the time range makes a read return the
//! same cells before and after a major compaction.

use bytes::{Buf, Bytes, BytesMut};

use crate::cell::{same_bytes, Cell, CellType, KeyView};
use crate::descriptor::FamilyDescriptor;
use crate::masking::{is_expired, DeleteTracker, Marker};
use crate::query::TimeRange;
use crate::read::cursor::CellCursor;
use crate::Result;

/// One family as a read sees it.
pub(crate) struct FamilyView<'a> {
    pub name: Bytes,
    pub desc: &'a FamilyDescriptor,
    /// Selected qualifiers, sorted; `None` selects all.
    pub qualifiers: Option<Vec<Bytes>>,
}

impl FamilyView<'_> {
    fn selects(&self, qualifier: &[u8]) -> bool {
        self.qualifiers.as_ref().is_none_or(|qs| qs.binary_search_by(|q| q.as_ref().cmp(qualifier)).is_ok())
    }
}

/// The per-read parameters that shape visibility.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadParams {
    pub time_range: TimeRange,
    pub max_versions: u32,
    pub raw: bool,
    pub now: u64,
}

/// Buffers a read reuses from row to row. Row keys, qualifiers and values are appended to `arena` and
/// split off as shared slices, so a row costs no allocation of its own.
#[derive(Default)]
pub(crate) struct RowScratch {
    pub arena: BytesMut,
    /// Where each returned cell's qualifier and value sit in the arena.
    cell_ranges: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
}

impl RowScratch {
    /// Scratch whose arena grows in chunks of `chunk` bytes (small for a Get, larger for scans).
    pub fn new(chunk: usize) -> Self {
        RowScratch { arena: BytesMut::with_capacity(chunk), cell_ranges: Vec::new() }
    }

    /// `bytes` as shared `Bytes` carved from the arena.
    pub fn bytes(&mut self, bytes: &[u8]) -> Bytes {
        self.arena.extend_from_slice(bytes);
        self.arena.split().freeze()
    }
}

/// Per-column progress through the versions of one column.
struct ColumnState {
    /// Where the qualifier sits in the row's qualifier buffer.
    qualifier: std::ops::Range<usize>,
    selected: bool,
    last_put_ts: Option<u64>,
    surviving: u32,
    returned: u32,
}

/// Reads the cells of `row` in one family from `cur` (positioned at or before the row's first
/// cell of this family) and appends what the read returns to `out`. Leaves `cur` after the row.
pub(crate) fn read_row_family(
    cur: &mut dyn CellCursor,
    row: &Bytes,
    fam: &FamilyView<'_>,
    p: &ReadParams,
    tracker: &mut DeleteTracker,
    scratch: &mut RowScratch,
    out: &mut Vec<Cell>,
) -> Result<()> {
    tracker.start_row();
    let ceiling = if fam.desc.keep_deleted_cells { p.time_range.max } else { u64::MAX };
    let ttl = fam.desc.ttl_ms();
    let mut col: Option<ColumnState> = None;
    // Qualifiers of this row's columns and the values it returns go back to back into the
    // arena; cells get slices of them once the row is done. Copying values keeps results from
    // pinning cached blocks or memstore chunks.
    debug_assert!(scratch.arena.is_empty());
    let arena = &mut scratch.arena;
    let first_cell = out.len();
    let cell_ranges = &mut scratch.cell_ranges;
    cell_ranges.clear();
    while let Some(k) = cur.key() {
        if !same_bytes(k.row, row) {
            break;
        }
        if col.as_ref().is_none_or(|c| !same_bytes(&arena[c.qualifier.clone()], k.qualifier)) {
            tracker.start_column();
            let start = arena.len();
            arena.extend_from_slice(k.qualifier);
            let selected = fam.selects(k.qualifier);
            let qualifier = start..arena.len();
            col = Some(ColumnState { qualifier, selected, last_put_ts: None, surviving: 0, returned: 0 });
        }
        let Some(c) = col.as_mut() else { break };
        let mut emitted: Option<(CellType, &[u8])> = None;
        if p.raw {
            let family_marker_shown = k.kind.is_family_delete() && fam.qualifiers.is_none();
            if (c.selected || family_marker_shown) && p.time_range.contains(k.ts) {
                if k.kind.is_delete() {
                    emitted = Some((k.kind, &[]));
                } else if c.returned < p.max_versions {
                    c.returned += 1;
                    emitted = Some((k.kind, cur.value()));
                }
            }
        } else if k.kind.is_delete() {
            tracker.add(Marker { ts: k.ts, kind: k.kind, seq: k.seq });
        } else if c.last_put_ts != Some(k.ts) {
            c.last_put_ts = Some(k.ts);
            if !tracker.masks(k.ts, k.seq, ceiling) {
                let index = c.surviving;
                c.surviving += 1;
                let exists = index < fam.desc.max_versions
                    && (index < fam.desc.min_versions || !is_expired(k.ts, cur.ttl_ms(), ttl, p.now));
                if exists && c.selected && p.time_range.contains(k.ts) && c.returned < p.max_versions {
                    c.returned += 1;
                    emitted = Some((CellType::Put, cur.value()));
                }
            }
        }
        if let Some((kind, value)) = emitted {
            let start = arena.len();
            arena.extend_from_slice(value);
            cell_ranges.push((c.qualifier.clone(), start..arena.len()));
            out.push(Cell {
                row: row.clone(),
                family: fam.name.clone(),
                qualifier: Bytes::new(),
                timestamp: k.ts,
                cell_type: kind,
                value: Bytes::new(),
            });
        }
        // Once a column can yield nothing more (or is not asked for), jump past its remaining
        // versions instead of reading them: a hot row may hold thousands of obsolete versions
        // until its memstore is flushed.
        let column_done = (!c.selected && !c.qualifier.is_empty())
            || (!p.raw && (c.surviving >= fam.desc.max_versions || c.returned >= p.max_versions));
        if column_done {
            let qualifier = c.qualifier.clone();
            skip_column(cur, row, &arena[qualifier])?;
        } else {
            cur.next()?;
        }
    }
    // Hand out the pieces in arena order, each split off on its own (one reference count
    // each, and no handle on the whole row left to drop). Cells of one column share its
    // qualifier.
    let mut pos = 0;
    let mut column = None;
    for i in first_cell..out.len() {
        let (q, v) = cell_ranges[i - first_cell].clone();
        if column.as_ref() == Some(&q) {
            out[i].qualifier = out[i - 1].qualifier.clone();
        } else {
            arena.advance(q.start - pos);
            out[i].qualifier = arena.split_to(q.len()).freeze();
            pos = q.end;
            column = Some(q);
        }
        arena.advance(v.start - pos);
        out[i].value = arena.split_to(v.len()).freeze();
        pos = v.end;
    }
    cell_ranges.clear();
    arena.clear();
    Ok(())
}

/// Cells stepped over one by one before a skip turns into a seek (seeks cost more per call).
const STEPS_BEFORE_SEEK: usize = 4;

/// Moves `cur` past every remaining cell of column `qualifier` in `row`.
fn skip_column(cur: &mut dyn CellCursor, row: &[u8], qualifier: &[u8]) -> Result<()> {
    for _ in 0..STEPS_BEFORE_SEEK {
        cur.next()?;
        if !cur.key().is_some_and(|k| same_bytes(k.row, row) && same_bytes(k.qualifier, qualifier)) {
            return Ok(());
        }
    }
    // The qualifier followed by a zero byte is the next possible column.
    let next_column = [qualifier, &[0u8]].concat();
    cur.seek_forward(&KeyView::first_of_column(row, &next_column))
}
