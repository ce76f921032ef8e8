//! The cursor interface every cell source (memstore, SSTable) implements, and the merging
//! cursor that combines them into one ordered stream.

use std::cmp::Ordering;

use bytes::Bytes;

use crate::cell::{cmp_bytes, KeyView};
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
    /// True if there is a current cell and it is known, without comparing keys, to be in the
    /// row of the cell the last [`CellCursor::next`] moved from. False when that is not known,
    /// and after a seek.
    fn same_row(&self) -> bool {
        false
    }
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
    #[inline]
    fn key(&self) -> Option<KeyView<'_>> {
        each_source!(self, c => c.key())
    }
    #[inline]
    fn value(&self) -> &[u8] {
        each_source!(self, c => c.value())
    }
    #[inline]
    fn ttl_ms(&self) -> Option<u64> {
        each_source!(self, c => c.ttl_ms())
    }
    fn next(&mut self) -> Result<()> {
        each_source!(self, c => c.next())
    }
    #[inline]
    fn same_row(&self) -> bool {
        each_source!(self, c => c.same_row())
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
/// linear pass is cheaper than maintaining a heap. The pass also notes the runner-up: the
/// next cells usually come from the same source (a row's cells sit together), and while the
/// current source stays ahead of the runner-up one comparison settles each step. Once the
/// current source's row is found below the runner-up's, the steps it takes within that row
/// need no comparison at all.
pub(crate) struct MergeCursor<'a> {
    sources: Vec<Source<'a>>,
    current: Option<usize>,
    /// The source holding the smallest key after the current one's (the lower index among
    /// equal keys, as for the current one).
    runner_up: Option<usize>,
    /// The current source's row sorts strictly below the runner-up's key.
    ahead_by_row: bool,
    /// The last `next` stayed on one source and that source stayed in its row.
    same_row: bool,
}

impl<'a> MergeCursor<'a> {
    pub fn new(sources: Vec<Source<'a>>) -> Self {
        let mut m = MergeCursor { sources, current: None, runner_up: None, ahead_by_row: false, same_row: false };
        m.pick();
        m
    }

    fn pick(&mut self) {
        let mut best: Option<(usize, KeyView<'_>)> = None;
        let mut second: Option<(usize, KeyView<'_>)> = None;
        for (i, s) in self.sources.iter().enumerate() {
            let Some(k) = s.key() else { continue };
            match &best {
                Some((_, b)) if k.cmp_internal(b).is_ge() => {
                    if second.as_ref().is_none_or(|(_, r)| k.cmp_internal(r).is_lt()) {
                        second = Some((i, k));
                    }
                }
                _ => second = best.replace((i, k)),
            }
        }
        self.current = best.map(|(i, _)| i);
        self.runner_up = second.map(|(i, _)| i);
        self.ahead_by_row = false;
    }

    /// True if source `i`, just advanced, still comes before every other source: the others
    /// have not moved, so the runner-up still leads them.
    fn still_first(&mut self, i: usize) -> bool {
        let source = &self.sources[i];
        // Still in the row that was found below the runner-up: still first (a source in the
        // same row has a current cell, so this needs no key).
        if self.ahead_by_row && source.same_row() {
            return true;
        }
        let Some(k) = source.key() else { return false };
        let Some(r) = self.runner_up else { return true };
        let Some(rk) = self.sources[r].key() else { return true };
        match cmp_bytes(k.row, rk.row) {
            Ordering::Less => {
                self.ahead_by_row = true;
                true
            }
            Ordering::Greater => false,
            Ordering::Equal => {
                self.ahead_by_row = false;
                match k.cmp_within_row(&rk) {
                    Ordering::Less => true,
                    Ordering::Equal => i < r,
                    Ordering::Greater => false,
                }
            }
        }
    }
}

impl CellCursor for MergeCursor<'_> {
    #[inline]
    fn key(&self) -> Option<KeyView<'_>> {
        self.current.and_then(|i| self.sources[i].key())
    }

    #[inline]
    fn value(&self) -> &[u8] {
        self.current.map_or(&[], |i| self.sources[i].value())
    }

    #[inline]
    fn ttl_ms(&self) -> Option<u64> {
        self.current.and_then(|i| self.sources[i].ttl_ms())
    }

    fn next(&mut self) -> Result<()> {
        self.same_row = false;
        if let Some(i) = self.current {
            self.sources[i].next()?;
            if self.still_first(i) {
                self.same_row = self.sources[i].same_row();
            } else {
                self.pick();
            }
        }
        Ok(())
    }

