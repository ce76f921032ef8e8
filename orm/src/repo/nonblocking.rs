//! [`AsyncRepository`]: a [`Repository`]'s operations as futures, for async services. Each
//! runs the protocol the synchronous operation runs — the same code, over an
//! [`AsyncStore`](crate::store::AsyncStore) — so the two agree on every answer and error.
//!
//! Which store answers: Bigtable's own asynchronous client (calls wait without a thread), or,
//! for the embedded engine and other synchronous stores, Cellar's bounded blocking pool (see
//! [`Offload`](crate::store::Offload)), so that no call blocks a runtime worker.
//!
//! Dropping a future stops the operation where it is, as a crash of the process at that point
//! would: every multi-step write (the index protocol) is built to be left at any step, and the
//! next reader or writer settles what it left.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::Stream;

use super::query::{OnError, Plan};
use super::{Counter, Cursor, Page, Records, Repository};
use crate::entity::{Entity, KeyPrefix};
use crate::record::{Member, Record};
use crate::store::AsyncView;
use crate::Result;

/// Entities per page an [`EntityStream`] fetches: large enough that a long scan costs few
/// round trips, small enough that one page in hand and one in flight stay small.
pub const STREAM_PAGE: usize = 256;

/// Reads and writes entities of type `E` through futures; see the module documentation.
/// Made with [`Repository::to_async`]. Cheap to clone.
pub struct AsyncRepository<E> {
    repo: Repository<E>,
    store: AsyncView,
}

impl<E> Clone for AsyncRepository<E> {
    fn clone(&self) -> Self {
        AsyncRepository { repo: self.repo.clone(), store: self.store.clone() }
    }
}

impl<E> std::fmt::Debug for AsyncRepository<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncRepository").field("entity", &std::any::type_name::<E>()).finish_non_exhaustive()
    }
}

impl<E: Entity> Repository<E> {
    /// This repository's operations as futures (see [`AsyncRepository`]).
    pub fn to_async(&self) -> AsyncRepository<E> {
        AsyncRepository { repo: self.clone(), store: AsyncView::new(self.store.clone()) }
    }
}

impl<E: Entity> AsyncRepository<E> {
    /// The synchronous repository this one runs the protocols of.
    pub fn blocking(&self) -> &Repository<E> {
        &self.repo
    }

    /// The repository and the store as asynchronous calls reach it.
    pub(crate) fn parts(&self) -> (&Repository<E>, &AsyncView) {
        (&self.repo, &self.store)
    }

    /// As [`Repository::put`].
    ///
    /// # Errors
    /// As [`Repository::put`].
    pub async fn put(&self, entity: &E) -> Result<()> {
        let put = async {
            self.repo.warm_entity(self.store.get(), entity).await?;
            self.repo.put_via(self.store.get(), entity).await
        };
        self.repo.call("put").run_async(put).await
    }

