//! What a non-raw read sees of one row in one family, and what a raw read sees.
//!
//! For each column, newest first: a put is hidden if a marker masks it (see
//! [`crate::masking`]); a put at the same timestamp as a newer write is shadowed; only the
//! family's `max_versions` newest surviving versions exist at all; of those, versions past the
//! first `min_versions` vanish once expired; then the read's time range and version count pick
//! what is returned. Applying the family limits before the time range makes a read return the
//! same cells before and after a major compaction.

use bytes::Bytes;

use crate::cell::{same_bytes, CellType, KeyView};
use crate::descriptor::FamilyDescriptor;
use crate::filter::ColumnWindow;
use crate::masking::{is_expired, DeleteTracker, Marker};
use crate::query::TimeRange;
use crate::read::cursor::CellCursor;
use crate::read::row_buf::RowBuf;
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

/// Per-column progress through the versions of one column.
struct ColumnState {
    /// Where the qualifier sits in the row buffer.
    qualifier: std::ops::Range<usize>,
    selected: bool,
    /// Inside the read's column window; only the empty qualifier's column is read outside it
    /// (for its family markers).
    in_window: bool,
    last_put_ts: Option<u64>,
    surviving: u32,
    returned: u32,
}

/// Reads the cells of `buf`'s row in family number `family` from `cur` (positioned at or
/// before the row's first cell of this family) and appends what the read returns to `buf`.
/// Leaves `cur` after the row.
///
/// Columns outside `window` are sought past rather than read. Family-wide delete markers sit
/// at the empty qualifier, before every column, so that column is always read to its end; puts
/// there are a column like any other, left out when outside the window.
pub(crate) fn read_row_family<C: CellCursor + ?Sized>(
    cur: &mut C,
    family: usize,
    fam: &FamilyView<'_>,
    p: &ReadParams,
    window: &ColumnWindow,
    tracker: &mut DeleteTracker,
    buf: &mut RowBuf,
) -> Result<()> {
    tracker.start_row();
    let ceiling = if fam.desc.keep_deleted_cells { p.time_range.max } else { u64::MAX };
    let ttl = fam.desc.ttl_ms();
    let mut col: Option<ColumnState> = None;
    // Columns that returned a cell, for the window's column cap.
    let mut returned_columns = 0usize;
    // What skipping the last column found the cursor on, so its cell is not compared again.
    let mut landed = Landed::Unknown;
    while let Some(k) = cur.key() {
        let was = std::mem::replace(&mut landed, Landed::Unknown);
        if was == Landed::Unknown && !cur.same_row() && !same_bytes(k.row, buf.row()) {
            break;
        }
        let new_column = was == Landed::NextColumn
            || col.as_ref().is_none_or(|c| !same_bytes(buf.bytes(c.qualifier.clone()), k.qualifier));
        if new_column {
            // Taken, so a seek below leaves no column behind to be counted twice.
            if col.take().is_some_and(|c| c.returned > 0) {
                returned_columns += 1;
            }
            let mut in_window = true;
            if !window.is_whole() {
                if let Some(start) = window.start.as_ref().filter(|s| k.qualifier < s.as_ref()) {
                    if k.qualifier.is_empty() {
                        // The family markers here mask the window's columns: read them, return
                        // nothing of the column.
                        in_window = false;
                    } else {
                        let start = start.clone();
                        cur.seek_forward(&KeyView::first_of_column(buf.row(), &start))?;
                        continue;
                    }
                }
                // Nothing of the row is returned from here on, so no marker is needed either.
                if window.past_stop(k.qualifier) || window.columns.is_some_and(|cap| returned_columns >= cap) {
                    let next_row = [buf.row(), &[0u8]].concat();
                    cur.seek_forward(&KeyView::first_of_row(&next_row))?;
                    break;
                }
            }
            tracker.start_column();
            let selected = in_window && fam.selects(k.qualifier);
            let qualifier = buf.push_bytes(k.qualifier);
            col = Some(ColumnState { qualifier, selected, in_window, last_put_ts: None, surviving: 0, returned: 0 });
        }
        let Some(c) = col.as_mut() else { break };
        let mut emitted: Option<(CellType, &[u8])> = None;
        if p.raw {
            let family_marker_shown = k.kind.is_family_delete() && fam.qualifiers.is_none() && c.in_window;
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
            buf.push_cell(family, c.qualifier.clone(), k.ts, kind, value);
        }
        // Once a column can yield nothing more (or is not asked for), jump past its remaining
        // versions instead of reading them: a hot row may hold thousands of obsolete versions
        // until its memstore is flushed. Not the empty qualifier's: family markers older than
        // its newest puts sort among its later versions.
        let column_done = !c.qualifier.is_empty()
            && (!c.selected || (!p.raw && (c.surviving >= fam.desc.max_versions || c.returned >= p.max_versions)));
        if column_done {
            let qualifier = c.qualifier.clone();
            landed = skip_column(cur, buf.row(), buf.bytes(qualifier))?;
            if landed == Landed::OtherRow {
                break;
            }
        } else {
            cur.next()?;
        }
    }
    Ok(())
}

/// Cells stepped over one by one before a skip turns into a seek (seeks cost more per call).
const STEPS_BEFORE_SEEK: usize = 4;

/// Where [`skip_column`] left the cursor, as far as it looked.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Landed {
    /// Not looked at (after a seek).
    Unknown,
    /// On a later column of the same row.
    NextColumn,
    /// Past the row (or at the end).
    OtherRow,
}

/// Moves `cur` past every remaining cell of column `qualifier` in `row`, and says where it
/// landed as far as it looked.
fn skip_column<C: CellCursor + ?Sized>(cur: &mut C, row: &[u8], qualifier: &[u8]) -> Result<Landed> {
    for _ in 0..STEPS_BEFORE_SEEK {
        cur.next()?;
        let Some(k) = cur.key() else { return Ok(Landed::OtherRow) };
        if !cur.same_row() && !same_bytes(k.row, row) {
            return Ok(Landed::OtherRow);
        }
        if !same_bytes(k.qualifier, qualifier) {
            return Ok(Landed::NextColumn);
        }
    }
    // The qualifier followed by a zero byte is the next possible column.
    let next_column = [qualifier, &[0u8]].concat();
    cur.seek_forward(&KeyView::first_of_column(row, &next_column))?;
    Ok(Landed::Unknown)
}
