//! Secondary indexes added to an entity that already has data. Release 1 of an application
//! stored its customers without an index; release 2 maps the same table and columns with an
//! entity that declares two: a unique index on the email, and an index on the city that copies
//! the name, so "who lives in Porto" reads the index alone.
//!
//! Release 2 opens its repository on 5,000 stored customers: both indexes are recorded as
//! pending, and queries through them fail with `Error::IndexNotReady`. The application keeps
//! writing meanwhile, and every write keeps both indexes right from the start, so the backfill
//! only has to cover the older rows. Each index is built with a progress bar — plain progress
//! lines when stdout is not a terminal — and then the queries answer: a unique get by email,
//! and a covered scan of one city. A verification checks both indexes against the data.
//!
//! Then the email index drifts from the data the way a bug or an out-of-band tool can make it
//! drift, by writes straight into the store: one customer's entry is deleted, and a verified
//! entry is written for an address nobody holds. The verification finds both, queries answer
//! wrongly until a repair fixes them, and the next verification is clean.
//!
//! What is asserted: the `IndexNotReady` errors; that the writes made before the backfill left
//! their entries (and only theirs); each backfill's report (every row indexed, the index built)
//! and its progress every 1000 rows; the answers of the queries, against the customers kept in
//! memory, and their costs (a unique get reads the index row and then the data row; a covered
//! scan is one scan and reads no data row); every figure of the verification reports before
//! and after the damage, of the repair, and after it; and the wrong answers before the repair,
//! right after it.
//!
//! Run with `cargo run --release --example index_backfill`.

use std::collections::BTreeMap;
use std::io::IsTerminal;

use bytes::Bytes;
use cellar::orm::index::{index_table, BackfillProgress, BackfillReport, IndexValue};
use cellar::orm::store::{CellMutation, ReadSpec, RowMutation};
use cellar::orm::value::Column;
use cellar::orm::{Error, Index, Result};
use cellar::prelude::*;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Release 1's entity.
mod release_1 {
    use cellar::prelude::*;

    /// A customer as release 1 stored it: no index.
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "customers")]
    pub struct Customer {
        #[cellar(key)]
        pub id: u64,
        #[cellar(column = "n")]
        pub name: String,
        #[cellar(column = "e")]
        pub email: String,
        #[cellar(column = "c")]
        pub city: String,
    }
}

/// A customer of release 2: the same table and columns, and two indexes.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "customers", index(name = "by_city", on(city), include(name)))]
struct Customer {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "n")]
    name: String,
    /// At most one customer per address.
    #[cellar(column = "e", index = "by_email", unique)]
    email: String,
    #[cellar(column = "c")]
    city: String,
}

/// Customers 1 to 5,000 were stored by release 1.
const CUSTOMERS: u64 = 5_000;
const FIRST: [&str; 16] = [
    "Ada",
    "Alan",
    "Barbara",
    "Claude",
    "Donald",
    "Edsger",
    "Frances",
    "Grace",
    "John",
    "Katherine",
    "Leslie",
    "Niklaus",
    "Radia",
    "Shafi",
    "Tony",
    "Whitfield",
];
const LAST: [&str; 16] = [
    "Allen", "Backus", "Conway", "Dijkstra", "Floyd", "Hamming", "Hoare", "Hopper", "Kahn", "Knuth", "Lamport",
    "Liskov", "Perlman", "Ritchie", "Wirth", "Yao",
];
const CITIES: [&str; 8] = ["Aarhus", "Bergen", "Ghent", "Graz", "Lyon", "Porto", "Tartu", "Turku"];
/// The city the covered scan lists.
const CITY: &str = "Porto";
/// The customer whose email entry the damage deletes, and the one a bogus entry points at.
const VICTIM: u64 = 1234;
const IMPOSTOR: u64 = 42;
/// An address no customer holds.
const GHOST: &str = "ghost@example.com";

/// A well-mixed number per customer (splitmix64): the data is the same on every run.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Customer `id`, as it was first stored.
fn customer(id: u64) -> Customer {
    let m = mix(id);
    let (first, last) = (FIRST[m as usize % FIRST.len()], LAST[(m >> 8) as usize % LAST.len()]);
    Customer {
        id,
        name: format!("{first} {last}"),
        email: format!("{}.{}.{id}@example.com", first.to_lowercase(), last.to_lowercase()),
        city: CITIES[(m >> 16) as usize % CITIES.len()].into(),
    }
}

