//! [`Store`] on Cellar's embedded engine.

use std::sync::Arc;

use bytes::Bytes;
use cellar_engine::{
    CheckAndMutate, ColumnOffset, CompareOp, Delete, Durability, Engine, FamilyDescriptor, Filter, FromScannedRow, Get,
    Increment, MultiRowMutation, MultiTableMutation, Mutation, Put, RowCondition, RowMutations, Scan, ScanCursor,
    ScannedCell, SplitPolicy, Table, TableDescriptor,
};
use parking_lot::RwLock;

use super::{
    CellMutation, Columns, Commit, Condition, CursorRows, FamilyAlteration, FamilyChange, FamilySettings, FamilySpec,
    Guarantees, LentRow, ReadSpec, Row, RowCheck, RowCursor, RowCursorBox, RowMutation, RowStream, ScanSpec, Store,
    StoredCell, TableSpec,
};
use crate::{Error, Result};

/// A table's name and its handle.
type Handle = (String, Arc<Table>);

/// The embedded engine as a [`Store`]. Cheap to clone.
#[derive(Clone)]
pub struct EmbeddedStore {
    engine: Engine,
    /// Table handles, looked up once (shared: a call takes a reference count, not a copy of
    /// the handle and its name).
    tables: Arc<RwLock<Vec<Handle>>>,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore").finish_non_exhaustive()
    }
}

impl EmbeddedStore {
    /// A store over an open engine.
    pub fn new(engine: Engine) -> Self {
        EmbeddedStore { engine, tables: Arc::default() }
    }

    /// The engine underneath, for administration (flush, compaction, regions).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The handle of table `name`, if this store has looked it up before.
    fn cached_table(&self, name: &str) -> Option<Arc<Table>> {
        self.tables.read().iter().find(|(n, _)| n == name).map(|(_, t)| t.clone())
    }

    fn table(&self, name: &str) -> Result<Arc<Table>> {
        if let Some(t) = self.cached_table(name) {
            return Ok(t);
        }
        let table = Arc::new(self.engine.table(name)?);
        self.tables.write().push((name.to_string(), table.clone()));
        Ok(table)
    }
}

fn family_descriptor(f: &FamilySpec) -> FamilyDescriptor {
    let mut d = FamilyDescriptor::new(f.name.clone()).max_versions(f.max_versions);
    if let Some(ttl) = f.ttl_secs {
        d = d.ttl_secs(ttl);
    }
    d
}

/// The versions and TTL of an engine family.
fn family_spec(d: &FamilyDescriptor) -> FamilySpec {
    FamilySpec { name: d.name.clone(), max_versions: d.max_versions, ttl_secs: d.ttl_secs }
}

/// Everything a [`FamilySettings`] reports of an engine family.
fn family_settings(d: &FamilyDescriptor) -> FamilySettings {
    FamilySettings {
        max_versions: d.max_versions,
        ttl_secs: d.ttl_secs,
        compression: Some(d.compression),
        bloom: Some(d.bloom),
    }
}

/// `change` applied to the engine family `before` (`None`: a new family, from the engine's
/// defaults): the settings it names replaced, the others kept.
fn changed_family(change: &FamilyChange, before: Option<&FamilyDescriptor>) -> FamilyDescriptor {
    let spec = change.applied_to(before.map(family_spec).as_ref());
    let mut after = before.cloned().unwrap_or_else(|| FamilyDescriptor::new(change.name.clone()));
    after.max_versions = spec.max_versions;
    after.ttl_secs = spec.ttl_secs;
    if let Some(compression) = change.compression {
        after.compression = compression;
    }
    if let Some(bloom) = change.bloom {
        after.bloom = bloom;
    }
    after
}

/// Adds one `Put` cell mutation to `put`; other kinds leave it as it is.
fn add_cell(put: Put, m: CellMutation) -> Put {
    match m {
        CellMutation::Put { family, qualifier, value, timestamp: Some(ts) } => put.add_at(family, qualifier, ts, value),
        CellMutation::Put { family, qualifier, value, timestamp: None }
        | CellMutation::PutAtApply { family, qualifier, value } => put.add(family, qualifier, value),
        CellMutation::DeleteColumn { .. } | CellMutation::DeleteFamily { .. } | CellMutation::DeleteRow => put,
    }
}

