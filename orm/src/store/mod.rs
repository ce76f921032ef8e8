//! The one interface the object mapper calls: [`Store`]. It speaks in rows, families,
//! qualifiers and byte values only — the part of the data model HBase and Bigtable share — so
//! the embedded engine ([`EmbeddedStore`]) and Cloud Bigtable (`BigtableStore`, feature
//! `bigtable`) both implement it.

#[cfg(feature = "bigtable")]
mod bigtable;
mod call;
pub(crate) mod drive;
mod embedded;
mod latency;
mod lent;
mod metered;
mod metered_async;
mod nonblocking;
mod observe;
mod offload;
mod timer;

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
pub use cellar_engine::{BloomType, Compression, PrefixField, SplitPolicy};

#[cfg(feature = "bigtable")]
pub use bigtable::{BigtableOptions, BigtableStore, RpcCounts};
pub use call::Call;
pub use embedded::EmbeddedStore;
pub use latency::{Latencies, Latency};
use lent::CursorRows;
pub use lent::{LentCell, LentCells, LentRow, RowCursor, RowCursorBox};
pub(crate) use metered::ByteSize;
pub use metered::{Costs, Metered, TIMESTAMP_BYTES};
pub(crate) use nonblocking::AsyncView;
pub use nonblocking::{AsDyn, AsyncCursorBox, AsyncRowCursor, AsyncStore, BuildCommit, Inline, Visit};
pub use offload::{Offload, FIRST_CHUNK, POOL_THREADS, SCAN_CHUNK};

use crate::Result;

/// A column family a table needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilySpec {
    /// Family name.
    pub name: String,
    /// Versions kept per column.
    pub max_versions: u32,
    /// Time to live of cells, in seconds; `None` keeps them.
    pub ttl_secs: Option<u64>,
}

/// A table a repository needs: created if missing, checked if present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    /// Table name.
    pub name: String,
    /// Families, in any order.
    pub families: Vec<FamilySpec>,
    /// Row keys at which a new table is pre-split (salt and bucket boundaries).
    pub split_keys: Vec<Vec<u8>>,
    /// Where the table may split: never inside a key prefix whose rows are mutated together
    /// (an aggregate's rows), or [`SplitPolicy::MidKey`]: no requirement, which leaves an
    /// existing table's policy as it is. Backends that cannot keep prefixes together ignore it
    /// and say so in [`Store::guarantees`].
    pub split_policy: SplitPolicy,
    /// Writes to this table may wait for the next durable write to the store instead of
    /// paying for their own: a crash can lose the most recent of them, never one older than a
    /// write the store acknowledged since (the embedded engine's log is written in order; it
    /// logs these writes into its buffer). For tables whose rows a crash may roll back
    /// without harm — index rows, which readers check against the data. Backends whose every
    /// write is durable ignore it.
    pub deferred: bool,
}

impl TableSpec {
    /// One of Cellar's own tables (job checkpoints, index statuses, ids): one family keeping
    /// one version, not pre-split.
    pub(crate) fn internal(name: &str, family: &str) -> Self {
        TableSpec {
            name: name.into(),
            families: vec![FamilySpec { name: family.into(), max_versions: 1, ttl_secs: None }],
            split_keys: Vec::new(),
            split_policy: SplitPolicy::MidKey,
            deferred: false,
        }
    }
}

impl FamilySpec {
    /// The error for an existing family (`self`) whose settings differ from `wanted`: names
    /// both, and the calls that change the table.
    pub(crate) fn mismatch(&self, table: &str, wanted: &FamilySpec) -> crate::Error {
        let have = FamilySettings::of(self);
        let want = FamilySettings::of(wanted);
        crate::Error::SchemaMismatch {
            table: table.to_string(),
            reason: format!(
                "family `{}` keeps {have}; the entity declares {want}. To change the table, call \
                 `Db::alter_to::<Entity>()` (the entity's declared settings) or `Db::alter(\"{table}\")` \
                 (settings of your choosing), then `Db::repo` again",
                wanted.name
            ),
        }
    }
}