    /// As [`Repository::put_many`].
    ///
    /// # Errors
    /// As [`Repository::put_many`].
    pub fn put_many<'a>(
        &'a self,
        entities: impl IntoIterator<Item = &'a E>,
    ) -> impl Future<Output = Result<()>> + Send + 'a {
        let entities: Vec<&E> = entities.into_iter().collect();
        let call = self.repo.call("put_many").keys(entities.len());
        call.run_async(async move {
            for entity in &entities {
                self.repo.warm_entity(self.store.get(), entity).await?;
            }
            let rows = self.repo.mutations(entities)?;
            self.repo.put_rows(self.store.get(), rows).await
        })
    }

    /// As [`Repository::save`].
    ///
    /// # Errors
    /// As [`Repository::save`].
    pub async fn save(&self, entity: &mut E) -> Result<()> {
        let save = async {
            self.repo.warm_entity(self.store.get(), entity).await?;
            self.repo.save_via(self.store.get(), entity).await
        };
        self.repo.call("save").run_async(save).await
    }

    /// As [`Repository::get`].
    ///
    /// # Errors
    /// As [`Repository::get`].
    pub fn get(&self, key: impl Into<E::Key>) -> impl Future<Output = Result<Option<E>>> + Send + '_ {
        let key = key.into();
        self.repo.call("get").run_async(async move {
            if !self.repo.warm_key(self.store.get(), &key, false).await? {
                return Ok(None);
            }
            self.repo.get_via(self.store.get(), key).await
        })
    }

    /// As [`Repository::get_many`]: one round trip for every key.
    ///
    /// # Errors
    /// As [`Repository::get_many`].
    pub fn get_many<K: Into<E::Key>>(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> impl Future<Output = Result<Vec<Option<E>>>> + Send + '_ {
        let keys: Vec<E::Key> = keys.into_iter().map(Into::into).collect();
        let call = self.repo.call("get_many").keys(keys.len());
        call.run_async(async move {
            // Keys holding a name without an id name no row: only the others are read.
            let mut found = Vec::with_capacity(keys.len());
            let mut known = Vec::with_capacity(keys.len());
            for key in keys {
                let stored = self.repo.warm_key(self.store.get(), &key, false).await?;
                found.push(stored);
                if stored {
                    known.push(key);
                }
            }
            let mut read = self.repo.get_many_via(self.store.get(), known).await?.into_iter();
            Ok(found.into_iter().map(|stored| if stored { read.next().flatten() } else { None }).collect())
        })
    }

    /// As [`Repository::exists`].
    ///
    /// # Errors
    /// As [`Repository::exists`].
    pub fn exists(&self, key: impl Into<E::Key>) -> impl Future<Output = Result<bool>> + Send + '_ {
        let key = key.into();
        self.repo.call("exists").run_async(async move {
            if !self.repo.warm_key(self.store.get(), &key, false).await? {
                return Ok(false);
            }
            self.repo.exists_via(self.store.get(), key).await
        })
    }

    /// As [`Repository::delete`].
    ///
    /// # Errors
    /// As [`Repository::delete`].
    pub fn delete(&self, key: impl Into<E::Key>) -> impl Future<Output = Result<()>> + Send + '_ {
        let key = key.into();
        self.repo.call("delete").run_async(async move {
            if !self.repo.warm_key(self.store.get(), &key, false).await? {
                return Ok(());
            }
            self.repo.delete_via(self.store.get(), key).await
        })
    }

    /// As [`Repository::increment`].
    ///
    /// # Errors
    /// As [`Repository::increment`].
    pub fn increment(
        &self,
        key: impl Into<E::Key>,
        counter: Counter<E>,
        delta: i64,
    ) -> impl Future<Output = Result<i64>> + Send + '_ {
        let key = key.into();
        self.repo.call("increment").run_async(async move {
            self.repo.warm_key(self.store.get(), &key, true).await?;
            self.repo.increment_via(self.store.get(), key, counter, delta).await
        })
    }

    /// As [`Repository::get_as_of`].
    ///
    /// # Errors
    /// As [`Repository::get_as_of`].
    pub fn get_as_of(
        &self,
        key: impl Into<E::Key>,
        timestamp: u64,
    ) -> impl Future<Output = Result<Option<E>>> + Send + '_ {
        let key = key.into();
        self.repo.call("get_as_of").run_async(async move {
            if !self.repo.warm_key(self.store.get(), &key, false).await? {
                return Ok(None);
            }
            self.repo.get_as_of_via(self.store.get(), key, timestamp).await
        })
    }

    /// As [`Repository::history`].
    ///
    /// # Errors
    /// As [`Repository::history`].
    pub fn history(&self, key: impl Into<E::Key>, max: u32) -> impl Future<Output = Result<Vec<(u64, E)>>> + Send + '_ {
        let key = key.into();
        self.repo.call("history").run_async(async move {
            if !self.repo.warm_key(self.store.get(), &key, false).await? {
                return Ok(Vec::new());
            }
            self.repo.history_via(self.store.get(), key, max).await
        })
    }

    /// The entries of the wide field `field` of the entity at `key`, read and written through
    /// futures, as [`Repository::wide`].
    ///
    /// # Errors
    /// As [`Repository::wide`].
    pub fn wide<K: crate::key::KeyPart, V: crate::value::ColumnValue>(
        &self,
        key: impl Into<E::Key>,
        field: crate::wide::Wide<E, K, V>,
    ) -> Result<crate::wide::AsyncWideColumns<K, V>> {
        Ok(self.repo.wide(key, field)?.to_async())
    }

    /// A scan over the entities of this type, as [`Repository::scan`].
    pub fn scan(&self) -> AsyncQuery<E> {
        AsyncQuery { store: self.store.clone(), plan: self.repo.plan() }
    }
}

