//! Write operations, named after the HBase client API: [`Put`], [`Delete`], [`Increment`],
//! [`Append`], [`RowMutations`] and [`CheckAndMutate`].
//!
//! Each operation targets one row and is applied atomically. Timestamps left unset take the
//! engine clock's "now" when the write is applied.

use bytes::Bytes;

use crate::cell::{CellType, LATEST_TIMESTAMP};
use crate::descriptor::Durability;

/// One cell-level change inside a mutation, before the engine resolves its timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edit {
    pub family: Bytes,
    pub qualifier: Bytes,
    /// [`LATEST_TIMESTAMP`] means "now" (or, for a one-version delete, "the latest version").
    pub ts: u64,
    pub kind: CellType,
    pub value: Bytes,
    /// Per-cell time to live in milliseconds.
    pub ttl_ms: Option<u64>,
}

/// Writes values into one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Put {
    pub(crate) row: Bytes,
    pub(crate) edits: Vec<Edit>,
    pub(crate) ttl_ms: Option<u64>,
    pub(crate) durability: Option<Durability>,
}

impl Put {
    /// A put on `row`; add columns with [`Put::add`].
    pub fn new(row: impl Into<Bytes>) -> Self {
        Put { row: row.into(), edits: Vec::new(), ttl_ms: None, durability: None }
    }

    /// A put on `row` with room for `columns` columns, for callers that know how many they add.
    pub fn with_capacity(row: impl Into<Bytes>, columns: usize) -> Self {
        Put { row: row.into(), edits: Vec::with_capacity(columns), ttl_ms: None, durability: None }
    }

    /// Writes `value` to `family:qualifier` at the current time.
    pub fn add(self, family: impl Into<Bytes>, qualifier: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        self.add_at(family, qualifier, LATEST_TIMESTAMP, value)
    }

    /// Writes `value` to `family:qualifier` with an explicit timestamp (ms).
    pub fn add_at(
        mut self,
        family: impl Into<Bytes>,
        qualifier: impl Into<Bytes>,
        ts: u64,
        value: impl Into<Bytes>,
    ) -> Self {
        self.edits.push(Edit {
            family: family.into(),
            qualifier: qualifier.into(),
            ts,
            kind: CellType::Put,
            value: value.into(),
            ttl_ms: None,
        });
        self
    }

    /// Gives every cell of this put a time to live in milliseconds (it cannot outlive the
    /// family's TTL).
    pub fn ttl_ms(mut self, ttl: u64) -> Self {
        self.ttl_ms = Some(ttl);
        self
    }

    /// Overrides the table's durability for this write.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = Some(durability);
        self
    }

    /// The row key.
    pub fn row(&self) -> &[u8] {
        &self.row
    }
}

/// Places delete markers in one row.
///
/// With no column or family added it deletes the whole row (a `DeleteFamily` marker in every
/// family at the delete's timestamp).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete {
    pub(crate) row: Bytes,
    pub(crate) ts: u64,
    pub(crate) edits: Vec<Edit>,
    pub(crate) durability: Option<Durability>,
}

impl Delete {
    /// Deletes `row` (whole row unless columns or families are added).
    pub fn new(row: impl Into<Bytes>) -> Self {
        Delete { row: row.into(), ts: LATEST_TIMESTAMP, edits: Vec::new(), durability: None }
    }

    /// Sets the timestamp of whole-row and family deletes added without one.
    pub fn at(mut self, ts: u64) -> Self {
        self.ts = ts;
        self
    }

    fn marker(mut self, family: Bytes, qualifier: Bytes, ts: u64, kind: CellType) -> Self {
        self.edits.push(Edit { family, qualifier, ts, kind, value: Bytes::new(), ttl_ms: None });
        self
    }

    /// Deletes the latest version of a column (`Delete` marker at that version's timestamp).
    pub fn add_column(self, family: impl Into<Bytes>, qualifier: impl Into<Bytes>) -> Self {
        self.marker(family.into(), qualifier.into(), LATEST_TIMESTAMP, CellType::Delete)
    }

    /// Deletes the version of a column at exactly `ts`.
    pub fn add_column_at(self, family: impl Into<Bytes>, qualifier: impl Into<Bytes>, ts: u64) -> Self {
        self.marker(family.into(), qualifier.into(), ts, CellType::Delete)
    }

    /// Deletes every version of a column up to now.
    pub fn add_columns(self, family: impl Into<Bytes>, qualifier: impl Into<Bytes>) -> Self {
        self.marker(family.into(), qualifier.into(), LATEST_TIMESTAMP, CellType::DeleteColumn)
    }

    /// Deletes every version of a column at or before `ts`.
    pub fn add_columns_at(self, family: impl Into<Bytes>, qualifier: impl Into<Bytes>, ts: u64) -> Self {
        self.marker(family.into(), qualifier.into(), ts, CellType::DeleteColumn)
    }

