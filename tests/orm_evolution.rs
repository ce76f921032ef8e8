//! Schema evolution of column-mapped entities: a second release of an entity reads the rows
//! the first wrote — an added field with a default, a renamed column, a widened number, a
//! dropped field, `T` to `Option<T>` and back with a default — and both releases write the same
//! table in turn. Every test runs on every backend.

use cellar::prelude::*;

mod common;

/// Release 1 of a customer.
mod v1 {
    use cellar::prelude::*;

    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_customers")]
    pub struct Customer {
        #[cellar(key)]
        pub id: u64,
        #[cellar(column = "n")]
        pub name: String,
        pub visits: i32,
        pub score: f32,
        pub fax: String,
        pub nickname: String,
        pub note: Option<String>,
    }
}

fn tier_default() -> String {
    "bronze".into()
}

/// Release 2: `tier` added with a default, `name` moved to column `full_name`, `visits` widened
/// to `i64`, `score` to `f64`, `fax` dropped, `nickname` now optional, `note` now required with
/// a default.
mod v2 {
    use cellar::prelude::*;

    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_customers")]
    pub struct Customer {
        #[cellar(key)]
        pub id: u64,
        #[cellar(column = "full_name", rename_from = "n")]
        pub name: String,
        pub visits: i64,
        pub score: f64,
        pub nickname: Option<String>,
        #[cellar(default)]
        pub note: String,
        #[cellar(default = "super::tier_default")]
        pub tier: String,
        #[cellar(default)]
        pub tags: Vec<u8>,
    }
}

fn first(id: u64) -> v1::Customer {
    v1::Customer {
        id,
        name: format!("name {id}"),
        visits: -3,
        score: 1.5,
        fax: "555".into(),
        nickname: format!("nick {id}"),
        note: None,
    }
}