/// A change to one column family's settings, for [`Store::alter_families`]: the settings it
/// names change, every other setting stays as it is. A family the table lacks is created, with
/// the defaults (one version, no TTL) for what the change does not name.
///
/// Built with [`FamilyChange::new`] and its setters, so that a minor release can add settings
/// without breaking callers (the struct is `#[non_exhaustive]`); the fields stay public to read.
///
/// ```
/// use std::time::Duration;
/// use cellar_orm::store::{Compression, FamilyChange};
///
/// let change = FamilyChange::new("d").max_versions(3).ttl(Duration::from_secs(86_400)).compression(Compression::Lz4);
/// assert_eq!(change.ttl_secs, Some(Some(86_400)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct FamilyChange {
    /// The family.
    pub name: String,
    /// Versions kept per column, at least 1; `None` leaves them.
    pub max_versions: Option<u32>,
    /// Time to live of cells in seconds: `Some(Some(s))` sets it (at least 1 s), `Some(None)`
    /// removes it (cells are kept), `None` leaves it.
    pub ttl_secs: Option<Option<u64>>,
    /// Block compression of the family's files on the embedded engine (files written from now
    /// on: flushes and compactions); `None` leaves it. Bigtable compresses on its own and
    /// ignores it.
    pub compression: Option<Compression>,
    /// Bloom filter kind of the family's files on the embedded engine (files written from now
    /// on); `None` leaves it. Bigtable has no such setting and ignores it.
    pub bloom: Option<BloomType>,
}

impl FamilyChange {
    /// A change of family `name` that changes nothing yet.
    pub fn new(name: impl Into<String>) -> Self {
        FamilyChange { name: name.into(), ..FamilyChange::default() }
    }

    /// Keeps `n` versions per column (at least 1; 0 is refused when the change is applied).
    /// Fewer than before: the versions past `n` are no longer read and are dropped by the
    /// store's next compaction (embedded) or garbage collection (Bigtable).
    pub fn max_versions(mut self, n: u32) -> Self {
        self.max_versions = Some(n);
        self
    }

    /// Expires cells `ttl` after their timestamp, rounded up to whole seconds (the unit families
    /// keep). A zero TTL is refused when the change is applied.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        let secs = ttl.as_secs().saturating_add(u64::from(ttl.subsec_nanos() > 0));
        self.ttl_secs = Some(Some(secs));
        self
    }

    /// Removes the TTL: cells are kept however old (those already past the old TTL and not
    /// yet collected read again).
    pub fn no_ttl(mut self) -> Self {
        self.ttl_secs = Some(None);
        self
    }

    /// Sets block compression (embedded engine; Bigtable ignores it).
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = Some(compression);
        self
    }

    /// Sets the bloom filter kind (embedded engine; Bigtable ignores it).
    pub fn bloom(mut self, bloom: BloomType) -> Self {
        self.bloom = Some(bloom);
        self
    }

    /// What family `before` keeps after this change (`None`: a family the table lacks, created
    /// with the defaults for what the change does not name). Compression and bloom filters are
    /// left to the backend, which knows whether it keeps them.
    pub(crate) fn applied_to(&self, before: Option<&FamilySpec>) -> FamilySpec {
        let mut after =
            before.cloned().unwrap_or_else(|| FamilySpec { name: self.name.clone(), max_versions: 1, ttl_secs: None });
        if let Some(n) = self.max_versions {
            after.max_versions = n;
        }
        if let Some(ttl) = self.ttl_secs {
            after.ttl_secs = ttl;
        }
        after
    }
}

/// Checks changes for [`Store::alter_families`] before a backend applies any of them: one per
/// family, named, at least one version, a TTL of at least one second.
///
/// # Errors
/// [`crate::Error::InvalidArgument`] naming the change at fault.
pub(crate) fn check_changes(table: &str, changes: &[FamilyChange]) -> Result<()> {
    let bad = |reason: String| crate::Error::InvalidArgument { arg: "family change", reason };
    for (i, c) in changes.iter().enumerate() {
        if c.name.is_empty() {
            return Err(bad(format!("table `{table}`: a family change without a family name")));
        }
        if changes[..i].iter().any(|d| d.name == c.name) {
            return Err(bad(format!("table `{table}`: family `{}` is changed twice in one alter", c.name)));
        }
        if c.max_versions == Some(0) {
            return Err(bad(format!("table `{table}`, family `{}`: max versions must be at least 1", c.name)));
        }
        if c.ttl_secs == Some(Some(0)) {
            return Err(bad(format!("table `{table}`, family `{}`: a TTL must be at least 1 s", c.name)));
        }
    }
    Ok(())
}

