//! Scans of aggregates: rows read in key order and grouped into aggregates, each read whole —
//! by a synchronous iterator ([`AggregateIter`]), or a page at a time (synchronous pages, and
//! the asynchronous API's pages and streams). Both group rows with the same code
//! ([`Grouping`]), over a synchronous iterator or asynchronous cursors ([`RowSource`]).

use std::future::Future;

use bytes::Bytes;
use futures::future::BoxFuture;

use super::repo::holds_intent;
use super::rows::{self, RowSet};
use super::shape::key_len;
use super::{Aggregate, AggregateRepository, Strategy};
use crate::entity::KeyPrefix;
use crate::repo::{Cursor, EntityIter, EntityStream, Merge, OnError, Page, Pager, Plan, Query};
use crate::store::drive::drive;
use crate::store::{AsyncCursorBox, AsyncStore, AsyncView, Row};
use crate::{Error, Result};

impl<A: Aggregate> AggregateRepository<A> {
    /// A scan over aggregates in root-key order, each read whole.
    pub fn scan(&self) -> AggregateQuery<'_, A> {
        let one_row_each = !self.shape.strategy.typed_rows();
        // Rows that are not aggregates may lie in range (child rows, tombstones on shared
        // stores): the store cannot apply the limit then.
        let mixed = !one_row_each || !self.store.guarantees().single_process;
        AggregateQuery { repo: self, rows: Query::<()>::rows(&*self.store, &A::SCHEMA, mixed), limit: None }
    }
}

/// A scan of aggregates being set up; see [`AggregateRepository::scan`].
pub struct AggregateQuery<'a, A> {
    repo: &'a AggregateRepository<A>,
    rows: Query<'a, ()>,
    limit: Option<usize>,
}

impl<'a, A: Aggregate> AggregateQuery<'a, A> {
    /// Only aggregates whose root key starts with `prefix` (`<Root>Key::<first part>(..)`).
    pub fn prefix(mut self, prefix: impl KeyPrefix<A>) -> Self {
        // A full key names one aggregate: its prefix without the record type covers its rows.
        let encoded = prefix.encode_prefix().map(|k| k.without_record_type(&A::SCHEMA));
        self.rows = self.rows.with_prefix(encoded);
        self
    }

    /// Only aggregates with `from <= root key < to`; either end may be left open with `..`.
    pub fn range(mut self, range: impl std::ops::RangeBounds<A::Key>) -> Self {
        use std::ops::Bound;
        // Bounds fall on whole aggregates: from the start of one aggregate's rows, or from past
        // the last of them.
        let group = |k: &A::Key| A::row_key(k).map(|k| k.without_record_type(&A::SCHEMA));
        let mut empty = false;
        let from = match range.start_bound() {
            Bound::Included(k) => Some(group(k)),
            Bound::Excluded(k) => Some(group(k).map(|g| match g.group_end() {
                Some(end) => end,
                // Nothing follows a key of 0xFF bytes.
                None => {
                    empty = true;
                    g
                }
            })),
            Bound::Unbounded => None,
        };
        let to = match range.end_bound() {
            _ if empty => from.clone(),
            Bound::Excluded(k) => Some(group(k)),
            Bound::Included(k) => group(k).map(|g| g.group_end()).transpose(),
            Bound::Unbounded => None,
        };
        self.rows = self.rows.with_bounds(from, to);
        self
    }

    /// Largest root key first.
    pub fn reverse(mut self) -> Self {
        self.rows = self.rows.reverse();
        self
    }

    /// Sets aggregates that do not decode aside instead of ending the scan with their error;
    /// [`AggregateIter::skipped`] reports them.
    pub fn skip_unreadable(mut self) -> Self {
        self.rows = self.rows.skip_unreadable();
        self
    }

    /// At most `n` aggregates.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Continues after the page that returned `cursor`.
    pub fn after(mut self, cursor: &Cursor) -> Self {
        self.rows = self.rows.after(cursor);
        self
    }