on_every_backend! {
fn release_two_reads_what_release_one_wrote(db: Db) {
    db.repo::<v1::Customer>().unwrap().put(&first(1)).unwrap();
    let customers = db.repo::<v2::Customer>().unwrap();
    let read = customers.get(1u64).unwrap().unwrap();
    assert_eq!(
        read,
        v2::Customer {
            id: 1,
            name: "name 1".into(),
            visits: -3,
            score: 1.5,
            nickname: Some("nick 1".into()),
            note: String::new(),
            tier: "bronze".into(),
            tags: Vec::new(),
        }
    );
}

fn a_renamed_column_is_written_under_its_new_qualifier_and_read_newest_first(db: Db) {
    let old = db.repo::<v1::Customer>().unwrap();
    let new = db.repo::<v2::Customer>().unwrap();
    old.put(&first(2)).unwrap();
    let mut c = new.get(2u64).unwrap().unwrap();
    c.name = "renamed".into();
    new.put(&c).unwrap();
    let row = db.store().read_rows("ev_customers", &[v2::Customer::row_key(&c.key()).unwrap().for_write()], &Default::default()).unwrap();
    let row = row.into_iter().flatten().next().unwrap();
    assert_eq!(row.value("d", "full_name"), Some(&b"renamed"[..]));
    // Release 1's cell stays as it was: a write of release 2 puts only the new qualifier.
    assert_eq!(row.value("d", "n"), Some(&b"name 2"[..]));
    // Release 1 writes again: its cell is now the newest of the two, and release 2 reads it.
    std::thread::sleep(std::time::Duration::from_millis(2));
    old.put(&v1::Customer { name: "written by release 1".into(), ..first(2) }).unwrap();
    assert_eq!(new.get(2u64).unwrap().unwrap().name, "written by release 1");
}

fn the_releases_take_turns_on_one_table(db: Db) {
    let old = db.repo::<v1::Customer>().unwrap();
    let new = db.repo::<v2::Customer>().unwrap();
    for id in 0..20u64 {
        if id % 2 == 0 {
            old.put(&first(id)).unwrap();
        } else {
            new.put(&v2::Customer {
                id,
                name: format!("name {id}"),
                visits: i64::from(i32::MAX) + 1,
                score: 0.25,
                nickname: None,
                note: "vip".into(),
                tier: "gold".into(),
                tags: vec![1],
            })
            .unwrap();
        }
    }
    let all = new.scan().to_vec().unwrap();
    assert_eq!(all.len(), 20);
    for c in &all {
        assert_eq!(c.name, format!("name {}", c.id));
        if c.id % 2 == 0 {
            assert_eq!((c.visits, c.tier.as_str(), c.nickname.is_some()), (-3, "bronze", true));
        } else {
            assert_eq!((c.visits, c.tier.as_str(), c.note.as_str()), (i64::from(i32::MAX) + 1, "gold", "vip"));
        }
    }
    // Release 1 reads its own rows. A rename is not forward compatible: a row release 2
    // wrote has no cell under the old qualifier, and release 1 says so instead of guessing.
    assert_eq!(old.get(4u64).unwrap().unwrap(), first(4));
    let err = old.get(5u64).unwrap_err().to_string();
    assert!(err.contains("d:n") && err.contains("missing required column"), "{err}");
}

fn a_field_set_to_none_deletes_its_earlier_qualifiers_too(db: Db) {
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_optional")]
    struct Before {
        #[cellar(key)]
        id: u64,
        #[cellar(column = "e")]
        email: Option<String>,
    }
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_optional")]
    struct After {
        #[cellar(key)]
        id: u64,
        #[cellar(column = "email", aliases = ["e", "mail"])]
        email: Option<String>,
    }
    db.repo::<Before>().unwrap().put(&Before { id: 1, email: Some("a@x".into()) }).unwrap();
    let after = db.repo::<After>().unwrap();
    assert_eq!(after.get(1u64).unwrap().unwrap().email.as_deref(), Some("a@x"));
    after.put(&After { id: 1, email: None }).unwrap();
    // Without the delete of `d:e`, the old address would read again.
    assert_eq!(after.get(1u64).unwrap().unwrap().email, None);
    assert_eq!(db.repo::<Before>().unwrap().get(1u64).unwrap().unwrap().email, None);
}

fn an_index_on_a_defaulted_field_indexes_old_rows_as_the_default(db: Db) {
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_indexed")]
    struct Before {
        #[cellar(key)]
        id: u64,
        name: String,
    }
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_indexed", index(name = "by_tier", on(tier), include(name)), index(name = "by_name", on(name)))]
    struct After {
        #[cellar(key)]
        id: u64,
        name: String,
        #[cellar(default = "super::tier_default")]
        tier: String,
    }
    let before = db.repo::<Before>().unwrap();
    for id in 0..5 {
        before.put(&Before { id, name: format!("c{id}") }).unwrap();
    }
    let after = db.repo::<After>().unwrap();
    after.put(&After { id: 9, name: "c9".into(), tier: "gold".into() }).unwrap();
    after.build_index(After::BY_TIER).run().unwrap();
    let bronze = after.index(After::BY_TIER).scan().prefix("bronze".to_string()).to_vec().unwrap();
    assert_eq!(bronze.iter().map(|c| c.id).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
    let covered = after.index(After::BY_TIER).scan().prefix("gold".to_string()).entries().unwrap();
    assert_eq!(covered.len(), 1);
    assert_eq!(covered[0].entity().unwrap(), After { id: 9, name: "c9".into(), tier: "gold".into() });
    let report = after.verify_index(After::BY_TIER).run().unwrap();
    assert!(report.is_clean(), "{report}");
    // An index that does not copy the defaulted field cannot rebuild the entity: the default
    // would stand in for what the row holds.
    after.build_index(After::BY_NAME).run().unwrap();
    let entries = after.index(After::BY_NAME).scan().prefix("c9".to_string()).entries().unwrap();
    let err = entries[0].entity().unwrap_err().to_string();
    assert!(err.contains("does not copy field `tier`"), "{err}");
}

fn an_index_on_a_widened_field_finds_the_rows_written_narrow(db: Db) {
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_widened", index(name = "by_visits", on(visits)))]
    struct Before {
        #[cellar(key)]
        id: u64,
        visits: i32,
    }
    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_widened", index(name = "by_visits", on(visits)))]
    struct After {
        #[cellar(key)]
        id: u64,
        visits: i64,
    }
    let before = db.repo::<Before>().unwrap();
    for id in 0..6 {
        before.put(&Before { id, visits: (id % 3) as i32 - 1 }).unwrap();
    }
    let after = db.repo::<After>().unwrap();
    after.put(&After { id: 10, visits: -1 }).unwrap();
    // The index's part changed type: it is rebuilt, narrow cells read as the wider type.
    after.build_index(After::BY_VISITS).run().unwrap();
    let minus_one = after.index(After::BY_VISITS).scan().prefix(-1i64).keys().unwrap();
    assert_eq!(minus_one.iter().map(|k| k.id).collect::<Vec<_>>(), [0, 3, 10]);
    assert!(after.verify_index(After::BY_VISITS).run().unwrap().is_clean());
}
}

/// Release 1.1: release 1 reading the name under both qualifiers, still writing the old one,
/// and reading wide numbers: the first step of changes that run beside the release making them.
mod v1_reads_both {
    use cellar::prelude::*;

    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_customers")]
    pub struct Customer {
        #[cellar(key)]
        pub id: u64,
        #[cellar(column = "n", aliases = ["full_name"])]
        pub name: String,
        pub visits: i64,
        pub score: f64,
        pub fax: Option<String>,
        pub nickname: Option<String>,
        pub note: Option<String>,
    }
}

/// Release 3: `visits` is now a string, `segment` a new required field, and the key gains a
/// part: none of which the stored rows fit.
mod v3 {
    use cellar::prelude::*;

    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_customers")]
    pub struct Customer {
        #[cellar(key)]
        pub region: String,
        #[cellar(key)]
        pub id: u64,
        #[cellar(column = "full_name")]
        pub name: String,
        pub visits: String,
        pub segment: String,
    }
}

/// Release 2 with an index on `tier`.
mod v2_indexed {
    use cellar::prelude::*;

    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_customers", index(name = "by_tier", on(tier)))]
    pub struct Customer {
        #[cellar(key)]
        pub id: u64,
        #[cellar(column = "full_name", rename_from = "n")]
        pub name: String,
        pub visits: i64,
        pub score: f64,
        pub nickname: Option<String>,
        #[cellar(default)]
        pub note: String,
        #[cellar(default = "super::tier_default")]
        pub tier: String,
        #[cellar(default)]
        pub tags: Vec<u8>,
    }
}

on_every_backend! {
fn the_catalog_records_each_compatible_release_as_a_version(db: Db) {
    db.repo::<v1::Customer>().unwrap();
    let history = db.schema_history::<v1::Customer>().unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].version, 1);
    assert_eq!(history[0].schema.columns.iter().map(|c| c.qualifier.as_str()).collect::<Vec<_>>(), ["n", "visits", "score", "fax", "nickname", "note"]);
    // Opening release 2 records version 2 with what changed; opening it again changes nothing,
    // also from another `Db` over the same store.
    db.repo::<v2::Customer>().unwrap();
    cellar::orm::Db::with_store(db.store().clone()).repo::<v2::Customer>().unwrap();
    let history = db.schema_history::<v2::Customer>().unwrap();
    assert_eq!(history.iter().map(|v| v.version).collect::<Vec<_>>(), [1, 2]);
    let changes = history[1].changes.join("\n");
    for expected in [
        "renamed column d:n -> d:full_name",
        "widened field `visits` from i32 to i64",
        "widened field `score` from f32 to f64",
        "dropped field `fax`",
        "field `nickname` became optional",
        "field `note` became required, reading absent cells as its default",
        "added field `tier`",
        "added field `tags`",
    ] {
        assert!(changes.contains(expected), "missing {expected:?} in\n{changes}");
    }
    assert!(history[1].first_written_ms >= history[0].first_written_ms);
    // The catalog describes the type completely enough to decode its rows without it.
    let tier = history[1].schema.columns.iter().find(|c| c.field == "tier").unwrap();
    let default = tier.default.as_ref().unwrap();
    assert_eq!((default.expr.as_str(), default.cell_hex.as_deref()), ("super::tier_default()", Some("62726f6e7a65")));
    assert_eq!(db.catalog().unwrap().iter().filter(|v| v.schema.table == "ev_customers").count(), 1);
}