fn to_engine_mutation(row: &Bytes, m: CellMutation) -> Mutation {
    match m {
        put @ (CellMutation::Put { .. } | CellMutation::PutAtApply { .. }) => {
            add_cell(Put::new(row.clone()), put).into()
        }
        CellMutation::DeleteColumn { family, qualifier } => {
            Delete::new(row.clone()).add_columns(family, qualifier).into()
        }
        CellMutation::DeleteFamily { family } => Delete::new(row.clone()).add_family(family).into(),
        CellMutation::DeleteRow => Delete::new(row.clone()).into(),
    }
}

fn row_mutations(m: RowMutation) -> RowMutations {
    if puts_only(&m) {
        return RowMutations::new(m.row.clone()).with(single_put(m));
    }
    let row = m.row;
    m.mutations.into_iter().fold(RowMutations::new(row.clone()), |rm, cm| rm.with(to_engine_mutation(&row, cm)))
}

fn row_condition(check: RowCheck) -> RowCondition {
    match check.condition {
        Condition::Equals { family, qualifier, value } => {
            RowCondition::if_value(check.row, family, qualifier, CompareOp::Equal, value)
        }
        Condition::Absent { family, qualifier } => RowCondition::if_absent(check.row, family, qualifier),
    }
}

/// True if `m` only puts cells: it can go to the engine as one put.
fn puts_only(m: &RowMutation) -> bool {
    m.mutations.iter().all(|c| matches!(c, CellMutation::Put { .. } | CellMutation::PutAtApply { .. }))
}

/// A row mutation of puts only, as one engine put.
fn single_put(m: RowMutation) -> Put {
    let columns = m.mutations.len();
    m.mutations.into_iter().fold(Put::with_capacity(m.row, columns), add_cell)
}

/// Scanned rows become store rows straight from the engine's read buffer.
impl FromScannedRow for Row {
    fn from_scanned(key: Bytes, cells: impl ExactSizeIterator<Item = ScannedCell>) -> Self {
        let cells = cells
            .map(|c| StoredCell { family: c.family, qualifier: c.qualifier, timestamp: c.timestamp, value: c.value })
            .collect();
        Row { key, cells }
    }
}

/// The read settings Gets and Scans share.
trait Read: Sized {
    fn max_versions(self, n: u32) -> Self;
    fn time_range(self, min: u64, max: u64) -> Self;
    fn family(self, family: Bytes) -> Self;
    fn filter(self, filter: Filter) -> Self;
}

macro_rules! read_settings {
    ($t:ty) => {
        impl Read for $t {
            fn max_versions(self, n: u32) -> Self {
                <$t>::max_versions(self, n)
            }
            fn time_range(self, min: u64, max: u64) -> Self {
                <$t>::time_range(self, min, max)
            }
            fn family(self, family: Bytes) -> Self {
                <$t>::family(self, family)
            }
            fn filter(self, filter: Filter) -> Self {
                <$t>::filter(self, filter)
            }
        }
    };
}
read_settings!(Get);
read_settings!(Scan);

/// `read` applied to a Get or Scan: versions, time range, and the columns — a slice as the
/// column filters, which seek to it inside each row.
fn apply_read<T: Read>(q: T, read: &ReadSpec) -> T {
    let q = q.max_versions(read.max_versions.max(1));
    let q = match read.time_range {
        Some((min, max)) => q.time_range(min, max),
        None => q,
    };
    match &read.columns {
        Columns::All => q,
        Columns::Families(families) => families.iter().fold(q, |q, f| q.family(Bytes::from_static(f.as_bytes()))),
        Columns::Slice(slice) => {
            let mut filters = vec![Filter::ColumnRange {
                min: slice.from.clone(),
                min_inclusive: true,
                max: slice.to.clone(),
                max_inclusive: false,
            }];
            if slice.limit.is_some() || slice.offset > 0 {
                let limit = slice.limit.unwrap_or(usize::MAX);
                filters.push(Filter::ColumnPagination { limit, offset: ColumnOffset::Count(slice.offset) });
            }
            if slice.keys_only {
                filters.push(Filter::KeyOnly);
            }
            q.family(slice.family.clone()).filter(Filter::And(filters))
        }
    }
}

