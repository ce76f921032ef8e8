//! [`AsyncStore`]: the [`Store`](super::Store) interface as futures, which the object mapper's
//! protocols are written against once, for the synchronous and the asynchronous API alike.
//!
//! Three stores implement it:
//! * [`Inline`]: any [`Store`](super::Store), called on the spot; every call is ready. The
//!   synchronous API runs the protocols over it with [`drive`](super::drive), so a
//!   synchronous caller pays for no thread, lock or allocation it did not pay for before.
//! * `BigtableStore` natively: a call waits on the network without holding a thread.
//! * [`Offload`](super::Offload): a synchronous store (the embedded engine, a wrapper a test
//!   or an application wrote) for asynchronous callers, its calls run on a bounded pool of
//!   threads so that they never block a runtime's workers.
//!
//! Every method means what the [`Store`](super::Store) method of the same name means, with
//! the same errors; only the calling convention differs.

use bytes::Bytes;

use super::{
    Call, Commit, Condition, FamilyAlteration, FamilyChange, Guarantees, LentRow, ReadSpec, Row, RowCheck,
    RowCursorBox, RowMutation, ScanSpec, Store, TableSpec,
};
use crate::Result;

/// A scan's rows, lent one at a time as they arrive: the asynchronous
/// [`RowCursor`](super::RowCursor).
pub trait AsyncRowCursor: Send {
    /// Moves to the next row: `true` if there is one, `false` at the end.
    ///
    /// # Errors
    /// Store failures; the cursor is at its end after one.
    fn advance(&mut self) -> Call<'_, Result<bool>>;

    /// The row the cursor is on: `None` before the first [`AsyncRowCursor::advance`] and once
    /// it returned `false` or failed.
    fn row(&self) -> Option<LentRow<'_>>;
}

/// A boxed [`AsyncRowCursor`].
pub type AsyncCursorBox<'a> = Box<dyn AsyncRowCursor + 'a>;

/// A lent row's visitor, for [`AsyncStore::read_rows_with`]: its position among the keys read
/// and the row (`None`: no cells).
pub type Visit<'a> = dyn FnMut(usize, Option<LentRow<'_>>) + Send + 'a;

/// The builder of [`AsyncStore::read_and_commit`]'s commit from the row read.
pub type BuildCommit<'a> = dyn FnMut(Option<&Row>) -> Option<Commit> + Send + 'a;

/// A wide-column store called through futures (see the module's documentation). Object-safe:
/// the protocols take `&dyn AsyncStore` (the hottest reads are generic over the store, so the
/// synchronous path calls [`Inline`] without a virtual call).
pub trait AsyncStore: Send + Sync + AsDyn {
    /// As [`Store::ensure_table`].
    fn ensure_table<'a>(&'a self, spec: &'a TableSpec) -> Call<'a, Result<()>>;

