//! Scans of one entity type (by typed key prefix or range) or of a record enum (by partition),
//! forward or reverse, with a limit and opaque page cursors. Over a salted or bucketed table a
//! scan reads every bucket it may touch and merges the streams back into key order.

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;

use super::{Records, Repository};
use std::sync::Arc;

use super::key_uids::KeyUids;
use crate::entity::{Entity, FieldError, KeyPrefix};
use crate::key::UidResolver;
use crate::key::{prefix_end, KeyBuilder, RowKey, Salt, SaltByte};
use crate::record::{Member, Record};
use crate::store::drive::drive;
use crate::store::{AsyncCursorBox, AsyncStore, Inline, LentRow, ReadSpec, Row, RowCursorBox, ScanSpec, Store};
use crate::{Error, Result};

/// Where a scan resumes: after the last entity of the previous page. Opaque; it prints as a
/// short string (for URLs and APIs) and parses back with [`str::parse`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cursor {
    pub(crate) reverse: bool,
    /// The last key returned, without its salt byte.
    pub(crate) after: Vec<u8>,
    /// `after` is a key prefix: the scan resumes past every key that starts with it (an
    /// aggregate's rows), not just past the key itself.
    pub(crate) group: bool,
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match (self.reverse, self.group) {
            (false, false) => "f",
            (true, false) => "r",
            (false, true) => "F",
            (true, true) => "R",
        })?;
        self.after.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl FromStr for Cursor {
    type Err = Error;

    fn from_str(s: &str) -> Result<Cursor> {
        let bad = |reason: &str| Error::InvalidArgument { arg: "cursor", reason: reason.to_string() };
        let (reverse, group, hex) = match s.split_at_checked(1) {
            Some(("f", hex)) => (false, false, hex),
            Some(("r", hex)) => (true, false, hex),
            Some(("F", hex)) => (false, true, hex),
            Some(("R", hex)) => (true, true, hex),
            _ => return Err(bad("not a page cursor")),
        };
        if hex.len() % 2 != 0 || !hex.is_ascii() {
            return Err(bad("not a page cursor"));
        }
        let after = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| bad("not a page cursor"))?;
        Ok(Cursor { reverse, after, group })
    }
}

/// One page of a paginated scan.
#[derive(Debug, Clone)]
pub struct Page<E> {
    /// The entities, in scan order.
    pub items: Vec<E>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<Cursor>,
}

/// What a scan reads and how it turns rows into items: an entity type or a record enum.
struct Target<T> {
    /// The entity or enum, for errors.
    name: &'static str,
    table: &'static str,
    salt: Salt,
    /// The key range every row of the target lives in, when narrower than the table.
    own: Option<RowKey>,
    /// Rows that are not the target's may lie in range, so the store cannot apply the limit.
    mixed: bool,
    /// Which columns a row is read with.
    columns: crate::store::Columns,
    /// Resolves key parts stored as uids.
    uids: Arc<KeyUids>,
    decode: fn(LentRow<'_>, &dyn UidResolver) -> std::result::Result<T, FieldError>,
    /// True for a deleted entity's tombstone (see `crate::index`), which the scan skips.
    tombstone: fn(LentRow<'_>) -> bool,
}

/// What a scan reads — target, bounds, direction, limit — without the store it runs on: a
/// [`Query`] runs it on a [`Store`], an asynchronous query on an [`AsyncStore`].
pub(crate) struct Plan<T> {
    target: Target<T>,
    /// Inclusive lower bound, exclusive upper bound (bodies without salt); `None` = open.
    from: Option<RowKey>,
    to: Option<RowKey>,
    prefix: Option<RowKey>,
    reverse: bool,
    limit: Option<usize>,
    after: Option<Cursor>,
    error: Option<Error>,
    /// Rows that do not decode are set aside instead of ending the scan.
    skip_unreadable: bool,
    /// Nothing can match (a prefix holds a name stored as a uid that has none yet).
    nothing: bool,
}

/// A scan being set up. Build it with [`Repository::scan`] or [`Records::scan`], then
/// [`Query::iter`], [`Query::to_vec`] or [`Query::page`].
pub struct Query<'a, E> {
    store: &'a dyn Store,
    plan: Plan<E>,
}

impl<E: Entity> Repository<E> {
    /// A scan over the entities of this type, in key order unless reversed.
    pub fn scan(&self) -> Query<'_, E> {
        Query { store: &*self.store, plan: self.plan() }
    }

