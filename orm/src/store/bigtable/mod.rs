//! [`Store`] on Cloud Bigtable (and its emulator), over gRPC.
//!
//! The backend owns a small tokio runtime; every `Store` call runs as a task there and the
//! calling thread waits (see `blocking`). What differs from the embedded engine, and how it is
//! bridged:
//!
//! * **Garbage collection** is lazy on Bigtable: family limits become GC rules *and* every
//!   read carries them as a filter (`filters`), so reads answer as the embedded engine does.
//! * **Timestamps** are milliseconds in Cellar and microseconds on Bigtable (tables at
//!   millisecond granularity): multiplied by 1000 on the way in, divided on the way out. Writes
//!   without a timestamp get the client's clock, so a retried write is idempotent.
//! * **Deletes** remove what exists when they apply, every timestamp included; the embedded
//!   engine's markers cover versions up to the delete's time, so a version written with a
//!   timestamp in the future survives a delete there and not here.
//! * **Counters** are ReadModifyWriteRow increments of 8-byte big-endian values, as in HBase;
//!   Bigtable wraps on overflow where the embedded engine refuses.
//! * **Atomicity** ends at one row: no [`Store::mutate_group`] (see [`Guarantees`]), so
//!   aggregates and indexes use their protocols that need none. Writers in other processes may
//!   share the instance, so `single_process` is false.
//! * **Pre-splitting**: tables are created with the split keys as initial splits; split
//!   policies that keep prefixes together do not exist on Bigtable.
//!
//! One concept per module: `url` (addresses), `client` (connecting, credentials and RPC
//! counts), `pool` (the channels calls spread over, and their refresh), `retry` (what is
//! repeated, how long it waits), `blocking` (waiting on the runtime), `tables` (table and family
//! administration), `read` (ReadRows requests and streams), `merge` (cell chunks into rows),
//! `filters` (a read's filter), `write` (MutateRows batches), `conditional`
//! (CheckAndMutateRow), `gc` (family limits as GC rules). This module holds the store and its
//! `Store` implementation.

mod blocking;
mod client;
mod conditional;
mod filters;
mod gc;
mod merge;
mod pool;
mod read;
mod retry;
mod tables;
mod url;
mod write;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use googleapis_tonic_google_bigtable_admin_v2::google::bigtable::admin::v2 as admin;
use googleapis_tonic_google_bigtable_v2::google::bigtable::v2 as pb;
use parking_lot::RwLock;
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tonic::{Code, Status};

pub use client::{BigtableOptions, RpcCounts};

use self::blocking::wait;
use self::client::{rpc_error, Ctx, Rpc};
use self::merge::{Chunk, RowMerger};
use self::read::*;
use self::retry::{transient, unrepeatable_error};
use self::tables::*;
use self::url::*;
use self::write::*;
use super::{
    CellMutation, Commit, Condition, FamilyAlteration, FamilyChange, FamilySettings, FamilySpec, Guarantees, ReadSpec,
    Row, RowCheck, RowMutation, RowStream, ScanSpec, Store, TableSpec,
};
use crate::{Error, Result};

/// Rows a scan reads ahead of its consumer.
const SCAN_BUFFER: usize = 256;
/// Bounds of one MutateRows call: Bigtable takes at most 100 000 mutations per call, and a
/// request must fit the server's message limit (the emulator's: 4 MiB).
const MUTATIONS_PER_CALL: usize = 100_000;
const BYTES_PER_CALL: usize = 3 << 20;
/// Check-and-mutates in flight at once for one `check_and_mutate_many`.
const CONCURRENT_CHECKS: usize = 64;

/// Cloud Bigtable (or its emulator) as a [`Store`]. Cheap to clone; clones share the
/// connection.
#[derive(Clone)]
pub struct BigtableStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// `Some` until dropped: shut down in the background, so dropping the store inside an
    /// async context does not panic.
    runtime: Option<Runtime>,
    ctx: Ctx,
    /// Bulk writes in flight, across every caller.
    flow: Arc<FlowControl>,
    /// Each table's families as Bigtable keeps them, for read filters.
    families: RwLock<HashMap<String, Arc<[FamilySpec]>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for BigtableStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BigtableStore").field("instance", &self.inner.ctx.instance).finish_non_exhaustive()
    }
}