    /// Streams the aggregates.
    ///
    /// # Errors
    /// As [`Query::iter`]; decoding errors come from the iterator.
    pub fn iter(self) -> Result<AggregateIter<'a, A>> {
        let one_row_each = !self.repo.shape.strategy.typed_rows();
        let mut rows = self.rows;
        if let (true, Some(n)) = (one_row_each, self.limit) {
            rows = rows.limit(n);
        }
        debug_assert!(rows.limit_set().is_none() || one_row_each);
        let grouping = Grouping { pending: None, left: self.limit.unwrap_or(usize::MAX) };
        Ok(AggregateIter { repo: self.repo, rows: rows.iter()?, grouping })
    }

    /// Collects the aggregates.
    ///
    /// # Errors
    /// As [`AggregateQuery::iter`].
    pub fn to_vec(self) -> Result<Vec<A>> {
        self.repo.call("scan").run(|| self.iter()?.collect())
    }

    /// One page of at most `size` aggregates and the cursor of the next.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero size; as [`AggregateQuery::iter`].
    pub fn page(self, size: usize) -> Result<Page<A>> {
        let store = self.repo.inline();
        let call = self.repo.call("scan_page");
        call.run(|| drive(page(self.repo, &store, self.rows.into_plan(), size, OnError::Fail)))
    }
}

/// Aggregates streamed from a scan.
pub struct AggregateIter<'a, A> {
    repo: &'a AggregateRepository<A>,
    rows: EntityIter<'a, ()>,
    grouping: Grouping,
}

impl<A: Aggregate> AggregateIter<'_, A> {
    /// The aggregates set aside so far, with [`AggregateQuery::skip_unreadable`].
    pub fn skipped(&self) -> &[crate::repo::Skipped] {
        self.rows.skipped()
    }
}

impl<A: Aggregate> Iterator for AggregateIter<'_, A> {
    type Item = Result<A>;

    fn next(&mut self) -> Option<Result<A>> {
        let store = self.repo.inline();
        drive(self.grouping.next(self.repo, &store, &mut self.rows)).map(|r| r.map(|(_, a)| a))
    }
}

/// One page of at most `size` aggregates of the scan `plan` from `store`, and the cursor of
/// the next.
async fn page<A: Aggregate>(
    repo: &AggregateRepository<A>,
    store: &dyn AsyncStore,
    mut plan: Plan<()>,
    size: usize,
    on_error: OnError,
) -> Result<Page<A>> {
    if size == 0 {
        return Err(Error::InvalidArgument { arg: "size", reason: "a page holds at least one aggregate".into() });
    }
    if !repo.shape.strategy.typed_rows() {
        // One row per aggregate: the store stops after the rows the page needs.
        plan = plan.limit(size.saturating_add(1));
    }
    let reverse = plan.is_reverse();
    let (specs, mut rows) = plan.start::<AsyncCursorBox<'_>>()?;
    for spec in &specs {
        rows.attach(store.scan_cursor(A::SCHEMA.table, spec).await?);
    }
    let mut grouping = Grouping { pending: None, left: size.saturating_add(1) };
    let mut items = Vec::new();
    let mut last = None;
    let ends_page = |items: &Vec<A>| on_error == OnError::EndPage && !items.is_empty();
    // Whether the page ended before an error, which the next page then meets.
    let mut ended = false;
    while items.len() < size && !ended {
        match grouping.next(repo, store, &mut rows).await {
            Some(Ok((prefix, a))) => {
                last = Some(prefix);
                items.push(a);
            }
            Some(Err(_)) if ends_page(&items) => ended = true,
            Some(Err(e)) => return Err(e),
            None => return Ok(Page { items, next: None }),
        }
    }
    let more = ended
        || match grouping.next(repo, store, &mut rows).await {
            Some(Err(_)) if ends_page(&items) => true,
            next => next.transpose()?.is_some(),
        };
    Ok(Page { items, next: last.filter(|_| more).map(|after| Cursor { reverse, after, group: true }) })
}

/// Where a scan of aggregates gets its rows, in key order.
trait RowSource {
    /// The next row, copied out.
    fn pull(&mut self) -> impl Future<Output = Option<Result<Row>>> + Send;

    /// A row key without its salt byte (what cursors hold).
    fn body<'k>(&self, key: &'k [u8]) -> &'k [u8];

    /// Sets an aggregate that does not decode aside, if the scan was asked to; else hands
    /// its error back.
    fn set_aside(&mut self, key: &[u8], error: Error) -> Option<Error>;
}

