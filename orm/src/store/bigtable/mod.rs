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

mod blocking;
mod client;
mod filters;
mod gc;
mod merge;

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
use self::client::{backoff, rpc_error, transient, Ctx, Rpc, MAX_ATTEMPTS};
use self::merge::{Chunk, RowMerger};
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
        Ok(BigtableStore { inner: Arc::new(Inner { runtime: Some(runtime), ctx, families: RwLock::default() }) })
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
            let request =
                ctx.request(Rpc::Admin, admin::DeleteTableRequest { name: name.clone() }, ("name", &name)).await?;
            match ctx.deadline(ctx.admin.clone().delete_table(request)).await {
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

    /// A ReadRows request of `table` with the read filter its families need.
    fn read_request(
        &self,
        table: &str,
        rows: pb::RowSet,
        read: &ReadSpec,
        limit: i64,
        reverse: bool,
    ) -> Result<(pb::ReadRowsRequest, Option<filters::ColumnWindow>)> {
        let families = self.families(table)?;
        let (filter, window) = filters::columns_filter(&families, read, now_ms());
        let request = pb::ReadRowsRequest {
            table_name: self.inner.ctx.table_name(table),
            app_profile_id: self.inner.ctx.app_profile.clone(),
            rows: Some(rows),
            filter,
            rows_limit: limit,
            reversed: reverse,
            ..Default::default()
        };
        Ok((request, window))
    }

    /// Starts a ReadRows stream feeding `tx`.
    fn start_read(&self, table: &str, request: pb::ReadRowsRequest, tx: mpsc::Sender<Result<Row>>) -> Result<()> {
        let runtime = self.runtime()?;
        runtime.spawn(read_rows(self.inner.ctx.clone(), table.to_string(), request, tx));
        Ok(())
    }
}

/// `bigtable://projects/P/instances/I[?app_profile=A]` as options.
fn parse_url(url: &str) -> Result<BigtableOptions> {
    let bad = |reason: &str| Error::InvalidArgument { arg: "url", reason: format!("{url}: {reason}") };
    let rest = url.strip_prefix("bigtable://").ok_or_else(|| bad("expected bigtable://projects/P/instances/I"))?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let ["projects", project, "instances", instance] = parts[..] else {
        return Err(bad("expected bigtable://projects/P/instances/I"));
    };
    if project.is_empty() || instance.is_empty() {
        return Err(bad("empty project or instance"));
    }
    let mut options = BigtableOptions::new(project, instance);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("app_profile", profile)) if !profile.is_empty() => options = options.app_profile(profile),
            _ => return Err(bad(&format!("unknown parameter `{pair}` (known: app_profile)"))),
        }
    }
    Ok(options)
}

/// Where the table's tablets begin, as SampleRowKeys reports them (the table's end, an empty
/// key, left out).
async fn sample_row_keys(ctx: &Ctx, table: &str) -> Result<Vec<Bytes>> {
    let name = ctx.table_name(table);
    let message = pb::SampleRowKeysRequest {
        table_name: name.clone(),
        app_profile_id: ctx.app_profile.clone(),
        ..Default::default()
    };
    let request = ctx.request(Rpc::SampleRowKeys, message, ("table_name", &name)).await?;
    let fail = |s: Status| rpc_error("SampleRowKeys", table, None, &s);
    let mut stream = ctx.deadline(ctx.data.clone().sample_row_keys(request)).await.map_err(fail)?.into_inner();
    let mut keys = Vec::new();
    while let Some(sample) = ctx.deadline(stream.message()).await.map_err(fail)? {
        if !sample.row_key.is_empty() {
            keys.push(sample.row_key);
        }
    }
    keys.dedup();
    Ok(keys)
}

/// The families of a table, or `None` if it does not exist.
async fn get_table(ctx: &Ctx, table: &str) -> Result<Option<Vec<FamilySpec>>> {
    let name = ctx.table_name(table);
    let message = admin::GetTableRequest { name: name.clone(), view: admin::table::View::SchemaView as i32 };
    let request = ctx.request(Rpc::Admin, message, ("name", &name)).await?;
    match ctx.deadline(ctx.admin.clone().get_table(request)).await {
        Ok(t) => {
            let mut families: Vec<FamilySpec> = t
                .into_inner()
                .column_families
                .iter()
                .map(|(name, f)| gc::family_of(name, f.gc_rule.as_ref()))
                .collect();
            families.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(Some(families))
        }
        Err(s) if s.code() == Code::NotFound => Ok(None),
        Err(s) => Err(rpc_error("GetTable", table, None, &s)),
    }
}