fn an_older_release_keeps_working_beside_a_newer_one_it_can_follow(db: Db) {
    db.repo::<v1::Customer>().unwrap().put(&first(1)).unwrap();
    db.repo::<v1_reads_both::Customer>().unwrap();
    db.repo::<v2::Customer>().unwrap();
    // A fresh process of the release that reads both qualifiers opens after release 2
    // recorded its schema: let in, it records nothing, and the releases read each other.
    let old = cellar::orm::Db::with_store(db.store().clone()).repo::<v1_reads_both::Customer>().unwrap();
    let new = db.repo::<v2::Customer>().unwrap();
    assert_eq!(db.schema_history::<v2::Customer>().unwrap().len(), 3, "an older release records nothing");
    let mut c = new.get(1u64).unwrap().unwrap();
    c.name = "renamed by release 2".into();
    new.put(&c).unwrap();
    assert_eq!(old.get(1u64).unwrap().unwrap().name, "renamed by release 2");
    std::thread::sleep(std::time::Duration::from_millis(2));
    let mut o = old.get(1u64).unwrap().unwrap();
    o.name = "renamed by the older release".into();
    old.put(&o).unwrap();
    assert_eq!(new.get(1u64).unwrap().unwrap().name, "renamed by the older release");
    // Release 1 itself reads only the old qualifier: it would read stale names. Refused.
    let err = cellar::orm::Db::with_store(db.store().clone()).repo::<v1::Customer>().unwrap_err().to_string();
    assert!(err.contains("reads field `name` from d:n, which a newer release moved to d:full_name"), "{err}");
}