impl RowSource for EntityIter<'_, ()> {
    fn pull(&mut self) -> impl Future<Output = Option<Result<Row>>> + Send {
        std::future::ready(self.next_row())
    }

    fn body<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        EntityIter::body(self, key)
    }

    fn set_aside(&mut self, key: &[u8], error: Error) -> Option<Error> {
        EntityIter::set_aside(self, key, error)
    }
}

impl RowSource for Merge<(), AsyncCursorBox<'_>> {
    fn pull(&mut self) -> impl Future<Output = Option<Result<Row>>> + Send {
        self.next_row()
    }

    fn body<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        Merge::body(self, key)
    }

    fn set_aside(&mut self, key: &[u8], error: Error) -> Option<Error> {
        Merge::set_aside(self, key, error)
    }
}

/// A scan's way through its rows, grouping them into aggregates.
struct Grouping {
    /// The first row of the next aggregate, read while finishing the previous one.
    pending: Option<Row>,
    /// Aggregates the scan may still return.
    left: usize,
}

impl Grouping {
    /// The next aggregate and its prefix without salt (for cursors).
    async fn next<A: Aggregate>(
        &mut self,
        repo: &AggregateRepository<A>,
        store: &dyn AsyncStore,
        rows: &mut impl RowSource,
    ) -> Option<Result<(Vec<u8>, A)>> {
        while self.left > 0 {
            let first = match self.pending.take() {
                Some(row) => row,
                None => match rows.pull().await? {
                    Ok(row) => row,
                    Err(e) => return Some(Err(e)),
                },
            };
            let first_key = first.key.clone();
            let decoded = match self.group(repo, store, rows, first).await {
                Ok(Some((body, node))) => AggregateRepository::<A>::decode(node).map(|a| Some((body, a))),
                // Rows of an aggregate deleted between reads: go on with the next.
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            };
            match decoded {
                Ok(Some(found)) => {
                    self.left -= 1;
                    return Some(Ok(found));
                }
                Ok(None) => {}
                Err(e) => {
                    if let Some(e) = rows.set_aside(&first_key, e) {
                        return Some(Err(e));
                    }
                }
            }
        }
        None
    }

    /// The aggregate whose first row is `first`, as a node tree, with its prefix without salt.
    async fn group<A: Aggregate>(
        &mut self,
        repo: &AggregateRepository<A>,
        store: &dyn AsyncStore,
        rows: &mut impl RowSource,
        first: Row,
    ) -> Result<Option<(Vec<u8>, super::Node)>> {
        let prefix = Bytes::copy_from_slice(&first.key[..prefix_len::<A>(&first.key)?]);
        let shape = &repo.shape;
        let node = if shape.strategy == Strategy::Normalized {
            // The root table's rows are the aggregates; the rest is read per aggregate.
            repo.load(store, &first.key, &prefix).await?
        } else {
            let mut set = RowSet::new();
            set.insert((0, first.key), first.cells);
            while shape.strategy.typed_rows() {
                match rows.pull().await {
                    Some(Ok(row)) if row.key.starts_with(&prefix) => {
                        set.insert((0, row.key), row.cells);
                    }
                    Some(Ok(row)) => {
                        self.pending = Some(row);
                        break;
                    }
                    Some(Err(e)) => return Err(e),
                    None => break,
                }
            }
            let root = root_of(repo, &prefix);
            if !repo.atomic || holds_intent(&set, &root) {
                // Rows read by a plain scan may be mid-write; read this one consistently.
                rows::from_rows(shape, &prefix, &repo.read(store, &root, &prefix).await?)?
            } else {
                rows::from_rows(shape, &prefix, &set)?
            }
        };
        let body = rows.body(&prefix).to_vec();
        Ok(node.map(|n| (body, n)))
    }
}

/// Length of the aggregate prefix at the front of a row key (salt included).
fn prefix_len<A: Aggregate>(key: &[u8]) -> Result<usize> {
    let salt = usize::from(A::SCHEMA.salt.is_some());
    let body = key.get(salt..).unwrap_or_default();
    key_len(&A::SCHEMA, body)
        .map(|n| n + salt)
        .map_err(|e| crate::repo::decode_error(A::SCHEMA.table, key, crate::entity::FieldError::from(e)))
}

