//! [`Children`]: one child collection of one aggregate — add, replace, remove or read a child
//! without writing the rest of the aggregate.
//!
//! A child write is a read-modify-write of the aggregate like any other (see `repo.rs`), so
//! it is atomic and ordered with every other write of the aggregate; only the rows that
//! change are written, with the root row's new generation: a line item's row under
//! `single_table`, every copy of a location under `denormalized`, the whole blob under `blob`.

use std::marker::PhantomData;

use bytes::Bytes;

use super::{Aggregate, AggregateRepository, ChildField, Node, Part};
use crate::key::KeyError;
use crate::store::drive::drive;
use crate::store::AsyncStore;
use crate::{Error, Result};

/// One child collection of one aggregate; from [`AggregateRepository::children`], and deeper
/// with [`Children::child`].
pub struct Children<'r, A: Aggregate, C> {
    repo: &'r AggregateRepository<A>,
    root: A::Key,
    /// From the root down: the collection to enter and the key of the child to descend into.
    parents: Vec<(usize, Bytes)>,
    /// The collection of the last parent that holds the children.
    collection: usize,
    _child: PhantomData<fn() -> C>,
}

impl<A: Aggregate> AggregateRepository<A> {
    /// The collection `field` of the aggregate at `key`.
    pub fn children<C: Part>(&self, key: impl Into<A::Key>, field: ChildField<A, C>) -> Children<'_, A, C> {
        Children { repo: self, root: key.into(), parents: Vec::new(), collection: field.index(), _child: PhantomData }
    }
}

fn own_key<C: Part>(key: &C::Key) -> Result<Bytes> {
    let key = C::row_key(key).map_err(|source: KeyError| Error::Key { entity: C::SCHEMA.entity, source })?;
    Ok(Bytes::copy_from_slice(key.body()))
}

impl<'r, A: Aggregate, C: Part> Children<'r, A, C> {
    /// The collection `field` of the child with key `key` in this collection.
    ///
    /// # Errors
    /// A key that does not encode.
    pub fn child<D: Part>(&self, key: impl Into<C::Key>, field: ChildField<C, D>) -> Result<Children<'r, A, D>> {
        let mut parents = self.parents.clone();
        parents.push((self.collection, own_key::<C>(&key.into())?));
        Ok(Children {
            repo: self.repo,
            root: self.root.clone(),
            parents,
            collection: field.index(),
            _child: PhantomData,
        })
    }

    /// The collection inside `root`, if the aggregate has every parent on the path.
    fn find<'n>(&self, root: &'n mut Node) -> Option<&'n mut Vec<Node>> {
        let mut node = root;
        for (collection, key) in &self.parents {
            let children = node.children.get_mut(*collection)?;
            let i = children.binary_search_by(|n| n.row.key.as_ref().cmp(key)).ok()?;
            node = &mut children[i];
        }
        node.children.get_mut(self.collection)
    }

    fn missing(&self) -> Error {
        Error::InvalidArgument {
            arg: "parent",
            reason: format!("no such {} or parent of its {} collection", A::SCHEMA.entity, C::SCHEMA.entity),
        }
    }

    async fn read(&self, store: &dyn AsyncStore) -> Result<Option<Vec<Node>>> {
        let (root, prefix) = self.repo.locate(&self.root)?;
        let Some(mut node) = self.repo.load(store, &root, &prefix).await? else { return Ok(None) };
        Ok(self.find(&mut node).map(std::mem::take))
    }

    fn decode(node: Node) -> Result<C> {
        let row = node.row.key.clone();
        C::from_node(node).map_err(|e| crate::repo::decode_error(A::SCHEMA.table, &row, e))
    }

    /// The span of a call `op` on this collection: the aggregate repository's.
    pub(super) fn call(&self, op: &'static str) -> crate::trace::RepoCall {
        self.repo.call(op)
    }

    /// The children, in key order; `None` if the aggregate or a parent on the path is missing.
    ///
    /// # Errors
    /// As [`AggregateRepository::get`].
    pub fn list(&self) -> Result<Option<Vec<C>>> {
        self.call("child_list").run(|| drive(self.list_via(&self.repo.inline())))
    }

    pub(super) async fn list_via(&self, store: &dyn AsyncStore) -> Result<Option<Vec<C>>> {
        self.read(store).await?.map(|nodes| nodes.into_iter().map(Self::decode).collect()).transpose()
    }

    /// The child with key `key`, if there is one.
    ///
    /// # Errors
    /// As [`AggregateRepository::get`].
    pub fn get(&self, key: impl Into<C::Key>) -> Result<Option<C>> {
        self.call("child_get").run(|| drive(self.get_via(&self.repo.inline(), key.into())))
    }

    pub(super) async fn get_via(&self, store: &dyn AsyncStore, key: C::Key) -> Result<Option<C>> {
        let key = own_key::<C>(&key)?;
        let found = self.read(store).await?.and_then(|nodes| nodes.into_iter().find(|n| n.row.key == key));
        found.map(Self::decode).transpose()
    }

    /// Adds `child` (with its own children), or replaces the child with its key.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the aggregate or a parent on the path does not exist, or
    /// the strategy cannot hold the result; as [`AggregateRepository::put`].
    pub fn put(&self, child: &C) -> Result<()> {
        self.call("child_put").run(|| drive(self.put_via(&self.repo.inline(), child)))
    }

    pub(super) async fn put_via(&self, store: &dyn AsyncStore, child: &C) -> Result<()> {
        let node = child.to_node()?;
        self.repo
            .modify(store, &self.root, |current| {
                let mut root = current.ok_or_else(|| self.missing())?;
                let collection = self.find(&mut root).ok_or_else(|| self.missing())?;
                match collection.binary_search_by(|n| n.row.key.as_ref().cmp(&node.row.key)) {
                    Ok(i) => collection[i] = node.clone(),
                    Err(i) => collection.insert(i, node.clone()),
                }
                Ok(Some(root))
            })
            .await
    }

    /// Removes the child with key `key` and everything under it; returns whether there was
    /// one.
    ///
    /// # Errors
    /// As [`AggregateRepository::put`].
    pub fn remove(&self, key: impl Into<C::Key>) -> Result<bool> {
        self.call("child_remove").run(|| drive(self.remove_via(&self.repo.inline(), key.into())))
    }

    pub(super) async fn remove_via(&self, store: &dyn AsyncStore, key: C::Key) -> Result<bool> {
        let key = own_key::<C>(&key)?;
        let mut removed = false;
        self.repo
            .modify(store, &self.root, |current| {
                removed = false;
                let Some(mut root) = current else { return Ok(None) };
                if let Some(collection) = self.find(&mut root) {
                    if let Ok(i) = collection.binary_search_by(|n| n.row.key.as_ref().cmp(&key)) {
                        collection.remove(i);
                        removed = true;
                    }
                }
                Ok(Some(root))
            })
            .await?;
        Ok(removed)
    }
}
