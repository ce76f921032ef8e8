//! `cargo bench --bench index`: what secondary indexes cost. Puts of an entity with 0, 1 and
//! 3 indexes (fresh rows, then updates that change an indexed value), a get by a unique index
//! against a get by primary key, and a 100-row index scan read covered (index rows only)
//! against one that reads the entities. Round trips per call come from `Db::measure`; rates
//! are the median of five rounds, and each cost against its baseline the median of the five
//! rounds' own ratios.
//!
//! Writes its table into `benches/README.md` between the `index` markers. `-- --quick` runs a
//! tenth of the rows and only prints; `-- --puts N` measures only the put goal, in N rounds
//! of fresh databases (see [`puts_only`]); without `--bench` (as `cargo test --benches` runs it) it
//! is a short smoke run that writes nothing.

mod common;

use std::time::Instant;

use cellar::prelude::*;

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "plain")]
struct Plain {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "n")]
    name: String,
    #[cellar(column = "e")]
    email: String,
    #[cellar(column = "c")]
    city: String,
    #[cellar(column = "a")]
    age: u32,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "one")]
struct One {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "n")]
    name: String,
    #[cellar(column = "e", index = "by_email", unique)]
    email: String,
    #[cellar(column = "c")]
    city: String,
    #[cellar(column = "a")]
    age: u32,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "three", index(name = "by_city_age", on(city, age), include(name)))]
struct Three {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "n", index = "by_name")]
    name: String,
    #[cellar(column = "e", index = "by_email", unique)]
    email: String,
    #[cellar(column = "c")]
    city: String,
    #[cellar(column = "a")]
    age: u32,
}

const CITIES: u64 = 50;

macro_rules! fields {
    ($t:ident, $id:expr, $gen:expr) => {{
        let id: u64 = $id;
        $t {
            id,
            name: format!("name {id}"),
            email: format!("user{id}.{}@example.com", $gen),
            city: format!("city {:02}", id % CITIES),
            age: (id % 90) as u32,
        }
    }};
}

/// Calls per second and round trips per call of `f` run `n` times.
fn rate(db: &Db, n: u64, mut f: impl FnMut(u64)) -> (f64, f64) {
    let started = Instant::now();
    let ((), costs) = db.measure(|| (0..n).for_each(&mut f));
    (n as f64 / started.elapsed().as_secs_f64(), costs.round_trips() as f64 / n as f64)
}

/// One round: every measurement, in a fresh database.
fn round(n: u64) -> Vec<(&'static str, f64, f64)> {
    let db = Db::open_temporary().expect("a database");
    let (plain, one, three) = (db.repo::<Plain>().unwrap(), db.repo::<One>().unwrap(), db.repo::<Three>().unwrap());
    let mut out = Vec::new();
    let mut push = |name, (r, rt)| out.push((name, r, rt));
    push("put, no index", rate(&db, n, |i| plain.put(&fields!(Plain, i, 0)).unwrap()));
    push("put, 1 index", rate(&db, n, |i| one.put(&fields!(One, i, 0)).unwrap()));
    push("put, 3 indexes", rate(&db, n, |i| three.put(&fields!(Three, i, 0)).unwrap()));
    let batches = n / 100;
    let batch = |i: u64| (i * 100..(i + 1) * 100).map(|id| id + n);
    let plain_rate =
        rate(&db, batches, |i| plain.put_many(&batch(i).map(|id| fields!(Plain, id, 0)).collect::<Vec<_>>()).unwrap());
    push("put_many of 100, no index", (plain_rate.0 * 100.0, plain_rate.1 / 100.0));
    let one_rate =
        rate(&db, batches, |i| one.put_many(&batch(i).map(|id| fields!(One, id, 0)).collect::<Vec<_>>()).unwrap());
    push("put_many of 100, 1 index", (one_rate.0 * 100.0, one_rate.1 / 100.0));
    push("update, no index", rate(&db, n, |i| plain.put(&fields!(Plain, i, 1)).unwrap()));
    push("update, 1 index", rate(&db, n, |i| one.put(&fields!(One, i, 1)).unwrap()));
    push("update, 3 indexes", rate(&db, n, |i| three.put(&fields!(Three, i, 1)).unwrap()));
    let key = |i: u64| (i * 7919) % n;
    push("get by primary key", rate(&db, n, |i| assert!(one.get(key(i)).unwrap().is_some())));
    let by_email = one.index(One::BY_EMAIL);
    push(
        "get by unique index",
        rate(&db, n, |i| assert!(by_email.get(format!("user{}.1@example.com", key(i))).unwrap().is_some())),
    );
    let scans = (n / 100).max(1);
    let by_city = three.index(Three::BY_CITY_AGE);
    let city = |i: u64| format!("city {:02}", i % CITIES);
    push(
        "scan 100, covered",
        rate(&db, scans, |i| assert_eq!(by_city.scan().prefix((city(i),)).limit(100).entries().unwrap().len(), 100)),
    );
    push(
        "scan 100, entities",
        rate(&db, scans, |i| assert_eq!(by_city.scan().prefix((city(i),)).limit(100).to_vec().unwrap().len(), 100)),
    );
    out
}