/// The client's clock for writes without a timestamp, in milliseconds; never goes back within
/// the process, so a wall clock stepped backwards cannot hide a write behind an older one.
fn now_ms() -> u64 {
    static LATEST: AtomicU64 = AtomicU64::new(0);
    let wall = crate::writer::now_ms();
    LATEST.fetch_max(wall, Ordering::Relaxed).max(wall)
}

fn micros(ms: u64) -> Result<i64> {
    ms.checked_mul(1000)
        .and_then(|us| i64::try_from(us).ok())
        .ok_or_else(|| Error::InvalidArgument { arg: "timestamp", reason: format!("{ms} ms is past Bigtable's range") })
}

impl BigtableStore {
    /// Connects to the instance `options` name.
    ///
    /// # Errors
    /// [`Error::Remote`] (`connect`, `Unavailable`) if the endpoint cannot be reached within
    /// the connect timeout; [`Error::Store`] without credentials on Cloud Bigtable.
    pub fn connect(options: BigtableOptions) -> Result<BigtableStore> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cellar-bigtable")
            .enable_all()
            .build()
            .map_err(|e| Error::Store(format!("starting the Bigtable client's runtime: {e}")))?;
        let ctx = {
            let options = options.clone();
            wait(runtime.spawn(async move { Ctx::connect(&options).await }))
                .map_err(|e| Error::Store(format!("connecting to Bigtable: {e}")))??
        };
        let flow = Arc::new(FlowControl::new(CALLS_IN_FLIGHT, BYTES_IN_FLIGHT));
        Ok(BigtableStore { inner: Arc::new(Inner { runtime: Some(runtime), ctx, flow, families: RwLock::default() }) })
    }

    /// Connects to `bigtable://projects/{project}/instances/{instance}`, with an optional
    /// `?app_profile={id}`; `BIGTABLE_EMULATOR_HOST` is honoured as in [`BigtableOptions::new`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a malformed address; as [`BigtableStore::connect`].
    pub fn connect_url(url: &str) -> Result<BigtableStore> {
        BigtableStore::connect(parse_url(url)?)
    }

    /// How many RPCs of each kind this store has made.
    pub fn rpcs(&self) -> RpcCounts {
        self.inner.ctx.rpcs.snapshot()
    }

    /// Deletes a table and its data (tests, copies that start over).
    ///
    /// # Errors
    /// [`Error::Remote`]; a missing table is not an error.
    pub fn drop_table(&self, table: &str) -> Result<()> {
        let ctx = self.inner.ctx.clone();
        let name = ctx.table_name(table);
        let table_owned = table.to_string();
        self.inner.families.write().remove(table);
        self.run(async move {
            // Repeated after a lost answer, it finds no table: `NotFound`.
            let delete = || async {
                let message = admin::DeleteTableRequest { name: name.clone() };
                let request = ctx.request(Rpc::Admin, message, ("name", &name)).await.map_err(retry::unbuilt)?;
                ctx.deadline(ctx.admin.clone().delete_table(request)).await
            };
            match retry::repeated(&ctx, delete).await {
                Ok(_) => Ok(()),
                Err(s) if s.code() == Code::NotFound => Ok(()),
                Err(s) => Err(rpc_error("DeleteTable", &table_owned, None, &s)),
            }
        })
    }

    /// The runtime calls run on (present until the store is dropped).
    fn runtime(&self) -> Result<&Runtime> {
        self.inner.runtime.as_ref().ok_or_else(|| Error::Store("the Bigtable client is closed".into()))
    }

    /// Runs `call` on the backend's runtime and waits for it.
    fn run<T: Send + 'static>(&self, call: impl Future<Output = Result<T>> + Send + 'static) -> Result<T> {
        let runtime = self.runtime()?;
        wait(runtime.spawn(call)).map_err(|e| Error::Store(format!("a Bigtable call failed to complete: {e}")))?
    }

    /// The families of `table` as Bigtable keeps them (cached).
    fn families(&self, table: &str) -> Result<Arc<[FamilySpec]>> {
        if let Some(f) = self.inner.families.read().get(table) {
            return Ok(f.clone());
        }
        let ctx = self.inner.ctx.clone();
        let name = table.to_string();
        let families = self.run(async move { get_table(&ctx, &name).await })?.ok_or_else(|| Error::Remote {
            rpc: "GetTable",
            table: table.to_string(),
            row: None,
            code: "NotFound".into(),
            message: "no such table".into(),
        })?;
        let families: Arc<[FamilySpec]> = families.into();
        self.inner.families.write().insert(table.to_string(), families.clone());
        Ok(families)
    }

    fn family(&self, table: &str, family: &[u8]) -> Result<FamilySpec> {
        let families = self.families(table)?;
        families.iter().find(|f| f.name.as_bytes() == family).cloned().ok_or_else(|| Error::Remote {
            rpc: "CheckAndMutateRow",
            table: table.to_string(),
            row: None,
            code: "NotFound".into(),
            message: format!("no column family `{}`", String::from_utf8_lossy(family)),
        })
    }
}

