//! Golden fixtures of every format the object mapper writes, byte for byte: row keys of every
//! key encoding, cell values of every value type, index rows and statuses, the rows of every
//! aggregate strategy (with generations, fences, tombstones and interrupted intents), uids,
//! job checkpoints and the schema catalog. (Key parts cannot be `Option`s — a compile error —
//! so `None`/`Some` is pinned where it exists: optional columns, and optional indexed fields.)
//!
//! **A change of a fixture under `tests/fixtures/orm/` is a change of the on-disk format**: a
//! database written by the build before it would no longer read the same. Such a change needs
//! a format version (and a reader of the old format), never just a regenerated fixture.
//!
//! Each test does two things with its fixture file:
//! - (a) writes fresh data with fixed inputs through the typed API and compares every row the
//!   store then holds (table, row key, family, qualifier, value) with the fixture;
//! - (b) loads the fixture's rows into a fresh database through the raw store
//!   (`db.store().mutate`) and reads them back through the typed API, asserting the values.
//!
//! Regenerate the fixtures (only for a deliberate format change, with a new format version):
//! `CELLAR_BLESS=1 cargo test -p cellar --test orm_formats`.
//!
//! The fixture notation is described in the header each file starts with ([`HEADER`]). What is
//! masked (`??`, one per byte), and why — everything else is pinned exactly:
//! - cell timestamps are not dumped at all: the engine stamps cells with the wall clock;
//! - a data row's write token (`\x00i`, 8 bytes), an aggregate's committed generation
//!   (`\x00g`, 8 bytes) and a row's fence (`\x00w`, 8 bytes) are random tokens
//!   (`writer::token`: the process's random instance mixed with a counter): masked whole, their
//!   length pinned;
//! - a deleted aggregate's generation (9 bytes): the token masked, the trailing `00` pinned;
//! - an index row's state (`s`): the first byte (`01` verified, `00` unverified) pinned; a
//!   verified state's 8-byte token masked; an unverified state's token, writer instance,
//!   writer serial (a process-wide counter) and lease deadline (wall clock) masked — 32 bytes;
//! - a pending aggregate generation (an intent): the new token (bytes 0–7), the low seven bytes
//!   of the lease deadline (9–15: wall clock) and the owner (16–31: instance and serial) are
//!   masked; byte 8 — the deadline's top byte, which holds the fenced flag (bit 63) and is
//!   otherwise zero for millennia — is pinned; inside the intent, the values of puts of the
//!   generation, fence and token columns (the new token again) and the fences the write read
//!   (fenced intents) are masked; every other byte of the intent is pinned (the walker
//!   [`mask_pending`] checks its framing while masking);
//! - the salt byte of a randomly salted row key (a process-wide counter picks it): masked, the
//!   layout after it pinned;
//! - in the schema catalog (`cellar_schemas`, pinned by the `catalog` fixture alone), the digits
//!   of a schema version's `first_written_ms` (wall clock).
//!
//! Loading a fixture back fills every masked byte with `00` (masked catalog digits with `1`,
//! so that the JSON still parses): any token will do, and equal tokens stay equal (an intent's
//! fences as read match the rows' fences). A writer named by instance 0 is not this process's,
//! so on the embedded store (one process) its leftovers are taken for abandoned and finished by
//! readers, as after a crash.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use cellar::orm::store::{
    CellMutation, Commit, Condition, EmbeddedStore, FamilyAlteration, FamilyChange, FamilySpec, Guarantees, ReadSpec,
    Row, RowCheck, RowMutation, RowStream, ScanSpec, SplitPolicy, Store, TableSpec,
};
use cellar::orm::{Error, Result};
use cellar::prelude::*;
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------------
// A store whose guarantees and failures a test chooses.
// ---------------------------------------------------------------------------------------------

/// A store call a [`Rig`] can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Mutate,
    CheckAndMutate,
    CheckAndMutateMany,
}

/// The next failure a [`Rig`] injects: the call, its table (`None`: any), and how many such
/// calls to let through first.
type Failure = (Call, Option<&'static str>, u32);

/// The embedded engine in a temporary directory, with the guarantees a test chooses (one
/// process with atomic commits, one process without, or a store several processes share) and
/// one injected failure of a chosen call.
struct Rig {
    inner: EmbeddedStore,
    guarantees: Guarantees,
    fail: Mutex<Option<Failure>>,
    _dir: tempfile::TempDir,
}

impl Rig {
    fn with(guarantees: impl FnOnce(Guarantees) -> Guarantees) -> Arc<Rig> {
        let dir = tempfile::tempdir().unwrap();
        let inner = EmbeddedStore::new(Engine::open(dir.path(), EngineOptions::default()).unwrap());
        let guarantees = guarantees(inner.guarantees());
        Arc::new(Rig { inner, guarantees, fail: Mutex::new(None), _dir: dir })
    }

    /// The embedded engine as it is: one process, atomic row groups and commits.
    fn embedded() -> Arc<Rig> {
        Rig::with(|g| g)
    }

    /// One process without atomic commits: index writes take the protocol of several steps.
    fn without_commits() -> Arc<Rig> {
        Rig::with(|_| Guarantees::new(true, true))
    }

    /// A store several processes share (as Bigtable is): no atomic row groups, no commits,
    /// and fences, tombstones and deletes of earlier versions where the protocols need them.
    fn shared() -> Arc<Rig> {
        Rig::with(|_| Guarantees::new(false, false))
    }

    fn db(self: &Arc<Rig>) -> Db {
        Db::with_store(self.clone())
    }

    /// Fails the call `call` on `table` (any table for `None`) after `skip` such calls.
    fn fail(&self, call: Call, table: Option<&'static str>, skip: u32) {
        *self.fail.lock().unwrap() = Some((call, table, skip));
    }

    fn check(&self, call: Call, table: &str) -> Result<()> {
        let mut fail = self.fail.lock().unwrap();
        let Some((c, t, skip)) = *fail else { return Ok(()) };
        if c != call || t.is_some_and(|t| t != table) {
            return Ok(());
        }
        if skip > 0 {
            *fail = Some((c, t, skip - 1));
            return Ok(());
        }
        *fail = None;
        Err(Error::Store(format!("injected failure of {call:?} on {table}")))
    }
}

impl Store for Rig {
    fn ensure_table(&self, spec: &TableSpec) -> Result<()> {
        self.inner.ensure_table(spec)
    }
    fn alter_families(&self, table: &str, changes: &[FamilyChange]) -> Result<Vec<FamilyAlteration>> {
        self.inner.alter_families(table, changes)
    }
    fn mutate(&self, table: &str, rows: Vec<RowMutation>) -> Result<()> {
        self.check(Call::Mutate, table)?;
        self.inner.mutate(table, rows)
    }
    fn read_rows(&self, table: &str, rows: &[Bytes], read: &ReadSpec) -> Result<Vec<Option<Row>>> {
        self.inner.read_rows(table, rows, read)
    }
    fn scan<'a>(&'a self, table: &str, scan: &ScanSpec) -> Result<RowStream<'a>> {
        self.inner.scan(table, scan)
    }
    fn check_and_mutate(&self, table: &str, condition: Condition, mutation: RowMutation) -> Result<bool> {
        self.check(Call::CheckAndMutate, table)?;
        self.inner.check_and_mutate(table, condition, mutation)
    }
    fn check_and_mutate_many(&self, table: &str, entries: Vec<(Condition, RowMutation)>) -> Result<Vec<bool>> {
        self.check(Call::CheckAndMutateMany, table)?;
        self.inner.check_and_mutate_many(table, entries)
    }
    fn describe(&self, table: &str) -> Result<Option<TableSpec>> {
        self.inner.describe(table)
    }
    fn split_keys(&self, table: &str) -> Result<Option<Vec<Bytes>>> {
        self.inner.split_keys(table)
    }
    fn increment(&self, table: &str, row: Bytes, family: &str, qualifier: &str, delta: i64) -> Result<i64> {
        self.inner.increment(table, row, family, qualifier, delta)
    }
    fn guarantees(&self) -> Guarantees {
        self.guarantees
    }
    fn mutate_group(&self, table: &str, checks: Vec<RowCheck>, rows: Vec<RowMutation>) -> Result<bool> {
        self.inner.mutate_group(table, checks, rows)
    }
    fn commit(&self, commit: Commit) -> Result<bool> {
        self.inner.commit(commit)
    }
    fn read_and_commit(
        &self,
        table: &str,
        row: &Bytes,
        read: &ReadSpec,
        build: &mut dyn FnMut(Option<&Row>) -> Option<Commit>,
    ) -> Result<Option<bool>> {
        self.inner.read_and_commit(table, row, read, build)
    }
}

// ---------------------------------------------------------------------------------------------
// Dumps: what the store holds, masked where the bytes are random or wall-clock.
// ---------------------------------------------------------------------------------------------

/// Bytes of a row key or value; `None` where masked.
type Masked = Vec<Option<u8>>;

