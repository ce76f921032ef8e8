//! [`Store`] and [`AsyncStore`] on Cloud Bigtable (and its emulator), over gRPC.
//!
//! The backend owns a small tokio runtime; every call runs as a task there, and its future
//! awaits the task (see `nonblocking`). The synchronous `Store` drives those same futures on
//! the calling thread, so each call is written once. What differs from the embedded engine,
//! and how it is bridged:
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
//! repeated, how long it waits), `nonblocking` (calls as tasks, and the `AsyncStore` they
//! make), `tables` (table and family administration), `read` (ReadRows requests, streams and
//! scan cursors), `merge` (cell chunks into rows), `filters` (a read's filter), `write`
//! (MutateRows batches), `conditional` (CheckAndMutateRow), `gc` (family limits as GC rules).
//! This module holds the store, what its calls share, and its `Store` implementation.

mod client;
mod conditional;
mod filters;
mod gc;
mod merge;
mod nonblocking;
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

use self::client::{rpc_error, Ctx, Rpc};
use self::merge::{Chunk, RowMerger};
use self::nonblocking::OnDrop;
use self::read::*;
use self::retry::{transient, unrepeatable_error};
use self::tables::*;
use self::url::*;
use self::write::*;
use super::drive::drive;
use super::{
    AsyncStore, CellMutation, Commit, Condition, FamilyAlteration, FamilyChange, FamilySettings, FamilySpec,
    Guarantees, ReadSpec, Row, RowCheck, RowMutation, RowStream, ScanSpec, Store, TableSpec,
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

/// Cloud Bigtable (or its emulator) as a [`Store`] and an [`AsyncStore`]. Cheap to clone;
/// clones share the connection.
#[derive(Clone)]
pub struct BigtableStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// `Some` until dropped: shut down in the background, so dropping the store inside an
    /// async context does not panic.
    runtime: Option<Runtime>,
    conn: Conn,
}

/// What a call's task takes along. Never the runtime: a task holding the store's last handle
/// would shut the runtime down from inside itself.
#[derive(Clone)]
struct Conn {
    ctx: Ctx,
    /// Bulk writes in flight, across every caller.
    flow: Arc<FlowControl>,
    /// Each table's families as Bigtable keeps them, for read filters.
    families: Arc<RwLock<HashMap<String, Arc<[FamilySpec]>>>>,
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
        f.debug_struct("BigtableStore").field("instance", &self.inner.conn.ctx.instance).finish_non_exhaustive()
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
            drive(runtime.spawn(async move { Ctx::connect(&options).await }))
                .map_err(|e| Error::Store(format!("connecting to Bigtable: {e}")))??
        };
        let flow = Arc::new(FlowControl::new(CALLS_IN_FLIGHT, BYTES_IN_FLIGHT));
        let conn = Conn { ctx, flow, families: Arc::default() };
        Ok(BigtableStore { inner: Arc::new(Inner { runtime: Some(runtime), conn }) })
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
        self.inner.conn.ctx.rpcs.snapshot()
    }

    /// Deletes a table and its data (tests, copies that start over).
    ///
    /// # Errors
    /// [`Error::Remote`]; a missing table is not an error.
    pub fn drop_table(&self, table: &str) -> Result<()> {
        let ctx = self.inner.conn.ctx.clone();
        let name = ctx.table_name(table);
        let table_owned = table.to_string();
        self.inner.conn.families.write().remove(table);
        drive(self.call(OnDrop::Finish, async move {
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
        }))
    }

    /// The runtime calls run on (present until the store is dropped).
    fn runtime(&self) -> Result<&Runtime> {
        self.inner.runtime.as_ref().ok_or_else(|| Error::Store("the Bigtable client is closed".into()))
    }
}

impl Conn {
    /// The families of `table` as Bigtable keeps them: cached, read with GetTable on a miss.
    async fn families(&self, table: &str) -> Result<Arc<[FamilySpec]>> {
        if let Some(families) = self.cached(table) {
            return Ok(families);
        }
        let families = get_table(&self.ctx, table).await?.ok_or_else(|| Error::Remote {
            rpc: "GetTable",
            table: table.to_string(),
            row: None,
            code: "NotFound".into(),
            message: "no such table".into(),
        })?;
        Ok(self.remember(table, families))
    }

    /// The families of `table` if they are cached.
    fn cached(&self, table: &str) -> Option<Arc<[FamilySpec]>> {
        self.families.read().get(table).cloned()
    }