/// The error for altering a table that does not exist, the same on every backend.
pub(crate) fn no_table_to_alter(table: &str) -> crate::Error {
    crate::Error::InvalidArgument {
        arg: "table",
        reason: format!("there is no table `{table}` to alter (`Db::repo` creates an entity's table)"),
    }
}

/// One family's settings as a backend keeps them: what [`Store::alter_families`] reports
/// before and after a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FamilySettings {
    /// Versions kept per column (`u32::MAX`: a Bigtable family without a version limit).
    pub max_versions: u32,
    /// Time to live in seconds; `None` keeps cells.
    pub ttl_secs: Option<u64>,
    /// Block compression; `None` where the backend manages it (Bigtable).
    pub compression: Option<Compression>,
    /// Bloom filter kind; `None` where the backend has none to set (Bigtable).
    pub bloom: Option<BloomType>,
}

impl FamilySettings {
    /// The versions and TTL of `family`, with no compression or bloom setting (a backend that
    /// manages them).
    pub(crate) fn of(family: &FamilySpec) -> Self {
        FamilySettings { max_versions: family.max_versions, ttl_secs: family.ttl_secs, compression: None, bloom: None }
    }
}

impl FamilySettings {
    /// Writes versions and TTL, and compression and bloom filter kind if asked to and kept.
    fn show(&self, f: &mut fmt::Formatter<'_>, compression: bool, bloom: bool) -> fmt::Result {
        match self.max_versions {
            1 => f.write_str("1 version")?,
            u32::MAX => f.write_str("every version")?,
            n => write!(f, "{n} versions")?,
        }
        match self.ttl_secs {
            Some(secs) => write!(f, ", TTL {secs} s")?,
            None => f.write_str(", no TTL")?,
        }
        if let Some(c) = self.compression.filter(|_| compression) {
            write!(f, ", compression {c:?}")?;
        }
        if let Some(b) = self.bloom.filter(|_| bloom) {
            write!(f, ", bloom {b:?}")?;
        }
        Ok(())
    }
}

impl fmt::Display for FamilySettings {
    /// `3 versions, TTL 86400 s, compression Lz4, bloom Row`; settings a backend manages are
    /// left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.show(f, true, true)
    }
}

/// What [`Store::alter_families`] did to one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyAlteration {
    /// The family.
    pub family: String,
    /// Its settings before; `None` if the alter created it.
    pub before: Option<FamilySettings>,
    /// Its settings after.
    pub after: FamilySettings,
}

impl FamilyAlteration {
    /// True if the family's settings changed (or it was created).
    pub fn changed(&self) -> bool {
        self.before != Some(self.after)
    }
}

impl fmt::Display for FamilyAlteration {
    /// `family `d`: 1 version, no TTL → 3 versions, TTL 86400 s`: versions and TTL, and
    /// compression and bloom filter kind where they changed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let after = &self.after;
        write!(f, "family `{}`: ", self.family)?;
        match &self.before {
            Some(before) if before == after => {
                after.show(f, false, false)?;
                f.write_str(" (unchanged)")
            }
            Some(before) => {
                let (compression, bloom) = (before.compression != after.compression, before.bloom != after.bloom);
                before.show(f, compression, bloom)?;
                f.write_str(" → ")?;
                after.show(f, compression, bloom)
            }
            None => {
                f.write_str("created with ")?;
                after.show(f, true, true)
            }
        }
    }
}

/// An 8-byte big-endian counter cell's value.
pub(crate) fn counter_value(cell: &[u8]) -> Result<i64> {
    let bytes: [u8; 8] =
        cell.try_into().map_err(|_| crate::Error::Store(format!("counter cell has {} bytes, not 8", cell.len())))?;
    Ok(i64::from_be_bytes(bytes))
}

