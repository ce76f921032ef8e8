//! Advice on an aggregate: the rules of thumb every row of it must follow (families, name
//! lengths, the root's leading key part), and what its strategy costs for the common
//! operations, with sizes measured on the aggregates already stored.

use super::intent::TOKEN_LEN;
use super::rows::{self, RowSet, GENERATION};
use super::shape::Shape;
use super::{Aggregate, AggregateRepository, Node, Strategy};
use crate::advice::{Advice, Rule};
use crate::store::ByteSize;
use crate::Result;

/// Stored aggregates read to measure sizes.
pub const ADVICE_SAMPLE: usize = 100;

/// Sizes of the sampled aggregates, as the strategy stores them.
#[derive(Debug, Default)]
struct Sample {
    aggregates: u64,
    rows: u64,
    /// Bytes as the store counts them: row key + family + qualifier + value + 8 per cell.
    bytes: u64,
    largest: u64,
    /// Objects per level, over all sampled aggregates.
    objects: Vec<u64>,
}

impl Sample {
    fn add(&mut self, shape: &Shape, node: &Node, stored: &RowSet) {
        let cells: u64 = stored
            .iter()
            .flat_map(|((_, key), cells)| {
                cells.iter().map(move |c| (key.len() + c.family.len() + c.qualifier.len() + c.value.len() + 8) as u64)
            })
            .sum();
        // The root row's generation cell, which every stored aggregate has besides its own cells.
        let generation = node.row.key.len() + shape.family().len() + GENERATION.len() + TOKEN_LEN + 8;
        let bytes = cells + generation as u64;
        self.aggregates += 1;
        self.rows += stored.len() as u64;
        self.bytes += bytes;
        self.largest = self.largest.max(bytes);
        self.objects.resize(shape.levels.len(), 0);
        count_objects(shape, 0, node, &mut self.objects);
    }

    /// `what` averaged over the sampled aggregates, e.g. ` (12 rows on average)`; empty with no sample.
    fn average(&self, total: u64, what: impl Fn(u64) -> String) -> String {
        match self.aggregates {
            0 => String::new(),
            n => format!(" ({} on average over {n} stored)", what(total / n)),
        }
    }
}

fn count_objects(shape: &Shape, level: usize, node: &Node, objects: &mut [u64]) {
    objects[level] += 1;
    for (collection, children) in node.children.iter().enumerate() {
        let child_level = shape.levels[level].child_levels[collection];
        for child in children {
            count_objects(shape, child_level, child, objects);
        }
    }
}

impl<A: Aggregate> AggregateRepository<A> {
    /// Checks the aggregate against the rules of thumb of schema design — for the root's row
    /// and key, and the families and qualifiers of every part — and says what its strategy
    /// costs for whole reads, child-level writes and parent changes, with sizes measured on up
    /// to [`ADVICE_SAMPLE`] stored aggregates (one scan).
    ///
    /// # Errors
    /// Store and decoding errors of the sample scan.
    pub fn advice(&self) -> Result<Vec<Advice>> {
        let shape = &self.shape;
        let mut out = A::SCHEMA.advice();
        let root_families: Vec<String> =
            out.iter().filter(|a| a.rule == Rule::LongFamilyName).map(|a| a.subject.clone()).collect();
        for level in &shape.levels[1..] {
            let own = level.schema.advice().into_iter().filter(|a| match a.rule {
                // Families are shared across levels: reported once, at the root if it has it.
                Rule::LongFamilyName => !root_families.contains(&a.subject),
                Rule::LongQualifier | Rule::NumberAsString => true,
                _ => false,
            });
            let prefixed = own.map(|a| Advice { subject: format!("{}: {}", level.field_path, a.subject), ..a });
            let prefixed: Vec<Advice> = prefixed.filter(|a| !out.contains(a)).collect();
            out.extend(prefixed);
        }
        let mut sample = Sample::default();
        for aggregate in self.scan().limit(ADVICE_SAMPLE).iter()? {
            let node = aggregate?.to_node()?;
            let mut sorted = node;
            rows::sort_children(shape, 0, &mut sorted)?;
            let stored = rows::to_rows(shape, &sorted)?;
            sample.add(shape, &sorted, &stored);
        }
        out.push(strategy_cost(shape, &sample));
        Ok(out)
    }
}

/// What the strategy costs, in store calls and bytes.
fn strategy_cost(shape: &Shape, sample: &Sample) -> Advice {
    let levels = shape.levels.len();
    let size = sample.average(sample.bytes, |b| ByteSize(b).to_string());
    let rows = sample.average(sample.rows, |r| format!("{r} rows"));
    let largest = match sample.aggregates {
        0 => String::new(),
        _ => format!(", the largest stored is {}", ByteSize(sample.largest)),
    };
    let reason = match shape.strategy {
        Strategy::Blob => format!(
            "every write, even of one field of one child, rewrites the whole aggregate in one cell{size}\
             {largest}; every read decodes all of it. Cheap while aggregates are small and read whole; \
             prefer single_table when children change one at a time or aggregates grow large"
        ),
        Strategy::Normalized => format!(
            "a whole read is two gets of the root (before and after) and {} prefix scans, one per child \
             table{rows}; a write that spans tables goes through the intent protocol — two \
             check-and-mutates of the root and one batch per table it changes — and readers of an \
             aggregate mid-write wait for it. single_table reads it with one scan and, on a store with \
             atomic row groups, writes it with one atomic mutation",
            levels - 1
        ),
        Strategy::SingleTable => format!(
            "a whole read is one prefix scan{rows}, a read of the upper levels scans only their record \
             types, and a child change writes only its rows. The table never splits inside an \
             aggregate, so one aggregate must fit a region{largest}"
        ),
        Strategy::Denormalized => denormalized_cost(shape, sample, &rows),
    };
    Advice { rule: Rule::StrategyCost, subject: format!("strategy {}", shape.strategy.name()), reason }
}

/// Denormalized: what changing a collapsed object costs — a rewrite of every row its columns
/// are copied onto.
fn denormalized_cost(shape: &Shape, sample: &Sample, rows: &str) -> String {
    let collapsed: Vec<String> = shape
        .levels
        .iter()
        .enumerate()
        .filter(|(_, l)| l.parent == Some(0) && !l.child_levels.is_empty())
        .map(|(i, l)| {
            let copies: u64 = l.child_levels.iter().map(|&c| sample.objects.get(c).copied().unwrap_or(0)).sum();
            let per_object = match sample.objects.get(i).copied().unwrap_or(0) {
                0 => String::new(),
                n => format!(" ({:.1} on average)", copies as f64 / n as f64),
            };
            let children: Vec<&str> = l.child_levels.iter().map(|&c| shape.levels[c].schema.entity).collect();
            format!(
                "changing one {} rewrites its copies on every {} row{per_object}",
                l.schema.entity,
                children.join(" and ")
            )
        })
        .collect();
    format!(
        "a whole read is one prefix scan{rows}; {}. Reads never see two different copies of one object. \
         Prefer single_table when the collapsed objects change often",
        if collapsed.is_empty() { "no level is collapsed".to_string() } else { collapsed.join("; ") }
    )
}
