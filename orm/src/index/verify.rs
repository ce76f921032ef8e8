//! Verification and repair of an index against its data: every data row's entry must be in
//! the index, verified, with the right copies; every index row must be implied by its data
//! row; a unique value must belong to one entity.
//!
//! Two passes — the data rows, then the index rows — each reading the other side in batches.
//! Repairs go through the same steps as writes and reads (entries are rebuilt with the write
//! protocol, leftovers removed with a check-and-mutate on the state read), so a repair run
//! while the application writes undoes nothing it did.

use std::fmt;

use bytes::Bytes;

use super::entry::{self, IndexRow, State};
use super::fence::{self, Fenced};
use super::{Change, Index, IndexedWrite};
use crate::entity::Entity;
use crate::repo::{printable, AsyncRepository, Repository};
use crate::store::drive::drive;
use crate::store::{AsyncStore, AsyncView, Inline};
use crate::store::{CellMutation, ReadSpec, Row, RowMutation, ScanSpec};
use crate::{writer, Error, Result};

/// Rows checked per batch of reads of the other side.
const BATCH: usize = 256;

/// What verification found (and repair fixed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// The index.
    pub index: &'static str,
    /// Data rows of the entity read.
    pub data_rows: u64,
    /// Index rows read.
    pub index_rows: u64,
    /// Data rows whose entry the index lacks.
    pub missing: u64,
    /// Index rows whose copies differ from their data row's.
    pub outdated: u64,
    /// Index rows no data row implies (the entity changed or is gone).
    pub stale: u64,
    /// Index rows still unverified (writes in flight, or left by a crash).
    pub unverified: u64,
    /// Data rows holding a unique value another entity holds.
    pub violations: u64,
    /// Problems fixed (repair only).
    pub repaired: u64,
    /// Problems repair tried and could not fix (repair only): an entry whose unique value
    /// another entity's entry holds, perhaps a write still in flight.
    pub unfixed: u64,
    /// The first problems, by row, for the report.
    pub examples: Vec<String>,
    /// Why each of the first [`VerifyReport::unfixed`] problems was not fixed: the row, and
    /// what stood in the way.
    pub unfixed_reasons: Vec<String>,
}

impl VerifyReport {
    /// True if the index holds exactly what the data implies.
    pub fn is_clean(&self) -> bool {
        self.missing + self.outdated + self.stale + self.unverified + self.violations == 0
    }
}

impl fmt::Display for VerifyReport {
    /// A two-column table.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows = [
            ("data rows", self.data_rows),
            ("index rows", self.index_rows),
            ("missing entries", self.missing),
            ("outdated copies", self.outdated),
            ("stale entries", self.stale),
            ("unverified entries", self.unverified),
            ("unique violations", self.violations),
            ("repaired", self.repaired),
            ("not repaired", self.unfixed),
        ];
        writeln!(f, "index {}", self.index)?;
        for (what, n) in rows {
            writeln!(f, "  {what:<20} {n:>10}")?;
        }
        for example in &self.examples {
            writeln!(f, "  - {example}")?;
        }
        for reason in &self.unfixed_reasons {
            writeln!(f, "  ! {reason}")?;
        }
        Ok(())
    }
}

const MAX_EXAMPLES: usize = 20;

/// A verification (and optional repair) of one index; from [`Repository::verify_index`].
pub struct Verify<'a, E> {
    repo: &'a Repository<E>,
    position: usize,
    repair: bool,
}

impl<E: Entity> Repository<E> {
    /// A job that checks `index` against the data (see [`crate::index`]); add
    /// [`Verify::repair`] to fix what it finds.
    pub fn verify_index<V>(&self, index: Index<E, V>) -> Verify<'_, E> {
        Verify { repo: self, position: index.position(), repair: false }
    }
}