    /// The plan of a scan over every entity of this type.
    pub(crate) fn plan(&self) -> Plan<E> {
        let schema = &E::SCHEMA;
        // A type stored behind its record-type byte (no partition parts) has a range of its own.
        let own = (schema.partition.is_empty() && schema.record_type.is_some()).then(|| {
            let mut b = KeyBuilder::new(schema);
            b.end_partition();
            b.finish(false)
        });
        let target = Target {
            name: schema.entity,
            table: schema.table,
            salt: schema.salt,
            own,
            // Rows the scan skips may lie in range: other record types, tombstones.
            mixed: schema.record_type.is_some() || !schema.indexes.is_empty(),
            columns: schema.read_columns(),
            uids: self.uids.clone(),
            decode: |row, uids| E::from_row_in(row, u64::MAX, uids),
            tombstone: |row| crate::index::is_tombstone(&E::SCHEMA, row),
        };
        Plan::new(target)
    }
}

impl<R: Record> Records<R> {
    /// A scan over every record of the table that is a member of `R`, in key order unless
    /// reversed; narrow it to one partition with [`Query::partition`].
    pub fn scan(&self) -> Query<'_, R> {
        Query { store: &*self.store, plan: self.plan() }
    }

    /// The plan of a scan over every record of `R`.
    pub(crate) fn plan(&self) -> Plan<R> {
        let first = self.first;
        let target = Target {
            name: R::NAME,
            table: first.table,
            salt: first.salt,
            own: None,
            mixed: true,
            columns: crate::store::Columns::All,
            uids: Arc::default(),
            decode: |row, _| R::from_row(row),
            tombstone: |row| R::MEMBERS.iter().any(|m| crate::index::is_tombstone(m, row)),
        };
        Plan::new(target)
    }
}

impl<T> Clone for Target<T> {
    fn clone(&self) -> Self {
        Target {
            name: self.name,
            table: self.table,
            salt: self.salt,
            own: self.own.clone(),
            mixed: self.mixed,
            columns: self.columns.clone(),
            uids: self.uids.clone(),
            decode: self.decode,
            tombstone: self.tombstone,
        }
    }
}

impl<T> Plan<T> {
    /// The span of a scan call `op` over this plan's type and table.
    pub(crate) fn call(&self, op: &'static str) -> crate::trace::RepoCall {
        crate::trace::repo_call(op, self.target.name, self.target.table)
    }

    /// The error the plan holds (a key that did not encode), taken out: a plan is checked for
    /// one before it is copied for each page of a stream.
    pub(crate) fn take_error(&mut self) -> Option<Error> {
        self.error.take()
    }

    /// A copy of the plan, without its error (see [`Plan::take_error`]).
    pub(crate) fn copy(&self) -> Self {
        Plan {
            target: self.target.clone(),
            from: self.from.clone(),
            to: self.to.clone(),
            prefix: self.prefix.clone(),
            reverse: self.reverse,
            limit: self.limit,
            after: self.after.clone(),
            error: None,
            skip_unreadable: self.skip_unreadable,
            nothing: self.nothing,
        }
    }

    /// The limit set, if any.
    pub(crate) fn limit_of(&self) -> Option<usize> {
        self.limit
    }

    /// Whether the scan runs backwards.
    pub(crate) fn is_reverse(&self) -> bool {
        self.reverse
    }

    fn new(target: Target<T>) -> Self {
        Plan {
            target,
            from: None,
            to: None,
            prefix: None,
            reverse: false,
            limit: None,
            after: None,
            error: None,
            skip_unreadable: false,
            nothing: false,
        }
    }

    fn keep(&mut self, key: std::result::Result<RowKey, crate::key::KeyError>) -> Option<RowKey> {
        match key {
            Ok(k) => Some(k),
            Err(source) => {
                self.error.get_or_insert(Error::Key { entity: self.target.name, source });
                None
            }
        }
    }

    /// See [`Query::partition`].
    pub(crate) fn partition<R: Record, E: Member<R>>(mut self, prefix: impl KeyPrefix<E>) -> Self {
        self.prefix = self.keep(prefix.encode_prefix()).map(|p| p.without_record_type(&E::SCHEMA));
        self
    }

    /// Only rows whose key starts with `prefix`.
    pub(crate) fn with_prefix(mut self, prefix: std::result::Result<RowKey, crate::key::KeyError>) -> Self {
        self.prefix = self.keep(prefix);
        self
    }