impl Store for BigtableStore {
    fn ensure_table(&self, spec: &TableSpec) -> Result<()> {
        let ctx = self.inner.ctx.clone();
        let owned = spec.clone();
        let families = self.run(async move {
            let spec = owned;
            let mut existing = get_table(&ctx, &spec.name).await?;
            if existing.is_none() {
                create_table(&ctx, &spec).await?;
                existing = get_table(&ctx, &spec.name).await?;
            }
            let mut existing = existing.ok_or_else(|| Error::Remote {
                rpc: "CreateTable",
                table: spec.name.clone(),
                row: None,
                code: "NotFound".into(),
                message: "the table vanished right after it was created".into(),
            })?;
            let missing: Vec<&FamilySpec> =
                spec.families.iter().filter(|f| !existing.iter().any(|e| e.name == f.name)).collect();
            if !missing.is_empty() {
                add_families(&ctx, &spec.name, &missing).await?;
                existing = get_table(&ctx, &spec.name).await?.unwrap_or_default();
            }
            for f in &spec.families {
                match existing.iter().find(|e| e.name == f.name) {
                    Some(e) if e.max_versions == f.max_versions && e.ttl_secs == f.ttl_secs => {}
                    Some(e) => return Err(e.mismatch(&spec.name, f)),
                    None => {
                        return Err(Error::SchemaMismatch {
                            table: spec.name.clone(),
                            reason: format!("family `{}` could not be added", f.name),
                        })
                    }
                }
            }
            Ok(existing)
        })?;
        self.inner.families.write().insert(spec.name.clone(), families.into());
        Ok(())
    }

    /// As [`Store::alter_families`]: one ModifyColumnFamilies call that updates the GC rules
    /// of existing families and creates missing ones. Compression and bloom filters are
    /// Bigtable's to manage: a change naming them is accepted, and that part ignored. Reads
    /// through this store use the new limits at once; other clients of the instance keep
    /// filtering their reads by the limits they last read (until their next `ensure_table`),
    /// while Bigtable collects by the new ones.
    fn alter_families(&self, table: &str, changes: &[FamilyChange]) -> Result<Vec<FamilyAlteration>> {
        super::check_changes(table, changes)?;
        let ctx = self.inner.ctx.clone();
        let name = table.to_string();
        let changes = changes.to_vec();
        let (alterations, families) = self.run(async move {
            let existing = get_table(&ctx, &name).await?.ok_or_else(|| super::no_table_to_alter(&name))?;
            let (modifications, alterations, expected) = family_modifications(&existing, &changes);
            if modifications.is_empty() {
                return Ok((alterations, existing));
            }
            modify_families(&ctx, &name, modifications).await?;
            // The families as Bigtable now keeps them, for read filters; as sent if the table
            // vanished meanwhile.
            let families = get_table(&ctx, &name).await?.unwrap_or(expected);
            Ok((alterations, families))
        })?;
        self.inner.families.write().insert(table.to_string(), families.into());
        Ok(alterations)
    }