/// The root row's key of the aggregate at `prefix`.
fn root_of<A>(repo: &AggregateRepository<A>, prefix: &Bytes) -> Bytes {
    match repo.shape.strategy {
        Strategy::SingleTable | Strategy::Denormalized => {
            Bytes::from([&prefix[..], &[repo.shape.levels[0].record_type]].concat())
        }
        _ => prefix.clone(),
    }
}

/// An asynchronous scan of aggregates being set up: [`AsyncAggregateRepository::scan`], then
/// [`AsyncAggregateQuery::stream`], [`AsyncAggregateQuery::to_vec`] or
/// [`AsyncAggregateQuery::page`].
///
/// [`AsyncAggregateRepository::scan`]: super::AsyncAggregateRepository::scan
pub struct AsyncAggregateQuery<'r, A> {
    query: AggregateQuery<'r, A>,
    store: &'r AsyncView,
}

impl<A> std::fmt::Debug for AsyncAggregateQuery<'_, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncAggregateQuery").field("aggregate", &std::any::type_name::<A>()).finish_non_exhaustive()
    }
}

impl<'r, A: Aggregate> AsyncAggregateQuery<'r, A> {
    pub(super) fn new(query: AggregateQuery<'r, A>, store: &'r AsyncView) -> Self {
        AsyncAggregateQuery { query, store }
    }

    /// As [`AggregateQuery::prefix`].
    pub fn prefix(self, prefix: impl KeyPrefix<A>) -> Self {
        AsyncAggregateQuery { query: self.query.prefix(prefix), ..self }
    }

    /// As [`AggregateQuery::range`].
    pub fn range(self, range: impl std::ops::RangeBounds<A::Key>) -> Self {
        AsyncAggregateQuery { query: self.query.range(range), ..self }
    }

    /// As [`AggregateQuery::reverse`].
    pub fn reverse(self) -> Self {
        AsyncAggregateQuery { query: self.query.reverse(), ..self }
    }

    /// As [`AggregateQuery::limit`].
    pub fn limit(self, n: usize) -> Self {
        AsyncAggregateQuery { query: self.query.limit(n), ..self }
    }

    /// As [`AggregateQuery::after`] (a cursor from either API).
    pub fn after(self, cursor: &Cursor) -> Self {
        AsyncAggregateQuery { query: self.query.after(cursor), ..self }
    }

    /// As [`AggregateQuery::page`].
    ///
    /// # Errors
    /// As [`AggregateQuery::page`].
    pub async fn page(self, size: usize) -> Result<Page<A>> {
        let call = self.query.repo.call("scan_page");
        call.run_async(page(self.query.repo, self.store.get(), self.query.rows.into_plan(), size, OnError::Fail)).await
    }

    /// The aggregates as a [`Stream`](futures::Stream), fetched
    /// [`STREAM_PAGE`](crate::repo::STREAM_PAGE) at a time
    /// with the next page fetched while the current one is read; dropping the stream stops the
    /// fetching. Each aggregate is read consistently; aggregates of different pages are read
    /// at different times. The stream ends after its first error.
    pub fn stream(self) -> EntityStream<A> {
        let mut plan = self.query.rows.into_plan();
        let failed = plan.take_error();
        let pager = AggregatePager { repo: self.query.repo.clone(), store: self.store.clone(), plan };
        EntityStream::new(Box::new(pager), self.query.limit, failed)
    }

    /// Collects the aggregates.
    ///
    /// # Errors
    /// As [`AggregateQuery::to_vec`].
    pub async fn to_vec(self) -> Result<Vec<A>> {
        use futures::TryStreamExt;
        let call = self.query.repo.call("scan");
        call.run_async(self.stream().try_collect()).await
    }
}

/// The pages of a scan of aggregates.
struct AggregatePager<A> {
    repo: AggregateRepository<A>,
    store: AsyncView,
    plan: Plan<()>,
}

impl<A: Aggregate> Pager<A> for AggregatePager<A> {
    fn page(&self, after: Option<&Cursor>, want: usize) -> BoxFuture<'static, Result<Page<A>>> {
        let plan = match after {
            Some(cursor) => self.plan.copy().after(cursor),
            None => self.plan.copy(),
        };
        let (repo, store) = (self.repo.clone(), self.store.clone());
        Box::pin(async move { page(&repo, store.get(), plan, want, OnError::EndPage).await })
    }
}