    /// Only rows with keys of `E` in `range` (parts stored as uids order by uid).
    pub(crate) fn with_range<E: Entity>(mut self, range: impl std::ops::RangeBounds<E::Key>) -> Self {
        use std::ops::Bound;
        let uids = self.target.uids.clone();
        let uids = uids.reading();
        let encode = |q: &mut Self, k: &E::Key| match E::row_key_in(k, &uids) {
            Ok(k) => Some(k),
            Err(e) => {
                q.error.get_or_insert(uids.error(q.target.name, e));
                None
            }
        };
        self.from = match range.start_bound() {
            Bound::Included(k) => encode(&mut self, k),
            Bound::Excluded(k) => encode(&mut self, k).map(|k| k.successor()),
            Bound::Unbounded => None,
        };
        self.to = match range.end_bound() {
            Bound::Excluded(k) => encode(&mut self, k),
            Bound::Included(k) => encode(&mut self, k).map(|k| k.successor()),
            Bound::Unbounded => None,
        };
        self
    }

    /// Only rows with `from <= key < to`, bounds already encoded.
    pub(crate) fn with_bounds(
        mut self,
        from: Option<std::result::Result<RowKey, crate::key::KeyError>>,
        to: Option<std::result::Result<RowKey, crate::key::KeyError>>,
    ) -> Self {
        self.from = from.and_then(|k| self.keep(k));
        self.to = to.and_then(|k| self.keep(k));
        self
    }

    pub(crate) fn reverse(mut self) -> Self {
        self.reverse = true;
        self
    }

    pub(crate) fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    pub(crate) fn after(mut self, cursor: &Cursor) -> Self {
        self.after = Some(cursor.clone());
        self
    }

    pub(crate) fn skip_unreadable(mut self) -> Self {
        self.skip_unreadable = true;
        self
    }

    /// The scans of each bucket the plan reads, and the merge of their rows (its streams not
    /// yet opened).
    pub(crate) fn start<C>(self) -> Result<(Vec<ScanSpec>, Merge<T, C>)> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.after.as_ref().is_some_and(|c| c.reverse != self.reverse) {
            return Err(Error::InvalidArgument {
                arg: "cursor",
                reason: "the cursor comes from a scan in the other direction".into(),
            });
        }
        let (mut lo, mut hi, buckets) = self.bounds();
        if let Some(c) = &self.after {
            if self.reverse {
                hi = Some(hi.map_or(c.after.clone(), |h| h.min(c.after.clone())));
            } else if c.group {
                match prefix_end(&c.after) {
                    Some(end) => lo = lo.max(end),
                    // Nothing sorts after a prefix of 0xFF bytes.
                    None => hi = Some(lo.clone()),
                }
            } else {
                let mut next = c.after.clone();
                next.push(0);
                lo = lo.max(next);
            }
        }
        let salted = self.target.salt.is_some();
        let mut specs = Vec::new();
        for bucket in buckets.into_iter().filter(|_| !self.nothing) {
            let with = |body: &[u8]| -> Bytes {
                let mut k = Vec::with_capacity(body.len() + 1);
                k.extend(bucket);
                k.extend_from_slice(body);
                k.into()
            };
            let end = match (&hi, bucket) {
                (Some(h), _) => Some(with(h)),
                (None, Some(b)) => b.checked_add(1).map(|next| Bytes::from(vec![next])),
                (None, None) => None,
            };
            specs.push(ScanSpec {
                start: with(&lo),
                end,
                reverse: self.reverse,
                // Rows of other record types are skipped after reading, so only a table
                // without them can let the store stop early.
                limit: self.limit.filter(|_| !self.target.mixed && !self.skip_unreadable),
                read: ReadSpec { columns: self.target.columns.clone(), ..ReadSpec::default() },
            });
        }
        let merge = Merge {
            streams: Vec::with_capacity(specs.len()),
            target: self.target,
            salted,
            reverse: self.reverse,
            left: self.limit.unwrap_or(usize::MAX),
            skip_unreadable: self.skip_unreadable,
            skipped: Vec::new(),
        };
        Ok((specs, merge))
    }

    /// Streams the plan's entities from `store`.
    ///
    /// # Errors
    /// As [`Query::iter`].
    fn iter(self, store: &dyn Store) -> Result<EntityIter<'_, T>> {
        let (specs, mut merge) = self.start()?;
        for spec in &specs {
            merge.streams.push(Stream { rows: store.scan_cursor(merge.target.table, spec)?, head: Head::Stale });
        }
        Ok(EntityIter { merge })
    }

    /// One page of at most `size` entities from `store`, and the cursor of the next.
    ///
    /// # Errors
    /// As [`Query::page`] (with [`OnError::EndPage`], only when the page would hold nothing).
    pub(crate) async fn page(self, store: &dyn AsyncStore, size: usize, on_error: OnError) -> Result<Page<T>> {
        if size == 0 {
            return Err(Error::InvalidArgument { arg: "size", reason: "a page holds at least one entity".into() });
        }
        let reverse = self.reverse;
        let (specs, mut merge) = self.limit(size.saturating_add(1)).start()?;
        let table = merge.target.table;
        for spec in &specs {
            merge.streams.push(Stream { rows: store.scan_cursor(table, spec).await?, head: Head::Stale });
        }
        let mut items = Vec::new();
        let mut last = Vec::new();
        let ends_page = |items: &Vec<T>| on_error == OnError::EndPage && !items.is_empty();
        // Whether the page ended before an error, which the next page then meets.
        let mut ended = false;
        while items.len() < size && !ended {
            match merge.next_entity(store, Some(&mut last)).await {
                Some(Ok(e)) => items.push(e),
                Some(Err(_)) if ends_page(&items) => ended = true,
                Some(Err(e)) => return Err(e),
                None => return Ok(Page { items, next: None }),
            }
        }
        let more = ended
            || match merge.next_entity(store, None).await {
                Some(Err(_)) if ends_page(&items) => true,
                next => next.transpose()?.is_some(),
            };
        let after = merge.body(&last).to_vec();
        Ok(Page { items, next: more.then_some(Cursor { reverse, after, group: false }) })
    }
}

