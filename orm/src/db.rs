//! [`Db`]: a store plus the repositories over it, and what the calls to the store cost.
//!
//! Every `Db` meters its store ([`Metered`]), so that [`Db::costs`] and [`Db::measure`] can
//! tell how many round trips, rows, cells and bytes an operation took — the numbers tests,
//! examples and benches compare storage strategies on.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cellar_engine::{Engine, EngineOptions};

use crate::entity::Entity;
use crate::record::Record;
use crate::repo::{Records, Repository};
use crate::store::{Costs, EmbeddedStore, FamilySpec, Latencies, Metered, Store, TableSpec};
use crate::Result;

/// A database: the entry point of the object mapper. Cheap to clone; clones share the store
/// and its cost counters.
#[derive(Clone)]
pub struct Db {
    /// `metered`, as the store every repository calls.
    store: Arc<dyn Store>,
    /// Counts the calls to the backend.
    metered: Arc<Metered>,
    /// The schemas this `Db` (and its clones) found current or older in the catalog, as JSON:
    /// a type is compared with the catalog once per `Db`, not at every `repo()`.
    registered: Arc<parking_lot::Mutex<std::collections::HashMap<String, crate::catalog::Registration>>>,
    /// The embedded engine, when the `Db` opened one: what [`Db::stats`] reports on.
    engine: Option<Engine>,
    /// Keeps a temporary database's directory alive as long as the `Db`.
    _temp: Option<Arc<tempfile::TempDir>>,
}

/// A snapshot of a database for an application to print or serve: what the store calls cost
/// and how long they took since the `Db` was opened, and, on the embedded engine, how the
/// engine stands. From [`Db::stats`]; its `Display` is a few lines of text.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DbStats {
    /// Round trips, rows, cells and bytes ([`Db::costs`]).
    pub costs: Costs,
    /// Store-call latencies by kind, of the calls tracked ([`Db::latencies`]).
    pub latencies: Latencies,
    /// The embedded engine's tables, memstores, log, cache and background work; `None` on
    /// another backend, or for a `Db` made with [`Db::with_store`].
    pub engine: Option<cellar_engine::EngineStats>,
}

/// `costs: …`, the latencies (one line per kind of call made), then the engine's lines.
impl std::fmt::Display for DbStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "costs: {}\n{}", self.costs, self.latencies)?;
        if let Some(engine) = &self.engine {
            write!(f, "\n{engine}")?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("temporary", &self._temp.is_some()).finish_non_exhaustive()
    }
}

impl Db {
    /// Opens (or creates) an embedded database in `dir` with default engine options.
    ///
    /// # Errors
    /// Engine errors opening the directory (I/O, corruption).
    pub fn open(dir: impl AsRef<Path>) -> Result<Db> {
        Self::open_with(dir, EngineOptions::default())
    }

    /// Opens an embedded database with engine options.
    ///
    /// # Errors
    /// As [`Db::open`].
    pub fn open_with(dir: impl AsRef<Path>, options: EngineOptions) -> Result<Db> {
        let engine = Engine::open(dir, options)?;
        Ok(Db::metered(Arc::new(EmbeddedStore::new(engine.clone())), Some(engine), None))
    }

    /// An embedded database in a fresh temporary directory, removed when the last clone is
    /// dropped: for tests and examples.
    ///
    /// # Errors
    /// I/O errors creating the directory.
    pub fn open_temporary() -> Result<Db> {
        let dir =
            tempfile::tempdir().map_err(|e| cellar_engine::Error::Io { path: std::env::temp_dir(), source: e })?;
        let engine = Engine::open(dir.path(), EngineOptions::default())?;
        Ok(Db::metered(Arc::new(EmbeddedStore::new(engine.clone())), Some(engine), Some(Arc::new(dir))))
    }