/// The customer's data row key.
fn data_key(id: u64) -> Bytes {
    Customer::row_key(&id.into()).expect("a u64 key encodes").for_write()
}

/// The key of the `by_email` row of `email`: `[record type] by_email 00 [the email, encoded as a
/// key part]` (a unique index leaves the customer's key out: one row per value).
fn email_entry(email: &str) -> Bytes {
    let index = Customer::BY_EMAIL.spec();
    let mut key: Vec<u8> = Customer::SCHEMA.record_type.into_iter().collect();
    key.extend_from_slice(index.name.as_bytes());
    key.push(0);
    email.to_string().encode_value(index.parts, &mut key).expect("an email encodes");
    key.into()
}

/// A put of cell `i:qualifier` of an index row.
fn index_cell(qualifier: &[u8], value: Vec<u8>) -> CellMutation {
    CellMutation::Put {
        family: Bytes::from_static(b"i"),
        qualifier: Bytes::copy_from_slice(qualifier),
        value: value.into(),
        timestamp: None,
    }
}

/// Builds `index` with a progress bar on a terminal and a line per report elsewhere. (Under the
/// test harness stdout is captured, whatever it is: no bar there.)
fn build<V>(
    customers: &Repository<Customer>,
    index: Index<Customer, V>,
    rows: u64,
) -> Result<(BackfillReport, Vec<BackfillProgress>)> {
    let name = index.spec().name;
    let interactive = !cfg!(test) && std::io::stdout().is_terminal();
    let bar = if interactive {
        let style = ProgressStyle::with_template("  {prefix:<8} [{bar:40}] {pos}/{len} rows, {msg}")
            .expect("a valid template")
            .progress_chars("=> ");
        ProgressBar::with_draw_target(Some(rows), ProgressDrawTarget::stdout()).with_style(style).with_prefix(name)
    } else {
        ProgressBar::hidden()
    };
    let mut reports = Vec::new();
    let report = customers
        .build_index(index)
        .on_progress(|p| {
            if bar.is_hidden() {
                println!("  {name:<8} {:>4}/{rows} rows, {} entries", p.rows, p.indexed);
            }
            bar.set_message(format!("{} entries", p.indexed));
            bar.set_position(p.rows);
            reports.push(p.clone());
        })
        .run()?;
    bar.finish();
    let violations = report.violations.len();
    println!(
        "  {name:<8} rows {}, indexed {}, violations {violations}, built {}",
        report.rows, report.indexed, report.built
    );
    Ok((report, reports))
}