impl<R: Record> Records<R> {
    /// The records' scans as futures and streams: [`Records::scan`] for async services.
    pub fn to_async(&self) -> AsyncRecords<R> {
        AsyncRecords { records: self.clone(), store: AsyncView::new(self.store.clone()) }
    }
}

/// Reads the records of a single-table design through futures; made with
/// [`Records::to_async`]. Cheap to clone.
pub struct AsyncRecords<R> {
    records: Records<R>,
    store: AsyncView,
}

impl<R> Clone for AsyncRecords<R> {
    fn clone(&self) -> Self {
        AsyncRecords { records: self.records.clone(), store: self.store.clone() }
    }
}

impl<R> std::fmt::Debug for AsyncRecords<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncRecords").field("record", &std::any::type_name::<R>()).finish_non_exhaustive()
    }
}

impl<R: Record> AsyncRecords<R> {
    /// A scan over every record of `R`, as [`Records::scan`]; narrow it with
    /// [`AsyncQuery::partition`].
    pub fn scan(&self) -> AsyncQuery<R> {
        AsyncQuery { store: self.store.clone(), plan: self.records.plan() }
    }
}

/// An asynchronous scan being set up: [`AsyncRepository::scan`] or [`AsyncRecords::scan`], then
/// [`AsyncQuery::stream`], [`AsyncQuery::to_vec`] or [`AsyncQuery::page`].
pub struct AsyncQuery<E> {
    store: AsyncView,
    plan: Plan<E>,
}

impl<E> std::fmt::Debug for AsyncQuery<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncQuery").field("entity", &std::any::type_name::<E>()).finish_non_exhaustive()
    }
}

impl<E: Entity> AsyncQuery<E> {
    /// As [`Query::prefix`](super::Query::prefix).
    pub fn prefix(mut self, prefix: impl KeyPrefix<E>) -> Self {
        self.plan = self.plan.prefix(prefix);
        self
    }

    /// As [`Query::range`](super::Query::range).
    pub fn range(mut self, range: impl std::ops::RangeBounds<E::Key>) -> Self {
        self.plan = self.plan.with_range::<E>(range);
        self
    }
}

impl<R: Record> AsyncQuery<R> {
    /// As [`Query::partition`](super::Query::partition).
    pub fn partition<E: Member<R>>(mut self, prefix: impl KeyPrefix<E>) -> Self {
        self.plan = self.plan.partition::<R, E>(prefix);
        self
    }
}

impl<T: Send + 'static> AsyncQuery<T> {
    /// Largest key first.
    pub fn reverse(mut self) -> Self {
        self.plan = self.plan.reverse();
        self
    }

    /// At most `n` entities.
    pub fn limit(mut self, n: usize) -> Self {
        self.plan = self.plan.limit(n);
        self
    }

    /// Continues after the page that returned `cursor` (from either API).
    pub fn after(mut self, cursor: &Cursor) -> Self {
        self.plan = self.plan.after(cursor);
        self
    }

    /// One page of at most `size` entities, and the cursor of the next, as
    /// [`Query::page`](super::Query::page).
    ///
    /// # Errors
    /// As [`Query::page`](super::Query::page).
    pub async fn page(self, size: usize) -> Result<Page<T>> {
        self.plan.call("scan_page").run_async(self.plan.page(self.store.get(), size, OnError::Fail)).await
    }

    /// The entities as a [`Stream`], fetched a page ([`STREAM_PAGE`] entities) at a time with
    /// the next page fetched while the current one is read; dropping the stream stops the
    /// fetching. Each entity is read atomically; entities of different pages are read at
    /// different times (as a scan on Bigtable or HBase reads each row at its own time). The
    /// stream ends after its first error.
    pub fn stream(mut self) -> EntityStream<T> {
        let failed = self.plan.take_error();
        let left = self.plan.limit_of();
        EntityStream::new(Box::new(PlanPager { store: self.store, plan: self.plan }), left, failed)
    }

    /// Collects the entities.
    ///
    /// # Errors
    /// As [`Query::iter`](super::Query::iter).
    pub async fn to_vec(self) -> Result<Vec<T>> {
        use futures::TryStreamExt;
        let call = self.plan.call("scan");
        call.run_async(self.stream().try_collect()).await
    }
}

