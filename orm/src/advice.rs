//! Schema advice: an entity checked against the rules of thumb of HBase schema design — few
//! families, short names, no monotonically increasing leading key without a salt, numbers
//! stored as numbers, pre-split regions the keys can reach. Each [`Advice`] says what and why;
//! none of it is an error.

use std::fmt;

use crate::entity::{ColumnKind, KeyField, Schema};
use crate::key::Modifier;

/// More families than this multiply flushes and compactions: they run per region, for every
/// family, whenever one of them fills up.
pub const MAX_FAMILIES: usize = 3;
/// Family names longer than this: the name is stored in every cell.
pub const MAX_FAMILY_NAME: usize = 3;
/// Qualifiers longer than this: the qualifier is stored in every cell.
pub const MAX_QUALIFIER: usize = 8;

/// Which rule of thumb a piece of advice comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// More than [`MAX_FAMILIES`] families.
    TooManyFamilies,
    /// A family name longer than [`MAX_FAMILY_NAME`] bytes.
    LongFamilyName,
    /// A qualifier longer than [`MAX_QUALIFIER`] bytes.
    LongQualifier,
    /// A timestamp or sequence leads the key with no salt or bucket in front.
    MonotonicLeadingKey,
    /// A field that holds a number is a string.
    NumberAsString,
    /// A pre-split region no key of the entity can fall into.
    UnreachableRegion,
    /// What an aggregate's storage strategy costs for its common operations.
    StrategyCost,
    /// A map stored as columns whose key allows more entries than a row should hold.
    UnboundedRow,
}

/// The most entries a map stored as columns is bounded to without advice: what a key of one or
/// two bytes allows (OpenTSDB's hour of seconds fits, with room to spare).
pub const MAX_ROW_ENTRIES: usize = 1 << 16;

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advice {
    /// The rule.
    pub rule: Rule,
    /// What it is about: `family `metadata``, `key part `ts``, `column d:count`, ...
    pub subject: String,
    /// Why it matters and what to do instead.
    pub reason: String,
}

impl fmt::Display for Advice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.subject, self.reason)
    }
}

/// Words in a field name that say it holds a point in time or a position in a sequence.
const SEQUENTIAL_WORDS: &[&str] =
    &["ts", "time", "timestamp", "date", "datetime", "seq", "sequence", "epoch", "millis", "nanos", "serial", "at"];
/// Words in a field name that say it holds a number.
const NUMERIC_WORDS: &[&str] = &[
    "count", "total", "amount", "price", "qty", "quantity", "age", "size", "number", "num", "year", "score", "balance",
    "cents", "port", "seq", "sequence", "len", "length", "weight", "height", "width",
];

fn words(name: &str) -> impl Iterator<Item = String> + '_ {
    name.split(['_', '-']).filter(|w| !w.is_empty()).map(str::to_ascii_lowercase)
}

fn names_any(name: &str, list: &[&str]) -> bool {
    words(name).any(|w| list.contains(&w.as_str()))
}

fn is_integer(type_name: &str) -> bool {
    matches!(type_name, "u16" | "u32" | "u64" | "u128" | "i16" | "i32" | "i64" | "i128")
}

fn is_string(type_name: &str) -> bool {
    matches!(type_name, "String" | "Option<String>")
}

impl Schema {
    /// Checks the entity against the rules of thumb of schema design.
    pub fn advice(&self) -> Vec<Advice> {
        let mut out = Vec::new();
        if self.families.len() > MAX_FAMILIES {
            out.push(Advice {
                rule: Rule::TooManyFamilies,
                subject: format!("{} families", self.families.len()),
                reason: format!(
                    "more than {MAX_FAMILIES} families: flushes and compactions run per region for every \
                     family whenever one fills, so small families pay for large ones; merge families \
                     that are read together"
                ),
            });
        }
        for fam in self.families.iter().filter(|f| f.name.len() > MAX_FAMILY_NAME) {
            out.push(Advice {
                rule: Rule::LongFamilyName,
                subject: format!("family `{}`", fam.name),
                reason: "the family name is stored with every cell; use one or two characters".into(),
            });
        }
        for col in self.columns.iter().filter(|c| c.qualifier.len() > MAX_QUALIFIER) {
            out.push(Advice {
                rule: Rule::LongQualifier,
                subject: format!("column {}:{}", col.family, col.qualifier),
                reason: format!(
                    "the qualifier is stored with every cell; give field `{}` a short \
                     #[cellar(column = \"...\")]",
                    col.field
                ),
            });
        }
        if let Some(lead) = self.partition.first().or(self.key.first()) {
            self.check_leading_part(lead, &mut out);
        }
        for part in self.partition.iter().chain(self.key).filter(|p| is_string(p.type_name)) {
            if names_any(part.spec.name, NUMERIC_WORDS) && part.spec.modifier != Modifier::Md5 {
                out.push(Advice {
                    rule: Rule::NumberAsString,
                    subject: format!("key part `{}`", part.spec.name),
                    reason: "a number as text sorts as text (\"10\" before \"9\") and takes more bytes; \
                             use an integer type"
                        .into(),
                });
            }
        }
        for wide in self.wide.iter().filter(|w| w.key_width.is_none_or(|n| n > 2)) {
            out.push(Advice {
                rule: Rule::UnboundedRow,
                subject: format!("map `{}`", wide.field),
                reason: format!(
                    "one column per entry, and its `{}` keys allow more than {MAX_ROW_ENTRIES} entries in one \
                     row; a row never splits across regions, so a row that keeps growing outgrows its \
                     region and slows every read of it. Bound it — key the entries by a small offset (a \
                     u16) inside a key part that starts a new row per range, as OpenTSDB keeps an hour per \
                     row — or store them tall: one row per entry, the map's key as the entity's last key \
                     part",
                    wide.key_type
                ),
            });
        }
        for col in self.columns.iter().filter(|c| c.kind == ColumnKind::Value && is_string(c.type_name)) {
            if names_any(col.field, NUMERIC_WORDS) {
                out.push(Advice {
                    rule: Rule::NumberAsString,
                    subject: format!("column {}:{}", col.family, col.qualifier),
                    reason: format!(
                        "field `{}` looks numeric: stored as text a number takes up to three times the \
                         bytes of its 8-byte binary form and cannot be incremented; use an integer type",
                        col.field
                    ),
                });
            }
        }
        out
    }