#[derive(Debug, Clone, PartialEq)]
struct TableDump {
    name: String,
    families: Vec<FamilySpec>,
}

#[derive(Debug, Clone, PartialEq)]
struct CellDump {
    family: String,
    qualifier: Vec<u8>,
    value: Masked,
}

#[derive(Debug, Clone, PartialEq)]
struct RowDump {
    table: String,
    key: Masked,
    cells: Vec<CellDump>,
}

/// One database's tables and rows.
#[derive(Debug, Clone, PartialEq)]
struct Section {
    name: String,
    tables: Vec<TableDump>,
    rows: Vec<RowDump>,
}

const TOKEN: &[u8] = b"\x00i";
const GENERATION: &[u8] = b"\x00g";
const FENCE: &[u8] = b"\x00w";

fn pinned(bytes: &[u8]) -> Masked {
    bytes.iter().map(|&b| Some(b)).collect()
}

fn hide(m: &mut Masked, range: std::ops::Range<usize>) {
    for b in &mut m[range] {
        *b = None;
    }
}

/// The row key as dumped: the salt byte masked in the tables of `random_salt`.
fn mask_key(table: &str, key: &[u8], random_salt: &[&str]) -> Masked {
    let mut m = pinned(key);
    if random_salt.contains(&table) {
        assert!(!key.is_empty(), "a randomly salted key has its salt byte");
        hide(&mut m, 0..1);
    }
    m
}

/// A cell's value as dumped: random tokens and wall-clock fields masked (see the module docs).
fn mask_value(table: &str, qualifier: &[u8], value: &[u8]) -> Masked {
    let mut m = pinned(value);
    let what = || format!("{table} {qualifier:?} = {value:02x?}");
    if table.ends_with("_idx") && qualifier == b"s" {
        match value.first() {
            Some(1) => {
                assert_eq!(value.len(), 9, "a verified state: 01 and a token: {}", what());
                hide(&mut m, 1..9);
            }
            Some(0) => {
                assert_eq!(value.len(), 33, "an unverified state: 00, token, instance, serial, deadline: {}", what());
                hide(&mut m, 1..33);
            }
            _ => panic!("an index state starts 00 or 01: {}", what()),
        }
    } else if table == CATALOG && qualifier.first() == Some(&b'v') {
        // A schema version as JSON: when it was first recorded is wall clock.
        let field = b"\"first_written_ms\":";
        let at = value.windows(field.len()).position(|w| w == field).expect("a version records when") + field.len();
        let digits = value[at..].iter().take_while(|b| b.is_ascii_digit()).count();
        assert!(digits > 0, "first_written_ms is a number: {}", what());
        hide(&mut m, at..at + digits);
    } else if qualifier == TOKEN || qualifier == FENCE {
        assert_eq!(value.len(), 8, "a token: {}", what());
        hide(&mut m, 0..8);
    } else if qualifier == GENERATION {
        match value.len() {
            8 => hide(&mut m, 0..8),
            9 => {
                assert_eq!(value[8], 0, "a deleted generation ends 00: {}", what());
                hide(&mut m, 0..8);
            }
            n if n > 9 => m = mask_pending(value),
            _ => panic!("a generation of {} bytes: {}", value.len(), what()),
        }
    }
    m
}

/// Reads a LEB128 varint at `*at`.
fn varint(v: &[u8], at: &mut usize) -> u64 {
    let (mut n, mut shift) = (0u64, 0);
    loop {
        let b = v[*at];
        *at += 1;
        n |= u64::from(b & 0x7F) << shift;
        if b & 0x80 == 0 {
            return n;
        }
        shift += 7;
    }
}

/// Skips a length-prefixed byte string at `*at`; returns its range.
fn bytes_at(v: &[u8], at: &mut usize) -> std::ops::Range<usize> {
    let len = varint(v, at) as usize;
    let start = *at;
    *at += len;
    assert!(*at <= v.len(), "a byte string runs past the intent's end");
    start..*at
}

/// Walks the mutations of an intent at `*at`, masking the values of token puts.
fn mask_mutations(v: &[u8], at: &mut usize, m: &mut Masked) {
    for _ in 0..varint(v, at) {
        let tag = v[*at];
        *at += 1;
        match tag {
            // Put (family, qualifier, value, timestamp + 1 or 0) and PutAtApply (no timestamp).
            0 | 4 => {
                bytes_at(v, at);
                let qualifier = bytes_at(v, at);
                let value = bytes_at(v, at);
                if [TOKEN, GENERATION, FENCE].contains(&&v[qualifier]) {
                    assert_eq!(value.len(), 8, "a token put in an intent");
                    hide(m, value);
                }
                if tag == 0 {
                    varint(v, at);
                }
            }
            // DeleteColumn (family, qualifier).
            1 => {
                bytes_at(v, at);
                bytes_at(v, at);
            }
            // DeleteRow.
            2 => {}
            // DeleteFamily (family).
            3 => {
                bytes_at(v, at);
            }
            t => panic!("an intent holds mutation kind {t}"),
        }
    }
}

/// A pending generation as dumped (see the module docs): token (0–7), deadline (8–15, its top
/// bit the fenced flag), owner instance and serial (16–31), the root's mutations, then per other
/// row its table slot, key, mutations and — fenced — the fence the write read.
fn mask_pending(v: &[u8]) -> Masked {
    let mut m = pinned(v);
    hide(&mut m, 0..8);
    hide(&mut m, 9..32);
    assert_eq!(v[8] & 0x7F, 0, "the deadline's top byte holds only the fenced flag");
    let fenced = v[8] & 0x80 != 0;
    let mut at = 32;
    mask_mutations(v, &mut at, &mut m);
    for _ in 0..varint(v, &mut at) {
        varint(v, &mut at);
        bytes_at(v, &mut at);
        mask_mutations(v, &mut at, &mut m);
        if fenced {
            let prior = bytes_at(v, &mut at);
            assert!(prior.is_empty() || prior.len() == 8, "a fence as read: none, or a token");
            hide(&mut m, prior);
        }
    }
    assert_eq!(at, v.len(), "bytes after the intent");
    m
}

/// The schema catalog, written at every repository open: pinned by its own fixture
/// (`catalog`) and left out of the others, so that a change of it shows in one place.
const CATALOG: &str = cellar::orm::catalog::CATALOG_TABLE;

/// Every table of `rig` (those named in `only`, if given) with every row, newest versions.
fn dump(name: &str, rig: &Rig, only: Option<&[&str]>, random_salt: &[&str]) -> Section {
    let mut names = rig.inner.engine().list_tables();
    names.sort();
    let wanted = |n: &str| only.map_or(n != CATALOG, |only| only.contains(&n));
    names.retain(|n| wanted(n));
    let mut tables = Vec::new();
    let mut rows = Vec::new();
    for table in names {
        let spec = rig.inner.describe(&table).unwrap().expect("a listed table");
        let mut families = spec.families;
        families.sort_by(|a, b| a.name.cmp(&b.name));
        for row in rig.inner.scan(&table, &ScanSpec::default()).unwrap() {
            let row = row.unwrap();
            let cells = row
                .cells
                .iter()
                .map(|c| CellDump {
                    family: String::from_utf8(c.family.to_vec()).unwrap(),
                    qualifier: c.qualifier.to_vec(),
                    value: mask_value(&table, &c.qualifier, &c.value),
                })
                .collect();
            rows.push(RowDump { table: table.clone(), key: mask_key(&table, &row.key, random_salt), cells });
        }
        if random_salt.contains(&table.as_str()) {
            // In the order of the layout after the (masked) salt, whichever buckets were drawn.
            let first = rows.iter().position(|r: &RowDump| r.table == table).unwrap_or(rows.len());
            rows[first..].sort_by(|a, b| a.key.cmp(&b.key));
        }
        tables.push(TableDump { name: table, families });
    }
    Section { name: name.to_string(), tables, rows }
}

// ---------------------------------------------------------------------------------------------
// The fixture notation.
// ---------------------------------------------------------------------------------------------

/// The comment every fixture file starts with.
const HEADER: &str = "\
# Golden fixture of Cellar's object-mapper on-disk format, written and checked by
# tests/orm_formats.rs. A CHANGE OF THIS FILE IS A CHANGE OF THE ON-DISK FORMAT: databases
# written before it would read differently. It needs a format version and a reader of the old
# format; regenerate only then: CELLAR_BLESS=1 cargo test -p cellar --test orm_formats
#
# == NAME          a database, as the test that writes this file left it
# table T F/V ...  table T with family F keeping V versions (/ttl=SECONDS: a time to live)
# row T KEY        a row of table T, then its cells (newest versions), one per line:
#     F QUAL = VAL   family F, qualifier QUAL, value VAL
# Bytes are hex pairs, with runs of printable ASCII in double quotes (\\\" and \\\\ escaped); \"\"
# is empty; ?? is a masked byte (random or wall-clock: see tests/orm_formats.rs). Cell
# timestamps (wall clock) are not part of the dump.
";