/// What a backend makes atomic beyond a single row. The layers above branch on this, never on
/// which backend they talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Guarantees {
    /// [`Store::mutate_group`] applies several rows atomically when they share a prefix that
    /// the table's [`SplitPolicy`] keeps in one region (HBase's MultiRowMutation).
    pub atomic_row_groups: bool,
    /// Only this process writes the store while it has it open (the embedded engine holds its
    /// directory's lock), so a write left unfinished by another process can have no call still
    /// on its way: the writer is gone. Protocols that must tell a stalled writer from a dead
    /// one (the aggregate intent protocol) rely on this instead of a lease where they can.
    pub single_process: bool,
    /// [`Store::commit`] applies rows of any tables atomically, under conditions on any rows,
    /// and [`Store::read_and_commit`] holds the row it reads until its commit is applied: no
    /// other write reaches the row in between. Index maintenance relies on both to write a data
    /// row and its index rows in one step, with no check that the row is still as read,
    /// instead of the verified/unverified protocol of several writes. A store (or wrapper)
    /// that reports this must keep both promises.
    pub atomic_commits: bool,
}

impl Guarantees {
    /// A backend's guarantees (fields as documented on [`Guarantees`]), without atomic commits.
    pub const fn new(atomic_row_groups: bool, single_process: bool) -> Self {
        Guarantees { atomic_row_groups, single_process, atomic_commits: false }
    }

    /// These guarantees, and [`Guarantees::atomic_commits`].
    pub const fn with_atomic_commits(self) -> Self {
        Guarantees { atomic_commits: true, ..self }
    }
}

/// Rows of several tables to write atomically, with the conditions that must hold: what
/// [`Store::commit`] applies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Commit {
    /// The tables checked or written, each once.
    pub tables: Vec<String>,
    /// Conditions, each on a row of the table at its position in `tables`.
    pub checks: Vec<(usize, RowCheck)>,
    /// Mutations, each of a row of the table at its position in `tables`, applied in order.
    pub rows: Vec<(usize, RowMutation)>,
}

impl Commit {
    /// Adds a condition on a row of `table`.
    pub fn check(&mut self, table: &str, check: RowCheck) {
        let t = self.table(table);
        self.checks.push((t, check));
    }

    /// Adds a row of `table` to write.
    pub fn row(&mut self, table: &str, row: RowMutation) {
        let t = self.table(table);
        self.rows.push((t, row));
    }

    /// `table`'s position in `tables`, added if new.
    fn table(&mut self, table: &str) -> usize {
        match self.tables.iter().position(|t| t == table) {
            Some(i) => i,
            None => {
                self.tables.push(table.to_string());
                self.tables.len() - 1
            }
        }
    }
}

/// A condition on one row, for [`Store::mutate_group`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowCheck {
    /// The row.
    pub row: Bytes,
    /// What must hold.
    pub condition: Condition,
}

/// One change to one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CellMutation {
    /// Writes a cell version at `timestamp` (`None` = the store's current time).
    Put {
        /// Family.
        family: Bytes,
        /// Qualifier.
        qualifier: Bytes,
        /// Value.
        value: Bytes,
        /// Version timestamp in milliseconds.
        timestamp: Option<u64>,
    },
    /// Writes a cell version stamped with the store's clock when the write applies, so the
    /// column's versions order as their writes applied, whatever the writers' clocks and
    /// however late a request arrives: for cells a protocol reads in that order (an index
    /// row's state). On the embedded engine this is a `Put` without a timestamp. On Bigtable
    /// such a `Put` takes the client's clock when the request is built, so that a retried
    /// batch writes the same version again; this one takes the server's, and a retried batch
    /// may write it twice.
    PutAtApply {
        /// Family.
        family: Bytes,
        /// Qualifier.
        qualifier: Bytes,
        /// Value.
        value: Bytes,
    },
    /// Deletes every version of a column.
    DeleteColumn {
        /// Family.
        family: Bytes,
        /// Qualifier.
        qualifier: Bytes,
    },
    /// Deletes every column of a family (a wide field replaced whole).
    DeleteFamily {
        /// Family.
        family: Bytes,
    },
    /// Deletes the whole row.
    DeleteRow,
}

impl CellMutation {
    /// A put of `family:qualifier` (names known at compile time) at the store's current time.
    pub(crate) fn put_now(family: &'static str, qualifier: &'static [u8], value: Bytes) -> Self {
        CellMutation::Put {
            family: Bytes::from_static(family.as_bytes()),
            qualifier: Bytes::from_static(qualifier),
            value,
            timestamp: None,
        }
    }
}

