//! Delete-marker masking, shared by reads, flushes and compactions.
//!
//! Masking is sequence-aware (HBase's NEW_VERSION_BEHAVIOR): a marker hides only cells written
//! *before* it, so a delete followed by a put in the same millisecond keeps the put.
//!
//! Within one row of one family, cells arrive in key order: family markers sit at the empty
//! qualifier, before every other column, and any marker that can mask a cell sorts before that
//! cell (its timestamp is at least the cell's, and markers precede puts at equal timestamps).
//! So one forward pass that records markers as it meets them sees every marker in time.

use crate::cell::CellType;

/// A delete marker seen earlier in the current row.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Marker {
    pub ts: u64,
    pub kind: CellType,
    pub seq: u64,
}

impl Marker {
    /// True if this marker hides a put at `ts` written with sequence `seq`.
    fn masks(&self, ts: u64, seq: u64) -> bool {
        self.seq > seq
            && match self.kind {
                CellType::DeleteFamily | CellType::DeleteColumn => ts <= self.ts,
                CellType::DeleteFamilyVersion | CellType::Delete => ts == self.ts,
                CellType::Put => false,
            }
    }
}

/// Markers of the current row (family-wide) and column.
#[derive(Debug, Default)]
pub(crate) struct DeleteTracker {
    family: Vec<Marker>,
    column: Vec<Marker>,
}

impl DeleteTracker {
    /// Forgets every marker: a new row begins.
    #[inline]
    pub fn start_row(&mut self) {
        self.family.clear();
        self.column.clear();
    }

    /// Forgets column markers: a new column begins.
    #[inline]
    pub fn start_column(&mut self) {
        self.column.clear();
    }

    /// Records a marker.
    pub fn add(&mut self, marker: Marker) {
        if marker.kind.is_family_delete() {
            self.family.push(marker);
        } else {
            self.column.push(marker);
        }
    }

    /// True if a recorded marker with timestamp below `marker_ts_ceiling` hides the put.
    ///
    /// The ceiling implements KEEP_DELETED_CELLS time-range reads: markers at or after the
    /// read's upper time bound are ignored. Pass `u64::MAX` to apply every marker.
    #[inline]
    pub fn masks(&self, ts: u64, seq: u64, marker_ts_ceiling: u64) -> bool {
        let applies = |m: &&Marker| m.ts < marker_ts_ceiling || marker_ts_ceiling == u64::MAX;
        self.family.iter().filter(applies).any(|m| m.masks(ts, seq))
            || self.column.iter().filter(applies).any(|m| m.masks(ts, seq))
    }
}

/// True if a cell written at `ts` with an optional cell TTL is expired at `now` under a family
/// TTL. A cell TTL cannot extend a family TTL.
#[inline]
pub(crate) fn is_expired(ts: u64, cell_ttl_ms: Option<u64>, family_ttl_ms: Option<u64>, now: u64) -> bool {
    let ttl = match (cell_ttl_ms, family_ttl_ms) {
        (None, None) => return false,
        (Some(c), None) => c,
        (None, Some(f)) => f,
        (Some(c), Some(f)) => c.min(f),
    };
    ts.saturating_add(ttl) <= now
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(ts: u64, kind: CellType, seq: u64) -> Marker {
        Marker { ts, kind, seq }
    }

    #[test]
    fn markers_mask_only_older_writes() {
        let mut t = DeleteTracker::default();
        t.add(m(11, CellType::DeleteColumn, 5));
        assert!(t.masks(10, 1, u64::MAX));
        assert!(t.masks(11, 4, u64::MAX));
        assert!(!t.masks(12, 1, u64::MAX), "newer timestamp survives");
        assert!(!t.masks(10, 6, u64::MAX), "later write survives");
        t.start_column();
        assert!(!t.masks(10, 1, u64::MAX));
    }

    #[test]
    fn version_markers_hit_exact_timestamps() {
        let mut t = DeleteTracker::default();
        t.add(m(7, CellType::DeleteFamilyVersion, 9));
        t.add(m(3, CellType::Delete, 9));
        assert!(t.masks(7, 1, u64::MAX) && t.masks(3, 1, u64::MAX));
        assert!(!t.masks(6, 1, u64::MAX) && !t.masks(2, 1, u64::MAX));
        t.start_column();
        assert!(t.masks(7, 1, u64::MAX), "family markers outlive the column");
        assert!(!t.masks(3, 1, u64::MAX));
    }

    #[test]
    fn ceiling_ignores_later_markers() {
        let mut t = DeleteTracker::default();
        t.add(m(11, CellType::DeleteFamily, 5));
        assert!(t.masks(10, 1, 12));
        assert!(!t.masks(10, 1, 11));
    }

    #[test]
    fn expiry() {
        assert!(!is_expired(100, None, None, u64::MAX));
        assert!(is_expired(100, None, Some(50), 150));
        assert!(!is_expired(100, None, Some(50), 149));
        assert!(is_expired(100, Some(10), Some(50), 110), "cell TTL shortens");
        assert!(is_expired(100, Some(500), Some(50), 150), "cell TTL cannot extend");
        assert!(!is_expired(u64::MAX - 1, Some(10), None, u64::MAX - 1));
    }
}