fn an_incompatible_release_is_refused_with_every_difference(db: Db) {
    db.repo::<v1::Customer>().unwrap().put(&first(1)).unwrap();
    db.repo::<v2::Customer>().unwrap();
    let err = db.repo::<v3::Customer>().unwrap_err();
    let cellar::orm::Error::SchemaIncompatible { entity, table, version, differences } = &err else {
        panic!("{err}")
    };
    assert_eq!((entity.as_str(), table.as_str(), *version), ("Customer", "ev_customers", 2));
    let text = err.to_string();
    for expected in [
        "row key changed from (id: u64) to (region: String, id: u64)",
        "copy_to(..).rekey(..)",
        "field `visits` changed type from i64 to String",
        "versioned blob",
        "added field `segment` (String) has no default",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in\n{text}");
    }
    assert_eq!(differences.len(), 3, "{differences:?}");
    // Nothing was recorded, and the release that fits still opens.
    assert_eq!(db.schema_history::<v2::Customer>().unwrap().len(), 2);
    db.repo::<v2::Customer>().unwrap().get(1u64).unwrap().unwrap();
}

fn a_release_without_an_index_the_catalog_holds_is_refused_until_it_is_dropped(db: Db) {
    db.repo::<v1::Customer>().unwrap().put(&first(1)).unwrap();
    let indexed = db.repo::<v2_indexed::Customer>().unwrap();
    indexed.build_index(v2_indexed::Customer::BY_TIER).run().unwrap();
    assert_eq!(indexed.index(v2_indexed::Customer::BY_TIER).scan().to_vec().unwrap().len(), 1);
    // Release 2 without the index, and release 1, would write rows the index never sees.
    for err in [
        cellar::orm::Db::with_store(db.store().clone()).repo::<v2::Customer>().unwrap_err(),
        cellar::orm::Db::with_store(db.store().clone()).repo::<v1::Customer>().unwrap_err(),
    ] {
        let text = err.to_string();
        assert!(text.contains("lacks index `by_tier`") && text.contains("Db::drop_index"), "{text}");
    }
    assert_eq!(db.drop_index::<v2_indexed::Customer>("by_tier").unwrap(), 1);
    let fresh = cellar::orm::Db::with_store(db.store().clone());
    fresh.repo::<v2::Customer>().unwrap().put(&fresh.repo::<v2::Customer>().unwrap().get(1u64).unwrap().unwrap()).unwrap();
    // Release 1 is no longer refused for the index; it still is for the rename it cannot follow.
    let err = fresh.repo::<v1::Customer>().unwrap_err().to_string();
    assert!(!err.contains("by_tier") && err.contains("moved to d:full_name"), "{err}");
    let history = db.schema_history::<v2::Customer>().unwrap();
    assert_eq!(history.last().unwrap().changes, ["dropped index `by_tier`"]);
    // Declared again, the index is new: pending until its backfill, which finds the rows.
    let again = cellar::orm::Db::with_store(db.store().clone()).repo::<v2_indexed::Customer>().unwrap();
    assert!(again.index(v2_indexed::Customer::BY_TIER).scan().to_vec().is_err());
    again.build_index(v2_indexed::Customer::BY_TIER).run().unwrap();
    assert_eq!(again.index(v2_indexed::Customer::BY_TIER).scan().to_vec().unwrap().len(), 1);
}

