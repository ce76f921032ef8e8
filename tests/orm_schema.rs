//! What an entity's schema says about itself: its printed layout, and advice against the rules
//! of thumb of schema design (families, name lengths, hotspotting keys, numbers as strings,
//! pre-split regions its keys cannot reach).

use cellar::orm::advice::Rule;
use cellar::orm::store::{FamilySpec, TableSpec};
use cellar::prelude::*;

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(
    table = "events",
    bucket(field = "at", buckets = 8),
    family_options(name = "m", max_versions = 3, ttl = 86400)
)]
struct Event {
    #[cellar(partition, hash = "md5", column = "h")]
    host: String,
    #[cellar(key, reverse_ts)]
    at: Timestamp,
    #[cellar(key, fixed = 4)]
    kind: String,
    #[cellar(column = "msg")]
    message: String,
    #[cellar(family = "m", column = "r")]
    retries: Option<u32>,
    #[cellar(serde, column = "tg")]
    tags: Vec<String>,
    #[cellar(counter, column = "v")]
    views: i64,
    #[cellar(version)]
    version: u64,
}

#[test]
fn layout_names_every_key_part_family_and_column() {
    let expected = "\
Event -> table `events`
row key (29 bytes):
  bucket  1 byte    `at` mod 8
  host    16 bytes  String: MD5 of its encoding, value kept in d:h  [partition]
  at      8 bytes   Timestamp: milliseconds, big-endian, reversed (newest first)
  kind    4 bytes   String: UTF-8, zero-padded to 4 bytes
families:
  d  max versions 1, TTL none
  m  max versions 3, TTL 86400 s
columns:
  d:h        host: String          UTF-8, original of a hashed key part
  d:msg      message: String       UTF-8
  m:r        retries: Option<u32>  big-endian, as Bytes.toBytes
  d:tg       tags: Vec<String>     MessagePack
  d:v        views: i64            big-endian, as Bytes.toBytes, counter (changed by increments only)
  d:version  version: u64          big-endian, as Bytes.toBytes, version (optimistic writes)
";
    assert_eq!(Event::layout().to_string(), expected);
}

/// Breaks most rules at once.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "telemetry", family = "data")]
struct Reading {
    #[cellar(key)]
    created_at: Timestamp,
    #[cellar(key)]
    sensor: String,
    #[cellar(column = "description_text")]
    description: String,
    #[cellar(column = "c")]
    reading_count: String,
    #[cellar(family = "a", column = "x")]
    x: u32,
    #[cellar(family = "b", column = "y")]
    y: u32,
    #[cellar(family = "c", column = "z")]
    z: u32,
}

/// A sequence number leading the key, and a price as text inside it.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "ledger")]
struct Entry {
    #[cellar(key)]
    seq: u64,
    #[cellar(key)]
    price: String,
}

/// The follower graph of the seeds: hashed keys, one short family.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "follows", family = "f")]
struct Follow {
    #[cellar(key, hash = "md5", column = "a")]
    follower: String,
    #[cellar(key, hash = "md5", column = "b")]
    followed: String,
}

/// Time-ordered, but behind a bucket.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "logs", bucket(field = "at", buckets = 4))]
struct LogLine {
    #[cellar(key)]
    at: Timestamp,
    #[cellar(column = "m")]
    message: String,
}

fn rules(advice: &[cellar::orm::Advice]) -> Vec<(Rule, String)> {
    let mut r: Vec<(Rule, String)> = advice.iter().map(|a| (a.rule, a.subject.clone())).collect();
    r.sort_by(|a, b| a.1.cmp(&b.1));
    r
}

#[test]
fn advice_names_each_broken_rule_with_its_subject() {
    let advice = Reading::advice();
    assert_eq!(
        rules(&advice),
        [
            (Rule::TooManyFamilies, "4 families".to_string()),
            (Rule::NumberAsString, "column data:c".into()),
            (Rule::LongQualifier, "column data:description_text".into()),
            (Rule::LongFamilyName, "family `data`".into()),
            (Rule::MonotonicLeadingKey, "key part `created_at`".into()),
        ]
    );
    // Every piece says why.
    let hot = advice.iter().find(|a| a.rule == Rule::MonotonicLeadingKey).unwrap();
    assert!(hot.to_string().contains("one region takes all writes"), "{hot}");
    assert_eq!(
        rules(&Entry::advice()),
        [(Rule::NumberAsString, "key part `price`".into()), (Rule::MonotonicLeadingKey, "key part `seq`".into())]
    );
    assert_eq!(Follow::advice(), []);
    assert_eq!(LogLine::advice(), [], "a bucket in front of the timestamp spreads the writes");
}

#[test]
fn split_advice_finds_regions_no_key_can_reach() {
    // Four buckets: regions starting at 0x08 and beyond see no rows.
    let advice = LogLine::SCHEMA.split_advice(&[vec![1u8], vec![2], vec![3], vec![8], vec![9]]);
    assert_eq!(
        advice.iter().map(|a| (a.rule, a.subject.as_str())).collect::<Vec<_>>(),
        [(Rule::UnreachableRegion, "region [\\x08, \\x09)"), (Rule::UnreachableRegion, "region [\\x09, end)")]
    );
    assert!(advice[0].reason.contains("bucket byte below 4"), "{}", advice[0]);
    assert_eq!(LogLine::SCHEMA.split_advice(&[vec![1u8], vec![2], vec![3]]), []);
    assert_eq!(Follow::SCHEMA.split_advice(&[vec![0x40u8], vec![0x80], vec![0xC0]]), []);
}

#[test]
fn db_advice_checks_the_stored_tables_regions() {
    let db = Db::open_temporary().unwrap();
    // A table pre-split evenly over the first byte, as for random keys; millisecond
    // timestamps all start with two zero bytes.
    db.store()
        .ensure_table(&TableSpec {
            name: "telemetry".into(),
            families: ["data", "a", "b", "c"]
                .into_iter()
                .map(|f| FamilySpec { name: f.into(), max_versions: 1, ttl_secs: None })
                .collect(),
            split_keys: vec![vec![0x40], vec![0x80], vec![0xC0]],
            split_policy: Default::default(),
            deferred: false,
        })
        .unwrap();
    let advice = db.advise::<Reading>().unwrap();
    let unreachable: Vec<&str> =
        advice.iter().filter(|a| a.rule == Rule::UnreachableRegion).map(|a| a.subject.as_str()).collect();
    assert_eq!(unreachable, ["region [@, \\x80)", "region [\\x80, \\xC0)", "region [\\xC0, end)"]);
    // A table the entity created itself is split at its buckets: nothing to report there.
    db.repo::<LogLine>().unwrap();
    assert_eq!(db.advise::<LogLine>().unwrap(), []);
}