    fn mutate(&self, table: &str, rows: Vec<RowMutation>) -> Result<()> {
        let now = now_ms();
        let mut entries = Vec::with_capacity(rows.len());
        for m in rows {
            let changes = mutations(table, m.mutations, now)?;
            if !changes.is_empty() {
                entries.push(pb::mutate_rows_request::Entry {
                    row_key: m.row,
                    mutations: changes,
                    ..Default::default()
                });
            }
        }
        if entries.is_empty() {
            return Ok(());
        }
        let (ctx, flow) = (self.inner.ctx.clone(), self.inner.flow.clone());
        self.run(mutate_all(ctx, flow, table.to_string(), entries))
    }

    fn read_rows(&self, table: &str, rows: &[Bytes], read: &ReadSpec) -> Result<Vec<Option<Row>>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut keys = rows.to_vec();
        keys.sort();
        keys.dedup();
        let (request, window) =
            self.read_request(table, pb::RowSet { row_keys: keys, row_ranges: Vec::new() }, read, 0, false)?;
        let (tx, rx) = mpsc::channel(SCAN_BUFFER);
        self.start_read(table, request, tx)?;
        let mut found = HashMap::new();
        for row in Rows::new(rx, window, None) {
            let row = row?;
            found.insert(row.key.clone(), row);
        }
        Ok(rows.iter().map(|k| found.get(k).cloned()).collect())
    }

    fn scan<'a>(&'a self, table: &str, spec: &ScanSpec) -> Result<RowStream<'a>> {
        use pb::row_range::{EndKey, StartKey};
        if spec.limit == Some(0) || spec.end.as_ref().is_some_and(|end| *end <= spec.start) {
            return Ok(Box::new(std::iter::empty()));
        }
        let range = pb::RowRange {
            start_key: (!spec.start.is_empty()).then(|| StartKey::StartKeyClosed(spec.start.clone())),
            end_key: spec.end.clone().map(EndKey::EndKeyOpen),
        };
        let limit = spec.limit.map_or(0, |n| i64::try_from(n).unwrap_or(i64::MAX));
        let rows = pb::RowSet { row_keys: Vec::new(), row_ranges: vec![range] };
        // The server counts the rows it sends, before they are trimmed: when trimming can drop
        // a row, a server limit would end the scan short, so the limit is the client's alone.
        let (mut request, window) = self.read_request(table, rows, &spec.read, 0, spec.reverse)?;
        if !window.is_some_and(filters::ColumnWindow::can_empty_rows) {
            request.rows_limit = limit;
        }
        let (tx, rx) = mpsc::channel(SCAN_BUFFER);
        // The read starts now, before the first row is asked for: scans opened one after the
        // other (salt buckets) run at the same time.
        self.start_read(table, request, tx)?;
        Ok(Box::new(Rows::new(rx, window, spec.limit)))
    }

    fn check_and_mutate(&self, table: &str, condition: Condition, mutation: RowMutation) -> Result<bool> {
        let call = self.conditional(table, condition, mutation)?;
        self.run(call)
    }

    fn check_and_mutate_many(&self, table: &str, entries: Vec<(Condition, RowMutation)>) -> Result<Vec<bool>> {
        // Entries on different rows run at once; those on one row in order, each seeing the
        // ones before.
        let n = entries.len();
        let mut by_row: Vec<(Bytes, Vec<usize>)> = Vec::new();
        let mut index: HashMap<Bytes, usize> = HashMap::new();
        let mut calls = Vec::with_capacity(n);
        for (i, (condition, mutation)) in entries.into_iter().enumerate() {
            let row = mutation.row.clone();
            let slot = *index.entry(row.clone()).or_insert_with(|| {
                by_row.push((row, Vec::new()));
                by_row.len() - 1
            });
            by_row[slot].1.push(i);
            calls.push(Some(self.conditional(table, condition, mutation)?));
        }
        let limit = Arc::new(tokio::sync::Semaphore::new(CONCURRENT_CHECKS));
        let mut tasks = Vec::with_capacity(by_row.len());
        for (_, indexes) in by_row {
            let group: Vec<_> = indexes.iter().filter_map(|&i| calls[i].take().map(|c| (i, c))).collect();
            let limit = limit.clone();
            tasks.push(async move {
                let _permit = limit.acquire_owned().await;
                let mut out = Vec::with_capacity(group.len());
                for (i, call) in group {
                    out.push((i, call.await?));
                }
                Ok::<_, Error>(out)
            });
        }
        let runtime = self.runtime()?;
        let handles: Vec<_> = tasks.into_iter().map(|t| runtime.spawn(t)).collect();
        let mut results = vec![false; n];
        let mut first_error = None;
        for handle in handles {
            match wait(handle) {
                Ok(Ok(done)) => done.into_iter().for_each(|(i, applied)| results[i] = applied),
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => {
                    first_error.get_or_insert(Error::Store(format!("a Bigtable call failed to complete: {e}")));
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(results),
        }
    }

    fn describe(&self, table: &str) -> Result<Option<TableSpec>> {
        let ctx = self.inner.ctx.clone();
        let name = table.to_string();
        self.run(async move {
            let Some(families) = get_table(&ctx, &name).await? else { return Ok(None) };
            let split_keys = sample_row_keys(&ctx, &name).await?.into_iter().map(|k| k.to_vec()).collect();
            Ok(Some(TableSpec {
                name,
                families,
                split_keys,
                split_policy: super::SplitPolicy::MidKey,
                deferred: false,
            }))
        })
    }

    fn split_keys(&self, table: &str) -> Result<Option<Vec<Bytes>>> {
        let ctx = self.inner.ctx.clone();
        let table = table.to_string();
        self.run(async move {
            if get_table(&ctx, &table).await?.is_none() {
                return Ok(None);
            }
            sample_row_keys(&ctx, &table).await.map(Some)
        })
    }

    fn increment(&self, table: &str, row: Bytes, family: &str, qualifier: &str, delta: i64) -> Result<i64> {
        use pb::read_modify_write_rule::Rule;
        let ctx = self.inner.ctx.clone();
        let table = table.to_string();
        let (family, qualifier) = (family.to_string(), Bytes::copy_from_slice(qualifier.as_bytes()));
        self.run(async move {
            let name = ctx.table_name(&table);
            let message = pb::ReadModifyWriteRowRequest {
                table_name: name.clone(),
                app_profile_id: ctx.app_profile.clone(),
                row_key: row.clone(),
                rules: vec![pb::ReadModifyWriteRule {
                    family_name: family,
                    column_qualifier: qualifier,
                    rule: Some(Rule::IncrementAmount(delta)),
                }],
                ..Default::default()
            };
            let request = ctx.request(Rpc::ReadModifyWriteRow, message, ("table_name", &name)).await?;
            // Not retried: an increment is not idempotent.
            let response = ctx
                .deadline(ctx.data.clone().read_modify_write_row(request))
                .await
                .map_err(|s| unrepeatable_error("ReadModifyWriteRow", &table, &row, &s))?;
            let cell = response
                .into_inner()
                .row
                .and_then(|r| r.families.into_iter().next())
                .and_then(|f| f.columns.into_iter().next())
                .and_then(|c| c.cells.into_iter().next())
                .ok_or_else(|| Error::Store("ReadModifyWriteRow returned no cell".into()))?;
            super::counter_value(&cell.value)
        })
    }

    fn guarantees(&self) -> Guarantees {
        Guarantees::new(false, false)
    }

    fn mutate_group(&self, _table: &str, _checks: Vec<RowCheck>, _rows: Vec<RowMutation>) -> Result<bool> {
        Err(Error::Unsupported(
            "apply changes to several rows atomically: Cloud Bigtable has no multi-row transactions".into(),
        ))
    }

    fn commit(&self, _commit: Commit) -> Result<bool> {
        Err(Error::Unsupported(
            "apply changes to rows of several tables atomically: Cloud Bigtable has no multi-row transactions".into(),
        ))
    }

    fn read_and_commit(
        &self,
        _table: &str,
        _row: &Bytes,
        _read: &ReadSpec,
        _build: &mut dyn FnMut(Option<&Row>) -> Option<Commit>,
    ) -> Result<Option<bool>> {
        Err(Error::Unsupported(
            "read a row and apply changes to rows of several tables atomically: Cloud Bigtable has no multi-row \
             transactions"
                .into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_project_instance_and_profile() {
        let o = parse_url("bigtable://projects/p1/instances/i-2?app_profile=batch").unwrap();
        assert_eq!((o.project.as_str(), o.instance.as_str(), o.app_profile.as_deref()), ("p1", "i-2", Some("batch")));
        for bad in [
            "bigtable://p1/i",
            "http://projects/p/instances/i",
            "bigtable://projects//instances/i",
            "bigtable://projects/p/instances/i?x=1",
        ] {
            assert!(matches!(parse_url(bad), Err(Error::InvalidArgument { .. })), "{bad}");
        }
    }

    #[test]
    fn an_alter_updates_changed_families_creates_missing_ones_and_skips_the_rest() {
        use admin::modify_column_families_request::modification::Mod;
        let family = |name: &str, max_versions, ttl_secs| FamilySpec { name: name.into(), max_versions, ttl_secs };
        let existing = [family("a", 1, None), family("d", 1, Some(60))];
        let changes = [
            FamilyChange::new("d").max_versions(3),
            // Compression and blooms are Bigtable's own: nothing to send.
            FamilyChange::new("a").compression(crate::store::Compression::Zstd),
            FamilyChange::new("n").no_ttl(),
        ];
        let (modifications, alterations, families) = family_modifications(&existing, &changes);
        let sent: Vec<(&str, bool)> =
            modifications.iter().map(|m| (m.id.as_str(), matches!(m.r#mod, Some(Mod::Update(_))))).collect();
        assert_eq!(sent, [("d", true), ("n", false)]);
        assert_eq!(families, [family("a", 1, None), family("d", 3, Some(60)), family("n", 1, None)]);
        assert_eq!(alterations.iter().filter(|a| a.changed()).count(), 2);
        assert_eq!(alterations[1].before, Some(alterations[1].after));
    }

    #[test]
    fn calls_stay_within_bigtable_limits() {
        let entry = |size: usize| pb::mutate_rows_request::Entry {
            row_key: Bytes::from(vec![0; 8]),
            mutations: vec![
                pb::Mutation {
                    mutation: Some(pb::mutation::Mutation::SetCell(pb::mutation::SetCell {
                        family_name: "d".into(),
                        column_qualifier: Bytes::from_static(b"q"),
                        timestamp_micros: 0,
                        value: Bytes::from(vec![0; size]),
                    })),
                };
                1
            ],
            ..Default::default()
        };
        let small: Vec<_> = (0..10_000).map(|_| entry(100)).collect();
        assert_eq!(calls(small).len(), 1);
        let big: Vec<_> = (0..10).map(|_| entry(1 << 20)).collect();
        let split = calls(big);
        assert!(split.len() >= 4, "{}", split.len());
        assert!(split.iter().all(|c| c.iter().map(entry_size).sum::<usize>() <= BYTES_PER_CALL));
    }

    #[test]
    fn a_resumed_read_starts_after_the_last_row() {
        use pb::row_range::{EndKey, StartKey};
        let request = |reversed, limit| pb::ReadRowsRequest {
            rows: Some(pb::RowSet {
                row_keys: Vec::new(),
                row_ranges: vec![pb::RowRange {
                    start_key: Some(StartKey::StartKeyClosed(Bytes::from_static(b"a"))),
                    end_key: Some(EndKey::EndKeyOpen(Bytes::from_static(b"m"))),
                }],
            }),
            rows_limit: limit,
            reversed,
            ..Default::default()
        };
        let last = Bytes::from_static(b"f");
        let forward = resume(request(false, 10), &last, 3).unwrap();
        assert_eq!(forward.rows_limit, 7);
        assert_eq!(forward.rows.as_ref().unwrap().row_ranges[0].start_key, Some(StartKey::StartKeyOpen(last.clone())));
        let reverse = resume(request(true, 0), &last, 3).unwrap();
        assert_eq!(reverse.rows.as_ref().unwrap().row_ranges[0].end_key, Some(EndKey::EndKeyOpen(last.clone())));
        assert!(resume(request(false, 3), &last, 3).is_none(), "the limit is reached");
        let keys = pb::ReadRowsRequest {
            rows: Some(pb::RowSet {
                row_keys: vec![Bytes::from_static(b"b"), Bytes::from_static(b"x")],
                row_ranges: vec![],
            }),
            ..Default::default()
        };
        assert_eq!(resume(keys, &last, 1).unwrap().rows.unwrap().row_keys, vec![Bytes::from_static(b"x")]);
    }
}