/// Renders bytes: hex pairs, printable runs of at least `text_run` bytes (or the whole string,
/// if printable and longer than one byte, or any length for `text_run` 1) in quotes.
fn render(bytes: &[Option<u8>], text_run: usize) -> String {
    if bytes.is_empty() {
        return "\"\"".into();
    }
    let printable = |b: Option<u8>| matches!(b, Some(0x20..=0x7E));
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let mut end = i;
        while end < bytes.len() && printable(bytes[end]) {
            end += 1;
        }
        if end > i && (end - i >= text_run || (i == 0 && end == bytes.len() && end > 1)) {
            let mut s = String::from("\"");
            for b in &bytes[i..end] {
                let c = char::from(b.expect("printable"));
                if c == '"' || c == '\\' {
                    s.push('\\');
                }
                s.push(c);
            }
            s.push('"');
            out.push(s);
            i = end;
        } else {
            out.push(bytes[i].map_or_else(|| "??".to_string(), |b| format!("{b:02x}")));
            i += 1;
        }
    }
    out.join(" ")
}

fn render_key(bytes: &[Option<u8>]) -> String {
    render(bytes, 3)
}

fn render_qualifier(bytes: &[u8]) -> String {
    render(&pinned(bytes), 1)
}

fn render_section(s: &Section) -> Vec<String> {
    let mut lines = vec![format!("== {}", s.name)];
    for t in &s.tables {
        let families: Vec<String> = t
            .families
            .iter()
            .map(|f| match f.ttl_secs {
                Some(ttl) => format!("{}/{}/ttl={ttl}", f.name, f.max_versions),
                None => format!("{}/{}", f.name, f.max_versions),
            })
            .collect();
        lines.push(format!("table {} {}", t.name, families.join(" ")));
    }
    for r in &s.rows {
        lines.push(format!("row {} {}", r.table, render_key(&r.key)));
        for c in &r.cells {
            lines.push(format!("    {} {} = {}", c.family, render_qualifier(&c.qualifier), render_key(&c.value)));
        }
    }
    lines
}

/// Splits a line into words and quoted strings (`true`: quoted, unescaped).
fn tokens(line: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c == ' ' {
            chars.next();
        } else if c == '"' {
            chars.next();
            let mut s = String::new();
            loop {
                match chars.next().expect("a closing quote") {
                    '"' => break,
                    '\\' => s.push(chars.next().expect("an escaped character")),
                    c => s.push(c),
                }
            }
            out.push((true, s));
        } else {
            let mut s = String::new();
            while let Some(&c) = chars.peek().filter(|&&c| c != ' ') {
                s.push(c);
                chars.next();
            }
            out.push((false, s));
        }
    }
    out
}

fn parse_bytes(tokens: &[(bool, String)]) -> Masked {
    let mut out = Vec::new();
    for (quoted, t) in tokens {
        if *quoted {
            out.extend(t.bytes().map(Some));
        } else if t == "??" {
            out.push(None);
        } else {
            out.push(Some(u8::from_str_radix(t, 16).unwrap_or_else(|_| panic!("not a hex byte: {t}"))));
        }
    }
    out
}

fn parse(text: &str) -> Vec<Section> {
    let mut sections: Vec<Section> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
        if let Some(name) = line.strip_prefix("== ") {
            sections.push(Section { name: name.to_string(), tables: Vec::new(), rows: Vec::new() });
            continue;
        }
        let current = sections.last_mut().expect("a section before its lines");
        let t = tokens(line);
        if !line.starts_with(' ') && t[0].1 == "table" {
            let families = t[2..]
                .iter()
                .map(|(_, f)| {
                    let mut parts = f.split('/');
                    let name = parts.next().unwrap().to_string();
                    let max_versions = parts.next().unwrap().parse().unwrap();
                    let ttl_secs = parts.next().map(|ttl| ttl.strip_prefix("ttl=").unwrap().parse().unwrap());
                    FamilySpec { name, max_versions, ttl_secs }
                })
                .collect();
            current.tables.push(TableDump { name: t[1].1.clone(), families });
        } else if !line.starts_with(' ') && t[0].1 == "row" {
            current.rows.push(RowDump { table: t[1].1.clone(), key: parse_bytes(&t[2..]), cells: Vec::new() });
        } else {
            let eq = t.iter().position(|(quoted, s)| !quoted && s == "=").expect("a cell line has `=`");
            let qualifier = parse_bytes(&t[1..eq]).into_iter().map(|b| b.expect("qualifiers are not masked")).collect();
            let row = current.rows.last_mut().expect("a row before its cells");
            row.cells.push(CellDump { family: t[0].1.clone(), qualifier, value: parse_bytes(&t[eq + 1..]) });
        }
    }
    sections
}

fn fixture_path(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/orm").join(format!("{file}.txt"))
}

fn bless() -> bool {
    std::env::var_os("CELLAR_BLESS").is_some_and(|v| v != "0")
}

/// (a): compares `fresh` with the fixture `file` (writing it first under `CELLAR_BLESS`), and
/// returns the fixture's sections, parsed, for (b).
fn golden(file: &str, fresh: &[Section]) -> Vec<Section> {
    let path = fixture_path(file);
    let body: Vec<String> = fresh.iter().flat_map(render_section).collect();
    if bless() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("{HEADER}\n{}\n", body.join("\n"))).unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()));
    let stored: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')).collect();
    if stored != body {
        let first = stored.iter().zip(&body).position(|(a, b)| a != b).unwrap_or(stored.len().min(body.len()));
        let from = first.saturating_sub(3);
        let show = |lines: Vec<&str>| lines.iter().skip(from).take(12).map(|l| format!("    {l}")).collect::<Vec<_>>();
        panic!(
            "the object mapper no longer writes what {} pins: a change of the ON-DISK FORMAT.\n\
             First difference at line {} of the dump ({} lines pinned, {} written).\n\
             pinned:\n{}\nwritten:\n{}\n\
             If the change is deliberate, give it a format version (and keep reading the old \
             format), then regenerate: CELLAR_BLESS=1 cargo test -p cellar --test orm_formats",
            path.display(),
            first + 1,
            stored.len(),
            body.len(),
            show(stored.clone()).join("\n"),
            show(body.iter().map(String::as_str).collect()).join("\n"),
        );
    }
    // Rendering and parsing are inverses: what (b) loads is what (a) compared.
    let sections = parse(&text);
    assert_eq!(sections, fresh, "the fixture notation round-trips");
    sections
}

/// The section named `name` of a parsed fixture.
fn section<'s>(sections: &'s [Section], name: &str) -> &'s Section {
    sections.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no section {name}"))
}

/// (b): a fresh database holding the section's tables and rows, masked bytes as `00`.
fn load(s: &Section) -> Db {
    let db = Db::open_temporary().unwrap();
    load_into(&db, s);
    db
}

/// Creates the section's tables in `db` (if missing) and writes its rows through the raw store.
fn load_into(db: &Db, s: &Section) {
    for t in &s.tables {
        let spec = TableSpec {
            name: t.name.clone(),
            families: t.families.clone(),
            split_keys: Vec::new(),
            split_policy: SplitPolicy::MidKey,
            deferred: false,
        };
        db.store().ensure_table(&spec).unwrap();
    }
    for r in &s.rows {
        // Masked digits of a catalog version's time as `1`s (JSON numbers take no leading zero).
        let masked = if r.table == CATALOG { b'1' } else { 0 };
        let fill = |m: &Masked| -> Bytes { m.iter().map(|b| b.unwrap_or(masked)).collect::<Vec<u8>>().into() };
        let mutations = r
            .cells
            .iter()
            .map(|c| CellMutation::Put {
                family: Bytes::from(c.family.clone()),
                qualifier: Bytes::from(c.qualifier.clone()),
                value: fill(&c.value),
                timestamp: None,
            })
            .collect();
        db.store().mutate(&r.table, vec![RowMutation { row: fill(&r.key), mutations }]).unwrap();
    }
}

/// Runs `f`, which is to panic (a job killed at its first checkpoint).
fn killed(f: impl FnOnce()) {
    assert!(catch_unwind(AssertUnwindSafe(f)).is_err(), "the job was to be killed");
}

// ---------------------------------------------------------------------------------------------
// Row keys.
// ---------------------------------------------------------------------------------------------

/// Every fixed-width key part type, unsalted.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fk_numbers")]
struct Numbers {
    #[cellar(key)]
    a: u8,
    #[cellar(key)]
    b: u16,
    #[cellar(key)]
    c: u32,
    #[cellar(key)]
    d: u64,
    #[cellar(key)]
    e: u128,
    #[cellar(key)]
    f: i8,
    #[cellar(key)]
    g: i16,
    #[cellar(key)]
    h: i32,
    #[cellar(key)]
    i: i64,
    #[cellar(key)]
    j: i128,
    #[cellar(key)]
    k: f32,
    #[cellar(key)]
    l: f64,
    #[cellar(key)]
    m: bool,
    #[cellar(key)]
    n: Timestamp,
    #[cellar(column = "v")]
    v: u8,
}

