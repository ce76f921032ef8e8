//! What flushes and compactions keep.
//!
//! * Flush and minor compaction keep every marker and drop, within their input, puts hidden by a
//!   marker (unless the family keeps deleted cells), puts shadowed by a newer write at the same
//!   timestamp, and versions beyond `max_versions`. As in HBase, a version dropped this way stays
//!   gone even if a later delete removes a newer one; otherwise hot rows would drag thousands of
//!   dead versions through every file. A minor compaction that leaves newer files out keeps
//!   every version: a marker already in one of those may hide the newest versions it holds,
//!   and reads then return the ones behind them.
//! * Major compaction sees every file of a store and keeps exactly what reads can still
//!   return: markers go (unless KEEP_DELETED_CELLS), so do masked puts, puts shadowed by a
//!   newer write at the same timestamp, versions beyond `max_versions`, and expired versions
//!   beyond `min_versions`. With KEEP_DELETED_CELLS, masked puts stay while fewer than
//!   `max_versions` live versions are newer, since time-range reads below the marker still
//!   see them.

use crate::cell::KeyView;
use crate::descriptor::FamilyDescriptor;
use crate::masking::{is_expired, DeleteTracker, Marker};
use crate::read::cursor::CellCursor;
use crate::sst::SstWriter;
use crate::Result;

/// Which rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retention {
    /// Memstore flush or minor compaction.
    KeepMarkers,
    /// Minor compaction of files with newer files left out: as `KeepMarkers`, but every
    /// version stays, since a marker in a newer file may hide the newest versions here and
    /// make reads return the ones behind them.
    KeepVersions,
    /// Major compaction at time `now`.
    Major { now: u64 },
}

/// Per-column progress.
#[derive(Default)]
struct Column {
    qualifier: Vec<u8>,
    row: Vec<u8>,
    last_put_ts: Option<u64>,
    surviving: u32,
}

/// Copies the cells of `cursor` that `mode` retains into `out`; returns how many were kept.
pub(crate) fn copy_retained<C: CellCursor + ?Sized>(
    cursor: &mut C,
    desc: &FamilyDescriptor,
    mode: Retention,
    out: &mut impl FnMut(&KeyView<'_>, &[u8], Option<u64>) -> Result<()>,
) -> Result<u64> {
    let kdc = desc.keep_deleted_cells;
    let ttl = desc.ttl_ms();
    let mut tracker = DeleteTracker::default();
    let mut col = Column::default();
    let mut kept = 0u64;
    while let Some(k) = cursor.key() {
        if col.row != k.row {
            tracker.start_row();
            col.row.clear();
            col.row.extend_from_slice(k.row);
            col.qualifier.clear();
            col.qualifier.extend_from_slice(k.qualifier);
            tracker.start_column();
            col.last_put_ts = None;
            col.surviving = 0;
        } else if col.qualifier != k.qualifier {
            col.qualifier.clear();
            col.qualifier.extend_from_slice(k.qualifier);
            tracker.start_column();
            col.last_put_ts = None;
            col.surviving = 0;
        }
        let keep = if k.kind.is_delete() {
            tracker.add(Marker { ts: k.ts, kind: k.kind, seq: k.seq });
            kdc || !matches!(mode, Retention::Major { .. })
        } else {
            let masked = tracker.masks(k.ts, k.seq, u64::MAX);
            let shadowed = col.last_put_ts == Some(k.ts);
            col.last_put_ts = Some(k.ts);
            let index = col.surviving;
            if !shadowed && !masked {
                col.surviving += 1;
            }
            let within_limits = match mode {
                Retention::KeepVersions => true,
                Retention::KeepMarkers => index < desc.max_versions,
                Retention::Major { now } => {
                    index < desc.max_versions
                        && (index < desc.min_versions || !is_expired(k.ts, cursor.ttl_ms(), ttl, now))
                }
            };
            !shadowed && (!masked || kdc) && within_limits
        };
        if keep {
            out(&k, cursor.value(), cursor.ttl_ms())?;
            kept += 1;
        }
        cursor.next()?;
    }
    Ok(kept)
}

/// Copies retained cells into a new SSTable at `writer`.
pub(crate) fn write_retained<C: CellCursor + ?Sized>(
    cursor: &mut C,
    desc: &FamilyDescriptor,
    mode: Retention,
    writer: &mut SstWriter,
) -> Result<u64> {
    copy_retained(cursor, desc, mode, &mut |k, v, ttl| writer.add(k, v, ttl))
}