    fn check_leading_part(&self, lead: &KeyField, out: &mut Vec<Advice>) {
        if self.salt.is_some() || matches!(lead.spec.modifier, Modifier::Md5 | Modifier::Reversed) {
            return;
        }
        let timestamp = lead.type_name.ends_with("Timestamp");
        let sequence = is_integer(lead.type_name) && names_any(lead.spec.name, SEQUENTIAL_WORDS);
        if timestamp || sequence {
            let end = if lead.spec.modifier == Modifier::Desc { "first" } else { "last" };
            out.push(Advice {
                rule: Rule::MonotonicLeadingKey,
                subject: format!("key part `{}`", lead.spec.name),
                reason: format!(
                    "a {} leads the row key, so every new row lands in the {end} region and one region \
                     takes all writes; put a salt or bucket in front (#[cellar(salt(buckets = N))] or \
                     #[cellar(bucket(field = \"...\", buckets = N))]), lead with another field, or hash it",
                    if timestamp { "timestamp" } else { "sequence" }
                ),
            });
        }
    }

    /// Checks pre-split points (the start keys of every region but the first) against the
    /// keys this entity can have, and reports regions none of them can reach.
    pub fn split_advice(&self, split_keys: &[impl AsRef<[u8]>]) -> Vec<Advice> {
        let (reach, why) = self.key_reach();
        let mut bounds: Vec<&[u8]> = vec![&[]];
        bounds.extend(split_keys.iter().map(AsRef::as_ref));
        let mut out = Vec::new();
        for (i, start) in bounds.iter().enumerate() {
            let end = bounds.get(i + 1).copied();
            if !reach.iter().any(|r| r.meets(start, end)) {
                out.push(Advice {
                    rule: Rule::UnreachableRegion,
                    subject: format!(
                        "region [{}, {})",
                        crate::repo::printable(start),
                        end.map_or("end".to_string(), crate::repo::printable)
                    ),
                    reason: format!(
                        "no row key of {} can fall in this region ({why}); pre-split where the keys are",
                        self.entity
                    ),
                });
            }
        }
        out
    }

    /// The key ranges this entity's keys can fall into, and why they are confined. Timestamps
    /// are taken to be below 2^48 milliseconds (the year 10889), so their first two bytes are
    /// zero.
    fn key_reach(&self) -> (Vec<Reach>, String) {
        if self.salt.is_some() {
            let n = self.salt.buckets();
            return (
                vec![Reach { lo: vec![0], hi: Some(vec![n]) }],
                format!("keys start with a bucket byte below {n}"),
            );
        }
        let single = |b: u8| Reach { lo: vec![b], hi: b.checked_add(1).map(|n| vec![n]) };
        let lead = match (self.partition.first(), self.record_type, self.key.first()) {
            (Some(p), _, _) | (None, None, Some(p)) => p,
            (None, Some(rt), _) => return (vec![single(rt)], format!("keys start with record type 0x{rt:02x}")),
            (None, None, None) => return (vec![Reach { lo: Vec::new(), hi: None }], String::new()),
        };
        let name = lead.spec.name;
        let timestamp = lead.type_name.ends_with("Timestamp");
        match (lead.type_name, lead.spec.modifier) {
            ("bool", Modifier::None) => (vec![single(0), single(1)], format!("key part `{name}` is a bool")),
            ("bool", Modifier::Desc) => (vec![single(0xFE), single(0xFF)], format!("key part `{name}` is a bool")),
            (_, Modifier::None) if timestamp => (
                vec![Reach { lo: vec![0, 0], hi: Some(vec![0, 1]) }],
                format!("key part `{name}` holds millisecond timestamps"),
            ),
            (_, Modifier::Desc) if timestamp => (
                vec![Reach { lo: vec![0xFF, 0xFF], hi: None }],
                format!("key part `{name}` holds millisecond timestamps"),
            ),
            _ => (vec![Reach { lo: Vec::new(), hi: None }], String::new()),
        }
    }
}

/// Keys in `[lo, hi)`; `hi = None` is the end of the table.
struct Reach {
    lo: Vec<u8>,
    hi: Option<Vec<u8>>,
}

impl Reach {
    /// True if `[lo, hi)` overlaps the region `[start, end)`.
    fn meets(&self, start: &[u8], end: Option<&[u8]>) -> bool {
        let below_end = end.is_none_or(|e| self.lo.as_slice() < e);
        let above_start = self.hi.as_deref().is_none_or(|h| start < h);
        below_end && above_start
    }
}