/// What a page does when it meets an entity that cannot be read (or a store error).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum OnError {
    /// The page fails with the error, as [`Query::page`] does.
    Fail,
    /// The page ends before it if it holds entities already, and the next page, which starts
    /// there, fails: a stream hands out every entity before the error, as an iterator does.
    EndPage,
}

impl<'a, T> Query<'a, T> {
    /// A scan of raw rows of `schema`'s table (for aggregates): items are decoded by the
    /// caller from [`EntityIter::next_row`]. `mixed` if rows of other record types share the
    /// range, so the store cannot apply the limit.
    pub(crate) fn rows(store: &'a dyn Store, schema: &'static crate::Schema, mixed: bool) -> Query<'a, ()> {
        let target = Target {
            name: schema.entity,
            table: schema.table,
            salt: schema.salt,
            own: None,
            mixed,
            columns: schema.read_columns(),
            uids: Arc::default(),
            decode: |_, _| Ok(()),
            tombstone: |_| false,
        };
        Query { store, plan: Plan::new(target) }
    }

    /// Only rows whose key starts with `prefix`.
    pub(crate) fn with_prefix(mut self, prefix: std::result::Result<RowKey, crate::key::KeyError>) -> Self {
        self.plan = self.plan.with_prefix(prefix);
        self
    }

    /// Only rows with `from <= key < to`, bounds already encoded.
    pub(crate) fn with_bounds(
        mut self,
        from: Option<std::result::Result<RowKey, crate::key::KeyError>>,
        to: Option<std::result::Result<RowKey, crate::key::KeyError>>,
    ) -> Self {
        self.plan = self.plan.with_bounds(from, to);
        self
    }

    /// What the scan reads, without the store: for the asynchronous API.
    pub(crate) fn into_plan(self) -> Plan<T> {
        self.plan
    }

    /// The limit set, if any.
    pub(crate) fn limit_set(&self) -> Option<usize> {
        self.plan.limit
    }
}

impl<R: Record> Query<'_, R> {
    /// Only the records of one partition: `prefix` is a key prefix of any member entity. One
    /// that ends with the partition parts covers the records of every member type; one that
    /// goes further covers that member's records only.
    pub fn partition<E: Member<R>>(mut self, prefix: impl KeyPrefix<E>) -> Self {
        self.plan = self.plan.partition::<R, E>(prefix);
        self
    }
}

impl<E: Entity> Plan<E> {
    /// See [`Query::prefix`].
    pub(crate) fn prefix(mut self, prefix: impl KeyPrefix<E>) -> Self {
        let uids = self.target.uids.clone();
        let uids = uids.reading();
        match prefix.encode_prefix_in(&uids) {
            // A name without an id is in no key: nothing starts with the prefix.
            Err(crate::key::KeyError::Unassigned { .. }) => {
                self.nothing = true;
                self
            }
            Err(e) => {
                self.error.get_or_insert(uids.error(self.target.name, e));
                self
            }
            encoded => self.with_prefix(encoded),
        }
    }
}