/// How an [`EntityStream`] fetches its pages: a scan's plan run on a store, from the start
/// or after a page's cursor.
pub(crate) trait Pager<T>: Send {
    /// The page of at most `want` items after `after` (`None`: from the start).
    fn page(&self, after: Option<&Cursor>, want: usize) -> BoxFuture<'static, Result<Page<T>>>;
}

/// The pages of an entity or record scan.
struct PlanPager<T> {
    store: AsyncView,
    plan: Plan<T>,
}

impl<T: Send + 'static> Pager<T> for PlanPager<T> {
    fn page(&self, after: Option<&Cursor>, want: usize) -> BoxFuture<'static, Result<Page<T>>> {
        let plan = match after {
            Some(cursor) => self.plan.copy().after(cursor),
            None => self.plan.copy(),
        };
        let store = self.store.clone();
        Box::pin(async move { plan.page(store.get(), want, OnError::EndPage).await })
    }
}

/// The items of an asynchronous scan ([`AsyncQuery`], or a scan of aggregates), as a
/// [`Stream`].
pub struct EntityStream<E> {
    pager: Box<dyn Pager<E>>,
    /// Where the page after those fetched starts (`Some(None)`: at the beginning); `None` once
    /// there is none.
    next: Option<Option<Cursor>>,
    /// An error to hand out before anything else (a key that did not encode).
    failed: Option<crate::Error>,
    /// Items still to hand out under the query's limit.
    left: Option<usize>,
    items: VecDeque<E>,
    fetching: Option<BoxFuture<'static, Result<Page<E>>>>,
}

// Nothing is pinned in place: the page in flight is boxed.
impl<E> Unpin for EntityStream<E> {}

impl<E> std::fmt::Debug for EntityStream<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntityStream").field("entity", &std::any::type_name::<E>()).finish_non_exhaustive()
    }
}

impl<T: Send + 'static> EntityStream<T> {
    /// A stream of the pages `pager` fetches, at most `left` items; `failed` goes out first,
    /// and alone.
    pub(crate) fn new(pager: Box<dyn Pager<T>>, left: Option<usize>, failed: Option<crate::Error>) -> Self {
        let next = failed.is_none().then_some(None);
        EntityStream { pager, next, failed, left, items: VecDeque::new(), fetching: None }
    }

    /// Starts fetching the next page, if there is one and the limit wants more.
    fn fetch(&mut self) {
        let want = self.left.map_or(STREAM_PAGE, |n| n.min(STREAM_PAGE));
        let Some(after) = self.next.as_ref().filter(|_| want > 0) else { return };
        self.fetching = Some(self.pager.page(after.as_ref(), want));
    }

    /// Takes a fetched page: its items, and where the next one starts.
    fn accept(&mut self, page: Page<T>) {
        if let Some(left) = &mut self.left {
            *left = left.saturating_sub(page.items.len());
        }
        self.items.extend(page.items);
        self.next = page.next.map(Some);
    }
}

impl<T: Send + 'static> Stream for EntityStream<T> {
    type Item = Result<T>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<T>>> {
        let this = self.get_mut();
        loop {
            // An error goes out once the items fetched before it have.
            if this.items.is_empty() {
                if let Some(e) = this.failed.take() {
                    return Poll::Ready(Some(Err(e)));
                }
            }
            if let Some(fetching) = &mut this.fetching {
                match fetching.as_mut().poll(cx) {
                    Poll::Ready(Ok(page)) => {
                        this.fetching = None;
                        this.accept(page);
                        // Fetch ahead while the caller reads this page.
                        this.fetch();
                        continue;
                    }
                    Poll::Ready(Err(e)) => {
                        this.fetching = None;
                        this.next = None;
                        this.failed = Some(e);
                        continue;
                    }
                    Poll::Pending if this.items.is_empty() => return Poll::Pending,
                    Poll::Pending => {}
                }
            }
            if let Some(entity) = this.items.pop_front() {
                return Poll::Ready(Some(Ok(entity)));
            }
            if this.fetching.is_none() {
                this.fetch();
                if this.fetching.is_none() {
                    return Poll::Ready(None);
                }
            }
        }
    }
}
