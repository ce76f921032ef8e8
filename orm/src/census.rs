//! The census of an entity's table: what its rows hold, column by column — the evidence to
//! look at before dropping a field, an earlier qualifier or a default.
//!
//! [`Db::census`] scans the table once, read-only, and counts for every mapped column the
//! rows that hold it under its qualifier, under an earlier one only (`rename_from`,
//! `aliases`), or not at all (and so read as the field's default, if it has one); the widths
//! of plain-value cells (an `i32` widened to `i64`: how many rows still hold 4 bytes); the
//! formats of `#[cellar(blob)]` cells; and the qualifiers no field maps — a dropped field's
//! cells. Rows of other record types and tombstones of deleted entities are skipped, as the
//! repository skips them. Memory stays constant however large the table: every count is per
//! column or per qualifier, and qualifiers past [`MAX_LISTED`] are only counted.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::marker::PhantomData;

use bytes::Bytes;

use crate::blob::{read_header, Codec};
use crate::entity::{ColumnKind, ColumnSpec, Entity};
use crate::migrate::Format;
use crate::repo::printable;
use crate::store::{LentRow, ScanSpec};
use crate::{Db, Result};

/// Rows between progress reports, unless [`CensusJob::progress_every`] says otherwise.
pub const PROGRESS_EVERY: u64 = 1000;
/// Distinct unmapped (and internal) qualifiers listed by name; cells of further ones are only
/// counted ([`EntityCensus::unlisted`]).
pub const MAX_LISTED: usize = 1000;
/// Distinct cell widths counted per column; cells of further widths are only counted
/// ([`Widths::unlisted`]). Fixed-width values have one or two; strings have many.
pub const MAX_WIDTHS: usize = 16;

/// Where a running census is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CensusProgress {
    /// Rows read so far, of any record type.
    pub scanned: u64,
    /// Rows of the entity counted so far.
    pub rows: u64,
    /// The last row read.
    pub last_row: Bytes,
}

/// The widths of a plain-value column's cells: how many rows hold each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Widths {
    /// Rows per cell width in bytes, for the first [`MAX_WIDTHS`] widths seen.
    pub counts: BTreeMap<usize, u64>,
    /// Rows whose cell has a width past those.
    pub unlisted: u64,
    /// The narrowest and widest cell seen, if any.
    pub range: Option<(usize, usize)>,
}

impl Widths {
    fn add(&mut self, width: usize) {
        self.range = Some(self.range.map_or((width, width), |(lo, hi)| (lo.min(width), hi.max(width))));
        let room = self.counts.len() < MAX_WIDTHS;
        match self.counts.get_mut(&width) {
            Some(n) => *n += 1,
            None if room => {
                self.counts.insert(width, 1);
            }
            None => self.unlisted += 1,
        }
    }
}

impl fmt::Display for Widths {
    /// `4 B: 1200, 8 B: 300`; with many widths (strings), `0 to 57 B, 23 widths`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.range {
            None => f.write_str("-"),
            Some((lo, hi)) if self.unlisted > 0 || self.counts.len() > 4 => {
                let more = if self.unlisted > 0 { "more than " } else { "" };
                write!(f, "{lo} to {hi} B, {more}{} widths", self.counts.len())
            }
            Some(_) => {
                let parts: Vec<String> = self.counts.iter().map(|(w, n)| format!("{w} B: {n}")).collect();
                f.write_str(&parts.join(", "))
            }
        }
    }
}

/// What the rows hold of one mapped column. Every row of the entity counts in exactly one of
/// [`ColumnCensus::current`], [`ColumnCensus::alias_only`] and [`ColumnCensus::absent`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnCensus {
    /// The field.
    pub field: &'static str,
    /// Its family.
    pub family: &'static str,
    /// Its qualifier.
    pub qualifier: &'static str,
    /// How the field is stored.
    pub kind: ColumnKind,
    /// Rows holding a cell under the qualifier.
    pub current: u64,
    /// Per earlier qualifier (`rename_from`, `aliases`, in declared order): rows holding a
    /// cell under it, whether or not they hold one under the qualifier too. What
    /// [`crate::Repository::move_renamed`] moves.
    pub aliases: Vec<(&'static str, u64)>,
    /// Rows holding the column only under earlier qualifiers: readers that know only the
    /// qualifier miss their value.
    pub alias_only: u64,
    /// Rows holding the column under no qualifier.
    pub absent: u64,
    /// Of [`ColumnCensus::absent`], the rows that read as the field's `#[cellar(default)]`:
    /// all of them for a field with one, none otherwise (an `Option` reads them as `None`,
    /// another field fails to read them).
    pub defaulted: u64,
    /// A plain-value column: the widths of the cells reads take (the newest of the qualifier
    /// and its earlier ones).
    pub widths: Widths,
    /// A `#[cellar(blob)]` column: rows per stored format of the cells reads take, from the
    /// headers (payloads are not decoded or checked).
    pub blob_formats: BTreeMap<Format, u64>,
    /// A `#[cellar(blob)]` column: rows whose cell has no blob header (a declared legacy
    /// version, or not a blob).
    pub blob_headerless: u64,
    /// A `#[cellar(blob)]` column: the format its type writes now.
    pub blob_current: Option<Format>,
}