impl Store for EmbeddedStore {
    fn ensure_table(&self, spec: &TableSpec) -> Result<()> {
        if !self.engine.table_exists(&spec.name) {
            let desc = spec
                .families
                .iter()
                .fold(TableDescriptor::new(spec.name.clone()), |d, f| d.family(family_descriptor(f)))
                .split_policy(spec.split_policy.clone());
            let desc = if spec.deferred { desc.durability(Durability::AsyncWal) } else { desc };
            let splits = spec.split_keys.iter().map(|k| Bytes::copy_from_slice(k)).collect();
            match self.engine.create_table_with_splits(desc, splits) {
                // Another thread created it first: check it like any existing table.
                Ok(()) | Err(cellar_engine::Error::TableExists(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let existing = self.engine.describe(&spec.name)?;
        match (&spec.split_policy, &existing.split_policy) {
            // No requirement, or already kept.
            (SplitPolicy::MidKey, _) => {}
            (wanted, have) if wanted == have => {}
            (wanted, SplitPolicy::MidKey) => {
                // Rows written together must stay in one region from now on.
                let policy = wanted.clone();
                self.engine.alter_table(&spec.name, |d| {
                    d.split_policy = policy;
                    Ok(())
                })?;
            }
            (wanted, have) => {
                return Err(Error::SchemaMismatch {
                    table: spec.name.clone(),
                    reason: format!(
                        "the table keeps rows together by split policy {have:?}; this type needs {wanted:?}"
                    ),
                })
            }
        }
        for f in &spec.families {
            match existing.get_family(f.name.as_bytes()) {
                None => self.engine.modify_family(&spec.name, family_descriptor(f))?,
                Some(d) if d.max_versions != f.max_versions || d.ttl_secs != f.ttl_secs => {
                    return Err(family_spec(d).mismatch(&spec.name, f));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    fn alter_families(&self, table: &str, changes: &[FamilyChange]) -> Result<Vec<FamilyAlteration>> {
        super::check_changes(table, changes)?;
        let mut done = Vec::with_capacity(changes.len());
        // One descriptor change for every family: the engine validates the result and applies
        // and persists all of it, or none.
        let altered = self.engine.alter_table(table, |desc| {
            for change in changes {
                let before = desc.get_family(change.name.as_bytes()).cloned();
                let after = changed_family(change, before.as_ref());
                done.push(FamilyAlteration {
                    family: change.name.clone(),
                    before: before.as_ref().map(family_settings),
                    after: family_settings(&after),
                });
                desc.families.retain(|f| f.name != change.name);
                desc.families.push(after);
            }
            Ok(())
        });
        match altered {
            Ok(()) => Ok(done),
            Err(cellar_engine::Error::TableNotFound(_)) => Err(super::no_table_to_alter(table)),
            Err(e) => Err(e.into()),
        }
    }

    fn describe(&self, table: &str) -> Result<Option<TableSpec>> {
        if !self.engine.table_exists(table) {
            return Ok(None);
        }
        let d = self.engine.describe(table)?;
        let families = d.families.iter().map(family_spec).collect();
        let split_keys = self.split_keys(table)?.unwrap_or_default().into_iter().map(|k| k.to_vec()).collect();
        Ok(Some(TableSpec {
            name: table.to_string(),
            families,
            split_keys,
            split_policy: d.split_policy.clone(),
            deferred: d.durability == Durability::AsyncWal,
        }))
    }

    fn split_keys(&self, table: &str) -> Result<Option<Vec<Bytes>>> {
        if !self.engine.table_exists(table) {
            return Ok(None);
        }
        let regions = self.engine.regions(table)?;
        Ok(Some(regions.into_iter().map(|r| r.start_key).filter(|k| !k.is_empty()).collect()))
    }

    fn mutate(&self, table: &str, mut rows: Vec<RowMutation>) -> Result<()> {
        if rows.len() == 1 {
            if let Some(m) = rows.pop() {
                return self.mutate_row(table, m);
            }
        }
        let t = self.table(table)?;
        // Rows that only put cells go out as one batch; rows that also delete columns are
        // applied one by one, each atomically.
        let (puts, mixed): (Vec<_>, Vec<_>) = rows.into_iter().partition(puts_only);
        let batch: Vec<Mutation> = puts.into_iter().map(|m| Mutation::Put(single_put(m))).collect();
        if !batch.is_empty() {
            for r in t.batch(batch)? {
                r?;
            }
        }
        for m in mixed {
            t.mutate_row(row_mutations(m))?;
        }
        Ok(())
    }

    fn mutate_row(&self, table: &str, m: RowMutation) -> Result<()> {
        let t = self.table(table)?;
        // A row of puts only is one engine put: one mutation, not one per cell.
        if puts_only(&m) {
            return Ok(t.put(single_put(m))?);
        }
        Ok(t.mutate_row(row_mutations(m))?)
    }

    fn read_rows(&self, table: &str, rows: &[Bytes], read: &ReadSpec) -> Result<Vec<Option<Row>>> {
        let t = self.table(table)?;
        let found = |r: Option<Row>| r.filter(|r| !r.cells.is_empty());
        if let [row] = rows {
            return Ok(vec![found(t.get_as::<Row>(apply_read(Get::new(row.clone()), read))?)]);
        }
        let gets = rows.iter().map(|r| apply_read(Get::new(r.clone()), read)).collect();
        Ok(t.get_many_as::<Row>(gets)?.into_iter().map(found).collect())
    }

    fn scan<'a>(&'a self, table: &str, spec: &ScanSpec) -> Result<RowStream<'a>> {
        // The lent rows, copied out: one place narrows the engine's scan to the spec.
        Ok(Box::new(CursorRows::new(self.scan_cursor(table, spec)?)))
    }

    fn scan_cursor<'a>(&'a self, table: &str, spec: &ScanSpec) -> Result<RowCursorBox<'a>> {
        let t = self.table(table)?;
        let (scan, skip_row) = engine_scan(spec);
        Ok(Box::new(EngineCursor {
            rows: t.scan_cursor(scan)?,
            skip_row,
            start: spec.start.clone(),
            reverse: spec.reverse,
            left: spec.limit.unwrap_or(usize::MAX),
            on_row: false,
        }))
    }

    fn read_rows_with(
        &self,
        table: &str,
        rows: &[Bytes],
        read: &ReadSpec,
        visit: &mut dyn FnMut(usize, Option<LentRow<'_>>),
    ) -> Result<()> {
        let t = self.table(table)?;
        for (i, row) in rows.iter().enumerate() {
            let lent = t.get_with(apply_read(Get::new(row.clone()), read), |view| {
                visit(i, (!view.is_empty()).then(|| LentRow::engine(view)));
            })?;
            if lent.is_none() {
                visit(i, None);
            }
        }
        Ok(())
    }

    fn check_and_mutate(&self, table: &str, condition: Condition, mutation: RowMutation) -> Result<bool> {
        let t = self.table(table)?;
        Ok(t.check_and_mutate(check_and_mutate(condition, mutation))?)
    }

    fn check_and_mutate_many(&self, table: &str, entries: Vec<(Condition, RowMutation)>) -> Result<Vec<bool>> {
        let t = self.table(table)?;
        let cams = entries.into_iter().map(|(condition, mutation)| check_and_mutate(condition, mutation)).collect();
        t.check_and_mutate_batch(cams)?.into_iter().map(|r| r.map_err(Into::into)).collect()
    }

    fn increment(&self, table: &str, row: Bytes, family: &str, qualifier: &str, delta: i64) -> Result<i64> {
        let t = self.table(table)?;
        let r = t.increment(Increment::new(row).add(family.to_string(), qualifier.to_string(), delta))?;
        let cell = r.cells.first().ok_or_else(|| Error::Store("increment returned no cell".into()))?;
        super::counter_value(&cell.value)
    }

    fn guarantees(&self) -> Guarantees {
        Guarantees::new(true, true).with_atomic_commits()
    }

    fn mutate_group(&self, table: &str, checks: Vec<RowCheck>, rows: Vec<RowMutation>) -> Result<bool> {
        let t = self.table(table)?;
        let m = checks.into_iter().fold(MultiRowMutation::new(), |m, check| m.condition(row_condition(check)));
        let m = rows.into_iter().fold(m, |m, row| m.row(row_mutations(row)));
        Ok(t.mutate_rows(m)?)
    }

    fn commit(&self, commit: Commit) -> Result<bool> {
        let tables: Vec<Arc<Table>> = commit.tables.iter().map(|t| self.table(t)).collect::<Result<_>>()?;
        Ok(self.engine.mutate_tables(multi_table(commit, &tables)?)?)
    }

    fn read_and_commit(
        &self,
        table: &str,
        row: &Bytes,
        read: &ReadSpec,
        build: &mut dyn FnMut(Option<&Row>) -> Option<Commit>,
    ) -> Result<Option<bool>> {
        let t = self.table(table)?;
        let get = apply_read(Get::new(row.clone()), read);
        loop {
            // `build` runs under the engine's locks, where tables are taken only from this
            // store's cache: a table not used before sends the write back to look it up.
            let mut uncached = None;
            let mut invalid = None;
            let outcome = self.engine.read_then_mutate::<Row>(&t, &get, |found| {
                let commit = build(found.filter(|r| !r.cells.is_empty()).as_ref())?;
                let mut tables = Vec::with_capacity(commit.tables.len());
                for name in &commit.tables {
                    let Some(t) = self.cached_table(name) else {
                        uncached = Some(name.clone());
                        return None;
                    };
                    tables.push(t);
                }
                multi_table(commit, &tables).map_err(|e| invalid = Some(e)).ok()
            })?;
            match (uncached, invalid) {
                (_, Some(e)) => return Err(e),
                (Some(name), None) => {
                    self.table(&name)?;
                }
                (None, None) => return Ok(outcome),
            }
        }
    }
}

/// The engine scan of `spec`, and the row it must drop (see below).
fn engine_scan(spec: &ScanSpec) -> (Scan, Option<Bytes>) {
    let mut scan = Scan::new().reversed(spec.reverse);
    // A reversed engine scan starts at its largest row, inclusive, and stops above its
    // smallest, exclusive: the opposite of this range's bounds. So it starts at the range's
    // end and drops the row equal to it, and it runs without a stop row and ends at the
    // first row below the range's start.
    let mut skip_row = None;
    if spec.reverse {
        if let Some(end) = &spec.end {
            scan = scan.start(end.clone());
            skip_row = Some(end.clone());
        }
    } else {
        scan = scan.start(spec.start.clone());
        if let Some(end) = &spec.end {
            scan = scan.stop(end.clone());
        }
    }
    if let Some(n) = spec.limit {
        scan = scan.limit(n.saturating_add(usize::from(skip_row.is_some())));
    }
    (apply_read(scan, &spec.read), skip_row)
}

/// An engine scan cursor narrowed to a [`ScanSpec`]'s range and limit (see [`engine_scan`]).
struct EngineCursor {
    rows: ScanCursor,
    skip_row: Option<Bytes>,
    start: Bytes,
    reverse: bool,
    /// Rows still to lend.
    left: usize,
    /// The engine cursor is on a row this cursor lends.
    on_row: bool,
}

impl RowCursor for EngineCursor {
    fn advance(&mut self) -> Result<bool> {
        self.on_row = false;
        while self.left > 0 && self.rows.advance()? {
            let Some(row) = self.rows.row() else { break };
            let key = row.row();
            if self.skip_row.as_deref() == Some(key) || row.is_empty() {
                continue;
            }
            if self.reverse && key < &self.start[..] {
                self.left = 0;
                break;
            }
            self.left -= 1;
            self.on_row = true;
            break;
        }
        Ok(self.on_row)
    }

    fn row(&self) -> Option<LentRow<'_>> {
        self.rows.row().filter(|_| self.on_row).map(LentRow::engine)
    }
}

/// `commit` as the engine takes it; `tables` are its tables, by position.
fn multi_table(commit: Commit, tables: &[Arc<Table>]) -> Result<MultiTableMutation> {
    let table = |t: usize| {
        tables.get(t).ok_or_else(|| Error::InvalidArgument {
            arg: "commit",
            reason: format!("table position {t}, but the commit names {} tables", tables.len()),
        })
    };
    let mut m = MultiTableMutation::new();
    for (t, check) in commit.checks {
        m = m.condition(table(t)?, row_condition(check));
    }
    for (t, row) in commit.rows {
        m = m.row(table(t)?, row_mutations(row));
    }
    Ok(m)
}

fn check_and_mutate(condition: Condition, mutation: RowMutation) -> CheckAndMutate {
    let rm = row_mutations(mutation);
    match condition {
        Condition::Equals { family, qualifier, value } => {
            CheckAndMutate::if_value(family, qualifier, CompareOp::Equal, value, rm)
        }
        Condition::Absent { family, qualifier } => CheckAndMutate::if_absent(family, qualifier, rm),
    }
}