impl<E: Entity> Verify<'_, E> {
    /// Fixes what verification finds: missing and outdated entries rebuilt, stale ones
    /// deleted, abandoned unverified ones settled. Unique violations are reported only: which
    /// entity keeps the value is the application's call. An entry whose unique value another
    /// entity's entry took meanwhile stays as it is, counted in [`VerifyReport::unfixed`] with
    /// the holder and why its hold stands (a write in flight, or a unique violation).
    pub fn repair(mut self) -> Self {
        self.repair = true;
        self
    }

    /// Runs both passes.
    ///
    /// # Errors
    /// Store errors.
    pub fn run(self) -> Result<VerifyReport> {
        let store = self.repo.store();
        drive(self.run_via(&Inline(store)))
    }

    async fn run_via(self, store: &dyn AsyncStore) -> Result<VerifyReport> {
        let schema = &E::SCHEMA;
        let mut report = VerifyReport { index: schema.indexes[self.position].name, ..VerifyReport::default() };
        // Pass 1: every data row's entry.
        let mut batch = Vec::new();
        let everything = ScanSpec::default();
        let mut rows = store.scan_cursor(schema.table, &everything).await?;
        while rows.advance().await? {
            let Some(row) = rows.row() else { break };
            if super::is_other_record_type::<E>(&row.to_row()) || entry::is_tombstone(schema, row) {
                continue;
            }
            report.data_rows += 1;
            batch.push(row.to_row());
            if batch.len() == BATCH {
                self.check_data(store, std::mem::take(&mut batch), &mut report).await?;
            }
        }
        drop(rows);
        self.check_data(store, batch, &mut report).await?;
        // Pass 2: every index row.
        let spec = entry::index_range(schema, &schema.indexes[self.position]);
        let table = super::index_table(schema.table);
        let mut batch = Vec::new();
        let mut rows = store.scan_cursor(&table, &spec).await?;
        while rows.advance().await? {
            let Some(row) = rows.row() else { break };
            report.index_rows += 1;
            batch.push(row.to_row());
            if batch.len() == BATCH {
                self.check_index(store, std::mem::take(&mut batch), &mut report).await?;
            }
        }
        drop(rows);
        self.check_index(store, batch, &mut report).await?;
        Ok(report)
    }

    fn note(report: &mut VerifyReport, what: String) {
        if report.examples.len() < MAX_EXAMPLES {
            report.examples.push(what);
        }
    }

    /// Rebuilds the entry `want` of data row `row` (a `problem`: missing or outdated); counts
    /// it repaired, or unfixed with the reason.
    async fn rebuild(
        &self,
        store: &dyn AsyncStore,
        row: &Bytes,
        want: &entry::Entry,
        problem: &str,
        report: &mut VerifyReport,
    ) -> Result<()> {
        if !self.repair {
            return Ok(());
        }
        let write = IndexedWrite {
            store,
            schema: &E::SCHEMA,
            row: row.clone(),
            change: Change::Rebuild(self.position),
            version: super::Version::Untouched,
        };
        match write.run().await {
            Ok(_) => report.repaired += 1,
            Err(Error::UniqueViolation { index, value, .. }) => {
                // Another entity's entry took the value since this pass read the index.
                let holder = self.holder_of(store, want).await?;
                report.unfixed += 1;
                if report.unfixed_reasons.len() < MAX_EXAMPLES {
                    report.unfixed_reasons.push(format!(
                        "{problem}: entry of row {} not rebuilt: value {value} of index `{index}` is {holder}",
                        printable(row)
                    ));
                }
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Who holds the index row `want` would have taken, and why it stands, for a report.
    async fn holder_of(&self, store: &dyn AsyncStore, want: &entry::Entry) -> Result<String> {
        let (table, read) = (super::index_table(E::SCHEMA.table), ReadSpec::default());
        let rows = store.read_rows(&table, std::slice::from_ref(&want.key), &read).await?;
        let Some(holder) = rows.into_iter().flatten().next().as_ref().and_then(entry::parse_row) else {
            return Ok("taken by a write that has since let it go (repair again)".to_string());
        };
        let why = match holder.state {
            State::Verified => "its entity holds the value: a unique violation",
            State::Unverified { owner, deadline_ms } if !writer::gone(owner, deadline_ms, store.guarantees()) => {
                "a write in flight: repair again once it is done"
            }
            State::Unverified { .. } => "a write that did not finish, whose entity holds the value",
        };
        Ok(format!("held by row {} ({why})", printable(&holder.primary)))
    }

    async fn check_data(&self, store: &dyn AsyncStore, rows: Vec<Row>, report: &mut VerifyReport) -> Result<()> {
        let schema = &E::SCHEMA;
        let expected: Vec<(Bytes, entry::Entry)> =
            rows.iter().filter_map(|r| Some((r.key.clone(), entry::entry_of_row(schema, r, self.position)?))).collect();
        let keys: Vec<Bytes> = expected.iter().map(|(_, e)| e.key.clone()).collect();
        let (table, read) = (super::index_table(schema.table), ReadSpec::default());
        let found = store.read_rows(&table, &keys, &read).await?;
        for ((row, want), have) in expected.iter().zip(found) {
            match have.as_ref().and_then(entry::parse_row) {
                None => {
                    report.missing += 1;
                    Self::note(report, format!("missing: entry of row {}", printable(row)));
                    self.rebuild(store, row, want, "missing", report).await?;
                }
                Some(have) if have.primary != want.primary => {
                    // A unique value another entity holds in the index.
                    report.violations += 1;
                    Self::note(
                        report,
                        format!(
                            "unique violation: rows {} and {} hold one value",
                            printable(row),
                            printable(&have.primary)
                        ),
                    );
                }
                Some(have) if have.state != State::Verified => {
                    // Counted (and settled) in the index pass.
                }
                Some(have) if !entry::matches(&have, want) => {
                    report.outdated += 1;
                    Self::note(report, format!("outdated: entry of row {}", printable(row)));
                    self.rebuild(store, row, want, "outdated", report).await?;
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    async fn check_index(&self, store: &dyn AsyncStore, rows: Vec<Row>, report: &mut VerifyReport) -> Result<()> {
        let schema = &E::SCHEMA;
        let parsed: Vec<(Row, Option<IndexRow>)> = rows
            .into_iter()
            .map(|r| {
                let p = entry::parse_row(&r);
                (r, p)
            })
            .collect();
        let primaries: Vec<Bytes> = parsed.iter().filter_map(|(_, p)| p.as_ref().map(|p| p.primary.clone())).collect();
        let read = schema.read_spec();
        let mut data = store.read_rows(schema.table, &primaries, &read).await?.into_iter();
        let mut fixes = Vec::new();
        let mut fenced = Vec::new();
        for (raw, parsed) in parsed {
            let raw_state = raw.value(entry::FAMILY, "s").map(Bytes::copy_from_slice);
            let Some(index_row) = parsed else {
                report.stale += 1;
                Self::note(report, format!("damaged index row {}", printable(&raw.key)));
                fixes.push((
                    entry::state_is(raw_state),
                    RowMutation { row: raw.key, mutations: vec![CellMutation::DeleteRow] },
                ));
                continue;
            };
            let data_row = data.next().flatten();
            let implied = data_row.as_ref().and_then(|r| entry::entry_of_row(schema, r, self.position));
            let holds = implied.as_ref().is_some_and(|e| e.key == index_row.key && e.primary == index_row.primary);
            if index_row.state != State::Verified {
                report.unverified += 1;
                Self::note(report, format!("unverified: index row {}", printable(&index_row.key)));
                if let Some(s) = entry::settle_abandoned(schema, &index_row, implied.as_ref(), store.guarantees()) {
                    fenced.push(Fenced::new(schema, index_row.primary.clone(), data_row.as_ref(), s));
                }
            } else if !holds {
                report.stale += 1;
                Self::note(
                    report,
                    format!("stale: index row {} (row {})", printable(&index_row.key), printable(&index_row.primary)),
                );
                fixes.push((
                    entry::state_is(raw_state),
                    RowMutation { row: index_row.key.clone(), mutations: vec![CellMutation::DeleteRow] },
                ));
            }
        }
        if self.repair && !fixes.is_empty() {
            let tried = fixes.len();
            let applied = store.check_and_mutate_many(&super::index_table(schema.table), fixes).await?;
            let repaired = applied.iter().filter(|&&a| a).count();
            report.repaired += repaired as u64;
            tracing::info!(entity = schema.entity, table = schema.table, repaired, tried, "index rows repaired");
        }
        if self.repair {
            report.repaired += fence::settle(store, schema, fenced).await? as u64;
        }
        Ok(())
    }
}

/// A verification (and optional repair) of one index through futures; from
/// [`AsyncRepository::verify_index`]. Runs what [`Verify`] runs.
pub struct AsyncVerify<'a, E> {
    verify: Verify<'a, E>,
    store: &'a AsyncView,
}

impl<E: Entity> AsyncRepository<E> {
    /// As [`Repository::verify_index`].
    pub fn verify_index<V>(&self, index: Index<E, V>) -> AsyncVerify<'_, E> {
        let (repo, store) = self.parts();
        AsyncVerify { verify: repo.verify_index(index), store }
    }
}

impl<E: Entity> AsyncVerify<'_, E> {
    /// As [`Verify::repair`].
    pub fn repair(mut self) -> Self {
        self.verify = self.verify.repair();
        self
    }

    /// As [`Verify::run`].
    ///
    /// # Errors
    /// Store errors.
    pub async fn run(self) -> Result<VerifyReport> {
        self.verify.run_via(self.store.get()).await
    }
}