impl<E: Entity> Query<'_, E> {
    /// Only entities whose key starts with `prefix` (built with the generated
    /// `<Entity>Key::<first part>(..)` methods).
    pub fn prefix(mut self, prefix: impl KeyPrefix<E>) -> Self {
        self.plan = self.plan.prefix(prefix);
        self
    }

    /// Only entities with `from <= key < to`; either end may be left open with `..`.
    pub fn range(mut self, range: impl std::ops::RangeBounds<E::Key>) -> Self {
        self.plan = self.plan.with_range::<E>(range);
        self
    }
}

impl<'a, E> Query<'a, E> {
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

    /// Continues after the page that returned `cursor`.
    pub fn after(mut self, cursor: &Cursor) -> Self {
        self.plan = self.plan.after(cursor);
        self
    }

    /// Streams the entities.
    ///
    /// # Errors
    /// A key that did not encode; a cursor from a scan in the other direction; store errors
    /// (also later, from the iterator).
    pub fn iter(self) -> Result<EntityIter<'a, E>> {
        self.plan.iter(self.store)
    }

    /// Sets rows that do not decode (a damaged or newer blob, a malformed cell) aside instead
    /// of ending the scan with their error: the iterator goes on, and
    /// [`EntityIter::skipped`] reports them. A limit then counts the entities returned.
    pub fn skip_unreadable(mut self) -> Self {
        self.plan = self.plan.skip_unreadable();
        self
    }

    /// Collects the entities into a vector.
    ///
    /// # Errors
    /// As [`Query::iter`].
    pub fn to_vec(self) -> Result<Vec<E>> {
        self.plan.call("scan").run(|| self.iter()?.collect())
    }

    /// One page of at most `size` entities, and the cursor of the next.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero size; as [`Query::iter`].
    pub fn page(self, size: usize) -> Result<Page<E>> {
        self.plan.call("scan_page").run(|| drive(self.plan.page(&Inline(self.store), size, OnError::Fail)))
    }
}

impl<T> Plan<T> {
    /// The one bucket a range lies in, if its ends share a hash-salted partition.
    fn range_bucket(&self) -> Option<u8> {
        let (from, to) = (self.from.as_ref()?, self.to.as_ref()?);
        match (self.target.salt, from.salt(), to.salt()) {
            (Salt::Hash { .. }, SaltByte::Known(a), SaltByte::Known(b))
                if a == b && from.partition().is_some() && from.partition() == to.partition() =>
            {
                Some(a)
            }
            _ => None,
        }
    }

    /// The body range `[lo, hi)` to scan and the salt bytes to scan it under.
    fn bounds(&self) -> (Vec<u8>, Option<Vec<u8>>, Vec<Option<u8>>) {
        let prefix = self.prefix.clone().or_else(|| self.target.own.clone());
        let mut lo = prefix.as_ref().map(|p| p.body().to_vec()).unwrap_or_default();
        let mut hi = prefix.as_ref().and_then(|p| prefix_end(p.body()));
        if let Some(from) = &self.from {
            lo = lo.max(from.body().to_vec());
        }
        if let Some(to) = &self.to {
            hi = Some(hi.map_or(to.body().to_vec(), |h| h.min(to.body().to_vec())));
        }
        // A prefix fixes the salt of every key it covers. A range fixes it only under a hash
        // salt whose ends share their partition parts: every key between them shares those.
        let known = match prefix.as_ref().map(RowKey::salt) {
            Some(SaltByte::Known(b)) => Some(b),
            _ => self.range_bucket(),
        };
        let salt = self.target.salt;
        let buckets = match (salt.is_some(), known) {
            (false, _) => vec![None],
            (true, Some(b)) => vec![Some(b)],
            (true, None) => (0..salt.buckets()).map(Some).collect(),
        };
        (lo, hi, buckets)
    }
}

/// Entities (or records) streamed from a scan, merged across buckets.
pub struct EntityIter<'a, E> {
    merge: Merge<E, RowCursorBox<'a>>,
}