impl ColumnCensus {
    fn new(spec: &'static ColumnSpec) -> Self {
        ColumnCensus {
            field: spec.field,
            family: spec.family,
            qualifier: spec.qualifier,
            kind: spec.kind,
            current: 0,
            aliases: spec.aliases.iter().map(|a| (*a, 0)).collect(),
            alias_only: 0,
            absent: 0,
            defaulted: 0,
            widths: Widths::default(),
            blob_formats: BTreeMap::new(),
            blob_headerless: 0,
            blob_current: spec.current_blob.map(|f| Format { codec: f.codec.name(), version: Some(f.schema_version) }),
        }
    }

    /// Rows holding a cell under any earlier qualifier.
    pub fn alias_cells(&self) -> u64 {
        self.aliases.iter().map(|(_, n)| n).sum()
    }

    /// Counts `row`.
    fn count(&mut self, spec: &ColumnSpec, row: LentRow<'_>) {
        let current = row.value(spec.family, spec.qualifier).is_some();
        let mut earlier = false;
        for (i, alias) in spec.aliases.iter().enumerate() {
            if row.value(spec.family, alias).is_some() {
                earlier = true;
                if let Some((_, n)) = self.aliases.get_mut(i) {
                    *n += 1;
                }
            }
        }
        match (current, earlier) {
            (true, _) => self.current += 1,
            (false, true) => self.alias_only += 1,
            (false, false) => {
                self.absent += 1;
                self.defaulted += u64::from(spec.default.is_some());
                return;
            }
        }
        // The cell reads take.
        let Some(cell) = spec.cell_in(row, u64::MAX) else { return };
        match spec.kind {
            ColumnKind::Value => self.widths.add(cell.len()),
            ColumnKind::Blob => match read_header(cell) {
                Ok(header) => {
                    let codec = Codec::from_id(header.codec).map_or("unknown codec", Codec::name);
                    *self.blob_formats.entry(Format { codec, version: Some(header.schema_version) }).or_default() += 1;
                }
                Err(_) => self.blob_headerless += 1,
            },
            _ => {}
        }
    }

    /// The `cells` column of the table: widths or formats.
    fn cells_text(&self) -> String {
        match self.kind {
            ColumnKind::Value => self.widths.to_string(),
            ColumnKind::Blob => {
                let mut parts: Vec<String> = self
                    .blob_formats
                    .iter()
                    .map(|(format, n)| {
                        let current = if Some(*format) == self.blob_current { " (current)" } else { "" };
                        format!("{format}{current}: {n}")
                    })
                    .collect();
                if self.blob_headerless > 0 {
                    parts.push(format!("headerless: {}", self.blob_headerless));
                }
                if parts.is_empty() {
                    "-".into()
                } else {
                    parts.join(", ")
                }
            }
            _ => "-".into(),
        }
    }
}

/// Rows holding a cell under one qualifier no field maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QualifierCount {
    /// The family.
    pub family: String,
    /// The qualifier, printable (bytes outside printable ASCII as `\xNN`).
    pub qualifier: String,
    /// Rows holding it.
    pub rows: u64,
}

/// What the rows of an entity's table hold: see the module docs. `Display` prints it as a
/// table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntityCensus {
    /// The entity.
    pub entity: &'static str,
    /// Its table.
    pub table: &'static str,
    /// Rows of the entity (tombstones and other record types left out).
    pub rows: u64,
    /// Rows of other record types of the table, skipped.
    pub other_records: u64,
    /// Tombstones of deleted entities (rows holding only a write token), skipped.
    pub tombstones: u64,
    /// Every mapped column, in declaration order (wide fields excepted: their families hold
    /// entries, not columns).
    pub columns: Vec<ColumnCensus>,
    /// Qualifiers of the entity's rows that no field maps and that are not earlier qualifiers
    /// of a field — cells of dropped fields, or of another program — by family and qualifier.
    pub unmapped: Vec<QualifierCount>,
    /// Cellar's own cells in the entity's rows (write tokens under `\x00`-prefixed qualifiers,
    /// the empty marker cell of an entity with nothing else to store): not fields, not
    /// dropped; listed apart so they are not taken for either.
    pub internal: Vec<QualifierCount>,
    /// Cells under further unmapped or internal qualifiers, past the first [`MAX_LISTED`]:
    /// counted, not listed.
    pub unlisted: u64,
}