fn concurrent_openers_record_one_version(db: Db) {
    db.repo::<v1::Customer>().unwrap();
    std::thread::scope(|s| {
        for _ in 0..6 {
            let store = db.store().clone();
            s.spawn(move || cellar::orm::Db::with_store(store).repo::<v2::Customer>().unwrap());
        }
    });
    let history = db.schema_history::<v2::Customer>().unwrap();
    assert_eq!(history.iter().map(|v| v.version).collect::<Vec<_>>(), [1, 2]);
}
}

mod notes_v1 {
    use cellar::prelude::*;

    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_notes")]
    pub struct Note {
        #[cellar(key)]
        pub id: u64,
        pub text: String,
    }
}

mod notes_v2 {
    use cellar::prelude::*;

    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_notes", max_versions = 3)]
    pub struct Note {
        #[cellar(key)]
        pub id: u64,
        pub text: String,
        pub author: Option<String>,
    }
}

mod notes_other {
    use cellar::prelude::*;

    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_notes", max_versions = 2)]
    pub struct Note {
        #[cellar(key)]
        pub id: u64,
        pub text: String,
    }
}

on_every_backend! {
fn an_older_release_opens_a_table_a_newer_one_altered(db: Db) {
    db.repo::<notes_v1::Note>().unwrap().put(&notes_v1::Note { id: 1, text: "one".into() }).unwrap();
    let err = db.repo::<notes_v2::Note>().unwrap_err();
    assert!(matches!(err, cellar::orm::Error::SchemaMismatch { .. }), "{err}");
    db.alter_to::<notes_v2::Note>().unwrap();
    let notes = db.repo::<notes_v2::Note>().unwrap();
    // Release 1 still runs: the table keeps more versions than it declares, which it reads
    // and writes as they are.
    let old = cellar::orm::Db::with_store(db.store().clone()).repo::<notes_v1::Note>().unwrap();
    old.put(&notes_v1::Note { id: 1, text: "two".into() }).unwrap();
    assert_eq!(notes.get(1u64).unwrap().unwrap().text, "two");
    // A schema the catalog never held gets no such pass.
    let err = cellar::orm::Db::with_store(db.store().clone()).repo::<notes_other::Note>().unwrap_err();
    assert!(matches!(err, cellar::orm::Error::SchemaMismatch { .. }), "{err}");
}
}

mod orders_v1 {
    use cellar::prelude::*;

    #[derive(Aggregate, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_orders", strategy = "single_table")]
    pub struct Order {
        #[cellar(partition)]
        pub customer: u64,
        #[cellar(key)]
        pub order_no: u64,
        #[cellar(column = "s")]
        pub status: String,
        #[cellar(children)]
        pub lines: Vec<Line>,
    }