    /// Connects to Cloud Bigtable: `bigtable://projects/{project}/instances/{instance}`, with
    /// an optional `?app_profile={id}`. With `BIGTABLE_EMULATOR_HOST` set (`host:port`), talks
    /// to that emulator in plaintext, as Google's clients do; otherwise to Cloud Bigtable with
    /// application-default credentials (`GOOGLE_APPLICATION_CREDENTIALS`, `gcloud auth
    /// application-default login`, or the metadata server). For more settings build a
    /// [`crate::store::BigtableStore`] and pass it to [`Db::with_store`].
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] for a malformed address; [`crate::Error::Remote`] if
    /// the endpoint cannot be reached within the connect timeout (10 s).
    #[cfg(feature = "bigtable")]
    pub fn connect(url: &str) -> Result<Db> {
        let store = crate::store::BigtableStore::connect_url(url)?;
        Ok(Db::metered(Arc::new(store), None, None))
    }

    /// A database over any [`Store`] backend, metered like every `Db`.
    pub fn with_store(store: Arc<dyn Store>) -> Db {
        Db::metered(store, None, None)
    }

    fn metered(backend: Arc<dyn Store>, engine: Option<Engine>, temp: Option<Arc<tempfile::TempDir>>) -> Db {
        let metered = Arc::new(Metered::new(backend));
        Db { store: metered.clone(), metered, registered: Default::default(), engine, _temp: temp }
    }

    /// The store underneath, metered: calls made through it count in [`Db::costs`].
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// What the calls to the store have cost since this `Db` was opened (by it and by all its
    /// clones, repositories and streams). The counting rules are on [`Costs`].
    pub fn costs(&self) -> Costs {
        self.metered.costs()
    }

    /// Runs `f` and returns its result with what the calls to the store cost meanwhile: the
    /// difference of [`Db::costs`] after and before. The counters belong to the `Db`, not to
    /// the thread, so work other threads do on this `Db` (or its clones) while `f` runs is
    /// included; and scan rows count when they are pulled, so a stream `f` returns unread
    /// counts its rows later, outside the measurement.
    pub fn measure<T>(&self, f: impl FnOnce() -> T) -> (T, Costs) {
        let before = self.costs();
        let value = f();
        (value, self.costs() - before)
    }

    /// How long the calls to the store took, per kind of call: histograms with their
    /// quantiles ([`Latencies`]), of the calls made while latencies were tracked
    /// ([`Db::track_latencies`]) or measured ([`Db::measure_timed`]). Beside [`Db::costs`],
    /// which counts what the calls moved.
    pub fn latencies(&self) -> Latencies {
        self.metered.latencies()
    }

    /// Records the latency of every store call into [`Db::latencies`] from now on (`true`),
    /// or stops (`false`, the default). Shared by this `Db`'s clones. Off, a call is timed
    /// only when something else wants its time (a subscriber recording its span, the
    /// slow-call threshold, the `metrics` feature): two clock reads are about 1.5–2 % of an
    /// embedded put, too much to pay for nothing.
    pub fn track_latencies(&self, on: bool) {
        self.metered.track_latencies(on);
    }

    /// As [`Db::measure`], with how long the store calls made meanwhile took: their
    /// latencies are recorded while `f` runs, tracked or not (other threads' calls on this
    /// `Db` included, as for the costs).
    pub fn measure_timed<T>(&self, f: impl FnOnce() -> T) -> (T, Costs, Latencies) {
        let (costs, latencies) = (self.costs(), self.latencies());
        let value = self.metered.timing(f);
        (value, self.costs() - costs, &self.latencies() - &latencies)
    }

    /// Store calls that take `threshold` or longer log one WARN each (message `slow store
    /// call`, with the call, table, first row, what it moved and how long it took); `None`,
    /// the default, logs none. Shared by this `Db`'s clones.
    pub fn set_slow_call_threshold(&self, threshold: Option<Duration>) {
        self.metered.set_slow_call_threshold(threshold);
    }

    /// A snapshot of this database: costs, latencies and, on the embedded engine, the
    /// engine's figures ([`DbStats`]). With the `metrics` feature, also publishes the engine's
    /// gauges (its background publishes them too, about once a second).
    pub fn stats(&self) -> DbStats {
        #[cfg(feature = "metrics")]
        if let Some(engine) = &self.engine {
            engine.publish_metrics();
        }
        DbStats { costs: self.costs(), latencies: self.latencies(), engine: self.engine.as_ref().map(Engine::stats) }
    }

    /// The slow-call threshold, if one is set ([`Db::set_slow_call_threshold`]).
    pub fn slow_call_threshold(&self) -> Option<Duration> {
        self.metered.slow_call_threshold()
    }

    /// The repository of entity `E`: creates its table and families if missing, and checks
    /// that an existing table fits. That check is one admin call to the store each time
    /// ([`Costs::admin`]); keep the repository (it is cheap to clone) rather than asking again.
    ///
    /// The first time a `Db` opens `E`, its schema is compared with the one the schema catalog
    /// holds for it ([`crate::catalog`]) and recorded if it changed compatibly. That exchange
    /// with the catalog is control-plane work and is not counted in [`Db::costs`].
    ///
    /// # Errors
    /// [`crate::Error::SchemaMismatch`] for families whose settings differ (see
    /// [`Db::alter`]); [`crate::Error::SchemaIncompatible`] for a schema the table's rows do not
    /// fit; store errors.
    pub fn repo<E: Entity>(&self) -> Result<Repository<E>> {
        if E::STANDALONE {
            let declared = crate::catalog::describe::entity(&E::SCHEMA);
            self.ensure_table_for(&table_spec(&E::SCHEMA), &declared)?;
            self.register(&declared)?;
        } else {
            self.store.ensure_table(&table_spec(&E::SCHEMA))?;
        }
        Repository::open(self.store.clone())
    }

    /// Creates or checks the table `declared` needs. Families a newer release altered (more
    /// versions, another TTL) are no reason to refuse an older release: it reads and writes
    /// them as they are.
    pub(crate) fn ensure_table_for(&self, spec: &TableSpec, declared: &crate::catalog::TypeSchema) -> Result<()> {
        match self.store.ensure_table(spec) {
            Err(crate::Error::SchemaMismatch { .. })
                if crate::catalog::is_older(self.metered.inner().as_ref(), declared)? =>
            {
                // The families as the table keeps them; anything else must still fit.
                let Some(existing) = self.store.describe(&spec.name)? else { return self.store.ensure_table(spec) };
                let mut spec = spec.clone();
                for family in &mut spec.families {
                    if let Some(kept) = existing.families.iter().find(|f| f.name == family.name) {
                        *family = kept.clone();
                    }
                }
                self.store.ensure_table(&spec)
            }
            other => other,
        }
    }

    /// Compares `declared` with the catalog (once per `Db` and schema), recording it if new.
    pub(crate) fn register(&self, declared: &crate::catalog::TypeSchema) -> Result<crate::catalog::Registration> {
        let json = serde_json::to_string(declared)
            .map_err(|e| crate::Error::Store(format!("encoding the schema of {}: {e}", declared.name)))?;
        if let Some(known) = self.registered.lock().get(&json) {
            return Ok(known.clone());
        }
        let registration = crate::catalog::register(self.metered.inner().as_ref(), declared)?;
        self.registered.lock().insert(json, registration.clone());
        Ok(registration)
    }

    /// Forgets what this `Db` knows of the catalog, so the next `repo()` compares again.
    pub(crate) fn forget_registrations(&self) {
        self.registered.lock().clear();
    }

    /// Advice on entity `E`'s schema (see [`crate::advice`]), and on the regions of its table
    /// if it exists: pre-split regions none of its keys can reach.
    ///
    /// # Errors
    /// Store errors.
    pub fn advise<E: Entity>(&self) -> Result<Vec<crate::Advice>> {
        let mut advice = E::SCHEMA.advice();
        if let Some(splits) = self.store.split_keys(E::SCHEMA.table)? {
            advice.extend(E::SCHEMA.split_advice(&splits));
        }
        Ok(advice)
    }

    /// The records of the single-table design `R`: creates the table with every member's
    /// families if missing, and checks that an existing table fits each member.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] for a record type without members; as [`Db::repo`].
    pub fn records<R: Record>(&self) -> Result<Records<R>> {
        let first = R::MEMBERS.first().copied().ok_or_else(|| crate::Error::InvalidArgument {
            arg: "record",
            reason: format!("{} has no member entities", R::NAME),
        })?;
        for (i, schema) in R::MEMBERS.iter().enumerate() {
            // The catalog tells the types of a table apart by name.
            if R::MEMBERS[..i].iter().any(|m| m.entity == schema.entity) {
                return Err(crate::Error::InvalidArgument {
                    arg: "record",
                    reason: format!(
                        "{} has two members named {}: the schema catalog tells a table's types apart by name; \
                         rename one",
                        R::NAME,
                        schema.entity
                    ),
                });
            }
        }
        for schema in R::MEMBERS {
            let declared = crate::catalog::describe::entity(schema);
            self.ensure_table_for(&table_spec(schema), &declared)?;
            self.register(&declared)?;
        }
        Ok(Records::new(self.store.clone(), first))
    }
}

/// The table an entity needs, pre-split at its salt buckets.
pub(crate) fn table_spec(schema: &crate::entity::Schema) -> TableSpec {
    let families = schema
        .families
        .iter()
        .map(|f| FamilySpec { name: f.name.to_string(), max_versions: f.max_versions, ttl_secs: f.ttl_secs })
        .collect();
    let split_keys = (1..schema.salt.buckets()).map(|b| vec![b]).collect();
    TableSpec {
        name: schema.table.to_string(),
        families,
        split_keys,
        split_policy: Default::default(),
        deferred: false,
    }
}