/// Variable-length parts: delimited (zero bytes escaped `00 ff`, terminated `00 01`) before
/// another part, raw when last.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fk_strings")]
struct Strings {
    #[cellar(partition)]
    tenant: String,
    #[cellar(key)]
    blob: Vec<u8>,
    #[cellar(key)]
    name: String,
    #[cellar(key)]
    tail: String,
    #[cellar(column = "v")]
    v: u8,
}

/// A raw byte string as the last part.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fk_bytes_last")]
struct BytesLast {
    #[cellar(key)]
    id: u16,
    #[cellar(key)]
    raw: Vec<u8>,
    #[cellar(column = "v")]
    v: u8,
}

/// Descending parts: every byte inverted (strings delimited, even last); `reverse_ts`.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fk_desc")]
struct Desc {
    #[cellar(key, desc)]
    score: i64,
    #[cellar(key, desc)]
    rank: u32,
    #[cellar(key, desc)]
    ratio: f64,
    #[cellar(key, reverse_ts)]
    at: Timestamp,
    #[cellar(key, reverse_ts)]
    seq: u64,
    #[cellar(key, desc)]
    tag: String,
    #[cellar(key, desc)]
    name: String,
    #[cellar(column = "v")]
    v: u8,
}

/// Fixed-width numbers with their bytes reversed.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fk_reversed")]
struct Reversed {
    #[cellar(key, reversed)]
    id: u32,
    #[cellar(key, reversed)]
    big: i64,
    #[cellar(column = "v")]
    v: u8,
}

/// Strings zero-padded to a fixed width.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fk_fixed")]
struct Fixed {
    #[cellar(key, fixed = 6)]
    code: String,
    #[cellar(key, fixed = 3)]
    grade: String,
    #[cellar(key)]
    n: u16,
    #[cellar(column = "v")]
    v: u8,
}

/// MD5-hashed parts, their values kept in columns `o` and `i`.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fk_hashed")]
struct Hashed {
    #[cellar(partition, hash = "md5", column = "o")]
    owner: String,
    #[cellar(key, hash = "md5", column = "i")]
    item: u64,
    #[cellar(key)]
    n: u32,
    #[cellar(column = "v")]
    v: u8,
}

/// A hash salt over the whole key (no partition parts).
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fk_salted", salt(buckets = 8))]
struct Salted {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "v")]
    v: u8,
}

/// A hash salt over the partition parts.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fk_salted_partition", salt(buckets = 16))]
struct SaltedPartition {
    #[cellar(partition)]
    tenant: String,
    #[cellar(key)]
    n: u32,
    #[cellar(column = "v")]
    v: u8,
}

/// A random salt: the bucket is masked, the layout after it pinned.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fk_random", salt(buckets = 4, random))]
struct Logged {
    #[cellar(key)]
    seq: u64,
    #[cellar(column = "m")]
    msg: String,
}

/// A bucket computed from a field: `at % 4`.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fk_bucketed", bucket(field = "at", buckets = 4))]
struct Bucketed {
    #[cellar(key)]
    at: Timestamp,
    #[cellar(key)]
    n: u32,
    #[cellar(column = "v")]
    v: u8,
}

/// A single-table design: record types after the (hash-salted) partition.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fk_shop", record_type = 1, salt(buckets = 4))]
struct Customer {
    #[cellar(partition)]
    customer: String,
    #[cellar(column = "n")]
    name: String,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fk_shop", record_type = 2, salt(buckets = 4))]
struct Purchase {
    #[cellar(partition)]
    customer: String,
    #[cellar(key, desc)]
    placed: Timestamp,
    #[cellar(key)]
    number: u32,
    #[cellar(column = "t")]
    total_cents: i64,
}

#[derive(Record, Debug, Clone, PartialEq)]
enum Shop {
    Customer(Customer),
    Purchase(Purchase),
}

/// Key parts stored as uids: ids of names from `cellar_uids` (3 bytes by default, 4 declared).
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fk_points")]
struct Point {
    #[cellar(partition, uid = "metrics")]
    metric: String,
    #[cellar(key, uid(kind = "hosts", width = 4))]
    host: String,
    #[cellar(key)]
    at: Timestamp,
    #[cellar(column = "v")]
    value: f64,
}

fn numbers() -> Vec<Numbers> {
    vec![
        Numbers {
            a: 1,
            b: 0x0203,
            c: 0x0405_0607,
            d: 8,
            e: 9,
            f: -1,
            g: -2,
            h: -3,
            i: -4,
            j: -5,
            k: -1.5,
            l: 2.25,
            m: true,
            n: Timestamp(1_700_000_000_000),
            v: 1,
        },
        Numbers {
            a: u8::MAX,
            b: 0,
            c: u32::MAX,
            d: u64::MAX,
            e: u128::MAX,
            f: i8::MIN,
            g: i16::MAX,
            h: 0,
            i: i64::MIN,
            j: i128::MAX,
            k: 0.0,
            l: -0.0,
            m: false,
            n: Timestamp(0),
            v: 2,
        },
    ]
}

fn strings() -> Vec<Strings> {
    vec![
        Strings {
            tenant: "acme".into(),
            blob: vec![0x00, 0xFF, 0x01, 0x00, 0x61],
            name: "a\0b\u{ff}".into(),
            tail: "tail é/#".into(),
            v: 1,
        },
        Strings { tenant: "acme".into(), blob: Vec::new(), name: String::new(), tail: String::new(), v: 2 },
        Strings { tenant: "acme\0".into(), blob: vec![0xFF], name: "\0".into(), tail: "\0\u{1}".into(), v: 3 },
    ]
}

fn bytes_last() -> Vec<BytesLast> {
    vec![BytesLast { id: 1, raw: vec![0x00, 0x01, 0xFF, 0x00], v: 1 }, BytesLast { id: 2, raw: Vec::new(), v: 2 }]
}

fn descs() -> Vec<Desc> {
    vec![
        Desc {
            score: 10,
            rank: 1,
            ratio: 0.5,
            at: Timestamp(1_000),
            seq: 7,
            tag: "red".into(),
            name: "x\0y".into(),
            v: 1,
        },
        Desc {
            score: -10,
            rank: u32::MAX,
            ratio: -2.0,
            at: Timestamp(2_000),
            seq: 0,
            tag: String::new(),
            name: "zz".into(),
            v: 2,
        },
    ]
}

fn reversed() -> Vec<Reversed> {
    vec![
        Reversed { id: 1, big: 1, v: 1 },
        Reversed { id: 2, big: -2, v: 2 },
        Reversed { id: 0x0102_0304, big: 0, v: 3 },
    ]
}

fn fixed() -> Vec<Fixed> {
    vec![
        Fixed { code: "AB12".into(), grade: "A".into(), n: 1, v: 1 },
        Fixed { code: "ZZZZZZ".into(), grade: "ccc".into(), n: 2, v: 2 },
        Fixed { code: String::new(), grade: String::new(), n: 3, v: 3 },
    ]
}

fn hashed() -> Vec<Hashed> {
    vec![
        Hashed { owner: "ann@example.com".into(), item: 42, n: 1, v: 1 },
        Hashed { owner: String::new(), item: 0, n: 2, v: 2 },
    ]
}

fn salted() -> Vec<Salted> {
    (1..=5).map(|id| Salted { id, v: id as u8 }).collect()
}

fn salted_partition() -> Vec<SaltedPartition> {
    ["ann", "bob", "carol"]
        .iter()
        .enumerate()
        .map(|(i, t)| SaltedPartition { tenant: (*t).into(), n: i as u32, v: 1 })
        .collect()
}

fn logged() -> Vec<Logged> {
    (1..=3).map(|seq| Logged { seq, msg: format!("event {seq}") }).collect()
}

fn bucketed() -> Vec<Bucketed> {
    (0..5).map(|i| Bucketed { at: Timestamp(1_000 + i), n: i as u32, v: i as u8 }).collect()
}

fn customers() -> Vec<Customer> {
    vec![
        Customer { customer: "ann".into(), name: "Ann".into() },
        Customer { customer: "anna".into(), name: "Anna".into() },
    ]
}

fn purchases() -> Vec<Purchase> {
    vec![
        Purchase { customer: "ann".into(), placed: Timestamp(1_000), number: 1, total_cents: 250 },
        Purchase { customer: "ann".into(), placed: Timestamp(2_000), number: 2, total_cents: -100 },
        Purchase { customer: "anna".into(), placed: Timestamp(1_500), number: 3, total_cents: 0 },
    ]
}

fn points() -> Vec<Point> {
    vec![
        Point { metric: "cpu.load".into(), host: "web-1".into(), at: Timestamp(60_000), value: 0.25 },
        Point { metric: "cpu.load".into(), host: "web-2".into(), at: Timestamp(60_000), value: 1.5 },
        Point { metric: "mem.free".into(), host: "web-1".into(), at: Timestamp(120_000), value: -1.0 },
    ]
}

fn put_all<E: cellar::orm::Entity>(db: &Db, entities: &[E]) {
    let repo = db.repo::<E>().unwrap();
    for e in entities {
        repo.put(e).unwrap();
    }
}

/// Each entity reads back from the rows loaded into `db`.
fn read_all<E: cellar::orm::Entity + PartialEq + std::fmt::Debug>(db: &Db, entities: &[E]) {
    let repo = db.repo::<E>().unwrap();
    for e in entities {
        assert_eq!(repo.get(e.key()).unwrap().as_ref(), Some(e), "{}", E::SCHEMA.entity);
    }
    assert_eq!(repo.scan().to_vec().unwrap().len(), entities.len(), "{}: no other rows", E::SCHEMA.entity);
}

#[test]
fn row_keys_of_every_encoding() {
    let rig = Rig::embedded();
    let db = rig.db();
    put_all(&db, &numbers());
    put_all(&db, &strings());
    put_all(&db, &bytes_last());
    put_all(&db, &descs());
    put_all(&db, &reversed());
    put_all(&db, &fixed());
    put_all(&db, &hashed());
    put_all(&db, &salted());
    put_all(&db, &salted_partition());
    put_all(&db, &logged());
    put_all(&db, &bucketed());
    put_all(&db, &customers());
    put_all(&db, &purchases());
    put_all(&db, &points());
    let fresh = dump("keys", &rig, None, &["fk_random"]);
    let sections = golden("keys", &[fresh]);

    // (b)
    let db = load(section(&sections, "keys"));
    read_all(&db, &numbers());
    read_all(&db, &strings());
    read_all(&db, &bytes_last());
    read_all(&db, &descs());
    read_all(&db, &reversed());
    read_all(&db, &fixed());
    read_all(&db, &hashed());
    read_all(&db, &salted());
    read_all(&db, &salted_partition());
    read_all(&db, &logged());
    read_all(&db, &bucketed());
    read_all(&db, &customers());
    read_all(&db, &purchases());
    read_all(&db, &points());
    // The stored order is the order the encodings promise.
    let by_score: Vec<i64> = db.repo::<Desc>().unwrap().scan().to_vec().unwrap().iter().map(|d| d.score).collect();
    assert_eq!(by_score, [10, -10], "desc: largest first");
    let by_value: Vec<u8> = db.repo::<Numbers>().unwrap().scan().to_vec().unwrap().iter().map(|n| n.v).collect();
    assert_eq!(by_value, [1, 2]);
    // Record types: one partition scan, the customer first, then its purchases newest first.
    let shop = db.records::<Shop>().unwrap();
    let ann = shop.scan().partition(CustomerKey::customer("ann".into())).to_vec().unwrap();
    let c = customers();
    let p = purchases();
    assert_eq!(ann, [Shop::Customer(c[0].clone()), Shop::Purchase(p[1].clone()), Shop::Purchase(p[0].clone())]);
    let anna = shop.scan().partition(PurchaseKey::customer("anna".into())).to_vec().unwrap();
    assert_eq!(anna, [Shop::Customer(c[1].clone()), Shop::Purchase(p[2].clone())]);
    // The uids: both directions, and the counters hand out the next ids.
    let metrics = db.uids("metrics", 3).unwrap();
    assert_eq!(metrics.name(&[0, 0, 2]).unwrap().as_deref(), Some("mem.free"));
    assert_eq!(metrics.lookup("cpu.load").unwrap(), Some(Bytes::from_static(&[0, 0, 1])));
    assert_eq!(metrics.id("disk.used").unwrap(), Bytes::from_static(&[0, 0, 3]));
    let hosts = db.uids("hosts", 4).unwrap();
    assert_eq!(hosts.lookup("web-2").unwrap(), Some(Bytes::from_static(&[0, 0, 0, 2])));
    assert_eq!(hosts.id("web-3").unwrap(), Bytes::from_static(&[0, 0, 0, 3]));
}

// ---------------------------------------------------------------------------------------------
// Cell values.
// ---------------------------------------------------------------------------------------------

/// A `#[cellar(serde)]` value: MessagePack with field names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Prefs {
    theme: String,
    sizes: Vec<u16>,
    beta: Option<bool>,
}