    /// As [`Store::alter_families`].
    fn alter_families<'a>(
        &'a self,
        table: &'a str,
        changes: &'a [FamilyChange],
    ) -> Call<'a, Result<Vec<FamilyAlteration>>>;

    /// As [`Store::mutate`].
    fn mutate<'a>(&'a self, table: &'a str, rows: Vec<RowMutation>) -> Call<'a, Result<()>>;

    /// As [`Store::mutate_row`].
    fn mutate_row<'a>(&'a self, table: &'a str, row: RowMutation) -> Call<'a, Result<()>>;

    /// As [`Store::read_rows`].
    fn read_rows<'a>(
        &'a self,
        table: &'a str,
        rows: &'a [Bytes],
        read: &'a ReadSpec,
    ) -> Call<'a, Result<Vec<Option<Row>>>>;

    /// As [`Store::read_rows_with`].
    fn read_rows_with<'a>(
        &'a self,
        table: &'a str,
        rows: &'a [Bytes],
        read: &'a ReadSpec,
        visit: &'a mut Visit<'_>,
    ) -> Call<'a, Result<()>>;

    /// As [`Store::scan_cursor`]: a scan whose rows arrive as the cursor advances.
    fn scan_cursor<'a>(&'a self, table: &'a str, scan: &'a ScanSpec) -> Call<'a, Result<AsyncCursorBox<'a>>>;

    /// As [`Store::check_and_mutate`].
    fn check_and_mutate<'a>(
        &'a self,
        table: &'a str,
        condition: Condition,
        mutation: RowMutation,
    ) -> Call<'a, Result<bool>>;

    /// As [`Store::check_and_mutate_many`].
    fn check_and_mutate_many<'a>(
        &'a self,
        table: &'a str,
        entries: Vec<(Condition, RowMutation)>,
    ) -> Call<'a, Result<Vec<bool>>>;

    /// As [`Store::describe`].
    fn describe<'a>(&'a self, table: &'a str) -> Call<'a, Result<Option<TableSpec>>>;

    /// As [`Store::split_keys`].
    fn split_keys<'a>(&'a self, table: &'a str) -> Call<'a, Result<Option<Vec<Bytes>>>>;

    /// As [`Store::increment`].
    fn increment<'a>(
        &'a self,
        table: &'a str,
        row: Bytes,
        family: &'a str,
        qualifier: &'a str,
        delta: i64,
    ) -> Call<'a, Result<i64>>;

    /// As [`Store::guarantees`]: asks the backend nothing.
    fn guarantees(&self) -> Guarantees;

    /// As [`Store::mutate_group`].
    fn mutate_group<'a>(
        &'a self,
        table: &'a str,
        checks: Vec<RowCheck>,
        rows: Vec<RowMutation>,
    ) -> Call<'a, Result<bool>>;

    /// As [`Store::commit`].
    fn commit(&self, commit: Commit) -> Call<'_, Result<bool>>;

    /// As [`Store::read_and_commit`].
    fn read_and_commit<'a>(
        &'a self,
        table: &'a str,
        row: &'a Bytes,
        read: &'a ReadSpec,
        build: &'a mut BuildCommit<'_>,
    ) -> Call<'a, Result<Option<bool>>>;

    /// Waits `pause` (a protocol waiting for another writer to finish) without holding a
    /// thread: by default on Cellar's timer thread, which any executor can wait on.
    fn pause(&self, pause: std::time::Duration) -> Call<'_, ()> {
        Call::later(super::timer::sleep(pause))
    }
}

/// Any [`AsyncStore`] as a trait object; implemented for every store (and `dyn AsyncStore`).
pub trait AsDyn {
    /// This store as `&dyn AsyncStore`.
    fn as_dyn(&self) -> &dyn AsyncStore;
}

impl<T: AsyncStore> AsDyn for T {
    fn as_dyn(&self) -> &dyn AsyncStore {
        self
    }
}

/// A synchronous [`Store`] as an [`AsyncStore`] whose calls run on the spot: each returns a
/// ready [`Call`]. For synchronous callers only — on an async runtime it blocks the worker for
/// as long as the store takes.
#[derive(Clone, Copy)]
pub struct Inline<'s>(pub &'s dyn Store);

impl std::fmt::Debug for Inline<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Inline")
    }
}

/// A synchronous cursor, advanced on the spot.
struct InlineCursor<'a>(RowCursorBox<'a>);

impl AsyncRowCursor for InlineCursor<'_> {
    fn advance(&mut self) -> Call<'_, Result<bool>> {
        Call::ready(self.0.advance())
    }

    fn row(&self) -> Option<LentRow<'_>> {
        self.0.row()
    }
}

