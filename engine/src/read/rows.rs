//! Row assembly: walks the merged cursors of the selected families row by row, forward or
//! backward, applies visibility and filters, and hands finished rows to a sink.

use std::ops::Bound;

use bytes::Bytes;

use crate::cell::{same_bytes, KeyView};
use crate::filter::{ColumnWindow, Filter};
use crate::masking::DeleteTracker;
use crate::memstore::Memstore;
use crate::query::{ReadSpec, RowRange};
use crate::read::cursor::{CellCursor, MergeCursor, Source};
use crate::read::row_buf::RowBuf;
use crate::read::visibility::{read_row_family, FamilyView, ReadParams};
use crate::region::{ReadSnapshot, Store};
use crate::Result;

/// The rows one pass of [`read_rows`] covers.
#[derive(Clone, Copy)]
pub(crate) enum Rows<'a> {
    /// A scan's range.
    Range(&'a RowRange),
    /// A Get's single row: files can be skipped by key range and bloom filter.
    One(&'a [u8]),
}

impl<'a> Rows<'a> {
    fn lo(self) -> Bound<&'a [u8]> {
        match self {
            Rows::Range(r) => r.lo.as_ref().map(|l| l.as_ref()),
            Rows::One(row) => Bound::Included(row),
        }
    }

    fn hi(self) -> Bound<&'a [u8]> {
        match self {
            Rows::Range(r) => r.hi.as_ref().map(|h| h.as_ref()),
            Rows::One(row) => Bound::Included(row),
        }
    }

    fn above_lo(self, row: &[u8]) -> bool {
        match self {
            Rows::Range(r) => r.above_lo(row),
            Rows::One(one) => row >= one,
        }
    }

    fn below_hi(self, row: &[u8]) -> bool {
        match self {
            Rows::Range(r) => r.below_hi(row),
            Rows::One(one) => row <= one,
        }
    }

    fn point(self) -> Option<&'a [u8]> {
        match self {
            Rows::Range(_) => None,
            Rows::One(row) => Some(row),
        }
    }
}

/// Options of one pass of [`read_rows`].
pub(crate) struct RowRead<'a> {
    pub rows: Rows<'a>,
    pub reversed: bool,
    pub spec: &'a ReadSpec,
    pub now: u64,
    /// Read by the writer, under the region's write lock, of a row it is about to write: the
    /// active memstores' cursors leave their writer's splice at the row.
    pub for_writer: bool,
    /// The rows are lent, not taken: the row buffer is reused, never split into owned rows.
    pub lent: bool,
}

struct FamilyRead<'a> {
    view: FamilyView<'a>,
    cursor: MergeCursor<'a>,
}

fn open_family<'a>(
    store: &'a Store,
    qualifiers: Option<Vec<Bytes>>,
    snap: &ReadSnapshot,
    read: &RowRead<'_>,
) -> Result<FamilyRead<'a>> {
    let mut sources: Vec<Source<'a>> = Vec::with_capacity(2 + store.files.len());
    // A point read's memstore cursors find the row by the memstores' row index.
    let cursor = |m: &'a Memstore| {
        if read.rows.point().is_some() {
            m.point_cursor(snap.read_point)
        } else {
            m.cursor(snap.read_point)
        }
    };
    // An empty memstore holds nothing at or below the read point (those writes were inserted
    // before the read point was published), so it needs no cursor.
    if !store.active.is_empty() {
        let cursor = if read.for_writer { store.active.writer_cursor(snap.read_point) } else { cursor(&store.active) };
        sources.push(Source::Mem(cursor));
    }
    if let Some(frozen) = store.frozen.as_ref().filter(|m| !m.is_empty()) {
        sources.push(Source::Mem(cursor(frozen)));
    }
    for file in &store.files {
        if let Some(row) = read.rows.point() {
            let wanted = match &qualifiers {
                Some(qs) => file.may_contain_columns(row, qs),
                None => file.may_contain_row(row),
            };
            if !wanted {
                continue;
            }
        }
        sources.push(Source::Sst(if read.rows.point().is_some() { file.point_cursor() } else { file.cursor() }));
    }
    Ok(FamilyRead {
        view: FamilyView { name: store.name.clone(), desc: &store.desc, qualifiers },
        cursor: MergeCursor::new(sources),
    })
}