/// The first version of [`Doc`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct DocV1 {
    title: String,
}

/// A `#[cellar(blob)]` value: a versioned blob (header, MessagePack, schema version 2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Versioned)]
#[cellar(blob(version = 2, codec = "msgpack", history(1 = DocV1)))]
struct Doc {
    title: String,
    pages: u32,
}

impl From<DocV1> for Doc {
    fn from(v: DocV1) -> Self {
        Doc { title: v.title, pages: 0 }
    }
}

/// Every value type in a cell of its own.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fv_values", family_options(name = "h", max_versions = 3, ttl = 3153600000))]
struct Values {
    #[cellar(key)]
    id: u32,
    #[cellar(column = "u8")]
    a_u8: u8,
    #[cellar(column = "u16")]
    a_u16: u16,
    #[cellar(column = "u32")]
    a_u32: u32,
    #[cellar(column = "u64")]
    a_u64: u64,
    #[cellar(column = "u128")]
    a_u128: u128,
    #[cellar(column = "i8")]
    a_i8: i8,
    #[cellar(column = "i16")]
    a_i16: i16,
    #[cellar(column = "i32")]
    a_i32: i32,
    #[cellar(column = "i64")]
    a_i64: i64,
    #[cellar(column = "i128")]
    a_i128: i128,
    #[cellar(column = "f32")]
    a_f32: f32,
    #[cellar(column = "f64")]
    a_f64: f64,
    #[cellar(column = "yes")]
    yes: bool,
    #[cellar(column = "no")]
    no: bool,
    #[cellar(column = "str")]
    text: String,
    #[cellar(column = "empty")]
    empty: String,
    #[cellar(column = "vec")]
    raw: Vec<u8>,
    #[cellar(column = "bytes")]
    shared: Bytes,
    #[cellar(column = "ts")]
    at: Timestamp,
    #[cellar(column = "some")]
    some: Option<i32>,
    #[cellar(column = "none")]
    none: Option<i32>,
    #[cellar(serde, column = "prefs")]
    prefs: Prefs,
    #[cellar(serde, column = "map")]
    map: BTreeMap<String, u32>,
    #[cellar(serde, column = "maybe")]
    maybe: Option<Prefs>,
    #[cellar(blob, column = "doc")]
    doc: Doc,
    #[cellar(counter, column = "hits")]
    hits: i64,
    #[cellar(version, column = "ver")]
    version: u64,
    #[cellar(family = "h", column = "hv")]
    in_h: String,
    #[cellar(skip)]
    scratch: u32,
}

/// Maps stored as one column per entry.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fv_series")]
struct Series {
    #[cellar(key)]
    id: u32,
    #[cellar(column = "n")]
    name: String,
    #[cellar(columns(family = "p", prefix = "pt"))]
    points: BTreeMap<u16, i64>,
    #[cellar(columns(family = "r", desc))]
    recent: BTreeMap<Timestamp, String>,
    #[cellar(columns(family = "t"))]
    tags: BTreeMap<String, bool>,
    #[cellar(columns(family = "z", lazy))]
    archive: BTreeMap<i32, Vec<u8>>,
}

/// Nothing but a key: stored as the empty marker cell.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fv_bare")]
struct Bare {
    #[cellar(key)]
    id: u32,
}

/// As stored after a put, a save and an increment of 5.
fn values() -> Values {
    Values {
        id: 1,
        a_u8: 0xAB,
        a_u16: 0x0102,
        a_u32: 0x0304_0506,
        a_u64: 0x0708_090A_0B0C_0D0E,
        a_u128: u128::MAX - 1,
        a_i8: -1,
        a_i16: -256,
        a_i32: i32::MIN,
        a_i64: -2,
        a_i128: i128::MIN + 1,
        a_f32: 1.5,
        a_f64: -0.1,
        yes: true,
        no: false,
        text: "héllo, \"world\"".into(),
        empty: String::new(),
        raw: vec![0x00, 0xFF, 0x7F],
        shared: Bytes::from_static(b"\x01\x02\x03"),
        at: Timestamp(1_700_000_000_123),
        some: Some(-7),
        none: None,
        prefs: Prefs { theme: "dark".into(), sizes: vec![1, 300, 70_00], beta: Some(true) },
        map: [("a".to_string(), 1), ("b".to_string(), 256)].into_iter().collect(),
        maybe: None,
        doc: Doc { title: "Manual".into(), pages: 12 },
        hits: 5,
        version: 2,
        in_h: "kept three times".into(),
        scratch: 0,
    }
}

fn series() -> Series {
    Series {
        id: 9,
        name: "temps".into(),
        points: [(1, 10), (256, -1), (u16::MAX, i64::MAX)].into_iter().collect(),
        recent: [(Timestamp(1_000), "old".to_string()), (Timestamp(2_000), "new".to_string())].into_iter().collect(),
        tags: [("hot".to_string(), true), ("".to_string(), false)].into_iter().collect(),
        archive: BTreeMap::new(),
    }
}