/// Changes to one row, applied atomically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowMutation {
    /// Row key.
    pub row: Bytes,
    /// The changes, applied in order.
    pub mutations: Vec<CellMutation>,
}

/// Which columns and versions a read returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadSpec {
    /// Versions per column, newest first.
    pub max_versions: u32,
    /// Only versions with `min <= timestamp < max`.
    pub time_range: Option<(u64, u64)>,
    /// Which columns.
    pub columns: Columns,
}

impl Default for ReadSpec {
    fn default() -> Self {
        ReadSpec { max_versions: 1, time_range: None, columns: Columns::All }
    }
}

/// Which columns of a row a read returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Columns {
    /// Every column.
    #[default]
    All,
    /// The columns of these families only (an entity read without its wide fields).
    Families(&'static [&'static str]),
    /// Part of one family's columns: a slice of a wide row.
    Slice(ColumnSlice),
}

/// Part of one family's columns: qualifiers in `[from, to)`, at most `limit` of them per row,
/// with or without their values. Backends seek to the slice rather than read the row
/// (embedded: the column filters; Bigtable: a column-range filter and a per-row cell limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnSlice {
    /// The family.
    pub family: Bytes,
    /// First qualifier (inclusive); `None` from the family's first.
    pub from: Option<Bytes>,
    /// Qualifier to stop before; `None` to the family's last.
    pub to: Option<Bytes>,
    /// Columns of the range skipped first (HBase's ColumnPaginationFilter offset).
    pub offset: usize,
    /// At most this many columns per row, after the offset.
    pub limit: Option<usize>,
    /// Values left out (empty): to list or count entries cheaply.
    pub keys_only: bool,
}

impl ColumnSlice {
    /// Every column of `family`.
    pub fn family(family: impl Into<Bytes>) -> Self {
        ColumnSlice { family: family.into(), from: None, to: None, offset: 0, limit: None, keys_only: false }
    }
}

/// A range of rows to read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScanSpec {
    /// First row (inclusive).
    pub start: Bytes,
    /// Row to stop before (exclusive); `None` scans to the end of the table.
    pub end: Option<Bytes>,
    /// Largest row first.
    pub reverse: bool,
    /// At most this many rows.
    pub limit: Option<usize>,
    /// Versions returned.
    pub read: ReadSpec,
}

/// One cell version as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCell {
    /// Family.
    pub family: Bytes,
    /// Qualifier.
    pub qualifier: Bytes,
    /// Version timestamp in milliseconds.
    pub timestamp: u64,
    /// Value.
    pub value: Bytes,
}

/// A row as read: cells in family, qualifier, newest-first order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Row key.
    pub key: Bytes,
    /// Cells.
    pub cells: Vec<StoredCell>,
}

impl Row {
    /// The newest value of `family:qualifier`.
    pub fn value(&self, family: &str, qualifier: &str) -> Option<&[u8]> {
        self.lend().value(family, qualifier)
    }

    /// The value of `family:qualifier` as of `timestamp`: the newest version at or before it.
    pub fn value_at(&self, family: &str, qualifier: &str, timestamp: u64) -> Option<&[u8]> {
        self.lend().value_at(family, qualifier, timestamp)
    }
}

/// A condition for [`Store::check_and_mutate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// The column's newest value equals `value`.
    Equals {
        /// Family.
        family: Bytes,
        /// Qualifier.
        qualifier: Bytes,
        /// Expected value.
        value: Bytes,
    },
    /// The column has no value.
    Absent {
        /// Family.
        family: Bytes,
        /// Qualifier.
        qualifier: Bytes,
    },
}

impl Condition {
    /// The column's newest value is `value`, or, for `None`, the column has none.
    pub fn holds(family: impl Into<Bytes>, qualifier: impl Into<Bytes>, value: Option<Bytes>) -> Condition {
        let (family, qualifier) = (family.into(), qualifier.into());
        match value {
            Some(value) => Condition::Equals { family, qualifier, value },
            None => Condition::Absent { family, qualifier },
        }
    }
}

/// Rows streamed from a scan.
pub type RowStream<'a> = Box<dyn Iterator<Item = Result<Row>> + Send + 'a>;

