//! The cursor interface every cell source (memstore, SSTable) implements, and the merging
//! cursor that combines them into one ordered stream.

use bytes::Bytes;

use crate::cell::KeyView;
use crate::memstore::MemCursor;
use crate::sst::SstCursor;
use crate::Result;

/// A positioned iterator over one family's cells in the engine's key order.
pub(crate) trait CellCursor {
    /// The current cell's key, or `None` when exhausted.
    fn key(&self) -> Option<KeyView<'_>>;
    /// The current cell's value (empty when exhausted). Borrowed: reads copy what they return,
    /// so results never pin a cached block or a memstore chunk.
    fn value(&self) -> &[u8];
    /// The current cell's time to live in milliseconds.
    fn ttl_ms(&self) -> Option<u64>;
    /// Advances to the next cell.
    fn next(&mut self) -> Result<()>;
    /// Positions at the first cell whose key is `>= target`.
    fn seek(&mut self, target: &KeyView<'_>) -> Result<()>;
    /// Like [`CellCursor::seek`], for a target at or after the current position: sources can
    /// skip the search when they are already there.
    fn seek_forward(&mut self, target: &KeyView<'_>) -> Result<()> {
        self.seek(target)
    }
    /// The largest row strictly below `bound` (or the largest row, for `None`); used by
    /// reversed scans. Does not move the cursor in any way callers rely on.
    fn prev_row(&mut self, bound: Option<&[u8]>) -> Result<Option<Bytes>>;
}

/// One input of a merge: a memstore or an SSTable (an enum rather than a boxed trait object:
/// reads build these on every Get).
pub(crate) enum Source<'a> {
    Mem(MemCursor<'a>),
    Sst(SstCursor),
}

macro_rules! each_source {
    ($self:ident, $c:ident => $e:expr) => {
        match $self {
            Source::Mem($c) => $e,
            Source::Sst($c) => $e,
        }
    };
}

impl CellCursor for Source<'_> {
    fn key(&self) -> Option<KeyView<'_>> {
        each_source!(self, c => c.key())
    }
    fn value(&self) -> &[u8] {
        each_source!(self, c => c.value())
    }
    fn ttl_ms(&self) -> Option<u64> {
        each_source!(self, c => c.ttl_ms())
    }
    fn next(&mut self) -> Result<()> {
        each_source!(self, c => c.next())
    }
    fn seek(&mut self, target: &KeyView<'_>) -> Result<()> {
        each_source!(self, c => c.seek(target))
    }
    fn prev_row(&mut self, bound: Option<&[u8]>) -> Result<Option<Bytes>> {
        each_source!(self, c => c.prev_row(bound))
    }
}

/// Merges several cursors into one ordered stream.
///
/// Sources are few (one memstore or two, plus a handful of files), so picking the minimum by a
/// linear pass is cheaper than maintaining a heap.
pub(crate) struct MergeCursor<'a> {
    sources: Vec<Source<'a>>,
    current: Option<usize>,
}

impl<'a> MergeCursor<'a> {
    pub fn new(sources: Vec<Source<'a>>) -> Self {
        let mut m = MergeCursor { sources, current: None };
        m.pick();
        m
    }

    fn pick(&mut self) {
        let mut best: Option<(usize, KeyView<'_>)> = None;
        for (i, s) in self.sources.iter().enumerate() {
            if let Some(k) = s.key() {
                match &best {
                    Some((_, b)) if k.cmp_internal(b).is_ge() => {}
                    _ => best = Some((i, k)),
                }
            }
        }
        self.current = best.map(|(i, _)| i);
    }
}

impl CellCursor for MergeCursor<'_> {
    fn key(&self) -> Option<KeyView<'_>> {
        self.current.and_then(|i| self.sources[i].key())
    }

    fn value(&self) -> &[u8] {
        self.current.map_or(&[], |i| self.sources[i].value())
    }

    fn ttl_ms(&self) -> Option<u64> {
        self.current.and_then(|i| self.sources[i].ttl_ms())
    }

    fn next(&mut self) -> Result<()> {
        if let Some(i) = self.current {
            self.sources[i].next()?;
            self.pick();
        }
        Ok(())
    }

    fn seek(&mut self, target: &KeyView<'_>) -> Result<()> {
        for s in &mut self.sources {
            s.seek(target)?;
        }
        self.pick();
        Ok(())
    }

    fn seek_forward(&mut self, target: &KeyView<'_>) -> Result<()> {
        for s in &mut self.sources {
            // Sources already at or past the target (or exhausted) stay put: a seek costs a
            // search, and most sources of a row skip are already beyond the skipped column.
            if s.key().is_some_and(|k| k.cmp_internal(target).is_lt()) {
                s.seek(target)?;
            }
        }
        self.pick();
        Ok(())
    }

    fn prev_row(&mut self, bound: Option<&[u8]>) -> Result<Option<Bytes>> {
        let mut best: Option<Bytes> = None;
        for s in &mut self.sources {
            if let Some(r) = s.prev_row(bound)? {
                if best.as_ref().is_none_or(|b| r > *b) {
                    best = Some(r);
                }
            }
        }
        Ok(best)
    }
}

/// Limits a cursor to rows below `end` (exclusive; empty = unbounded), so a region compacting
/// files it shares with its sibling after a split copies only its own rows.
pub(crate) struct BoundedCursor<C> {
    inner: C,
    end: Bytes,
}

impl<C: CellCursor> BoundedCursor<C> {
    pub fn new(inner: C, end: Bytes) -> Self {
        BoundedCursor { inner, end }
    }
}

impl<C: CellCursor> CellCursor for BoundedCursor<C> {
    fn key(&self) -> Option<KeyView<'_>> {
        self.inner.key().filter(|k| self.end.is_empty() || k.row < self.end.as_ref())
    }

    fn value(&self) -> &[u8] {
        self.inner.value()
    }

    fn ttl_ms(&self) -> Option<u64> {
        self.inner.ttl_ms()
    }

    fn next(&mut self) -> Result<()> {
        self.inner.next()
    }

    fn seek(&mut self, target: &KeyView<'_>) -> Result<()> {
        self.inner.seek(target)
    }

    fn prev_row(&mut self, bound: Option<&[u8]>) -> Result<Option<Bytes>> {
        let bound = match bound {
            Some(b) if self.end.is_empty() || b < self.end.as_ref() => Some(b),
            _ if self.end.is_empty() => None,
            _ => Some(self.end.as_ref()),
        };
        self.inner.prev_row(bound)
    }
}