impl EntityCensus {
    /// The census of `field`'s column.
    pub fn column(&self, field: &str) -> Option<&ColumnCensus> {
        self.columns.iter().find(|c| c.field == field)
    }

    /// Rows holding `family:qualifier` with no field mapping it, 0 if none do.
    pub fn unmapped_rows(&self, family: &str, qualifier: &str) -> u64 {
        self.unmapped.iter().find(|q| q.family == family && q.qualifier == qualifier).map_or(0, |q| q.rows)
    }

    /// Cells under earlier qualifiers of renamed columns, all columns together: 0 once they
    /// are all moved.
    pub fn alias_cells(&self) -> u64 {
        self.columns.iter().map(ColumnCensus::alias_cells).sum()
    }
}

impl fmt::Display for EntityCensus {
    /// A header line, one line per column (rows under the qualifier, under earlier qualifiers,
    /// under none and of those defaulted; cell widths or blob formats), then the unmapped and
    /// internal qualifiers with their rows.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "census of {} (table `{}`): {} rows; skipped {} of other record types, {} tombstones",
            self.entity, self.table, self.rows, self.other_records, self.tombstones
        )?;
        let mut lines = vec![[
            "field".to_string(),
            "column".into(),
            "current".into(),
            "earlier qualifiers".into(),
            "neither".into(),
            "defaulted".into(),
            "cells".into(),
        ]];
        for c in &self.columns {
            let earlier = if c.aliases.is_empty() {
                "-".to_string()
            } else {
                let each: Vec<String> = c.aliases.iter().map(|(q, n)| format!("{}:{q} {n}", c.family)).collect();
                format!("{} ({} only there)", each.join(", "), c.alias_only)
            };
            lines.push([
                c.field.to_string(),
                format!("{}:{}", c.family, c.qualifier),
                c.current.to_string(),
                earlier,
                c.absent.to_string(),
                c.defaulted.to_string(),
                c.cells_text(),
            ]);
        }
        let mut widths = [0usize; 7];
        for line in &lines {
            for (w, cell) in widths.iter_mut().zip(line) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for line in &lines {
            let mut text = String::new();
            for (i, (cell, w)) in line.iter().zip(widths).enumerate() {
                if i > 0 {
                    text.push_str("  ");
                }
                if i + 1 < line.len() {
                    text.push_str(&format!("{cell:<w$}"));
                } else {
                    text.push_str(cell);
                }
            }
            writeln!(f, "  {}", text.trim_end())?;
        }
        let list = |f: &mut fmt::Formatter<'_>, title: &str, qualifiers: &[QualifierCount]| -> fmt::Result {
            if qualifiers.is_empty() {
                return writeln!(f, "{title}: none");
            }
            writeln!(f, "{title}:")?;
            for q in qualifiers {
                writeln!(f, "  {}:{}  {} rows", q.family, q.qualifier, q.rows)?;
            }
            Ok(())
        };
        list(f, "unmapped qualifiers", &self.unmapped)?;
        list(f, "Cellar's own cells", &self.internal)?;
        if self.unlisted > 0 {
            writeln!(f, "and {} cells under further qualifiers, not listed", self.unlisted)?;
        }
        Ok(())
    }
}

/// Where progress reports go.
type ProgressFn<'a> = Box<dyn FnMut(&CensusProgress) + 'a>;

/// A census of entity `E`'s table, being set up; from [`Db::census`].
pub struct CensusJob<'a, E> {
    db: &'a Db,
    every: u64,
    progress: Option<ProgressFn<'a>>,
    _entity: PhantomData<fn() -> E>,
}

impl Db {
    /// A census of entity `E`'s table (see [`crate::census`]): per mapped column, the rows
    /// holding it under its qualifier, under earlier qualifiers only, or not at all (read as
    /// the default); cell widths and blob formats; the qualifiers no field maps. Read-only;
    /// [`CensusJob::run`] takes it.
    pub fn census<E: Entity>(&self) -> CensusJob<'_, E> {
        CensusJob { db: self, every: PROGRESS_EVERY, progress: None, _entity: PhantomData }
    }
}

/// Rows per qualifier, per family: unmapped or internal qualifiers.
type Qualifiers = BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, u64>>;

