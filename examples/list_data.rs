//! Per-user list data, the seeds' list-data case study: users hold lists of values sorted by
//! value id, most users fewer than 30, a few a great many (a power law), and the common reads
//! are "the first 30 values" and "the 30 values after id Y". Three layouts of the same lists:
//!
//! - **tall**: one row per user and value, `[user][value id]`; a read is a scan of 30 rows.
//! - **wide**: one row per user, one column per value (the value id is the qualifier); a read
//!   is a slice of one row's columns — the engine's column pagination, no row scanned.
//! - **middle**: one row per user and block of 4,096 value ids, `[user][block]`, the value's
//!   offset in its block as a 2-byte qualifier; a read finds the user's first block with a
//!   scan and slices it. Rows stay bounded, and inserting a value never moves another.
//!
//! For each layout and query the example prints round trips, rows, cells and bytes read, and
//! asserts them. The advice on each layout is printed too: the wide one can grow a row without
//! bound (its biggest user holds every value in one row, which never splits), the other two
//! cannot.
//!
//! Run with `cargo run --release --example list_data` (the biggest user holds 10^6 values;
//! `CELLAR_LIST_MAX` sets another size). Every printed result is also asserted.

use std::collections::BTreeMap;

use cellar::orm::advice::Rule;
use cellar::orm::store::Costs;
use cellar::orm::{Entity as _, Result};
use cellar::prelude::*;

/// Tall: a row per user and value.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "list_tall")]
struct TallValue {
    #[cellar(key)]
    user: u32,
    #[cellar(key)]
    value_id: u64,
    #[cellar(column = "v")]
    value: u32,
}

/// Wide: a row per user, a column per value.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "list_wide")]
struct WideList {
    #[cellar(key)]
    user: u32,
    #[cellar(columns(family = "v", lazy))]
    values: BTreeMap<u64, u32>,
}

/// Middle: a row per user and block of value ids, a column per value of the block.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "list_blocks")]
struct ListBlock {
    #[cellar(key)]
    user: u32,
    #[cellar(key)]
    block: u32,
    #[cellar(columns(family = "v", lazy))]
    values: BTreeMap<u16, u32>,
}

/// Value ids per block of the middle layout.
const BLOCK: u64 = 4_096;
/// Values per page.
const PAGE: usize = 30;
/// Values per write batch.
const BATCH: usize = 10_000;

/// The value ids of `user`: spaced 3 apart, so "after Y" lands between values too.
fn value_ids(count: u64) -> impl Iterator<Item = u64> {
    (0..count).map(|i| 1_000 + 3 * i)
}

fn value_of(user: u32, id: u64) -> u32 {
    (u64::from(user) * 7_919 + id) as u32
}

/// A power law: user `u` holds `max / (u + 1)^2` values (at least 1), so user 0 holds `max`,
/// user 1 a quarter of it, and most users fewer than 30.
fn population(max: u64, users: u32) -> Vec<(u32, u64)> {
    (0..users).map(|u| (u, (max / (u64::from(u) + 1).pow(2)).max(1))).collect()
}

/// The three layouts' repositories.
struct Layouts {
    tall: Repository<TallValue>,
    wide: Repository<WideList>,
    middle: Repository<ListBlock>,
}

impl Layouts {
    fn load(&self, user: u32, count: u64) -> Result<()> {
        let ids: Vec<u64> = value_ids(count).collect();
        for chunk in ids.chunks(BATCH) {
            let tall: Vec<TallValue> =
                chunk.iter().map(|&id| TallValue { user, value_id: id, value: value_of(user, id) }).collect();
            self.tall.put_many(&tall)?;
            let values = chunk.iter().map(|&id| (id, value_of(user, id))).collect();
            self.wide.put(&WideList { user, values })?;
            let mut blocks: BTreeMap<u32, BTreeMap<u16, u32>> = BTreeMap::new();
            for &id in chunk {
                blocks.entry((id / BLOCK) as u32).or_default().insert((id % BLOCK) as u16, value_of(user, id));
            }
            let blocks: Vec<ListBlock> =
                blocks.into_iter().map(|(block, values)| ListBlock { user, block, values }).collect();
            self.middle.put_many(&blocks)?;
        }
        Ok(())
    }

    /// Up to 30 values of `user` after `after` (from the start for `None`), tall.
    fn tall_page(&self, user: u32, after: Option<u64>) -> Result<Vec<(u64, u32)>> {
        let from = TallValueKey::from((user, after.map_or(0, |y| y + 1)));
        let to = TallValueKey::from((user + 1, 0));
        let rows = self.tall.scan().range(from..to).limit(PAGE).to_vec()?;
        Ok(rows.into_iter().map(|r| (r.value_id, r.value)).collect())
    }

    /// The same, wide: one slice of one row.
    fn wide_page(&self, user: u32, after: Option<u64>) -> Result<Vec<(u64, u32)>> {
        let list = self.wide.wide(user, WideList::VALUES)?;
        match after {
            None => list.first(PAGE),
            Some(y) => list.after(&y, PAGE),
        }
    }

    /// The same, middle: a scan of the (at most two) blocks a page can span, reading each
    /// block's marker cell only, then a slice of each block until the page is full.
    fn middle_page(&self, user: u32, after: Option<u64>) -> Result<Vec<(u64, u32)>> {
        let first_block = after.map_or(0, |y| (y / BLOCK) as u32);
        let range = ListBlockKey::from((user, first_block))..ListBlockKey::from((user + 1, 0));
        let mut page = Vec::new();
        for block in self.middle.scan().range(range).limit(2).to_vec()? {
            let values = self.middle.wide((user, block.block), ListBlock::VALUES)?;
            let base = u64::from(block.block) * BLOCK;
            let want = PAGE - page.len();
            let slice = match after {
                Some(y) if y / BLOCK == u64::from(block.block) => values.after(&((y % BLOCK) as u16), want)?,
                _ => values.first(want)?,
            };
            page.extend(slice.into_iter().map(|(offset, v)| (base + u64::from(offset), v)));
            if page.len() == PAGE {
                break;
            }
        }
        Ok(page)
    }
}