async fn create_table(ctx: &Ctx, spec: &TableSpec) -> Result<()> {
    let column_families = spec
        .families
        .iter()
        .map(|f| (f.name.clone(), admin::ColumnFamily { gc_rule: Some(gc::rule_of(f)), ..Default::default() }))
        .collect();
    let message = admin::CreateTableRequest {
        parent: ctx.instance.clone(),
        table_id: spec.name.clone(),
        table: Some(admin::Table {
            column_families,
            granularity: admin::table::TimestampGranularity::Millis as i32,
            ..Default::default()
        }),
        initial_splits: spec
            .split_keys
            .iter()
            .map(|k| admin::create_table_request::Split { key: Bytes::copy_from_slice(k) })
            .collect(),
    };
    let request = ctx.request(Rpc::Admin, message, ("parent", &ctx.instance)).await?;
    match ctx.deadline(ctx.admin.clone().create_table(request)).await {
        // Another client created it first: it is checked like any existing table.
        Ok(_) => Ok(()),
        Err(s) if s.code() == Code::AlreadyExists => Ok(()),
        Err(s) => Err(rpc_error("CreateTable", &spec.name, None, &s)),
    }
}

async fn add_families(ctx: &Ctx, table: &str, missing: &[&FamilySpec]) -> Result<()> {
    use admin::modify_column_families_request::{modification::Mod, Modification};
    let name = ctx.table_name(table);
    let message = admin::ModifyColumnFamiliesRequest {
        name: name.clone(),
        modifications: missing
            .iter()
            .map(|f| Modification {
                id: f.name.clone(),
                r#mod: Some(Mod::Create(admin::ColumnFamily { gc_rule: Some(gc::rule_of(f)), ..Default::default() })),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let request = ctx.request(Rpc::Admin, message, ("name", &name)).await?;
    match ctx.deadline(ctx.admin.clone().modify_column_families(request)).await {
        Ok(_) => Ok(()),
        // Added by another client meanwhile; the caller checks the result.
        Err(s) if s.code() == Code::AlreadyExists => Ok(()),
        Err(s) => Err(rpc_error("ModifyColumnFamilies", table, None, &s)),
    }
}

/// `changes` applied to `existing` (a table's families): the modifications to send, the
/// families' settings before and after, and the families as they will be. Compression and
/// bloom filters are Bigtable's to manage: ignored. Families whose GC rule stays the same are
/// not sent.
fn family_modifications(
    existing: &[FamilySpec],
    changes: &[FamilyChange],
) -> (Vec<admin::modify_column_families_request::Modification>, Vec<FamilyAlteration>, Vec<FamilySpec>) {
    use admin::modify_column_families_request::{modification::Mod, Modification};
    let mut families = existing.to_vec();
    let mut modifications = Vec::new();
    let mut alterations = Vec::with_capacity(changes.len());
    for change in changes {
        let before = existing.iter().find(|f| f.name == change.name);
        let after = change.applied_to(before);
        if before != Some(&after) {
            let family = admin::ColumnFamily { gc_rule: Some(gc::rule_of(&after)), ..Default::default() };
            // An update's mask left empty updates the GC rule, all a family keeps here.
            let r#mod = if before.is_some() { Mod::Update(family) } else { Mod::Create(family) };
            modifications.push(Modification { id: after.name.clone(), r#mod: Some(r#mod), ..Default::default() });
        }
        alterations.push(FamilyAlteration {
            family: change.name.clone(),
            before: before.map(FamilySettings::of),
            after: FamilySettings::of(&after),
        });
        families.retain(|f| f.name != after.name);
        families.push(after);
    }
    families.sort_by(|a, b| a.name.cmp(&b.name));
    (modifications, alterations, families)
}

/// One ModifyColumnFamilies call: Bigtable applies all of its modifications or none.
async fn modify_families(
    ctx: &Ctx,
    table: &str,
    modifications: Vec<admin::modify_column_families_request::Modification>,
) -> Result<()> {
    let name = ctx.table_name(table);
    let message = admin::ModifyColumnFamiliesRequest { name: name.clone(), modifications, ..Default::default() };
    let request = ctx.request(Rpc::Admin, message, ("name", &name)).await?;
    match ctx.deadline(ctx.admin.clone().modify_column_families(request)).await {
        Ok(_) => Ok(()),
        // Dropped since it was read.
        Err(s) if s.code() == Code::NotFound => Err(super::no_table_to_alter(table)),
        Err(s) => Err(rpc_error("ModifyColumnFamilies", table, None, &s)),
    }
}

fn family_name(table: &str, family: &Bytes) -> Result<String> {
    String::from_utf8(family.to_vec()).map_err(|_| Error::InvalidArgument {
        arg: "family",
        reason: format!("table `{table}`: Bigtable family names are text, not {family:?}"),
    })
}

/// The timestamp that asks Bigtable for the server's clock when a write applies.
const SERVER_TIME: i64 = -1;

/// Bigtable mutations for one row's changes; puts without a timestamp get `now_ms`.
fn mutations(table: &str, changes: Vec<CellMutation>, now_ms: u64) -> Result<Vec<pb::Mutation>> {
    use pb::mutation::{DeleteFromColumn, DeleteFromFamily, DeleteFromRow, Mutation, SetCell};
    changes
        .into_iter()
        .map(|m| {
            let mutation = match m {
                CellMutation::Put { family, qualifier, value, timestamp } => Mutation::SetCell(SetCell {
                    family_name: family_name(table, &family)?,
                    column_qualifier: qualifier,
                    timestamp_micros: micros(timestamp.unwrap_or(now_ms))?,
                    value,
                }),
                CellMutation::PutAtApply { family, qualifier, value } => Mutation::SetCell(SetCell {
                    family_name: family_name(table, &family)?,
                    column_qualifier: qualifier,
                    timestamp_micros: SERVER_TIME,
                    value,
                }),
                CellMutation::DeleteColumn { family, qualifier } => Mutation::DeleteFromColumn(DeleteFromColumn {
                    family_name: family_name(table, &family)?,
                    column_qualifier: qualifier,
                    time_range: None,
                }),
                CellMutation::DeleteFamily { family } => {
                    Mutation::DeleteFromFamily(DeleteFromFamily { family_name: family_name(table, &family)? })
                }
                CellMutation::DeleteRow => Mutation::DeleteFromRow(DeleteFromRow {}),
            };
            Ok(pb::Mutation { mutation: Some(mutation) })
        })
        .collect()
}

fn entry_size(e: &pb::mutate_rows_request::Entry) -> usize {
    use pb::mutation::Mutation;
    e.row_key.len()
        + e.mutations
            .iter()
            .map(|m| match &m.mutation {
                Some(Mutation::SetCell(c)) => 24 + c.family_name.len() + c.column_qualifier.len() + c.value.len(),
                Some(Mutation::DeleteFromColumn(c)) => 16 + c.family_name.len() + c.column_qualifier.len(),
                _ => 8,
            })
            .sum::<usize>()
}

/// Splits entries into calls within Bigtable's limits.
fn calls(entries: Vec<pb::mutate_rows_request::Entry>) -> Vec<Vec<pb::mutate_rows_request::Entry>> {
    let mut out: Vec<Vec<pb::mutate_rows_request::Entry>> = Vec::new();
    let (mut mutations, mut bytes) = (0, 0);
    for e in entries {
        let (m, b) = (e.mutations.len(), entry_size(&e));
        if out.is_empty() || mutations + m > MUTATIONS_PER_CALL || bytes + b > BYTES_PER_CALL {
            out.push(Vec::new());
            (mutations, bytes) = (0, 0);
        }
        mutations += m;
        bytes += b;
        if let Some(call) = out.last_mut() {
            call.push(e);
        }
    }
    out
}

/// One MutateRows call with its retries: entries that fail transiently (or that the stream
/// never reported on) are sent again, with their explicit timestamps, so a repeat changes
/// nothing that already applied.
async fn mutate_rows(ctx: Ctx, table: String, mut pending: Vec<pb::mutate_rows_request::Entry>) -> Result<()> {
    let name = ctx.table_name(&table);
    let mut attempt = 0;
    loop {
        let message = pb::MutateRowsRequest {
            table_name: name.clone(),
            app_profile_id: ctx.app_profile.clone(),
            entries: pending.clone(),
            ..Default::default()
        };
        let request = ctx.request(Rpc::MutateRows, message, ("table_name", &name)).await?;
        let mut reported = vec![false; pending.len()];
        let mut retry = Vec::new();
        let mut failure: Option<Status> = None;
        match ctx.deadline(ctx.data.clone().mutate_rows(request)).await {
            Err(s) => failure = Some(s),
            Ok(response) => {
                let mut stream = response.into_inner();
                loop {
                    match ctx.deadline(stream.message()).await {
                        Ok(Some(batch)) => {
                            for e in batch.entries {
                                let Some(i) = usize::try_from(e.index).ok().filter(|i| *i < pending.len()) else {
                                    continue;
                                };
                                reported[i] = true;
                                let status = e.status.unwrap_or_default();
                                let code = Code::from_i32(status.code);
                                if code == Code::Ok {
                                    continue;
                                }
                                let s = Status::new(code, status.message);
                                if !transient(&s) {
                                    return Err(rpc_error("MutateRows", &table, Some(&pending[i].row_key), &s));
                                }
                                retry.push(i);
                                failure = Some(s);
                            }
                        }
                        Ok(None) => break,
                        Err(s) => {
                            failure = Some(s);
                            break;
                        }
                    }
                }
            }
        }
        retry.extend(reported.iter().enumerate().filter(|(_, r)| !**r).map(|(i, _)| i));
        if retry.is_empty() {
            return Ok(());
        }
        let status = failure.unwrap_or_else(|| Status::unavailable("the stream ended without reporting every row"));
        attempt += 1;
        if !transient(&status) || attempt >= MAX_ATTEMPTS {
            let row = (retry.len() == 1).then(|| pending[retry[0]].row_key.clone());
            return Err(rpc_error("MutateRows", &table, row.as_deref(), &status));
        }
        retry.sort_unstable();
        retry.dedup();
        pending = retry.into_iter().map(|i| pending[i].clone()).collect();
        ctx.rpcs.count(Rpc::Retry);
        tokio::time::sleep(backoff(attempt)).await;
    }
}

fn chunk_of(c: pb::read_rows_response::CellChunk) -> Chunk {
    use pb::read_rows_response::cell_chunk::RowStatus;
    Chunk {
        row_key: c.row_key,
        family: c.family_name,
        qualifier: c.qualifier.map(Bytes::from),
        timestamp_micros: c.timestamp_micros,
        value: c.value,
        value_size: c.value_size,
        has_labels: !c.labels.is_empty(),
        reset_row: matches!(c.row_status, Some(RowStatus::ResetRow(true))),
        commit_row: matches!(c.row_status, Some(RowStatus::CommitRow(true))),
    }
}

/// The part of `request` not yet read once rows up to `last` (in the read's direction) and
/// `delivered` rows have arrived; `None` if nothing is left.
fn resume(mut request: pb::ReadRowsRequest, last: &Bytes, delivered: i64) -> Option<pb::ReadRowsRequest> {
    use pb::row_range::{EndKey, StartKey};
    if request.rows_limit > 0 {
        request.rows_limit -= delivered;
        if request.rows_limit <= 0 {
            return None;
        }
    }
    let reverse = request.reversed;
    let rows = request.rows.get_or_insert_with(Default::default);
    let remaining = |k: &Bytes| if reverse { k < last } else { k > last };
    rows.row_keys.retain(remaining);
    let had_keys = !rows.row_keys.is_empty();
    if rows.row_ranges.is_empty() && !had_keys {
        return None;
    }
    for range in &mut rows.row_ranges {
        if reverse {
            let below = match &range.end_key {
                None => true,
                Some(EndKey::EndKeyOpen(e)) => last < e,
                Some(EndKey::EndKeyClosed(e)) => last <= e,
            };
            if below {
                range.end_key = Some(EndKey::EndKeyOpen(last.clone()));
            }
        } else {
            let above = match &range.start_key {
                None => true,
                Some(StartKey::StartKeyClosed(s)) => last >= s,
                Some(StartKey::StartKeyOpen(s)) => last >= s,
            };
            if above {
                range.start_key = Some(StartKey::StartKeyOpen(last.clone()));
            }
        }
    }
    // Ranges left empty (start at or past their end).
    rows.row_ranges.retain(|r| match (&r.start_key, &r.end_key) {
        (Some(StartKey::StartKeyOpen(s)), Some(EndKey::EndKeyOpen(e))) => s < e && s.as_ref() != e.as_ref(),
        (Some(StartKey::StartKeyClosed(s)), Some(EndKey::EndKeyOpen(e))) => s < e,
        (Some(StartKey::StartKeyOpen(s)), Some(EndKey::EndKeyClosed(e))) => s < e,
        _ => true,
    });
    (had_keys || !rows.row_ranges.is_empty()).then_some(request)
}

/// Streams the rows of a ReadRows request into `tx`, resuming after the last row on transient
/// failures; ends when the read ends, fails, or the receiver is dropped.
async fn read_rows(ctx: Ctx, table: String, request: pb::ReadRowsRequest, tx: mpsc::Sender<Result<Row>>) {
    let mut merger = RowMerger::new(request.reversed);
    let (mut last, mut delivered, mut attempt) = (None::<Bytes>, 0i64, 0);
    let mut next = Some(request.clone());
    while let Some(message) = next.take() {
        let delivered_before = delivered;
        let failure = match read_once(&ctx, &table, message, &mut merger, &tx, &mut last, &mut delivered).await {
            Ok(()) => return,
            Err(ReadFailure::Fatal(e)) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
            Err(ReadFailure::ReceiverGone) => return,
            Err(ReadFailure::Transient(s)) => s,
        };
        // A stream that made progress before it broke starts a fresh count of attempts.
        attempt = if delivered > delivered_before { 1 } else { attempt + 1 };
        if attempt >= MAX_ATTEMPTS {
            let _ = tx.send(Err(rpc_error("ReadRows", &table, None, &failure))).await;
            return;
        }
        merger.restart();
        ctx.rpcs.count(Rpc::Retry);
        tokio::time::sleep(backoff(attempt)).await;
        next = match &last {
            Some(last) => resume(request.clone(), last, delivered),
            None => Some(request.clone()),
        };
    }
}

enum ReadFailure {
    Transient(Status),
    Fatal(Error),
    ReceiverGone,
}

async fn read_once(
    ctx: &Ctx,
    table: &str,
    message: pb::ReadRowsRequest,
    merger: &mut RowMerger,
    tx: &mpsc::Sender<Result<Row>>,
    last: &mut Option<Bytes>,
    delivered: &mut i64,
) -> Result<(), ReadFailure> {
    let name = message.table_name.clone();
    let classify = |s: Status| {
        if transient(&s) {
            ReadFailure::Transient(s)
        } else {
            ReadFailure::Fatal(rpc_error("ReadRows", table, None, &s))
        }
    };
    let request = ctx.request(Rpc::ReadRows, message, ("table_name", &name)).await.map_err(ReadFailure::Fatal)?;
    let mut stream = ctx.deadline(ctx.data.clone().read_rows(request)).await.map_err(classify)?.into_inner();
    loop {
        match ctx.deadline(stream.message()).await.map_err(classify)? {
            Some(response) => {
                for chunk in response.chunks {
                    let row = merger.push(chunk_of(chunk)).map_err(|e| {
                        ReadFailure::Fatal(rpc_error("ReadRows", table, None, &Status::internal(e.to_string())))
                    })?;
                    if let Some(row) = row {
                        *last = Some(row.key.clone());
                        *delivered += 1;
                        tx.send(Ok(row)).await.map_err(|_| ReadFailure::ReceiverGone)?;
                    }
                }
            }
            None => {
                return merger.finish().map_err(|e| {
                    ReadFailure::Fatal(rpc_error("ReadRows", table, None, &Status::internal(e.to_string())))
                })
            }
        }
    }
}

/// Rows arriving from a read task.
struct Rows {
    rx: mpsc::Receiver<Result<Row>>,
    /// Columns per row to keep, for slices Bigtable could not select itself.
    window: Option<filters::ColumnWindow>,
    /// Rows still to return, for a scan's limit: counted here, after trimming, because rows
    /// trimming empties are not returned.
    left: Option<usize>,
}

impl Iterator for Rows {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Result<Row>> {
        if self.left == Some(0) {
            // The read may go on past the limit (no server limit): stop it.
            self.rx.close();
            return None;
        }
        loop {
            let mut row = wait(self.rx.recv());
            if let (Some(Ok(row)), Some(window)) = (&mut row, self.window) {
                filters::trim_columns(row, window);
                if row.cells.is_empty() {
                    continue;
                }
            }
            if let (Some(Ok(_)), Some(left)) = (&row, &mut self.left) {
                *left -= 1;
            }
            return row;
        }
    }
}

async fn check_and_mutate_row(
    ctx: Ctx,
    table: String,
    predicate: pb::RowFilter,
    on_match: bool,
    row: Bytes,
    changes: Vec<pb::Mutation>,
) -> Result<bool> {
    let name = ctx.table_name(&table);
    let (true_mutations, false_mutations) = if on_match { (changes, Vec::new()) } else { (Vec::new(), changes) };
    let message = pb::CheckAndMutateRowRequest {
        table_name: name.clone(),
        app_profile_id: ctx.app_profile.clone(),
        row_key: row.clone(),
        predicate_filter: Some(predicate),
        true_mutations,
        false_mutations,
        ..Default::default()
    };
    let request = ctx.request(Rpc::CheckAndMutateRow, message, ("table_name", &name)).await?;
    // Not retried: whether a failed call applied is unknown, and repeating a conditional write
    // could apply it against a state it was not meant for.
    let response = ctx
        .deadline(ctx.data.clone().check_and_mutate_row(request))
        .await
        .map_err(|s| rpc_error("CheckAndMutateRow", &table, Some(&row), &s))?;
    Ok(response.into_inner().predicate_matched == on_match)
}

impl BigtableStore {
    /// A check-and-mutate as a task: the predicate, which branch applies, and the changes.
    fn conditional(
        &self,
        table: &str,
        condition: Condition,
        mutation: RowMutation,
    ) -> Result<impl Future<Output = Result<bool>> + Send + 'static> {
        let now = now_ms();
        let (predicate, on_match) = match &condition {
            Condition::Equals { family, qualifier, value } => {
                let f = self.family(table, family)?;
                (filters::column_predicate(&f, qualifier, Some(value), now), true)
            }
            Condition::Absent { family, qualifier } => {
                let f = self.family(table, family)?;
                (filters::column_predicate(&f, qualifier, None, now), false)
            }
        };
        let changes = mutations(table, mutation.mutations, now)?;
        let ctx = self.inner.ctx.clone();
        let table = table.to_string();
        let row = mutation.row;
        Ok(async move {
            if changes.is_empty() {
                // Bigtable refuses a check-and-mutate without mutations: read the condition.
                return Ok(row_matches(ctx, table, predicate, row).await? == on_match);
            }
            check_and_mutate_row(ctx, table, predicate, on_match, row, changes).await
        })
    }
}

/// Whether `row` has a cell `predicate` passes.
async fn row_matches(ctx: Ctx, table: String, predicate: pb::RowFilter, row: Bytes) -> Result<bool> {
    let message = pb::ReadRowsRequest {
        table_name: ctx.table_name(&table),
        app_profile_id: ctx.app_profile.clone(),
        rows: Some(pb::RowSet { row_keys: vec![row], row_ranges: Vec::new() }),
        filter: Some(predicate),
        ..Default::default()
    };
    let (tx, mut rx) = mpsc::channel(1);
    read_rows(ctx, table, message, tx).await;
    match rx.recv().await {
        Some(Ok(_)) => Ok(true),
        Some(Err(e)) => Err(e),
        None => Ok(false),
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
        let ctx = self.inner.ctx.clone();
        let table = table.to_string();
        self.run(async move {
            for call in calls(entries) {
                mutate_rows(ctx.clone(), table.clone(), call).await?;
            }
            Ok(())
        })
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
        for row in (Rows { rx, window, left: None }) {
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
        Ok(Box::new(Rows { rx, window, left: spec.limit }))
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
                .map_err(|s| rpc_error("ReadModifyWriteRow", &table, Some(&row), &s))?;
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