impl<'a, E: Entity> CensusJob<'a, E> {
    /// Calls `f` every [`PROGRESS_EVERY`] rows read (see [`CensusJob::progress_every`]) and
    /// once at the end.
    pub fn on_progress(mut self, f: impl FnMut(&CensusProgress) + 'a) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    /// Reports progress every `rows` rows read (at least 1) instead of every
    /// [`PROGRESS_EVERY`].
    pub fn progress_every(mut self, rows: u64) -> Self {
        self.every = rows.max(1);
        self
    }

    /// Takes the census: one scan of the table, nothing written. A table that does not exist
    /// yet has no rows.
    ///
    /// # Errors
    /// Store errors.
    pub fn run(mut self) -> Result<EntityCensus> {
        let schema = &E::SCHEMA;
        let mut census = EntityCensus {
            entity: schema.entity,
            table: schema.table,
            rows: 0,
            other_records: 0,
            tombstones: 0,
            columns: schema.columns.iter().map(ColumnCensus::new).collect(),
            unmapped: Vec::new(),
            internal: Vec::new(),
            unlisted: 0,
        };
        let store = self.db.store();
        if store.split_keys(schema.table)?.is_none() {
            self.report(&CensusProgress { scanned: 0, rows: 0, last_row: Bytes::new() });
            return Ok(census);
        }
        // Every qualifier a field reads (its own and its earlier ones), and the families of
        // wide fields, whose qualifiers are map entries.
        let mapped: HashSet<(&[u8], &[u8])> = schema
            .columns
            .iter()
            .flat_map(|c| std::iter::once(c.qualifier).chain(c.aliases.iter().copied()).map(|q| (c.family, q)))
            .map(|(f, q)| (f.as_bytes(), q.as_bytes()))
            .collect();
        let wide: HashSet<&[u8]> = schema.wide.iter().map(|w| w.family.as_bytes()).collect();
        let (mut unmapped, mut internal) = (Qualifiers::new(), Qualifiers::new());
        let mut listed_qualifiers = 0usize;
        let mut scanned = 0u64;
        let mut last = Bytes::new();
        let mut cursor = store.scan_cursor(schema.table, &ScanSpec::default())?;
        while cursor.advance()? {
            let Some(row) = cursor.row() else { break };
            scanned += 1;
            if E::key_from_row(row).is_err_and(|e| e.other_record_type) {
                census.other_records += 1;
            } else if crate::index::is_tombstone(schema, row) {
                census.tombstones += 1;
            } else {
                census.rows += 1;
                for (counted, spec) in census.columns.iter_mut().zip(schema.columns) {
                    counted.count(spec, row);
                }
                for cell in row.cells() {
                    if wide.contains(cell.family) || mapped.contains(&(cell.family, cell.qualifier)) {
                        continue;
                    }
                    // Cellar's own cells: qualifiers starting with 0x00 (write tokens; an
                    // aggregate's generations, fences and copies) and the empty marker qualifier.
                    let own = cell.qualifier.first().is_none_or(|&b| b == 0);
                    let counts = if own { &mut internal } else { &mut unmapped };
                    let counted = count_qualifier(counts, &mut listed_qualifiers, cell.family, cell.qualifier);
                    census.unlisted += u64::from(!counted);
                }
            }
            if self.progress.is_some() {
                last = Bytes::copy_from_slice(row.key());
                if scanned.is_multiple_of(self.every) {
                    self.report(&CensusProgress { scanned, rows: census.rows, last_row: last.clone() });
                }
            }
        }
        if scanned == 0 || !scanned.is_multiple_of(self.every) {
            self.report(&CensusProgress { scanned, rows: census.rows, last_row: last });
        }
        census.unmapped = qualifier_counts(unmapped);
        census.internal = qualifier_counts(internal);
        Ok(census)
    }

    fn report(&mut self, progress: &CensusProgress) {
        if let Some(f) = self.progress.as_mut() {
            f(progress);
        }
    }
}

/// Counts a cell under `family:qualifier` in `counts` (`listed` qualifiers so far); false if
/// the qualifier is new and the list is full.
fn count_qualifier(counts: &mut Qualifiers, listed: &mut usize, family: &[u8], qualifier: &[u8]) -> bool {
    // Looked up by borrowed bytes: a row's cells mostly repeat qualifiers already listed.
    if let Some(n) = counts.get_mut(family).and_then(|q| q.get_mut(qualifier)) {
        *n += 1;
        return true;
    }
    if *listed >= MAX_LISTED {
        return false;
    }
    *listed += 1;
    counts.entry(family.to_vec()).or_default().insert(qualifier.to_vec(), 1);
    true
}

fn qualifier_counts(counts: Qualifiers) -> Vec<QualifierCount> {
    counts
        .into_iter()
        .flat_map(|(family, qualifiers)| {
            let family = printable(&family);
            qualifiers.into_iter().map(move |(qualifier, rows)| QualifierCount {
                family: family.clone(),
                qualifier: printable(&qualifier),
                rows,
            })
        })
        .collect()
}