/// The rows of a scan's buckets, merged into key order and decoded: one implementation for
/// synchronous cursors ([`RowCursorBox`]) and asynchronous ones ([`AsyncCursorBox`]). It
/// never moves a cursor itself: it says which one to move ([`Step::Advance`]), and its caller
/// moves it the way its cursors move.
pub(crate) struct Merge<T, C> {
    streams: Vec<Stream<C>>,
    target: Target<T>,
    salted: bool,
    reverse: bool,
    left: usize,
    skip_unreadable: bool,
    skipped: Vec<Skipped>,
}

/// One bucket's rows, lent by the store, decoded where they lie.
struct Stream<C> {
    rows: C,
    head: Head,
}

/// What lends a bucket's current row: a synchronous or an asynchronous cursor.
pub(crate) trait Lends {
    fn row(&self) -> Option<LentRow<'_>>;
}

impl Lends for RowCursorBox<'_> {
    fn row(&self) -> Option<LentRow<'_>> {
        (**self).row()
    }
}

impl Lends for AsyncCursorBox<'_> {
    fn row(&self) -> Option<LentRow<'_>> {
        (**self).row()
    }
}

/// Where a bucket's cursor stands.
enum Head {
    /// Not on a row yet, or past the one it was on: to be moved before the merge goes on.
    Stale,
    /// On a row.
    Row,
    End,
    /// The cursor failed; the error goes out in its turn.
    Failed(Error),
}

impl Head {
    /// Where a cursor stands after a move that returned `moved`.
    fn after(moved: Result<bool>) -> Head {
        match moved {
            Ok(true) => Head::Row,
            Ok(false) => Head::End,
            Err(e) => Head::Failed(e),
        }
    }
}

/// What the merge needs next: a cursor moved, or nothing (its answer).
enum Step<T> {
    /// Move stream `.0`'s cursor, then ask again.
    Advance(usize),
    Done(Option<Result<T>>),
}

/// A row a scan set aside because it does not decode ([`Query::skip_unreadable`]).
#[derive(Debug)]
pub struct Skipped {
    /// The row key, printable.
    pub row: String,
    /// Why it does not decode, naming table, row, column and (for blobs) versions.
    pub error: Error,
}

impl<E> EntityIter<'_, E> {
    /// The rows set aside so far, with [`Query::skip_unreadable`].
    pub fn skipped(&self) -> &[Skipped] {
        &self.merge.skipped
    }

    /// Sets an undecodable row aside, if the scan was asked to; else hands its error back.
    pub(crate) fn set_aside(&mut self, key: &[u8], error: Error) -> Option<Error> {
        self.merge.set_aside(key, error)
    }

    /// A row key without its salt byte: the order buckets merge in, and what cursors hold.
    pub(crate) fn body<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        self.merge.body(key)
    }

    /// Moves stream `i`'s cursor.
    fn advance(&mut self, i: usize) {
        let stream = &mut self.merge.streams[i];
        stream.head = Head::after(stream.rows.advance());
    }

    /// The next row in merged key order, copied out (for readers that keep rows).
    pub(crate) fn next_row(&mut self) -> Option<Result<Row>> {
        loop {
            match self.merge.step_row() {
                Step::Advance(i) => self.advance(i),
                Step::Done(row) => return row,
            }
        }
    }

    /// The next entity, decoded where the store lends its row; its row key goes to `key`, for
    /// page cursors.
    fn next_entity(&mut self, mut key: Option<&mut Vec<u8>>) -> Option<Result<E>> {
        loop {
            match self.merge.step_entity(key.as_deref_mut()) {
                Step::Advance(i) => self.advance(i),
                Step::Done(entity) => return entity,
            }
        }
    }
}

/// Entities streamed from asynchronous cursors and merged across buckets, as [`EntityIter`]
/// streams them: for jobs that read a whole table through futures and checkpoint where they
/// are. Made with [`Plan::prepare`], then [`AsyncEntities::open`].
pub(crate) struct AsyncEntities<'a, T> {
    merge: Merge<T, AsyncCursorBox<'a>>,
}

impl<T> Plan<T> {
    /// The scans of each bucket the plan reads, and the entities they yield once opened with
    /// them (the caller keeps the scans for as long as it reads).
    ///
    /// # Errors
    /// As [`Query::iter`].
    pub(crate) fn prepare<'a>(self) -> Result<(Vec<ScanSpec>, AsyncEntities<'a, T>)> {
        let (specs, merge) = self.start()?;
        Ok((specs, AsyncEntities { merge }))
    }
}