/// A wide-column store: what the object mapper needs from a backend.
pub trait Store: Send + Sync {
    /// Creates the table with its families if missing; adds missing families to an existing
    /// table.
    ///
    /// # Errors
    /// [`crate::Error::SchemaMismatch`] if an existing family's settings differ from `spec`.
    fn ensure_table(&self, spec: &TableSpec) -> Result<()>;

    /// Changes the settings of families of an existing table, all of them in one admin change:
    /// each [`FamilyChange`] sets what it names and keeps every other setting; a family the
    /// table lacks is created. Returns, per change and in order, the family's settings before
    /// and after (unchanged ones included). Cells already stored are not rewritten: a lower
    /// version limit or a shorter TTL hides the cells past it from reads at once, and the
    /// store removes them later (embedded: at compaction; Bigtable: at garbage collection).
    ///
    /// Backends differ in what they keep: the embedded engine applies compression and bloom
    /// filter kinds to the files it writes from now on; Bigtable manages both itself, so a
    /// change naming them is accepted and that part of it ignored (its settings report them as
    /// `None`). Required, with no default: a wrapper must pass the change on to its store.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] for a change of max versions 0, a zero TTL, no family
    /// name or a family named twice, and (the same on every backend) for a table that does not
    /// exist; the backend's error for a family name it refuses; store failures. Nothing is
    /// changed when a change is refused.
    fn alter_families(&self, table: &str, changes: &[FamilyChange]) -> Result<Vec<FamilyAlteration>>;

    /// Applies mutations, each row atomically.
    ///
    /// # Errors
    /// The first failure; rows before it may have been applied.
    fn mutate(&self, table: &str, rows: Vec<RowMutation>) -> Result<()>;

    /// Applies one row's mutations atomically: [`Store::mutate`] of one row, which a store can
    /// do without building a list (an unindexed entity put takes this path). A store that wraps
    /// another and overrides this must do what its `mutate` does for one row (count it, inject
    /// its faults), or keep this default.
    ///
    /// # Errors
    /// As [`Store::mutate`].
    fn mutate_row(&self, table: &str, row: RowMutation) -> Result<()> {
        self.mutate(table, vec![row])
    }

    /// Reads rows by key; `None` for a row with no cells.
    ///
    /// # Errors
    /// Store failures.
    fn read_rows(&self, table: &str, rows: &[Bytes], read: &ReadSpec) -> Result<Vec<Option<Row>>>;