/// `-- --puts N`: only the put goal, settled on a noisy machine. N rounds, each a plain put
/// loop and an indexed one, each in a fresh database, the order alternating; prints the median
/// of the rounds' ratios.
fn puts_only(n: u64, rounds: usize) {
    let loop_rate = |indexed: bool| {
        let db = Db::open_temporary().expect("a database");
        if indexed {
            let one = db.repo::<One>().unwrap();
            rate(&db, n, |i| one.put(&fields!(One, i, 0)).unwrap()).0
        } else {
            let plain = db.repo::<Plain>().unwrap();
            rate(&db, n, |i| plain.put(&fields!(Plain, i, 0)).unwrap()).0
        }
    };
    let mut ratios: Vec<f64> = (0..rounds)
        .map(|r| {
            let (plain, indexed) = if r % 2 == 0 {
                let plain = loop_rate(false);
                (plain, loop_rate(true))
            } else {
                let indexed = loop_rate(true);
                (loop_rate(false), indexed)
            };
            plain / indexed
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let listed: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    println!(
        "put with one unique index over a plain put, {n} fresh puts per loop: median {:.2}× over {rounds} rounds ({})",
        ratios[ratios.len() / 2],
        listed.join(", ")
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let benching = args.iter().any(|a| a == "--bench");
    let quick = args.iter().any(|a| a == "--quick");
    if let Some(i) = args.iter().position(|a| a == "--puts") {
        let rounds = args.get(i + 1).and_then(|r| r.parse::<usize>().ok()).filter(|&r| r > 0);
        let rounds = rounds.expect("--puts takes a number of rounds, at least 1");
        puts_only(if benching { 50_000 } else { 500 }, rounds);
        return;
    }
    let (n, rounds) = match (benching, quick) {
        (false, _) => (500, 1),
        (true, true) => (5_000, 1),
        (true, false) => (50_000, 5),
    };
    let all: Vec<Vec<(&str, f64, f64)>> = (0..rounds).map(|_| round(n)).collect();
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let position = |name: &str| all[0].iter().position(|r| r.0 == name);
    let baseline = |name: &str| match name {
        n if n.starts_with("put_many") => position("put_many of 100, no index"),
        n if n.starts_with("put") => position("put, no index"),
        n if n.starts_with("update") => position("update, no index"),
        n if n.starts_with("get") => position("get by primary key"),
        _ => position("scan 100, covered"),
    };
    let mut table =
        String::from("| operation | calls/s (entities/s for put_many) | round trips per entity | cost vs. baseline |\n|---|---:|---:|---:|\n");
    for (i, (name, _, rt)) in all[0].iter().enumerate() {
        let rate = median(all.iter().map(|r| r[i].1).collect());
        // Each round's own ratio, then their median: a slow spell of the host moves both
        // sides of one round together, where a ratio of medians would mix rounds.
        let cost = baseline(name).map_or(f64::NAN, |b| median(all.iter().map(|r| r[b].1 / r[i].1).collect()));
        table.push_str(&format!("| {name} | {rate:.0} | {rt:.2} | {cost:.2}× |\n"));
    }
    let section = format!(
        "## Secondary indexes\n\n`cargo bench --bench index` (`benches/index.rs`): {n} entities \
         (an 8-byte key, four columns) per table, put fresh one at a time and in `put_many` \
         batches of 100, then updated with a new unique value; gets of \
         random keys by primary key and through the unique index; scans of 100 entries of one city through a \
         two-field index that copies the name, covered (`entries()`, index rows only) and as entities \
         (`to_vec()`, which also reads the data rows). Embedded engine (SyncWal), release build, {} cores ({}); \
         median of {rounds} rounds. \"Cost vs. baseline\" is time per call over the baseline's, the median of \
         the rounds' own ratios: puts and \
         updates against no index, gets against the primary key, scans against the covered scan.\n\n{table}\n\
         Goals: a put with one index at most 2.5× a plain put; an index get at most 2× a primary get.",
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        common::cpu_model(),
    );
    println!("{section}");
    if benching && !quick {
        common::write_section("index", &section);
    }
}