impl<'a, T> AsyncEntities<'a, T> {
    /// Opens a cursor on each of `specs`, those [`Plan::prepare`] returned.
    ///
    /// # Errors
    /// Store errors.
    pub(crate) async fn open(&mut self, store: &'a dyn AsyncStore, specs: &'a [ScanSpec]) -> Result<()> {
        let table = self.merge.target.table;
        for spec in specs {
            self.merge.attach(store.scan_cursor(table, spec).await?);
        }
        Ok(())
    }

    /// The next entity and its row key: for jobs that checkpoint where they are (a
    /// [`Cursor`] holds the key's [`AsyncEntities::body`]).
    pub(crate) async fn next_keyed(&mut self, store: &dyn AsyncStore, key: &mut Vec<u8>) -> Option<Result<T>> {
        self.merge.next_entity(store, Some(key)).await
    }

    /// The rows set aside since the last call, leaving none: for jobs that report them as
    /// they go, without keeping every one for the length of a scan.
    pub(crate) fn take_skipped(&mut self) -> Vec<Skipped> {
        std::mem::take(&mut self.merge.skipped)
    }

    /// A row key without its salt byte: the order buckets merge in, and what cursors hold.
    pub(crate) fn body<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        self.merge.body(key)
    }
}

impl<'s, T> Merge<T, AsyncCursorBox<'s>> {
    /// The first uid in the row the merge decodes next whose name the cache lacks, with the
    /// ids of its kind: an asynchronous scan resolves it with an awaited call first, so that
    /// decoding the row makes no synchronous one.
    fn missing_name(&self) -> Option<(crate::uid::Uids, Bytes)> {
        if self.target.uids.is_empty() {
            return None;
        }
        let Step::Done(Some(Ok(next))) = self.next_stream() else { return None };
        let stream = &self.streams[next];
        let row = stream.rows.row().filter(|_| matches!(stream.head, Head::Row))?;
        let decode = self.target.decode;
        let (uids, id) = self.target.uids.missing_name(|probe| drop(decode(row, probe)))?;
        Some((uids.clone(), id))
    }

    /// Adds the rows of one more bucket (in the order of the plan's scans).
    pub(crate) fn attach(&mut self, rows: AsyncCursorBox<'s>) {
        self.streams.push(Stream { rows, head: Head::Stale });
    }

    /// The next row in merged key order, copied out, as [`EntityIter::next_row`] reads it.
    pub(crate) async fn next_row(&mut self) -> Option<Result<Row>> {
        loop {
            match self.step_row() {
                Step::Advance(i) => {
                    let stream = &mut self.streams[i];
                    stream.head = Head::after(stream.rows.advance().await);
                }
                Step::Done(row) => return row,
            }
        }
    }

    /// The next entity, as [`EntityIter`] reads it, from asynchronous cursors; key parts
    /// stored as uids get their names through `store` with awaited calls.
    async fn next_entity(&mut self, store: &dyn AsyncStore, mut key: Option<&mut Vec<u8>>) -> Option<Result<T>> {
        // Ids looked up already: one whose name is not found is left to the decoding, which
        // reports it.
        let mut looked_up: Vec<Bytes> = Vec::new();
        loop {
            if let Some((uids, id)) = self.missing_name().filter(|(_, id)| !looked_up.contains(id)) {
                if let Err(e) = uids.name_via(store, &id).await {
                    return Some(Err(e));
                }
                looked_up.push(id);
                continue;
            }
            match self.step_entity(key.as_deref_mut()) {
                Step::Advance(i) => {
                    let stream = &mut self.streams[i];
                    stream.head = Head::after(stream.rows.advance().await);
                }
                Step::Done(entity) => return entity,
            }
        }
    }
}

impl<T, C: Lends> Merge<T, C> {
    /// Sets an undecodable row aside, if the scan was asked to; else hands its error back.
    pub(crate) fn set_aside(&mut self, key: &[u8], error: Error) -> Option<Error> {
        if !self.skip_unreadable {
            return Some(error);
        }
        self.skipped.push(Skipped { row: crate::repo::printable(key), error });
        None
    }