    /// Streams a range of rows.
    ///
    /// # Errors
    /// Store failures, when starting or from the stream.
    fn scan<'a>(&'a self, table: &str, scan: &ScanSpec) -> Result<RowStream<'a>>;

    /// Scans like [`Store::scan`], lending the rows one at a time: what entity scans decode
    /// from. The default lends the rows [`Store::scan`] returns; a store that can lend rows in
    /// place (the embedded engine) saves building and dropping them.
    ///
    /// # Errors
    /// As [`Store::scan`].
    fn scan_cursor<'a>(&'a self, table: &str, scan: &ScanSpec) -> Result<RowCursorBox<'a>> {
        Ok(Box::new(lent::StreamCursor::new(self.scan(table, scan)?)))
    }

    /// Reads rows like [`Store::read_rows`] and lends each to `visit`, in order, with its
    /// position in `rows` (`None`: no cells). The default lends the rows
    /// [`Store::read_rows`] returns; a store that can lend them in place saves building them.
    ///
    /// # Errors
    /// As [`Store::read_rows`]; rows before the failure may have been visited.
    fn read_rows_with(
        &self,
        table: &str,
        rows: &[Bytes],
        read: &ReadSpec,
        visit: &mut dyn FnMut(usize, Option<LentRow<'_>>),
    ) -> Result<()> {
        for (i, row) in self.read_rows(table, rows, read)?.iter().enumerate() {
            visit(i, row.as_ref().map(Row::lend));
        }
        Ok(())
    }

    /// Applies `mutation` to its row if `condition` holds, atomically; returns whether it did.
    ///
    /// # Errors
    /// Store failures.
    fn check_and_mutate(&self, table: &str, condition: Condition, mutation: RowMutation) -> Result<bool>;

    /// Runs many [`Store::check_and_mutate`]s, each atomic on its own row and independent of
    /// the others; returns, in order, whether each applied. An entry sees the writes of
    /// earlier entries on the same row. Backends batch them into fewer round trips (the
    /// embedded engine: one log record per region); the default runs them one by one.
    ///
    /// # Errors
    /// The first failure; other entries may have been applied.
    fn check_and_mutate_many(&self, table: &str, entries: Vec<(Condition, RowMutation)>) -> Result<Vec<bool>> {
        entries.into_iter().map(|(condition, mutation)| self.check_and_mutate(table, condition, mutation)).collect()
    }

    /// The table's families as the store keeps them, and where it is split (what
    /// [`Store::split_keys`] reports); `None` if there is no such table. For jobs that recreate
    /// a table elsewhere (copies).
    ///
    /// # Errors
    /// [`crate::Error::Unsupported`] from a store that cannot describe tables (the default);
    /// store failures.
    fn describe(&self, table: &str) -> Result<Option<TableSpec>> {
        Err(crate::Error::Unsupported(format!("describe table `{table}`")))
    }

    /// Where the table's regions (or tablets) begin, the first one's empty start excepted;
    /// `None` if there is no such table.
    ///
    /// # Errors
    /// Store failures.
    fn split_keys(&self, table: &str) -> Result<Option<Vec<Bytes>>>;

    /// Adds `delta` to the 8-byte big-endian counter at `family:qualifier` (absent = 0) and
    /// returns the new value.
    ///
    /// # Errors
    /// A cell that is not an 8-byte counter; overflow; store failures.
    fn increment(&self, table: &str, row: Bytes, family: &str, qualifier: &str, delta: i64) -> Result<i64>;

    /// What this backend makes atomic beyond a single row.
    fn guarantees(&self) -> Guarantees;

    /// This store's own [`AsyncStore`], if it has one: a store whose calls wait on the
    /// network (Bigtable) answers asynchronous callers without holding a thread per call.
    /// `None` (the default): asynchronous callers reach the store through [`Offload`], its
    /// calls run on Cellar's blocking pool. A wrapper that counts or changes calls must return
    /// `None` unless its `AsyncStore` does what its `Store` does.
    fn as_async(&self) -> Option<&dyn AsyncStore> {
        None
    }

    /// Applies the mutations of several rows atomically if every check holds; returns whether
    /// it did. A reader sees all of the rows' changes or none.
    ///
    /// # Errors
    /// [`crate::Error::Unsupported`] from a backend without [`Guarantees::atomic_row_groups`];
    /// an engine error if the rows do not lie in one region; store failures.
    fn mutate_group(&self, table: &str, checks: Vec<RowCheck>, rows: Vec<RowMutation>) -> Result<bool>;

    /// Applies `commit`'s rows, of any tables, atomically if every check holds; returns
    /// whether it did. Checks see the rows as they were before the commit. A scan sees all of
    /// the rows' changes or none, and once a read has seen them every read that starts later
    /// does. Required, with no default: a wrapper that passes on [`Store::guarantees`] must pass
    /// on commits too.
    ///
    /// # Errors
    /// [`crate::Error::Unsupported`] from a backend without [`Guarantees::atomic_commits`];
    /// [`crate::Error::InvalidArgument`] for a commit without rows, or naming a table position
    /// `tables` does not have; store failures.
    fn commit(&self, commit: Commit) -> Result<bool>;

    /// Reads `row` of `table` and applies the commit `build` makes of it, with no other write
    /// to the row between the read and the commit: a read, a check that the row is still as
    /// read, and a commit, in one step. `build` gets the row as read (`None`: no cells) and
    /// returns `None` to write nothing; it may run more than once (each time with the row as it
    /// is then), and it runs while the store holds the row, so it must not call the store.
    /// Returns `None` if `build` declined, otherwise whether the commit's checks held and it
    /// was applied (as [`Store::commit`]). Required, as [`Store::commit`] is; a store that
    /// reports [`Guarantees::atomic_commits`] must not let another write reach the row between
    /// the read and the commit (a read followed by a commit would lose updates).
    ///
    /// # Errors
    /// [`crate::Error::Unsupported`] from a backend without [`Guarantees::atomic_commits`];
    /// as [`Store::read_rows`] and [`Store::commit`].
    fn read_and_commit(
        &self,
        table: &str,
        row: &Bytes,
        read: &ReadSpec,
        build: &mut dyn FnMut(Option<&Row>) -> Option<Commit>,
    ) -> Result<Option<bool>>;
}