    #[derive(Part, Debug, Clone, PartialEq)]
    pub struct Line {
        #[cellar(key)]
        pub line: u16,
        #[cellar(column = "q")]
        pub qty: u16,
    }
}

mod orders_v2 {
    use cellar::prelude::*;

    /// Lines gain a defaulted discount, widen their quantity and rename it.
    #[derive(Aggregate, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_orders", strategy = "single_table")]
    pub struct Order {
        #[cellar(partition)]
        pub customer: u64,
        #[cellar(key)]
        pub order_no: u64,
        #[cellar(column = "s")]
        pub status: String,
        #[cellar(default)]
        pub channel: String,
        #[cellar(children)]
        pub lines: Vec<Line>,
    }

    #[derive(Part, Debug, Clone, PartialEq)]
    pub struct Line {
        #[cellar(key)]
        pub line: u16,
        #[cellar(column = "quantity", rename_from = "q")]
        pub qty: u32,
        #[cellar(default)]
        pub discount_pct: u8,
    }
}

mod orders_v3 {
    use cellar::prelude::*;

    /// The strategy changes: the rows are laid out differently.
    #[derive(Aggregate, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_orders", strategy = "denormalized")]
    pub struct Order {
        #[cellar(partition)]
        pub customer: u64,
        #[cellar(key)]
        pub order_no: u64,
        #[cellar(column = "s")]
        pub status: String,
        #[cellar(children)]
        pub lines: Vec<Line>,
    }

    #[derive(Part, Debug, Clone, PartialEq)]
    pub struct Line {
        #[cellar(key)]
        pub line: u16,
        #[cellar(column = "q")]
        pub qty: u16,
    }
}

on_every_backend! {
fn aggregates_evolve_part_by_part(db: Db) {
    let old = db.aggregates::<orders_v1::Order>().unwrap();
    let lines = vec![orders_v1::Line { line: 1, qty: 2 }, orders_v1::Line { line: 2, qty: 5 }];
    old.put(&orders_v1::Order { customer: 7, order_no: 1, status: "placed".into(), lines }).unwrap();
    let new = db.aggregates::<orders_v2::Order>().unwrap();
    let order = new.get((7, 1)).unwrap().unwrap();
    assert_eq!(order.channel, "");
    assert_eq!(
        order.lines,
        [orders_v2::Line { line: 1, qty: 2, discount_pct: 0 }, orders_v2::Line { line: 2, qty: 5, discount_pct: 0 }]
    );
    let mut changed = order.clone();
    changed.lines[0].qty = 70_000;
    new.put(&changed).unwrap();
    assert_eq!(new.get((7, 1)).unwrap().unwrap(), changed);
    let history = db.schema_history_of("ev_orders", "Order").unwrap();
    assert_eq!(history.len(), 2);
    let changes = history[1].changes.join("\n");
    for expected in [
        "added field `channel`",
        "lines.renamed column d:q -> d:quantity",
        "lines.widened field `qty` from u16 to u32",
        "lines.added field `discount_pct`",
    ] {
        assert!(changes.contains(expected), "missing {expected:?} in\n{changes}");
    }
    let err = cellar::orm::Db::with_store(db.store().clone()).aggregates::<orders_v3::Order>().unwrap_err();
    assert!(err.to_string().contains("strategy changed from single_table to denormalized"), "{err}");
}
}

fn clock_default() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

mod reuse {
    pub mod v1 {
        use cellar::prelude::*;

        #[derive(Entity, Debug, Clone, PartialEq)]
        #[cellar(table = "ev_reuse")]
        pub struct Player {
            #[cellar(key)]
            pub id: u64,
            #[cellar(column = "s")]
            pub score: f64,
            #[cellar(columns(family = "m"))]
            pub medals: std::collections::BTreeMap<String, u32>,
            #[cellar(default = "crate::clock_default")]
            pub seen: u64,
        }
    }
    pub mod v2 {
        use cellar::prelude::*;