    #[inline]
    fn same_row(&self) -> bool {
        self.same_row
    }

    fn seek(&mut self, target: &KeyView<'_>) -> Result<()> {
        for s in &mut self.sources {
            s.seek(target)?;
        }
        self.pick();
        self.same_row = false;
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
        self.same_row = false;
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
    #[inline]
    fn key(&self) -> Option<KeyView<'_>> {
        self.inner.key().filter(|k| self.end.is_empty() || k.row < self.end.as_ref())
    }

    #[inline]
    fn value(&self) -> &[u8] {
        self.inner.value()
    }

    #[inline]
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use std::collections::BTreeSet;
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::cache::BlockCache;
    use crate::cell::CellType;
    use crate::descriptor::FamilyDescriptor;
    use crate::fs::OsFs;
    use crate::memstore::{MemAccount, Memstore};
    use crate::sst::{SstReader, SstWriter};

    /// Row, qualifier, timestamp, sequence: small ranges, so sources share keys.
    type Key = (u8, u8, u64, u64);

    /// One-byte rows and qualifiers, borrowed from here.
    static BYTES: [u8; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

    fn key_view(k: &Key) -> KeyView<'static> {
        let one = |b: u8| &BYTES[b as usize..b as usize + 1];
        KeyView { row: one(k.0), qualifier: one(k.1), ts: k.2, kind: CellType::Put, seq: k.3 }
    }

    #[derive(Debug, Clone)]
    enum Step {
        Next,
        Seek(Key),
        SeekForward(Key),
    }

    fn key() -> impl Strategy<Value = Key> {
        (0..6u8, 0..3u8, 0..3u64, 1..3u64)
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![6 => Just(Step::Next), 1 => key().prop_map(Step::Seek), 1 => key().prop_map(Step::SeekForward)]
    }

    /// A source of `keys`, each valued with `tag`: a memstore, or an SSTable of tiny blocks
    /// (so steps cross blocks and rows alike) written under `dir`.
    enum Input {
        Mem(Box<Memstore>),
        Sst(Arc<SstReader>),
    }

    impl Input {
        fn new(keys: &BTreeSet<Key>, tag: u8, sst: bool, dir: &Path, account: &Arc<MemAccount>) -> Input {
            let mut sorted: Vec<KeyView<'static>> = keys.iter().map(key_view).collect();
            sorted.sort_by(|a, b| a.cmp_internal(b));
            if !sst {
                let m = Memstore::new(account);
                for k in &sorted {
                    m.insert(k, &[tag], None, None);
                }
                return Input::Mem(Box::new(m));
            }
            let path = dir.join(format!("{tag}.sst"));
            let family = FamilyDescriptor::new("f").block_size(64);
            let mut w = SstWriter::create(&OsFs, &path, &family).unwrap();
            for k in &sorted {
                w.add(k, &[tag], None).unwrap();
            }
            w.finish().unwrap();
            Input::Sst(Arc::new(
                SstReader::open(&OsFs, &path, u64::from(tag), Arc::new(BlockCache::new(1 << 20)), false).unwrap(),
            ))
        }

        /// One input per source, tagged with its place.
        fn all(sources: &[(bool, BTreeSet<Key>)], dir: &Path, account: &Arc<MemAccount>) -> Vec<Input> {
            sources.iter().enumerate().map(|(i, (sst, keys))| Input::new(keys, i as u8, *sst, dir, account)).collect()
        }