fn archive() -> Vec<(i32, Vec<u8>)> {
    vec![(-1, vec![0xFF]), (0, Vec::new()), (7, b"seven".to_vec())]
}

#[test]
fn cell_values_of_every_type() {
    let rig = Rig::embedded();
    let db = rig.db();
    let repo = db.repo::<Values>().unwrap();
    let mut v = Values { version: 0, hits: 0, scratch: 99, ..values() };
    repo.put(&v).unwrap(); // version 1
    v.version = 1;
    repo.save(&mut v).unwrap(); // version 2
    repo.increment(1, Values::HITS, 5).unwrap();
    let wide = db.repo::<Series>().unwrap();
    wide.put(&Series { archive: archive().into_iter().take(1).collect(), ..series() }).unwrap();
    let lazy = wide.wide(9, Series::ARCHIVE).unwrap();
    for (k, v) in archive() {
        lazy.put(&k, &v).unwrap();
    }
    db.repo::<Bare>().unwrap().put(&Bare { id: 3 }).unwrap();
    let fresh = dump("values", &rig, None, &[]);
    let sections = golden("values", &[fresh]);

    // (b)
    let db = load(section(&sections, "values"));
    assert_eq!(db.repo::<Values>().unwrap().get(1).unwrap(), Some(values()));
    let wide = db.repo::<Series>().unwrap();
    assert_eq!(wide.get(9).unwrap(), Some(series()), "a lazy map reads empty with its entity");
    assert_eq!(wide.wide(9, Series::ARCHIVE).unwrap().all().unwrap(), archive());
    assert_eq!(wide.wide(9, Series::RECENT).unwrap().first(1).unwrap(), [(Timestamp(2_000), "new".to_string())]);
    assert_eq!(db.repo::<Bare>().unwrap().get(3).unwrap(), Some(Bare { id: 3 }));
    // The counter and the version go on from what is stored.
    let repo = db.repo::<Values>().unwrap();
    assert_eq!(repo.increment(1, Values::HITS, 1).unwrap(), 6);
    let mut again = values();
    repo.save(&mut again).unwrap();
    assert_eq!(repo.get(1).unwrap().map(|v| v.version), Some(3));
}

// ---------------------------------------------------------------------------------------------
// Indexes.
// ---------------------------------------------------------------------------------------------

/// Every kind of index row: unique claims, composite values with `desc` and `fixed` parts and
/// covered copies, an MD5-hashed part, a sparse optional field.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(
    table = "fi_people",
    index(name = "by_city_name", on(city, name(desc)), include(age, nick)),
    index(name = "by_email_md5", on(email(hash = "md5")))
)]
struct Person {
    #[cellar(key)]
    id: u32,
    #[cellar(column = "n")]
    name: String,
    #[cellar(column = "c")]
    city: String,
    #[cellar(column = "e", index = "by_email", unique)]
    email: String,
    #[cellar(column = "a")]
    age: u8,
    #[cellar(column = "k")]
    nick: Option<String>,
    #[cellar(column = "t", index = "by_tag")]
    tag: Option<String>,
    #[cellar(column = "z", fixed = 5, index = "by_zip")]
    zip: String,
    #[cellar(version)]
    version: u64,
}

fn people() -> Vec<Person> {
    vec![
        Person {
            id: 1,
            name: "Ada".into(),
            city: "Oslo".into(),
            email: "ada@example.com".into(),
            age: 36,
            nick: Some("countess".into()),
            tag: Some("math".into()),
            zip: "0150".into(),
            version: 1,
        },
        Person {
            id: 2,
            name: "Bob".into(),
            city: "Oslo".into(),
            email: "bob@example.com".into(),
            age: 41,
            nick: None,
            tag: None,
            zip: "0151".into(),
            version: 1,
        },
        Person {
            id: 3,
            name: "Cy".into(),
            city: "Lima".into(),
            email: "cy@example.com".into(),
            age: 29,
            nick: None,
            tag: Some("art".into()),
            zip: "15001".into(),
            version: 1,
        },
    ]
}

fn ids(people: &[Person]) -> Vec<u32> {
    people.iter().map(|p| p.id).collect()
}

#[test]
fn index_rows_verified_claims_copies_and_tokens() {
    let rig = Rig::embedded();
    let db = rig.db();
    let repo = db.repo::<Person>().unwrap();
    for p in people() {
        repo.put(&p).unwrap();
    }
    // A deleted entity leaves its write token alone: a tombstone.
    repo.delete(3).unwrap();
    let fresh = dump("indexes", &rig, None, &[]);
    let sections = golden("indexes", &[fresh]);

    // (b)
    let db = load(section(&sections, "indexes"));
    let repo = db.repo::<Person>().unwrap();
    let p = people();
    assert_eq!(repo.get(1).unwrap().as_ref(), Some(&p[0]));
    assert_eq!(repo.get(3).unwrap(), None, "a tombstone is no entity");
    assert_eq!(ids(&repo.scan().to_vec().unwrap()), [1, 2]);
    assert_eq!(repo.index(Person::BY_EMAIL).get("bob@example.com".into()).unwrap().as_ref(), Some(&p[1]));
    assert_eq!(repo.index(Person::BY_EMAIL).get("cy@example.com".into()).unwrap(), None);
    let md5 = repo.index(Person::BY_EMAIL_MD5).scan().prefix("ada@example.com".to_string()).to_vec().unwrap();
    assert_eq!(ids(&md5), [1]);
    let by_city_name = repo.index(Person::BY_CITY_NAME);
    let oslo = || by_city_name.scan().prefix(("Oslo".to_string(),));
    assert_eq!(ids(&oslo().to_vec().unwrap()), [2, 1], "names descending");
    let entries = oslo().entries().unwrap();
    assert_eq!(entries[1].get::<u8>("age").unwrap(), 36, "a covered copy");
    assert_eq!(entries[1].get::<Option<String>>("nick").unwrap().as_deref(), Some("countess"));
    assert_eq!(entries[0].get::<Option<String>>("nick").unwrap(), None, "an absent copy");
    assert_eq!(ids(&repo.index(Person::BY_TAG).scan().to_vec().unwrap()), [1], "sparse");
    assert_eq!(ids(&repo.index(Person::BY_ZIP).scan().prefix("0151".to_string()).to_vec().unwrap()), [2]);
    // Writes go on from the loaded token and version.
    repo.put(&Person { city: "Rome".into(), ..p[1].clone() }).unwrap();
    assert_eq!(repo.get(2).unwrap().map(|p| p.version), Some(2));
    assert_eq!(ids(&repo.index(Person::BY_CITY_NAME).scan().prefix(("Rome".to_string(),)).to_vec().unwrap()), [2]);
}

#[test]
fn index_rows_left_unverified_by_an_interrupted_write() {
    // Without atomic commits index writes take the protocol of several steps; the data write
    // (step 3) fails, leaving the new entries unverified and the old ones marked.
    let rig = Rig::without_commits();
    let db = rig.db();
    let repo = db.repo::<Person>().unwrap();
    let p = people();
    repo.put(&p[0]).unwrap();
    repo.put(&p[1]).unwrap();
    rig.fail(Call::CheckAndMutate, Some("fi_people"), 0);
    let moved = Person { city: "Rome".into(), email: "ada@rome.example".into(), tag: None, ..p[0].clone() };
    assert!(repo.put(&moved).is_err());
    let fresh = dump("indexes_unverified", &rig, None, &[]);
    let sections = golden("indexes_unverified", &[fresh]);

    // (b): the writer (instance 0) is gone; readers settle its marks against the data row.
    let db = load(section(&sections, "indexes_unverified"));
    let repo = db.repo::<Person>().unwrap();
    assert_eq!(repo.get(1).unwrap().as_ref(), Some(&p[0]), "the data write never happened");
    let by_email = repo.index(Person::BY_EMAIL);
    assert_eq!(by_email.get("ada@rome.example".into()).unwrap(), None);
    assert_eq!(by_email.get("ada@example.com".into()).unwrap().as_ref(), Some(&p[0]));
    assert_eq!(
        ids(&repo.index(Person::BY_CITY_NAME).scan().prefix(("Rome".to_string(),)).to_vec().unwrap()),
        Vec::<u32>::new()
    );
    assert_eq!(ids(&repo.index(Person::BY_CITY_NAME).scan().prefix(("Oslo".to_string(),)).to_vec().unwrap()), [2, 1]);
    assert_eq!(ids(&repo.index(Person::BY_TAG).scan().to_vec().unwrap()), [1]);
    // The unique value the failed write claimed is free again.
    repo.put(&Person { email: "ada@rome.example".into(), ..p[1].clone() }).unwrap();
    assert_eq!(by_email.get("ada@rome.example".into()).unwrap().map(|p| p.id), Some(2));
}

mod status_v1 {
    use cellar::prelude::*;

    /// The entity before it had indexes.
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "fs_people")]
    pub struct Member {
        #[cellar(key)]
        pub id: u32,
        #[cellar(column = "n")]
        pub name: String,
        #[cellar(column = "c")]
        pub city: String,
    }
}