pub(crate) fn main() -> Result<()> {
    let db = Db::open_temporary()?;

    // Release 1 stores its customers.
    let old = db.repo::<release_1::Customer>()?;
    let mut expected: BTreeMap<u64, Customer> = (1..=CUSTOMERS).map(|id| (id, customer(id))).collect();
    let stored: Vec<release_1::Customer> = expected
        .values()
        .map(|c| release_1::Customer { id: c.id, name: c.name.clone(), email: c.email.clone(), city: c.city.clone() })
        .collect();
    for chunk in stored.chunks(500) {
        old.put_many(chunk)?;
    }
    println!("release 1 stored {CUSTOMERS} customers, without indexes");

    // Release 2 opens its repository on them: both indexes are recorded as pending.
    let customers = db.repo::<Customer>()?;
    let by_email = customers.index(Customer::BY_EMAIL);
    let by_city = customers.index(Customer::BY_CITY);
    let first = &expected[&1];
    let err = by_email.get(first.email.clone()).expect_err("by_email is not built");
    println!("release 2: by_email.get({:?}): {err}", first.email);
    assert!(matches!(err, Error::IndexNotReady { index: "by_email", .. }), "{err}");
    assert!(err.to_string().contains("run its backfill"), "{err}");
    let err = by_city.scan().prefix(CITY.to_string()).entries().expect_err("by_city is not built");
    assert!(matches!(err, Error::IndexNotReady { index: "by_city", .. }), "{err}");

    // The application keeps writing meanwhile: new customers, and one who moves.
    let mut written = vec![customer(CUSTOMERS + 1), customer(CUSTOMERS + 2), customer(CUSTOMERS + 3)];
    let mut moved = expected[&17].clone();
    let new_email = format!("{}.17@example.org", moved.name.to_lowercase().replace(' ', "."));
    let old_email = std::mem::replace(&mut moved.email, new_email);
    moved.city = CITY.into();
    written.push(moved.clone());
    for c in &written {
        customers.put(c)?;
        expected.insert(c.id, c.clone());
    }
    let rows = expected.len() as u64;
    println!("release 2 writes meanwhile: 3 new customers, and customer 17 moves to {CITY} with a new address");
    // Those writes wrote their entries, though the indexes are not built: the verification
    // finds them, and the older rows missing, which is what the backfill is for.
    for report in [customers.verify_index(Customer::BY_EMAIL).run()?, customers.verify_index(Customer::BY_CITY).run()?]
    {
        println!(
            "  {:<8} before its backfill: {} index rows, {} entries missing",
            report.index, report.index_rows, report.missing
        );
        assert_eq!((report.data_rows, report.index_rows, report.missing), (rows, 4, CUSTOMERS - 1));
        assert_eq!(report.outdated + report.stale + report.unverified + report.violations, 0, "{report}");
    }

    // The backfills.
    println!("backfill:");
    for (report, progress) in
        [build(&customers, Customer::BY_EMAIL, rows)?, build(&customers, Customer::BY_CITY, rows)?]
    {
        assert_eq!((report.rows, report.indexed, report.built), (rows, rows, true), "{report:?}");
        assert_eq!((report.violations.len(), report.resumed_after), (0, None));
        let at: Vec<u64> = progress.iter().map(|p| p.rows).collect();
        assert_eq!(at, [1000, 2000, 3000, 4000, 5000, rows], "a report every 1000 rows and at the end");
        assert!(progress.iter().all(|p| p.indexed == p.rows), "every row has an entry");
    }

    // The queries answer. A unique get reads the index row, then the data row it names.
    println!("queries:");
    let wanted = &expected[&2718];
    let (found, costs) = db.measure(|| by_email.get(wanted.email.clone()));
    let found = found?.expect("an indexed address");
    println!("  by_email.get({:?}): customer {}, {} of {} ({costs})", wanted.email, found.id, found.name, found.city);
    assert_eq!(&found, wanted);
    assert_eq!((costs.gets, costs.scans, costs.rows_read), (2, 0, 2), "the index row, then the data row");
    assert_eq!(by_email.get(moved.email.clone())?.map(|c| c.id), Some(17), "the write before the backfill");
    assert_eq!(by_email.get(old_email)?, None, "the address customer 17 left");
    // A covered scan: keys and names from the index rows alone, in key order within the city.
    let (entries, costs) = db.measure(|| by_city.scan().prefix(CITY.to_string()).entries());
    let listed = entries?.iter().map(|e| Ok((e.key.id, e.get::<String>("name")?))).collect::<Result<Vec<_>>>()?;
    let lives_there: Vec<(u64, String)> =
        expected.values().filter(|c| c.city == CITY).map(|c| (c.id, c.name.clone())).collect();
    println!(
        "  by_city {CITY}, covered: {} customers, first {:?}, last {:?} ({costs})",
        listed.len(),
        listed[0],
        listed[listed.len() - 1]
    );
    assert_eq!(listed, lives_there);
    assert!(listed.contains(&(17, moved.name.clone())), "the customer who moved there");
    let read = listed.len() as u64;
    assert_eq!((costs.scans, costs.gets, costs.rows_read), (1, 0, read), "one scan, no data row read");

    // Both indexes hold exactly what the data implies.
    println!("verification:");
    for report in [customers.verify_index(Customer::BY_EMAIL).run()?, customers.verify_index(Customer::BY_CITY).run()?]
    {
        print!("{report}");
        assert!(report.is_clean(), "{report}");
        assert_eq!((report.data_rows, report.index_rows, report.repaired), (rows, rows, 0));
    }

    // Damage to the email index, through the raw store, as a bug or an out-of-band tool could
    // do it. (An older build still writing through release 1's entity leaves the same kind of
    // drift: it does not know the indexes.) First, the victim's entry goes.
    println!("damage, through the raw store:");
    let table = index_table(Customer::SCHEMA.table);
    let victim = expected[&VICTIM].clone();
    let entry = email_entry(&victim.email);
    let row = db.store().read_rows(&table, std::slice::from_ref(&entry), &ReadSpec::default())?.pop().flatten();
    let row = row.expect("the victim's entry, as the backfill wrote it");
    // Verified: `01` and the verification's token.
    assert_eq!(row.value("i", "s").map(|s| (s[0], s.len())), Some((1, 9)), "verified");
    assert_eq!(row.value("i", "k"), Some(&data_key(VICTIM)[..]), "naming the victim's row");
    db.store().mutate(&table, vec![RowMutation { row: entry, mutations: vec![CellMutation::DeleteRow] }])?;
    println!("  deleted the by_email entry of {:?} (customer {VICTIM})", victim.email);
    // Then a verified entry for an address nobody holds, naming another customer's row, with
    // the copy of the email a real entry has.
    let email = Customer::SCHEMA.column("email").expect("the email column");
    let copy = format!("{}:{}", email.family, email.qualifier);
    let bogus = vec![
        index_cell(b"s", vec![1]),
        index_cell(b"k", data_key(IMPOSTOR).to_vec()),
        index_cell(copy.as_bytes(), GHOST.to_string().encode_cell().expect("a string cell")),
    ];
    db.store().mutate(&table, vec![RowMutation { row: email_entry(GHOST), mutations: bogus }])?;
    println!("  wrote a verified by_email entry for {GHOST:?}, naming customer {IMPOSTOR}");

    // Wrong answers. The victim cannot be found by address. A covered read trusts verified
    // entries — that is what makes it one scan — so it finds the ghost address and reports
    // customer 42 holding it, which no write ever said. (An entity read reads the data row
    // anyway and checks it: it finds no one there.) Verified rows are trusted; that is why
    // verification and repair exist.
    let ghost_entries = || -> Result<Vec<(u64, String)>> {
        let entries = by_email.scan().prefix(GHOST.to_string()).entries()?;
        entries.iter().map(|e| Ok((e.key.id, e.get::<String>("email")?))).collect()
    };
    println!("before the repair:");
    let lost = by_email.get(victim.email.clone())?;
    println!("  by_email.get({:?}): {:?}", victim.email, lost.as_ref().map(|c| c.id));
    assert_eq!(lost, None, "wrong: customer {VICTIM} holds it");
    let ghosts = ghost_entries()?;
    println!("  by_email {GHOST:?}, covered: {ghosts:?}");
    assert_eq!(ghosts, [(IMPOSTOR, GHOST.to_string())], "wrong: nobody holds it");
    assert_eq!(by_email.get(GHOST.to_string())?, None, "an entity read checks the data row");

    // The verification finds both.
    println!("verification:");
    let report = customers.verify_index(Customer::BY_EMAIL).run()?;
    print!("{report}");
    assert!(!report.is_clean());
    assert_eq!((report.data_rows, report.index_rows, report.missing, report.stale), (rows, rows, 1, 1));
    assert_eq!((report.outdated, report.unverified, report.violations, report.repaired), (0, 0, 0, 0));
    assert_eq!(report.examples.len(), 2, "{report}");
    assert!(report.examples[0].starts_with("missing: entry of row"), "{report}");
    assert!(report.examples[1].starts_with("stale: index row by_email\\x00ghost@example.com"), "{report}");

    // The repair rebuilds the missing entry through the write protocol, then deletes the stale
    // one with a check-and-mutate on the state it read. Its index pass runs after the rebuild,
    // so it reads the rebuilt entry too.
    println!("repair:");
    let report = customers.verify_index(Customer::BY_EMAIL).repair().run()?;
    print!("{report}");
    assert_eq!((report.data_rows, report.index_rows, report.missing, report.stale), (rows, rows + 1, 1, 1));
    assert_eq!(report.repaired, 2);
    let report = customers.verify_index(Customer::BY_EMAIL).run()?;
    println!("verification after the repair:");
    print!("{report}");
    assert!(report.is_clean(), "{report}");
    assert_eq!((report.data_rows, report.index_rows, report.repaired), (rows, rows, 0));

    println!("after the repair:");
    let found = by_email.get(victim.email.clone())?;
    println!("  by_email.get({:?}): {:?}", victim.email, found.as_ref().map(|c| c.id));
    assert_eq!(found, Some(victim));
    let ghosts = ghost_entries()?;
    println!("  by_email {GHOST:?}, covered: {ghosts:?}");
    assert!(ghosts.is_empty());

    println!("index_backfill: ok");
    Ok(())
}
