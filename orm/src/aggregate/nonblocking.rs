//! [`AsyncAggregateRepository`]: an [`AggregateRepository`]'s operations as futures, for async
//! services. Each runs the protocol the synchronous operation runs — the same code, over an
//! [`AsyncStore`](crate::store::AsyncStore) — so the two agree on every answer and error.
//!
//! Dropping a future stops the operation where it is, as a crash of the process at that point
//! would. A write through the intent protocol left at any step is finished by the next reader
//! or writer of the aggregate, once its writer is gone: the writer counts as live until every
//! store call it started has ended, so nobody rolls its intent forward while a step of it
//! may still land.

use std::future::Future;

use super::children::Children;
use super::scan::AsyncAggregateQuery;
use super::{Aggregate, AggregateRepository, ChildField, Part};
use crate::store::AsyncView;
use crate::Result;

/// Reads and writes aggregates of type `A` through futures; see the module documentation.
/// Made with [`AggregateRepository::to_async`]. Cheap to clone.
pub struct AsyncAggregateRepository<A> {
    repo: AggregateRepository<A>,
    store: AsyncView,
}

impl<A> Clone for AsyncAggregateRepository<A> {
    fn clone(&self) -> Self {
        AsyncAggregateRepository { repo: self.repo.clone(), store: self.store.clone() }
    }
}

impl<A> std::fmt::Debug for AsyncAggregateRepository<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncAggregateRepository")
            .field("aggregate", &std::any::type_name::<A>())
            .finish_non_exhaustive()
    }
}

impl<A: Aggregate> AggregateRepository<A> {
    /// This repository's operations as futures (see [`AsyncAggregateRepository`]).
    pub fn to_async(&self) -> AsyncAggregateRepository<A> {
        AsyncAggregateRepository { repo: self.clone(), store: AsyncView::new(self.store.clone()) }
    }
}

impl<A: Aggregate> AsyncAggregateRepository<A> {
    /// The synchronous repository this one runs the protocols of.
    pub fn blocking(&self) -> &AggregateRepository<A> {
        &self.repo
    }

    /// As [`AggregateRepository::put`].
    ///
    /// # Errors
    /// As [`AggregateRepository::put`].
    pub async fn put(&self, aggregate: &A) -> Result<()> {
        self.repo.call("put").run_async(self.repo.put_via(self.store.get(), aggregate)).await
    }

    /// As [`AggregateRepository::get`].
    ///
    /// # Errors
    /// As [`AggregateRepository::get`].
    pub fn get(&self, key: impl Into<A::Key>) -> impl Future<Output = Result<Option<A>>> + Send + '_ {
        let key = key.into();
        self.repo.call("get").run_async(async move { self.repo.get_via(self.store.get(), key).await })
    }

    /// As [`AggregateRepository::get_to_depth`].
    ///
    /// # Errors
    /// As [`AggregateRepository::get_to_depth`].
    pub fn get_to_depth(
        &self,
        key: impl Into<A::Key>,
        depth: usize,
    ) -> impl Future<Output = Result<Option<A>>> + Send + '_ {
        let key = key.into();
        self.repo
            .call("get_to_depth")
            .run_async(async move { self.repo.get_to_depth_via(self.store.get(), key, depth).await })
    }

    /// As [`AggregateRepository::get_many`].
    ///
    /// # Errors
    /// As [`AggregateRepository::get_many`].
    pub fn get_many<K: Into<A::Key>>(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> impl Future<Output = Result<Vec<Option<A>>>> + Send + '_ {
        let keys: Vec<A::Key> = keys.into_iter().map(Into::into).collect();
        let call = self.repo.call("get_many").keys(keys.len());
        call.run_async(async move { self.repo.get_many_via(self.store.get(), keys).await })
    }

    /// As [`AggregateRepository::exists`].
    ///
    /// # Errors
    /// As [`AggregateRepository::exists`].
    pub fn exists(&self, key: impl Into<A::Key>) -> impl Future<Output = Result<bool>> + Send + '_ {
        let key = key.into();
        self.repo.call("exists").run_async(async move { self.repo.exists_via(self.store.get(), key).await })
    }

    /// As [`AggregateRepository::delete`].
    ///
    /// # Errors
    /// As [`AggregateRepository::delete`].
    pub fn delete(&self, key: impl Into<A::Key>) -> impl Future<Output = Result<()>> + Send + '_ {
        let key = key.into();
        self.repo.call("delete").run_async(async move { self.repo.delete_via(self.store.get(), key).await })
    }

    /// The collection `field` of the aggregate at `key`, as [`AggregateRepository::children`].
    pub fn children<C: Part>(&self, key: impl Into<A::Key>, field: ChildField<A, C>) -> AsyncChildren<'_, A, C> {
        AsyncChildren { children: self.repo.children(key, field), store: &self.store }
    }

    /// A scan over aggregates in root-key order, each read whole, as
    /// [`AggregateRepository::scan`].
    pub fn scan(&self) -> AsyncAggregateQuery<'_, A> {
        AsyncAggregateQuery::new(self.repo.scan(), &self.store)
    }
}

/// One child collection of one aggregate, read and written through futures; from
/// [`AsyncAggregateRepository::children`].
pub struct AsyncChildren<'r, A: Aggregate, C> {
    children: Children<'r, A, C>,
    store: &'r AsyncView,
}

impl<A: Aggregate, C> std::fmt::Debug for AsyncChildren<'_, A, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncChildren").field("child", &std::any::type_name::<C>()).finish_non_exhaustive()
    }
}

impl<'r, A: Aggregate, C: Part> AsyncChildren<'r, A, C> {
    /// As [`Children::child`].
    ///
    /// # Errors
    /// As [`Children::child`].
    pub fn child<D: Part>(&self, key: impl Into<C::Key>, field: ChildField<C, D>) -> Result<AsyncChildren<'r, A, D>> {
        Ok(AsyncChildren { children: self.children.child(key, field)?, store: self.store })
    }

    /// As [`Children::list`].
    ///
    /// # Errors
    /// As [`Children::list`].
    pub async fn list(&self) -> Result<Option<Vec<C>>> {
        self.children.call("child_list").run_async(self.children.list_via(self.store.get())).await
    }

    /// As [`Children::get`].
    ///
    /// # Errors
    /// As [`Children::get`].
    pub fn get(&self, key: impl Into<C::Key>) -> impl Future<Output = Result<Option<C>>> + Send + '_ {
        let key = key.into();
        self.children.call("child_get").run_async(async move { self.children.get_via(self.store.get(), key).await })
    }

    /// As [`Children::put`].
    ///
    /// # Errors
    /// As [`Children::put`].
    pub async fn put(&self, child: &C) -> Result<()> {
        self.children.call("child_put").run_async(self.children.put_via(self.store.get(), child)).await
    }

    /// As [`Children::remove`].
    ///
    /// # Errors
    /// As [`Children::remove`].
    pub fn remove(&self, key: impl Into<C::Key>) -> impl Future<Output = Result<bool>> + Send + '_ {
        let key = key.into();
        self.children
            .call("child_remove")
            .run_async(async move { self.children.remove_via(self.store.get(), key).await })
    }
}