mod status_v2 {
    use cellar::prelude::*;

    /// Indexes declared on a table with rows: pending.
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "fs_people", index(name = "by_city", on(city)))]
    pub struct Member {
        #[cellar(key)]
        pub id: u32,
        #[cellar(column = "n", index = "by_name")]
        pub name: String,
        #[cellar(column = "c")]
        pub city: String,
    }
}

mod status_v3 {
    use cellar::prelude::*;

    /// `by_city` declared again with another shape: redefined.
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "fs_people", index(name = "by_city", on(city, name), unique))]
    pub struct Member {
        #[cellar(key)]
        pub id: u32,
        #[cellar(column = "n", index = "by_name")]
        pub name: String,
        #[cellar(column = "c")]
        pub city: String,
    }
}

/// An index its table had from the start: built.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fs_fresh", record_type = 5)]
struct Fresh {
    #[cellar(key)]
    id: u32,
    #[cellar(column = "c", index = "by_code", unique)]
    code: String,
}

#[test]
fn index_statuses_built_pending_redefined() {
    let rig = Rig::embedded();
    let db = rig.db();
    let v1 = db.repo::<status_v1::Member>().unwrap();
    v1.put(&status_v1::Member { id: 1, name: "ann".into(), city: "Oslo".into() }).unwrap();
    v1.put(&status_v1::Member { id: 2, name: "bob".into(), city: "Lima".into() }).unwrap();
    db.repo::<status_v2::Member>().unwrap();
    db.repo::<status_v3::Member>().unwrap();
    db.repo::<Fresh>().unwrap().put(&Fresh { id: 1, code: "x1".into() }).unwrap();
    let fresh = dump("statuses", &rig, None, &[]);
    let sections = golden("index_statuses", &[fresh]);

    // (b)
    let db = load(section(&sections, "statuses"));
    let v3 = db.repo::<status_v3::Member>().unwrap();
    let pending = v3.index(status_v3::Member::BY_NAME).scan().to_vec().unwrap_err();
    assert!(matches!(&pending, Error::IndexNotReady { index: "by_name", .. }), "{pending}");
    assert!(pending.to_string().contains("run its backfill"), "{pending}");
    let redefined = v3.index(status_v3::Member::BY_CITY).get(("Oslo".into(), "ann".into())).unwrap_err();
    assert!(redefined.to_string().contains("declared again"), "{redefined}");
    assert!(v3.build_index(status_v3::Member::BY_CITY).run().unwrap().built);
    assert_eq!(v3.index(status_v3::Member::BY_CITY).get(("Oslo".into(), "ann".into())).unwrap().map(|m| m.id), Some(1));
    let fresh = db.repo::<Fresh>().unwrap();
    assert_eq!(fresh.index(Fresh::BY_CODE).get("x1".into()).unwrap(), Some(Fresh { id: 1, code: "x1".into() }));
}

// ---------------------------------------------------------------------------------------------
// Aggregates.
// ---------------------------------------------------------------------------------------------

/// Declares `Order` → `Location` → `Item` under one strategy, and two versions of an order.
macro_rules! aggregate_types {
    ($module:ident, $strategy:literal, $table:literal) => {
        mod $module {
            use cellar::prelude::*;

            #[derive(Aggregate, Debug, Clone, PartialEq)]
            #[cellar(table = $table, strategy = $strategy)]
            pub struct Order {
                #[cellar(partition)]
                pub customer: u64,
                #[cellar(key)]
                pub order_no: String,
                #[cellar(column = "s")]
                pub status: String,
                #[cellar(column = "n")]
                pub note: Option<String>,
                #[cellar(children)]
                pub ship_to: Vec<Location>,
            }

            #[derive(Part, Debug, Clone, PartialEq)]
            pub struct Location {
                #[cellar(key)]
                pub loc: u16,
                #[cellar(column = "c")]
                pub city: Option<String>,
                #[cellar(children)]
                pub items: Vec<Item>,
            }

            #[derive(Part, Debug, Clone, PartialEq)]
            pub struct Item {
                #[cellar(key)]
                pub line: u16,
                #[cellar(column = "k")]
                pub sku: String,
                #[cellar(column = "q")]
                pub qty: u32,
            }

            fn item(line: u16, qty: u32) -> Item {
                Item { line, sku: format!("sku-{line}"), qty }
            }

            /// Two locations, one with three items, one empty with no city (a marker row).
            pub fn v1(customer: u64, order_no: &str) -> Order {
                Order {
                    customer,
                    order_no: order_no.into(),
                    status: "placed".into(),
                    note: None,
                    ship_to: vec![
                        Location {
                            loc: 1,
                            city: Some("Paris".into()),
                            items: vec![item(1, 2), item(2, 1), item(3, 9)],
                        },
                        Location { loc: 2, city: None, items: Vec::new() },
                    ],
                }
            }

            /// v1 changed: status and note, a quantity, an item removed, a location added.
            pub fn v2(customer: u64, order_no: &str) -> Order {
                Order {
                    customer,
                    order_no: order_no.into(),
                    status: "shipped".into(),
                    note: Some("gift".into()),
                    ship_to: vec![
                        Location { loc: 1, city: Some("Paris".into()), items: vec![item(1, 2), item(2, 5)] },
                        Location { loc: 2, city: None, items: Vec::new() },
                        Location { loc: 3, city: Some("Lyon".into()), items: vec![item(4, 1)] },
                    ],
                }
            }
        }
    };
}

aggregate_types!(normalized, "normalized", "fa_n");
aggregate_types!(single_table, "single_table", "fa_s");
aggregate_types!(denormalized, "denormalized", "fa_d");
aggregate_types!(blob, "blob", "fa_b");

/// A `blob` aggregate that is its own versioned value.
#[derive(Aggregate, Versioned, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cellar(table = "fa_v", strategy = "blob", blob(version = 1, codec = "msgpack"))]
struct Cart {
    #[cellar(partition)]
    customer: u64,
    #[cellar(key)]
    cart: u32,
    #[cellar(column = "s")]
    status: String,
    #[cellar(children)]
    lines: Vec<CartLine>,
}

#[derive(Part, Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CartLine {
    #[cellar(key)]
    n: u16,
    #[cellar(column = "k")]
    sku: String,
}

fn cart() -> Cart {
    Cart {
        customer: 7,
        cart: 1,
        status: "open".into(),
        lines: vec![CartLine { n: 1, sku: "sku-1".into() }, CartLine { n: 2, sku: "sku-2".into() }],
    }
}

/// Runs `$body` once per strategy, `$m` naming the strategy's module.
macro_rules! each_strategy {
    (|$m:ident| $body:block) => {{
        {
            use normalized as $m;
            $body
        }
        {
            use single_table as $m;
            $body
        }
        {
            use denormalized as $m;
            $body
        }
        {
            use blob as $m;
            $body
        }
    }};
}

#[test]
fn aggregate_rows_of_every_strategy() {
    let rig = Rig::embedded();
    let db = rig.db();
    each_strategy!(|m| {
        db.aggregates::<m::Order>().unwrap().put(&m::v1(7, "A-1")).unwrap();
    });
    db.aggregates::<Cart>().unwrap().put(&cart()).unwrap();
    let fresh = dump("aggregates", &rig, None, &[]);
    let sections = golden("aggregates", &[fresh]);

    // (b)
    let db = load(section(&sections, "aggregates"));
    each_strategy!(|m| {
        let orders = db.aggregates::<m::Order>().unwrap();
        assert_eq!(orders.get((7, "A-1".to_string())).unwrap(), Some(m::v1(7, "A-1")));
        // A write over the loaded rows (and generation) goes through.
        orders.put(&m::v2(7, "A-1")).unwrap();
        assert_eq!(orders.get((7, "A-1".to_string())).unwrap(), Some(m::v2(7, "A-1")));
    });
    assert_eq!(db.aggregates::<Cart>().unwrap().get((7, 1)).unwrap(), Some(cart()));
}

#[test]
fn aggregate_rows_on_a_shared_store_fences_and_tombstones() {
    // On a store several processes share every strategy but `blob` writes through intents:
    // child rows carry fences, a deleted row keeps its fence, a deleted aggregate its root
    // with a deleted generation.
    let rig = Rig::shared();
    let db = rig.db();
    each_strategy!(|m| {
        let orders = db.aggregates::<m::Order>().unwrap();
        orders.put(&m::v1(7, "A-1")).unwrap();
        orders.put(&m::v2(7, "A-1")).unwrap();
        orders.put(&m::v1(7, "B-2")).unwrap();
        orders.delete((7, "B-2".to_string())).unwrap();
    });
    let fresh = dump("aggregates_shared", &rig, None, &[]);
    let sections = golden("aggregates_shared", &[fresh]);

    // (b)
    let db = load(section(&sections, "aggregates_shared"));
    each_strategy!(|m| {
        let orders = db.aggregates::<m::Order>().unwrap();
        assert_eq!(orders.get((7, "A-1".to_string())).unwrap(), Some(m::v2(7, "A-1")));
        assert_eq!(orders.get((7, "B-2".to_string())).unwrap(), None);
        assert!(!orders.exists((7, "B-2".to_string())).unwrap());
        assert_eq!(orders.scan().to_vec().unwrap(), [m::v2(7, "A-1")]);
    });
}