impl AsyncStore for Inline<'_> {
    #[inline]
    fn ensure_table<'a>(&'a self, spec: &'a TableSpec) -> Call<'a, Result<()>> {
        Call::ready(self.0.ensure_table(spec))
    }

    #[inline]
    fn alter_families<'a>(
        &'a self,
        table: &'a str,
        changes: &'a [FamilyChange],
    ) -> Call<'a, Result<Vec<FamilyAlteration>>> {
        Call::ready(self.0.alter_families(table, changes))
    }

    #[inline]
    fn mutate<'a>(&'a self, table: &'a str, rows: Vec<RowMutation>) -> Call<'a, Result<()>> {
        Call::ready(self.0.mutate(table, rows))
    }

    #[inline]
    fn mutate_row<'a>(&'a self, table: &'a str, row: RowMutation) -> Call<'a, Result<()>> {
        Call::ready(self.0.mutate_row(table, row))
    }

    #[inline]
    fn read_rows<'a>(
        &'a self,
        table: &'a str,
        rows: &'a [Bytes],
        read: &'a ReadSpec,
    ) -> Call<'a, Result<Vec<Option<Row>>>> {
        Call::ready(self.0.read_rows(table, rows, read))
    }

    #[inline]
    fn read_rows_with<'a>(
        &'a self,
        table: &'a str,
        rows: &'a [Bytes],
        read: &'a ReadSpec,
        visit: &'a mut Visit<'_>,
    ) -> Call<'a, Result<()>> {
        Call::ready(self.0.read_rows_with(table, rows, read, visit))
    }

    #[inline]
    fn scan_cursor<'a>(&'a self, table: &'a str, scan: &'a ScanSpec) -> Call<'a, Result<AsyncCursorBox<'a>>> {
        Call::ready(self.0.scan_cursor(table, scan).map(|c| Box::new(InlineCursor(c)) as AsyncCursorBox<'a>))
    }

    #[inline]
    fn check_and_mutate<'a>(
        &'a self,
        table: &'a str,
        condition: Condition,
        mutation: RowMutation,
    ) -> Call<'a, Result<bool>> {
        Call::ready(self.0.check_and_mutate(table, condition, mutation))
    }

    #[inline]
    fn check_and_mutate_many<'a>(
        &'a self,
        table: &'a str,
        entries: Vec<(Condition, RowMutation)>,
    ) -> Call<'a, Result<Vec<bool>>> {
        Call::ready(self.0.check_and_mutate_many(table, entries))
    }

    #[inline]
    fn describe<'a>(&'a self, table: &'a str) -> Call<'a, Result<Option<TableSpec>>> {
        Call::ready(self.0.describe(table))
    }

    #[inline]
    fn split_keys<'a>(&'a self, table: &'a str) -> Call<'a, Result<Option<Vec<Bytes>>>> {
        Call::ready(self.0.split_keys(table))
    }

    #[inline]
    fn increment<'a>(
        &'a self,
        table: &'a str,
        row: Bytes,
        family: &'a str,
        qualifier: &'a str,
        delta: i64,
    ) -> Call<'a, Result<i64>> {
        Call::ready(self.0.increment(table, row, family, qualifier, delta))
    }

    #[inline]
    fn guarantees(&self) -> Guarantees {
        self.0.guarantees()
    }

    #[inline]
    fn mutate_group<'a>(
        &'a self,
        table: &'a str,
        checks: Vec<RowCheck>,
        rows: Vec<RowMutation>,
    ) -> Call<'a, Result<bool>> {
        Call::ready(self.0.mutate_group(table, checks, rows))
    }

    #[inline]
    fn commit(&self, commit: Commit) -> Call<'_, Result<bool>> {
        Call::ready(self.0.commit(commit))
    }

    #[inline]
    fn read_and_commit<'a>(
        &'a self,
        table: &'a str,
        row: &'a Bytes,
        read: &'a ReadSpec,
        build: &'a mut BuildCommit<'_>,
    ) -> Call<'a, Result<Option<bool>>> {
        Call::ready(self.0.read_and_commit(table, row, read, &mut |r| build(r)))
    }

    /// Sleeps: the caller is synchronous, and waits as it always has.
    fn pause(&self, pause: std::time::Duration) -> Call<'_, ()> {
        std::thread::sleep(pause);
        Call::ready(())
    }
}

/// A store as its asynchronous callers reach it: its own [`AsyncStore`] if it has one
/// ([`Store::as_async`]), otherwise through [`Offload`](super::Offload). Cheap to clone.
#[derive(Clone)]
pub(crate) struct AsyncView {
    store: std::sync::Arc<dyn Store>,
    offload: super::Offload,
}

impl AsyncView {
    pub(crate) fn new(store: std::sync::Arc<dyn Store>) -> Self {
        AsyncView { offload: super::Offload::new(store.clone()), store }
    }

    /// The store to call.
    pub(crate) fn get(&self) -> &dyn AsyncStore {
        self.store.as_async().unwrap_or(&self.offload)
    }
}