    /// A row key without its salt byte: the order buckets merge in, and what cursors hold.
    pub(crate) fn body<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        body(self.salted, key)
    }

    /// The stream whose head (a row, or an error) comes next in merged key order, or one to
    /// move first; `Done(None)` once every stream has ended.
    fn next_stream(&self) -> Step<usize> {
        if let Some(i) = self.streams.iter().position(|s| matches!(s.head, Head::Stale)) {
            return Step::Advance(i);
        }
        // One stream (an unsalted table, or one bucket): nothing to merge.
        if let [only] = &self.streams[..] {
            return Step::Done((!matches!(only.head, Head::End)).then_some(Ok(0)));
        }
        let mut best: Option<(usize, &[u8])> = None;
        for (i, stream) in self.streams.iter().enumerate() {
            match &stream.head {
                Head::End | Head::Stale => {}
                // An error goes out first.
                Head::Failed(_) => return Step::Done(Some(Ok(i))),
                Head::Row => {
                    let Some(row) = stream.rows.row() else { continue };
                    let key = self.body(row.key());
                    let better = best.is_none_or(|(_, b)| if self.reverse { key > b } else { key < b });
                    if better {
                        best = Some((i, key));
                    }
                }
            }
        }
        Step::Done(best.map(|(i, _)| Ok(i)))
    }

    /// The next row in merged key order, copied out.
    fn step_row(&mut self) -> Step<Row> {
        let next = match self.next_stream() {
            Step::Done(Some(Ok(next))) => next,
            Step::Advance(i) => return Step::Advance(i),
            Step::Done(_) => return Step::Done(None),
        };
        Step::Done(self.take_head(next, |_, row| row.to_row()))
    }

    /// Hands stream `i`'s head to `read` (a failed stream's error instead), leaving the stream
    /// to be moved on, whatever became of the row: it is behind the scan either way.
    fn take_head<R>(&mut self, i: usize, read: impl FnOnce(&Self, LentRow<'_>) -> R) -> Option<Result<R>> {
        let out = match std::mem::replace(&mut self.streams[i].head, Head::End) {
            Head::Failed(e) => return Some(Err(e)),
            Head::End | Head::Stale => return None,
            // A cursor on a row lends it; one that does not has ended.
            Head::Row => read(self, self.streams[i].rows.row()?),
        };
        self.streams[i].head = Head::Stale;
        Some(Ok(out))
    }

    /// The next entity, decoded where the store lends its row; its row key goes to `key`, for
    /// page cursors.
    fn step_entity(&mut self, mut key: Option<&mut Vec<u8>>) -> Step<T> {
        while self.left > 0 {
            let next = match self.next_stream() {
                Step::Done(Some(Ok(next))) => next,
                Step::Advance(i) => return Step::Advance(i),
                Step::Done(_) => return Step::Done(None),
            };
            let read = self.take_head(next, |merge, row| {
                if (merge.target.tombstone)(row) {
                    return Read::Skipped;
                }
                let uids = merge.target.uids.reading();
                match (merge.target.decode)(row, &uids) {
                    Ok(e) => {
                        if let Some(key) = key.as_deref_mut() {
                            key.clear();
                            key.extend_from_slice(row.key());
                        }
                        Read::Entity(e)
                    }
                    Err(e) if e.other_record_type => Read::Skipped,
                    // A store error while resolving a part stored as a uid is the scan's
                    // error, not the row's.
                    Err(e) => match uids.take_failure() {
                        Some(failure) => Read::Failed(failure),
                        None => {
                            Read::Unreadable(row.key().to_vec(), super::decode_error(merge.target.table, row.key(), e))
                        }
                    },
                }
            });
            let Some(read) = read else { return Step::Done(None) };
            match read {
                Err(e) | Ok(Read::Failed(e)) => return Step::Done(Some(Err(e))),
                Ok(Read::Entity(e)) => {
                    self.left -= 1;
                    return Step::Done(Some(Ok(e)));
                }
                Ok(Read::Skipped) => {}
                Ok(Read::Unreadable(row, e)) => {
                    if let Some(e) = self.set_aside(&row, e) {
                        return Step::Done(Some(Err(e)));
                    }
                }
            }
        }
        Step::Done(None)
    }
}

/// What became of a row an entity scan read.
enum Read<E> {
    Entity(E),
    /// A row of another record type, or a tombstone: skipped.
    Skipped,
    /// A row that does not decode: its key and why.
    Unreadable(Vec<u8>, Error),
    /// The scan itself failed.
    Failed(Error),
}

/// `key` without its salt byte, if the table is salted.
fn body(salted: bool, key: &[u8]) -> &[u8] {
    if salted {
        key.get(1..).unwrap_or_default()
    } else {
        key
    }
}

impl<E> Iterator for EntityIter<'_, E> {
    type Item = Result<E>;

    fn next(&mut self) -> Option<Result<E>> {
        self.next_entity(None)
    }
}