        fn source(&self) -> Source<'_> {
            match self {
                Input::Mem(m) => Source::Mem(m.cursor(u64::MAX)),
                Input::Sst(r) => Source::Sst(r.cursor()),
            }
        }
    }

    /// Every (key, source) of `sources` in merge order: keys in order, equal keys by source.
    fn merge_model(sources: &[(bool, BTreeSet<Key>)]) -> Vec<(Key, u8)> {
        let mut model: Vec<(Key, u8)> =
            sources.iter().enumerate().flat_map(|(i, (_, keys))| keys.iter().map(move |k| (*k, i as u8))).collect();
        model.sort_by(|a, b| key_view(&a.0).cmp_internal(&key_view(&b.0)).then(a.1.cmp(&b.1)));
        model
    }

    /// Checks that `cursor` stands on `model[at]` (or past the end with the model) and that its
    /// same-row hint, if given, matches the row it stood on before; returns its row.
    fn check_position(
        cursor: &dyn CellCursor,
        model: &[(Key, u8)],
        at: usize,
        previous_row: Option<u8>,
    ) -> Result<Option<u8>, TestCaseError> {
        let got = cursor.key().map(|k| (k.row[0], k.qualifier[0], k.ts, k.seq, cursor.value()[0]));
        let want = model.get(at).map(|(k, i)| (k.0, k.1, k.2, k.3, *i));
        prop_assert_eq!(got, want);
        if cursor.same_row() {
            prop_assert_eq!(got.map(|g| g.0), previous_row, "the hint held across a row change");
        }
        Ok(got.map(|g| g.0))
    }

    proptest! {
        /// The merge yields every source's cells in key order, equal keys in source order,
        /// through any mix of steps and seeks, over memstores and files alike: what reads and
        /// compactions rely on. Its same-row hint never claims a row it has left.
        #[test]
        fn merges_in_key_then_source_order(
            sources in proptest::collection::vec((any::<bool>(), proptest::collection::btree_set(key(), 0..12)), 1..5),
            steps in proptest::collection::vec(step(), 1..60),
        ) {
            let account = MemAccount::new(0, usize::MAX);
            let dir = tempfile::tempdir().unwrap();
            let inputs = Input::all(&sources, dir.path(), &account);
            let model = merge_model(&sources);
            let mut merge = MergeCursor::new(inputs.iter().map(Input::source).collect());
            merge.seek(&KeyView::first_of_row(b"")).unwrap();
            let mut at = 0;
            let mut previous_row: Option<u8> = None;
            for step in &steps {
                previous_row = check_position(&merge, &model, at, previous_row)?;
                match step {
                    Step::Next => {
                        merge.next().unwrap();
                        at = (at + 1).min(model.len());
                    }
                    Step::Seek(k) => {
                        let target = key_view(k);
                        merge.seek(&target).unwrap();
                        at = model.iter().position(|(m, _)| key_view(m).cmp_internal(&target).is_ge()).unwrap_or(model.len());
                    }
                    Step::SeekForward(k) => {
                        // Only forward: at or after the current key.
                        let current = model.get(at).map(|(m, _)| *m);
                        let k = match current {
                            Some(c) if key_view(&c).cmp_internal(&key_view(k)).is_gt() => c,
                            _ => *k,
                        };
                        let target = key_view(&k);
                        merge.seek_forward(&target).unwrap();
                        at += model[at..].iter().position(|(m, _)| key_view(m).cmp_internal(&target).is_ge()).unwrap_or(model.len() - at);
                    }
                }
            }
        }
        /// A bounded merge yields exactly the merged cells of rows below its end (none past it,
        /// however it got there), and its same-row hint never claims a row it has left.
        #[test]
        fn a_bounded_cursor_stops_at_its_end_row(
            sources in proptest::collection::vec((any::<bool>(), proptest::collection::btree_set(key(), 0..12)), 1..4),
            end in 0..7u8,
            steps in proptest::collection::vec(step(), 1..40),
        ) {
            let account = MemAccount::new(0, usize::MAX);
            let dir = tempfile::tempdir().unwrap();
            let inputs = Input::all(&sources, dir.path(), &account);
            // Row 6 never occurs: an end of 6 bounds nothing, as an empty end does.
            let end_row = if end == 6 { Bytes::new() } else { Bytes::copy_from_slice(&[end]) };
            let mut model = merge_model(&sources);
            model.retain(|(k, _)| k.0 < end);
            let mut bounded = BoundedCursor::new(MergeCursor::new(inputs.iter().map(Input::source).collect()), end_row);
            bounded.seek(&KeyView::first_of_row(b"")).unwrap();
            let mut at = 0;
            let mut previous_row: Option<u8> = None;
            for step in &steps {
                previous_row = check_position(&bounded, &model, at, previous_row)?;
                match step {
                    Step::Next => {
                        bounded.next().unwrap();
                        at = (at + 1).min(model.len());
                    }
                    Step::Seek(k) | Step::SeekForward(k) => {
                        let target = key_view(k);
                        bounded.seek(&target).unwrap();
                        at = model.iter().position(|(m, _)| key_view(m).cmp_internal(&target).is_ge()).unwrap_or(model.len());
                    }
                }
            }
        }
    }
}