#[test]
fn aggregate_intents_left_by_interrupted_writes() {
    // `normalized` on the embedded store: the write's intent is in the root's generation, its
    // first batch of child rows fails.
    let rig = Rig::embedded();
    let db = rig.db();
    let orders = db.aggregates::<normalized::Order>().unwrap();
    orders.put(&normalized::v1(7, "A-1")).unwrap();
    rig.fail(Call::Mutate, None, 0);
    assert!(orders.put(&normalized::v2(7, "A-1")).is_err());
    let plain = dump("normalized", &rig, None, &[]);
    // `single_table` on a shared store: a fenced intent, its fenced row writes fail.
    let rig = Rig::shared();
    let db = rig.db();
    let orders = db.aggregates::<single_table::Order>().unwrap();
    orders.put(&single_table::v1(7, "A-1")).unwrap();
    rig.fail(Call::CheckAndMutateMany, None, 0);
    assert!(orders.put(&single_table::v2(7, "A-1")).is_err());
    let fenced = dump("single_table_shared", &rig, None, &[]);
    let sections = golden("aggregate_intents", &[plain, fenced]);

    // (b): the writer (instance 0) is gone; the next reader rolls its intent forward.
    let db = load(section(&sections, "normalized"));
    let orders = db.aggregates::<normalized::Order>().unwrap();
    assert_eq!(orders.get((7, "A-1".to_string())).unwrap(), Some(normalized::v2(7, "A-1")));
    // A `single_table` aggregate writes intents only on stores without atomic row groups,
    // and only there do reads look for them: load the fenced intent into such a store.
    let rig = Rig::shared();
    let db = rig.db();
    load_into(&db, section(&sections, "single_table_shared"));
    let orders = db.aggregates::<single_table::Order>().unwrap();
    assert_eq!(orders.get((7, "A-1".to_string())).unwrap(), Some(single_table::v2(7, "A-1")));
}

// ---------------------------------------------------------------------------------------------
// Job checkpoints.
// ---------------------------------------------------------------------------------------------

mod job_v1 {
    use cellar::prelude::*;

    /// The entity before its index.
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "fj_people")]
    pub struct Member {
        #[cellar(key)]
        pub id: u32,
        #[cellar(column = "e")]
        pub email: String,
    }

    pub fn members() -> Vec<Member> {
        (0..1001).map(|id| Member { id, email: format!("m{id}@example.com") }).collect()
    }
}

/// The entity with an index declared after its rows: a backfill builds it.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fj_people")]
struct Member {
    #[cellar(key)]
    id: u32,
    #[cellar(column = "e", index = "by_email", unique)]
    email: String,
}

/// Blob cells for a migration to walk.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fj_docs")]
struct Archived {
    #[cellar(key)]
    id: u32,
    #[cellar(blob, column = "doc")]
    doc: Doc,
}

fn archived() -> Vec<Archived> {
    (0..1001).map(|id| Archived { id, doc: Doc { title: format!("doc {id}"), pages: id } }).collect()
}

/// Rows for a copy to move.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "fj_copied")]
struct Copied {
    #[cellar(key)]
    id: u32,
    #[cellar(column = "v")]
    v: String,
}

fn copy_source() -> Db {
    let db = Db::open_temporary().unwrap();
    let repo = db.repo::<Copied>().unwrap();
    repo.put_many(&(0..5).map(|id| Copied { id, v: format!("row {id}") }).collect::<Vec<_>>()).unwrap();
    db
}

#[test]
fn job_checkpoints_of_interrupted_jobs() {
    // An index backfill killed right after its first checkpoint (1000 rows).
    let rig = Rig::embedded();
    let db = rig.db();
    db.repo::<job_v1::Member>().unwrap().put_many(&job_v1::members()).unwrap();
    let members = db.repo::<Member>().unwrap();
    killed(|| {
        members.build_index(Member::BY_EMAIL).on_progress(|_| panic!("killed")).run().unwrap();
    });
    let backfill = dump("backfill", &rig, Some(&["cellar_indexes", "cellar_jobs"]), &[]);

    // A blob migration killed right after its first checkpoint.
    let rig = Rig::embedded();
    let db = rig.db();
    db.repo::<Archived>().unwrap().put_many(&archived()).unwrap();
    killed(|| {
        db.migrate_column::<Doc>("fj_docs", "d:doc").unwrap().on_progress(|_| panic!("killed")).run().unwrap();
    });
    let migration = dump("migration", &rig, Some(&["cellar_jobs"]), &[]);

    // A copy whose second batch fails, into the store that keeps the checkpoint.
    let rig = Rig::embedded();
    let to = rig.db();
    rig.fail(Call::Mutate, Some("fj_copied"), 1);
    assert!(copy_source().copy_to(&to).table("fj_copied").batch_rows(2).run().is_err());
    let copy = dump("copy", &rig, Some(&["cellar_jobs"]), &[]);
    let sections = golden("jobs", &[backfill, migration, copy]);

    // (b): each job resumes after the loaded checkpoint.
    let db = Db::open_temporary().unwrap();
    db.repo::<job_v1::Member>().unwrap().put_many(&job_v1::members()).unwrap();
    let members = db.repo::<Member>().unwrap();
    load_into(&db, section(&sections, "backfill"));
    let report = members.build_index(Member::BY_EMAIL).run().unwrap();
    assert!(report.resumed_after.is_some() && report.built, "{report:?}");
    assert_eq!(report.rows, 1, "the first 1000 rows are not done again");

    let db = Db::open_temporary().unwrap();
    db.repo::<Archived>().unwrap().put_many(&archived()).unwrap();
    load_into(&db, section(&sections, "migration"));
    let report = db.migrate_column::<Doc>("fj_docs", "d:doc").unwrap().run().unwrap();
    assert!(report.resumed_after.is_some(), "{report:?}");
    assert_eq!(report.rows, 1, "the first 1000 rows are not done again");

    let to = load(section(&sections, "copy"));
    let report = copy_source().copy_to(&to).table("fj_copied").batch_rows(2).run().unwrap();
    assert!(report.tables[0].resumed_after.is_some(), "{report:?}");
    assert_eq!(report.tables[0].rows, 3, "the first batch is not copied again");
}

// ---------------------------------------------------------------------------------------------
// The schema catalog.
// ---------------------------------------------------------------------------------------------

/// Opens the types the catalog fixture describes: entities of every kind, a record enum and
/// aggregates.
fn open_catalogued(db: &Db) {
    db.repo::<Numbers>().unwrap();
    db.repo::<Strings>().unwrap();
    db.repo::<Desc>().unwrap();
    db.repo::<Hashed>().unwrap();
    db.repo::<Logged>().unwrap();
    db.repo::<Bucketed>().unwrap();
    db.repo::<Point>().unwrap();
    db.records::<Shop>().unwrap();
    db.repo::<Values>().unwrap();
    db.repo::<Series>().unwrap();
    db.repo::<Bare>().unwrap();
    db.repo::<Person>().unwrap();
    db.aggregates::<normalized::Order>().unwrap();
    db.aggregates::<denormalized::Order>().unwrap();
    db.aggregates::<Cart>().unwrap();
}

/// The catalog's cells: row, qualifier and value.
fn catalog_cells(db: &Db) -> Vec<(Bytes, Bytes, Bytes)> {
    let rows = db.store().scan(CATALOG, &ScanSpec::default()).unwrap();
    rows.flat_map(|r| {
        let r = r.unwrap();
        r.cells.into_iter().map(move |c| (r.key.clone(), c.qualifier, c.value)).collect::<Vec<_>>()
    })
    .collect()
}

#[test]
fn schema_catalog_versions() {
    let rig = Rig::embedded();
    let db = rig.db();
    open_catalogued(&db);
    // A type whose schema changed: version 1, then version 2 with what changed.
    let v1 = db.repo::<status_v1::Member>().unwrap();
    v1.put(&status_v1::Member { id: 1, name: "ann".into(), city: "Oslo".into() }).unwrap();
    db.repo::<status_v2::Member>().unwrap();
    let fresh = dump("catalog", &rig, Some(&[CATALOG]), &[]);
    let sections = golden("catalog", &[fresh]);

    // (b): every type finds its schema current (no version is added), and the release before
    // the index was added, which would not maintain it, is refused.
    let db = load(section(&sections, "catalog"));
    let loaded = catalog_cells(&db);
    open_catalogued(&db);
    db.repo::<status_v2::Member>().unwrap();
    assert_eq!(catalog_cells(&db), loaded, "no schema recorded anew");
    let err = db.repo::<status_v1::Member>().unwrap_err();
    assert!(matches!(&err, Error::SchemaIncompatible { version: 2, .. }), "{err}");
}