    /// Deletes every column of a family at or before the delete's timestamp.
    pub fn add_family(self, family: impl Into<Bytes>) -> Self {
        let ts = self.ts;
        self.marker(family.into(), Bytes::new(), ts, CellType::DeleteFamily)
    }

    /// Deletes every column of a family at or before `ts`.
    pub fn add_family_at(self, family: impl Into<Bytes>, ts: u64) -> Self {
        self.marker(family.into(), Bytes::new(), ts, CellType::DeleteFamily)
    }

    /// Deletes every column of a family at exactly `ts`.
    pub fn add_family_version(self, family: impl Into<Bytes>, ts: u64) -> Self {
        self.marker(family.into(), Bytes::new(), ts, CellType::DeleteFamilyVersion)
    }

    /// Overrides the table's durability for this write.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = Some(durability);
        self
    }

    /// The row key.
    pub fn row(&self) -> &[u8] {
        &self.row
    }
}

/// A put or a delete, for batches and [`RowMutations`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// A put.
    Put(Put),
    /// A delete.
    Delete(Delete),
}

impl Mutation {
    /// The row key.
    pub fn row(&self) -> &[u8] {
        match self {
            Mutation::Put(p) => &p.row,
            Mutation::Delete(d) => &d.row,
        }
    }

    pub(crate) fn durability(&self) -> Option<Durability> {
        match self {
            Mutation::Put(p) => p.durability,
            Mutation::Delete(d) => d.durability,
        }
    }

    /// Cells the mutation names (a whole-row delete names none but writes one per family).
    pub(crate) fn edit_count(&self) -> usize {
        match self {
            Mutation::Put(p) => p.edits.len(),
            Mutation::Delete(d) => d.edits.len().max(1),
        }
    }
}

impl From<Put> for Mutation {
    fn from(p: Put) -> Self {
        Mutation::Put(p)
    }
}

impl From<Delete> for Mutation {
    fn from(d: Delete) -> Self {
        Mutation::Delete(d)
    }
}

/// Several puts and deletes of one row, applied atomically in order: a later mutation masks an
/// earlier one, never the reverse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowMutations {
    pub(crate) row: Bytes,
    pub(crate) mutations: Vec<Mutation>,
}

impl RowMutations {
    /// An empty group for `row`.
    pub fn new(row: impl Into<Bytes>) -> Self {
        RowMutations { row: row.into(), mutations: Vec::new() }
    }

    /// Appends a mutation; its row must be this group's row (checked when applied).
    pub fn with(mut self, mutation: impl Into<Mutation>) -> Self {
        self.mutations.push(mutation.into());
        self
    }

    /// The row key.
    pub fn row(&self) -> &[u8] {
        &self.row
    }
}

/// Adds to 8-byte big-endian counters atomically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Increment {
    pub(crate) row: Bytes,
    pub(crate) columns: Vec<(Bytes, Bytes, i64)>,
    pub(crate) ttl_ms: Option<u64>,
    pub(crate) durability: Option<Durability>,
}

impl Increment {
    /// An increment of `row`.
    pub fn new(row: impl Into<Bytes>) -> Self {
        Increment { row: row.into(), columns: Vec::new(), ttl_ms: None, durability: None }
    }

    /// Adds `amount` to `family:qualifier` (a missing cell counts as 0).
    pub fn add(mut self, family: impl Into<Bytes>, qualifier: impl Into<Bytes>, amount: i64) -> Self {
        self.columns.push((family.into(), qualifier.into(), amount));
        self
    }

    /// Time to live of the written cells, in milliseconds.
    pub fn ttl_ms(mut self, ttl: u64) -> Self {
        self.ttl_ms = Some(ttl);
        self
    }

    /// Overrides the table's durability for this write.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = Some(durability);
        self
    }
}

/// Appends bytes to cells atomically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Append {
    pub(crate) row: Bytes,
    pub(crate) columns: Vec<(Bytes, Bytes, Bytes)>,
    pub(crate) durability: Option<Durability>,
}

impl Append {
    /// An append to `row`.
    pub fn new(row: impl Into<Bytes>) -> Self {
        Append { row: row.into(), columns: Vec::new(), durability: None }
    }

    /// Appends `suffix` to `family:qualifier` (a missing cell counts as empty).
    pub fn add(mut self, family: impl Into<Bytes>, qualifier: impl Into<Bytes>, suffix: impl Into<Bytes>) -> Self {
        self.columns.push((family.into(), qualifier.into(), suffix.into()));
        self
    }

    /// Overrides the table's durability for this write.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = Some(durability);
        self
    }
}

/// Comparison used by [`CheckAndMutate`] and the comparison filters: `cell OP operand`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    /// cell < operand
    Less,
    /// cell <= operand
    LessOrEqual,
    /// cell == operand
    Equal,
    /// cell != operand
    NotEqual,
    /// cell >= operand
    GreaterOrEqual,
    /// cell > operand
    Greater,
}