        /// `score` dropped.
        #[derive(Entity, Debug, Clone, PartialEq)]
        #[cellar(table = "ev_reuse")]
        pub struct Player {
            #[cellar(key)]
            pub id: u64,
            #[cellar(columns(family = "m"))]
            pub medals: std::collections::BTreeMap<String, u32>,
            #[cellar(default = "crate::clock_default")]
            pub seen: u64,
        }
    }
    pub mod v3 {
        use cellar::prelude::*;

        /// A new field in the dropped field's column, and the map's values changed type.
        #[derive(Entity, Debug, Clone, PartialEq)]
        #[cellar(table = "ev_reuse")]
        pub struct Player {
            #[cellar(key)]
            pub id: u64,
            #[cellar(column = "s")]
            pub rank: Option<i64>,
            #[cellar(columns(family = "m"))]
            pub medals: std::collections::BTreeMap<String, f32>,
            #[cellar(default = "crate::clock_default")]
            pub seen: u64,
        }
    }
}

on_every_backend! {
fn a_dropped_fields_column_is_not_reused_for_another_type(db: Db) {
    let player = reuse::v1::Player { id: 1, score: 2.5, medals: [("gold".to_string(), 3)].into(), seen: 7 };
    db.repo::<reuse::v1::Player>().unwrap().put(&player).unwrap();
    db.repo::<reuse::v2::Player>().unwrap();
    let err = cellar::orm::Db::with_store(db.store().clone()).repo::<reuse::v3::Player>().unwrap_err();
    let text = err.to_string();
    assert!(text.contains("field `rank` (Option<i64>) reads d:s, which held field `score` (f64) in version 1"), "{text}");
    assert!(text.contains("map field `medals` changed its family, prefix, key or value type"), "{text}");
}

fn a_default_that_is_no_constant_records_one_version(db: Db) {
    for _ in 0..3 {
        cellar::orm::Db::with_store(db.store().clone()).repo::<reuse::v1::Player>().unwrap();
    }
    assert_eq!(db.schema_history::<reuse::v1::Player>().unwrap().len(), 1);
}
}

mod shelf_a {
    use cellar::prelude::*;

    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_shelf", record_type = 1)]
    pub struct Item {
        #[cellar(partition)]
        pub shelf: u64,
        #[cellar(key)]
        pub slot: u64,
    }
}

mod shelf_b {
    use cellar::prelude::*;

    #[derive(Entity, Debug, Clone, PartialEq)]
    #[cellar(table = "ev_shelf", record_type = 2)]
    pub struct Item {
        #[cellar(partition)]
        pub shelf: u64,
        #[cellar(key)]
        pub slot: u64,
        pub label: String,
    }
}

#[derive(Record, Debug, Clone, PartialEq)]
enum Shelf {
    Plain(shelf_a::Item),
    Labelled(shelf_b::Item),
}

on_every_backend! {
fn record_members_of_one_name_are_refused_with_the_reason(db: Db) {
    let err = db.records::<Shelf>().unwrap_err().to_string();
    assert!(err.contains("two members named Item") && err.contains("rename one"), "{err}");
}

fn a_copy_keeps_the_destinations_own_schema_history(db: Db) {
    let source = cellar::orm::Db::open_temporary().unwrap();
    source.repo::<v1::Customer>().unwrap().put(&first(1)).unwrap();
    source.repo::<v2::Customer>().unwrap();
    // The destination knows only release 1, recorded on its own.
    db.repo::<v1::Customer>().unwrap();
    source.copy_to(&db).entity::<v2::Customer>().run().unwrap();
    assert_eq!(db.schema_history::<v2::Customer>().unwrap().len(), 1, "not merged with the source's");
    // A type the destination never held arrives with its history.
    let fresh = cellar::orm::Db::open_temporary().unwrap();
    source.copy_to(&fresh).entity::<v2::Customer>().run().unwrap();
    assert_eq!(fresh.schema_history::<v2::Customer>().unwrap(), source.schema_history::<v2::Customer>().unwrap());
}
}
