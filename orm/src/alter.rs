//! Changing the settings of a table's families: [`Db::alter`] with settings of your choosing,
//! [`Db::alter_to`] with an entity's declared ones.
//!
//! [`Db::repo`] refuses an existing table whose families keep other settings than the entity
//! declares (a [`crate::Error::SchemaMismatch`]): an entity that now keeps three versions
//! instead of one, or lost its TTL. These calls are the way forward: they change the table's
//! families in place, keeping the data, and report what changed.
//!
//! ```
//! use std::time::Duration;
//! # fn main() -> cellar_orm::Result<()> {
//! # let db = cellar_orm::Db::open_temporary()?;
//! # db.store().ensure_table(&cellar_orm::store::TableSpec {
//! #     name: "events".into(),
//! #     families: vec![cellar_orm::store::FamilySpec { name: "d".into(), max_versions: 1, ttl_secs: None }],
//! #     split_keys: Vec::new(),
//! #     split_policy: Default::default(),
//! #     deferred: false,
//! # })?;
//! let report = db.alter("events").family("d", |f| f.max_versions(3).ttl(Duration::from_secs(86_400))).run()?;
//! assert_eq!(report.to_string(), "table `events`: family `d`: 1 version, no TTL → 3 versions, TTL 86400 s");
//! # Ok(()) }
//! ```

use std::fmt;

use crate::db::table_spec;
use crate::entity::Entity;
use crate::store::{FamilyAlteration, FamilyChange};
use crate::{Db, Result};

/// Changes to the families of one table, applied by [`Alter::run`]: what [`Db::alter`] starts.
#[derive(Debug)]
#[must_use = "an alter changes nothing until it is run"]
pub struct Alter<'a> {
    db: &'a Db,
    table: String,
    changes: Vec<FamilyChange>,
}

impl Alter<'_> {
    /// Changes family `name` as `change` says, starting from a change that names nothing:
    /// `|f| f.max_versions(3).no_ttl()`. Settings it does not name stay as they are; a family
    /// the table lacks is created. Naming a family twice merges the changes, the later one
    /// winning where both name a setting.
    pub fn family(mut self, name: &str, change: impl FnOnce(FamilyChange) -> FamilyChange) -> Self {
        let (start, at) = match self.changes.iter().position(|c| c.name == name) {
            Some(i) => (self.changes.remove(i), i),
            None => (FamilyChange::new(name), self.changes.len()),
        };
        let mut changed = change(start);
        // The closure may not rename the family it was given.
        changed.name = name.to_string();
        self.changes.insert(at, changed);
        self
    }

    /// Applies every change at once (one admin call to the store, which applies all of them
    /// or none) and reports the families whose settings changed. On Bigtable, compression and
    /// bloom filter settings are accepted and ignored: Bigtable manages both (see
    /// [`crate::Store::alter_families`]).
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] for a table that does not exist, max versions 0 or a
    /// zero TTL; the store's error for a family name it refuses; store errors. Nothing changes
    /// when any change is refused.
    pub fn run(self) -> Result<AlterReport> {
        let done = self.db.store().alter_families(&self.table, &self.changes)?;
        Ok(AlterReport::new(self.table, done))
    }
}

/// What an alter changed: the families whose settings differ from before, each with its
/// settings before and after. Displays as one line per family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterReport {
    /// The table.
    pub table: String,
    /// The families changed or created, in the order the alter named them; families whose
    /// settings already were as asked are left out.
    pub families: Vec<FamilyAlteration>,
}

impl AlterReport {
    fn new(table: String, done: Vec<FamilyAlteration>) -> Self {
        AlterReport { table, families: done.into_iter().filter(FamilyAlteration::changed).collect() }
    }

    /// True if nothing changed: the families already kept the settings asked for (or there was
    /// no table to upgrade, for [`Db::alter_to`]).
    pub fn is_empty(&self) -> bool {
        self.families.is_empty()
    }
}

impl fmt::Display for AlterReport {
    /// `table `t`: family `d`: 1 version, no TTL → 3 versions, no TTL`, a line per family, or
    /// `table `t`: no changes`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.families.as_slice() {
            [] => write!(f, "table `{}`: no changes", self.table),
            [one] => write!(f, "table `{}`: {one}", self.table),
            many => {
                write!(f, "table `{}`:", self.table)?;
                many.iter().try_for_each(|family| write!(f, "\n  {family}"))
            }
        }
    }
}

impl Db {
    /// Starts changing the settings of table `table`'s families: versions kept, TTL, and on the
    /// embedded engine compression and bloom filters. Nothing changes until
    /// [`Alter::run`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn main() -> cellar_orm::Result<()> {
    /// # let db = cellar_orm::Db::open_temporary()?;
    /// let report = db.alter("crm").family("d", |f| f.max_versions(3).ttl(Duration::from_secs(86_400))).run()?;
    /// println!("{report}");
    /// # Ok(()) }
    /// ```
    pub fn alter(&self, table: &str) -> Alter<'_> {
        Alter { db: self, table: table.to_string(), changes: Vec::new() }
    }

    /// Gives entity `E`'s existing table the family settings `E` declares (versions kept and
    /// TTL, `#[cellar(max_versions = ..., ttl = ...)]` and `family_options`), so that
    /// [`Db::repo`] accepts it again: the upgrade after a change of those attributes, made
    /// only when called. Families of the table that `E` does not declare (another record
    /// type's) and settings it has no attribute for (compression, bloom filters) stay as they
    /// are; a declared family the table lacks is created. Without a table there is nothing to
    /// upgrade: the report is empty, and [`Db::repo`] creates the table with the declared
    /// settings. So `db.alter_to::<E>()?` before `db.repo::<E>()?` suits every start.
    ///
    /// # Errors
    /// As [`Alter::run`], a missing table excepted.
    pub fn alter_to<E: Entity>(&self) -> Result<AlterReport> {
        let spec = table_spec(&E::SCHEMA);
        let changes: Vec<FamilyChange> = spec.families.iter().map(declared).collect();
        match self.store().alter_families(&spec.name, &changes) {
            Ok(done) => Ok(AlterReport::new(spec.name, done)),
            // Only a failure asks whether the table exists: an upgrade costs one admin call.
            Err(e) => match self.store().describe(&spec.name) {
                Ok(None) => Ok(AlterReport::new(spec.name, Vec::new())),
                _ => Err(e),
            },
        }
    }
}

/// The change that gives a family the settings an entity declares for it.
fn declared(family: &crate::store::FamilySpec) -> FamilyChange {
    FamilyChange {
        name: family.name.clone(),
        max_versions: Some(family.max_versions),
        ttl_secs: Some(family.ttl_secs),
        compression: None,
        bloom: None,
    }
}