impl CompareOp {
    /// Applies the comparison to `lhs OP rhs` in byte (memcmp) order.
    pub fn matches(self, lhs: &[u8], rhs: &[u8]) -> bool {
        let ord = lhs.cmp(rhs);
        match self {
            CompareOp::Less => ord.is_lt(),
            CompareOp::LessOrEqual => ord.is_le(),
            CompareOp::Equal => ord.is_eq(),
            CompareOp::NotEqual => ord.is_ne(),
            CompareOp::GreaterOrEqual => ord.is_ge(),
            CompareOp::Greater => ord.is_gt(),
        }
    }
}

/// Compares one cell's latest visible value (or its absence) and, if the check passes, applies
/// mutations to the row atomically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckAndMutate {
    pub(crate) family: Bytes,
    pub(crate) qualifier: Bytes,
    pub(crate) op: CompareOp,
    /// `None` checks that the cell does not exist.
    pub(crate) expected: Option<Bytes>,
    pub(crate) mutations: RowMutations,
}

impl CheckAndMutate {
    /// Applies `mutations` only if `family:qualifier`'s current value `op` `expected` holds.
    pub fn if_value(
        family: impl Into<Bytes>,
        qualifier: impl Into<Bytes>,
        op: CompareOp,
        expected: impl Into<Bytes>,
        mutations: RowMutations,
    ) -> Self {
        CheckAndMutate {
            family: family.into(),
            qualifier: qualifier.into(),
            op,
            expected: Some(expected.into()),
            mutations,
        }
    }

    /// Applies `mutations` only if `family:qualifier` has no visible value.
    pub fn if_absent(family: impl Into<Bytes>, qualifier: impl Into<Bytes>, mutations: RowMutations) -> Self {
        CheckAndMutate {
            family: family.into(),
            qualifier: qualifier.into(),
            op: CompareOp::Equal,
            expected: None,
            mutations,
        }
    }
}

/// A condition of a [`MultiRowMutation`]: one cell's latest visible value compared with an
/// operand, or its absence, like [`CheckAndMutate`]'s check but naming its row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowCondition {
    pub(crate) row: Bytes,
    pub(crate) family: Bytes,
    pub(crate) qualifier: Bytes,
    pub(crate) op: CompareOp,
    /// `None` checks that the cell does not exist.
    pub(crate) expected: Option<Bytes>,
}

impl RowCondition {
    /// Holds if `row`'s `family:qualifier` has a visible value and `value OP expected`.
    pub fn if_value(
        row: impl Into<Bytes>,
        family: impl Into<Bytes>,
        qualifier: impl Into<Bytes>,
        op: CompareOp,
        expected: impl Into<Bytes>,
    ) -> Self {
        RowCondition {
            row: row.into(),
            family: family.into(),
            qualifier: qualifier.into(),
            op,
            expected: Some(expected.into()),
        }
    }

    /// Holds if `row`'s `family:qualifier` has no visible value.
    pub fn if_absent(row: impl Into<Bytes>, family: impl Into<Bytes>, qualifier: impl Into<Bytes>) -> Self {
        RowCondition {
            row: row.into(),
            family: family.into(),
            qualifier: qualifier.into(),
            op: CompareOp::Equal,
            expected: None,
        }
    }

    /// The row the condition reads.
    pub fn row(&self) -> &[u8] {
        &self.row
    }

    /// Whether the condition holds for the cell's current state.
    pub(crate) fn holds(&self, current: Option<&[u8]>) -> bool {
        match (&self.expected, current) {
            (None, None) => true,
            (None, Some(_)) | (Some(_), None) => false,
            (Some(expected), Some(value)) => self.op.matches(value, expected),
        }
    }
}

/// Mutations of several rows of one region, applied atomically (HBase's MultiRowMutation): a
/// reader sees all of them or none, and recovery replays all of them or none. Optional
/// conditions, checked under the same lock, make it a multi-row check-and-mutate.
///
/// Every row, conditions' rows included, must lie in one region; a table whose split policy
/// keeps a key prefix together (see [`crate::SplitPolicy`]) guarantees that for rows sharing
/// the prefix.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MultiRowMutation {
    pub(crate) rows: Vec<RowMutations>,
    pub(crate) conditions: Vec<RowCondition>,
}

impl MultiRowMutation {
    /// No rows and no conditions yet.
    pub fn new() -> Self {
        MultiRowMutation::default()
    }

    /// Adds one row's mutations; they apply after those of the rows added before.
    pub fn row(mut self, mutations: RowMutations) -> Self {
        self.rows.push(mutations);
        self
    }

    /// Adds a condition: the mutation applies only if every condition holds.
    pub fn condition(mut self, condition: RowCondition) -> Self {
        self.conditions.push(condition);
        self
    }

    /// The rows' mutations, in order.
    pub fn rows(&self) -> &[RowMutations] {
        &self.rows
    }
}