/// True if no source of `snap` can hold a cell of `row`: its memstores hold none (the
/// writer's active memstore by a search that leaves its splice at the row, the others by their
/// row index) and no file can (key ranges and bloom filters). A writer's point read of a row that
/// does not exist — an insert's read of its old row, a put-if-absent's check — then costs
/// those searches alone. `for_writer` as in [`RowRead`].
pub(crate) fn row_absent(snap: &ReadSnapshot, row: &[u8], for_writer: bool) -> bool {
    snap.stores.families.iter().all(|store| {
        !store.active.holds_row(row, for_writer)
            && store.frozen.as_ref().is_none_or(|m| !m.holds_row(row, false))
            && store.files.iter().all(|f| !f.may_contain_row(row))
    })
}

/// Reads the rows of `snap` that `read.rows` covers, handing each non-empty row to `sink` (in
/// `RowBuf`, for it to take or view) until it returns false.
pub(crate) fn read_rows(
    snap: &ReadSnapshot,
    read: &RowRead<'_>,
    mut sink: impl FnMut(&mut RowBuf) -> bool,
) -> Result<()> {
    let mut families = Vec::new();
    for store in &snap.stores.families {
        let qualifiers =
            read.spec.columns.qualifiers(&store.name).map(|qs| qs.into_iter().cloned().collect::<Vec<_>>());
        // `Some(empty)`: the read names columns, none of them in this family.
        if qualifiers.as_ref().is_none_or(|q| !q.is_empty()) {
            families.push(open_family(store, qualifiers, snap, read)?);
        }
    }
    let params = ReadParams {
        time_range: read.spec.time_range,
        max_versions: read.spec.max_versions,
        raw: read.spec.raw,
        now: read.now,
    };
    let window = read.spec.filter.as_ref().map(Filter::column_window).unwrap_or_default();
    let mut tracker = DeleteTracker::default();
    let names = families.iter().map(|f| f.view.name.clone()).collect();
    // Owned rows keep the buffer they were split from alive: a taken point read starts
    // small. A lent one starts where a row of a few dozen small cells fits without growing.
    let chunk = match read.rows.point() {
        None => 16 * 1024,
        Some(_) if read.lent => 2 * 1024,
        Some(_) => 256,
    };
    let mut buf = RowBuf::new(names, chunk);
    if !read.reversed {
        let after;
        let start: &[u8] = match read.rows.lo() {
            Bound::Unbounded => &[],
            Bound::Included(l) => l,
            Bound::Excluded(l) => {
                after = [l, &[0u8]].concat();
                &after
            }
        };
        for f in &mut families {
            f.cursor.seek(&KeyView::first_of_row(start))?;
        }
        loop {
            let next = families.iter().filter_map(|f| f.cursor.key().map(|k| k.row)).min();
            let Some(row) = next else { break };
            if !read.rows.below_hi(row) {
                break;
            }
            buf.start_row(row);
            if !gather_row(&mut families, &params, &window, &mut tracker, &mut buf, read, &mut sink)? {
                break;
            }
        }
    } else {
        let mut bound: Option<Vec<u8>> = match read.rows.hi() {
            Bound::Unbounded => None,
            Bound::Excluded(h) => Some(h.to_vec()),
            Bound::Included(h) => Some([h, &[0u8]].concat()),
        };
        loop {
            let mut best: Option<Bytes> = None;
            for f in &mut families {
                if let Some(r) = f.cursor.prev_row(bound.as_deref())? {
                    if best.as_ref().is_none_or(|b| r > *b) {
                        best = Some(r);
                    }
                }
            }
            let Some(row) = best else { break };
            if !read.rows.above_lo(&row) {
                break;
            }
            for f in &mut families {
                f.cursor.seek(&KeyView::first_of_row(&row))?;
            }
            bound = Some(row.to_vec());
            buf.start_row(&row);
            if !gather_row(&mut families, &params, &window, &mut tracker, &mut buf, read, &mut sink)? {
                break;
            }
        }
    }
    Ok(())
}

/// Reads the row `buf` was started on from every family positioned at it, applies the read's
/// filter, and hands a non-empty result to `sink`; false when the sink wants no more rows.
#[allow(clippy::too_many_arguments)]
fn gather_row(
    families: &mut [FamilyRead<'_>],
    params: &ReadParams,
    window: &ColumnWindow,
    tracker: &mut DeleteTracker,
    buf: &mut RowBuf,
    read: &RowRead<'_>,
    sink: &mut impl FnMut(&mut RowBuf) -> bool,
) -> Result<bool> {
    for (i, f) in families.iter_mut().enumerate() {
        if f.cursor.key().is_some_and(|k| same_bytes(k.row, buf.row())) {
            read_row_family(&mut f.cursor, i, &f.view, params, window, tracker, buf)?;
        }
    }
    if let Some(filter) = &read.spec.filter {
        buf.apply_filter(filter);
    }
    Ok(buf.is_empty() || sink(buf))
}