    /// Caches `families` as the families of `table`.
    fn remember(&self, table: &str, families: Vec<FamilySpec>) -> Arc<[FamilySpec]> {
        let families: Arc<[FamilySpec]> = families.into();
        self.families.write().insert(table.to_string(), families.clone());
        families
    }

    /// The family of `table` named `family`, which a condition reads.
    async fn family(&self, table: &str, family: &[u8]) -> Result<FamilySpec> {
        let families = self.families(table).await?;
        families.iter().find(|f| f.name.as_bytes() == family).cloned().ok_or_else(|| Error::Remote {
            rpc: "CheckAndMutateRow",
            table: table.to_string(),
            row: None,
            code: "NotFound".into(),
            message: format!("no column family `{}`", String::from_utf8_lossy(family)),
        })
    }
}

/// Each synchronous call drives the asynchronous one (see `nonblocking`), so that each RPC's
/// retries, errors, flow control and family lookups exist once.
impl Store for BigtableStore {
    fn ensure_table(&self, spec: &TableSpec) -> Result<()> {
        drive(AsyncStore::ensure_table(self, spec))
    }

    /// As [`Store::alter_families`]: one ModifyColumnFamilies call that updates the GC rules
    /// of existing families and creates missing ones. Compression and bloom filters are
    /// Bigtable's to manage: a change naming them is accepted, and that part ignored. Reads
    /// through this store use the new limits at once; other clients of the instance keep
    /// filtering their reads by the limits they last read (until their next `ensure_table`),
    /// while Bigtable collects by the new ones.
    fn alter_families(&self, table: &str, changes: &[FamilyChange]) -> Result<Vec<FamilyAlteration>> {
        drive(AsyncStore::alter_families(self, table, changes))
    }

    fn mutate(&self, table: &str, rows: Vec<RowMutation>) -> Result<()> {
        drive(AsyncStore::mutate(self, table, rows))
    }

    fn mutate_row(&self, table: &str, row: RowMutation) -> Result<()> {
        drive(AsyncStore::mutate_row(self, table, row))
    }

    fn read_rows(&self, table: &str, rows: &[Bytes], read: &ReadSpec) -> Result<Vec<Option<Row>>> {
        drive(AsyncStore::read_rows(self, table, rows, read))
    }

    /// The rows of the scan cursor the asynchronous API lends, each waited for in turn.
    fn scan<'a>(&'a self, table: &str, spec: &ScanSpec) -> Result<RowStream<'a>> {
        Ok(Box::new(drive(self.open_scan(table, spec))?))
    }

    fn check_and_mutate(&self, table: &str, condition: Condition, mutation: RowMutation) -> Result<bool> {
        drive(AsyncStore::check_and_mutate(self, table, condition, mutation))
    }

    fn check_and_mutate_many(&self, table: &str, entries: Vec<(Condition, RowMutation)>) -> Result<Vec<bool>> {
        drive(AsyncStore::check_and_mutate_many(self, table, entries))
    }

    fn describe(&self, table: &str) -> Result<Option<TableSpec>> {
        drive(AsyncStore::describe(self, table))
    }

    fn split_keys(&self, table: &str) -> Result<Option<Vec<Bytes>>> {
        drive(AsyncStore::split_keys(self, table))
    }

    fn increment(&self, table: &str, row: Bytes, family: &str, qualifier: &str, delta: i64) -> Result<i64> {
        drive(AsyncStore::increment(self, table, row, family, qualifier, delta))
    }

    fn guarantees(&self) -> Guarantees {
        AsyncStore::guarantees(self)
    }

    fn as_async(&self) -> Option<&dyn AsyncStore> {
        Some(self)
    }

    fn mutate_group(&self, table: &str, checks: Vec<RowCheck>, rows: Vec<RowMutation>) -> Result<bool> {
        drive(AsyncStore::mutate_group(self, table, checks, rows))
    }

    fn commit(&self, commit: Commit) -> Result<bool> {
        drive(AsyncStore::commit(self, commit))
    }

    /// Unsupported, as [`AsyncStore::read_and_commit`] (whose builder must be `Send`, which
    /// this one need not be).
    fn read_and_commit(
        &self,
        _table: &str,
        _row: &Bytes,
        _read: &ReadSpec,
        _build: &mut dyn FnMut(Option<&Row>) -> Option<Commit>,
    ) -> Result<Option<bool>> {
        Err(nonblocking::no_read_and_commit())
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