/// One line of the cost table.
fn line(layout: &str, query: &str, page: &[(u64, u32)], c: &Costs) -> String {
    format!(
        "{layout:<6}  {query:<24}  {:>6}  {:>11}  {:>4}  {:>5}  {:>6}",
        page.len(),
        c.round_trips(),
        c.rows_read,
        c.cells_read,
        c.bytes_read
    )
}

// The tests run `run` with a shorter list.
#[allow(dead_code)]
pub(crate) fn main() -> Result<()> {
    let max = std::env::var("CELLAR_LIST_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    run(max)
}

/// The example with `max` values for the biggest user (at least 10,000).
pub(crate) fn run(max: u64) -> Result<()> {
    let max = max.max(10_000);
    for (name, advice) in [("tall", TallValue::advice()), ("wide", WideList::advice()), ("middle", ListBlock::advice())]
    {
        let rules: Vec<Rule> = advice.iter().map(|a| a.rule).collect();
        match advice.first() {
            Some(a) => println!("advice on {name}: {a}"),
            None => println!("advice on {name}: none"),
        }
        assert_eq!(rules, if name == "wide" { vec![Rule::UnboundedRow] } else { vec![] }, "{name}");
    }

    let db = Db::open_temporary()?;
    let layouts = Layouts { tall: db.repo()?, wide: db.repo()?, middle: db.repo()? };
    let users = population(max, 1_000);
    let (small, big) = (users.iter().filter(|(_, n)| *n < PAGE as u64).count(), users[0].1);
    println!("{} users: {small} with fewer than {PAGE} values, the biggest with {big}", users.len());
    assert!(small > users.len() / 2, "most users hold fewer than a page");
    let (loaded, load) = db.measure(|| users.iter().try_for_each(|&(user, count)| layouts.load(user, count)));
    loaded?;
    let total: u64 = users.iter().map(|(_, n)| n).sum();
    println!("{total} values written in each layout ({} cells written in all)", load.cells_written);

    // The queries: a small user's whole list, the biggest user's first page, and the page
    // after a value id deep in the biggest user's list (mid-block, between two values).
    let (few_user, _) = users.iter().copied().find(|(_, n)| *n < PAGE as u64).expect("a small user");
    // Halfway down the biggest list, 1,001 ids into a block: the next 30 values fit in it.
    let deep = (1_000 + 3 * (big / 2)) / BLOCK * BLOCK + 1_001;
    let queries = [
        (format!("user {few_user}: first {PAGE}"), few_user, None),
        (format!("user 0: first {PAGE}"), 0, None),
        (format!("user 0: {PAGE} after {deep}"), 0, Some(deep)),
    ];
    println!("layout  query                     values  round trips  rows  cells   bytes");
    for (query, user, after) in &queries {
        let (tall, tc) = db.measure(|| layouts.tall_page(*user, *after));
        let (wide, wc) = db.measure(|| layouts.wide_page(*user, *after));
        let (middle, mc) = db.measure(|| layouts.middle_page(*user, *after));
        let (tall, wide, middle) = (tall?, wide?, middle?);
        println!("{}", line("tall", query, &tall, &tc));
        println!("{}", line("wide", query, &wide, &wc));
        println!("{}", line("middle", query, &middle, &mc));

        // Every layout answers alike, and the answer is the model's.
        let count = users[*user as usize].1;
        let expected: Vec<(u64, u32)> = value_ids(count)
            .filter(|id| after.is_none_or(|y| *id > y))
            .take(PAGE)
            .map(|id| (id, value_of(*user, id)))
            .collect();
        assert_eq!(tall, expected, "{query}");
        assert_eq!(wide, expected, "{query}");
        assert_eq!(middle, expected, "{query}");

        // Costs: tall reads a row per value; wide a slice of one row; middle the marker cell of
        // each block the page can span (two, unless the list ends first), then a slice of each
        // block it needs. No layout reads a value it does not return.
        let n = expected.len() as u64;
        let markers = if count < PAGE as u64 { 1 } else { 2 };
        assert_eq!((tc.round_trips(), tc.rows_read, tc.cells_read), (1, n, n), "tall {query}: {tc}");
        assert_eq!((wc.round_trips(), wc.rows_read, wc.cells_read), (1, 1, n), "wide {query}: {wc}");
        assert_eq!(
            (mc.round_trips(), mc.rows_read, mc.cells_read),
            (2, markers + 1, n + markers),
            "middle {query}: {mc}"
        );
        // Bytes per cell: row key + family + qualifier + value + 8. Tall repeats the 12-byte
        // user and value id in every row key; wide keeps a 4-byte row key and puts the 8-byte
        // id in the qualifier; middle an 8-byte row key and a 2-byte offset (its empty marker
        // cells cost 17 bytes each).
        assert_eq!(tc.bytes_read, n * (12 + 1 + 1 + 4 + 8), "{query}");
        assert_eq!(wc.bytes_read, n * (4 + 1 + 8 + 4 + 8), "{query}");
        assert_eq!(mc.bytes_read, n * (8 + 1 + 2 + 4 + 8) + markers * (8 + 1 + 8), "{query}");
    }
    println!("list_data: ok");
    Ok(())
}
