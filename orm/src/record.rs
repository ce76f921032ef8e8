//! Single-table designs: several entity types sharing one table and one partition prefix (the
//! `[customer][1]` customer, `[customer][2][order]` orders layout). `#[derive(Record)]` on an
//! enum of the member entities implements [`Record`], so one scan of a partition returns every
//! record in it, typed.

use crate::entity::{Entity, FieldError, Schema};
use crate::key::{Form, Modifier, Salt};
use crate::store::LentRow;

/// An enum with one variant per entity type sharing a table. Implemented by
/// `#[derive(Record)]`, which also checks at compile time that the members fit together.
pub trait Record: Sized + Send + Sync + 'static {
    /// The enum's name, for errors.
    const NAME: &'static str;

    /// The members' schemas, in variant order.
    const MEMBERS: &'static [&'static Schema];

    /// Decodes a row as whichever member its record type names. A row of a type that is not a
    /// member yields a [`FieldError`] with `other_record_type` set (scans skip those).
    ///
    /// # Errors
    /// A [`FieldError`] naming what does not decode.
    fn from_row<'r>(row: impl Into<LentRow<'r>>) -> Result<Self, FieldError>;
}

/// An entity that is a variant of record enum `R`: its key prefixes scan `R`'s partitions.
pub trait Member<R: Record>: Entity + Into<R> {}

/// The error for a row of a record type that is not a member of `record` (generated code only).
#[doc(hidden)]
pub fn not_a_member(record: &'static str) -> FieldError {
    FieldError {
        column: None,
        reason: format!("the row's record type is not one of {record}'s members"),
        other_record_type: true,
    }
}

/// Checks that `members` can share a table as one record enum, panicking with the reason if
/// not. Generated code calls it in a constant, so a mismatch is a compile error.
#[doc(hidden)]
pub const fn check_members(members: &[&Schema]) {
    if members.is_empty() {
        panic!("a record enum needs at least one member entity");
    }
    let first = members[0];
    let mut i = 0;
    while i < members.len() {
        let m = members[i];
        if !str_eq(m.table, first.table) {
            panic!("the members of a record enum must all be stored in the same table");
        }
        let Some(rt) = m.record_type else {
            panic!("every member of a record enum needs #[cellar(record_type = N)]");
        };
        let mut j = 0;
        while j < i {
            if matches!(members[j].record_type, Some(other) if other == rt) {
                panic!("two members of a record enum have the same record type");
            }
            j += 1;
        }
        if !same_salt(m.salt, first.salt) {
            panic!("the members of a record enum must use the same salt or bucketing");
        }
        if m.partition.len() != first.partition.len() {
            panic!("the members of a record enum must have the same number of partition parts");
        }
        let mut p = 0;
        while p < m.partition.len() {
            let (a, b) = (&m.partition[p], &first.partition[p]);
            if !str_eq(a.type_name, b.type_name)
                || !same_form(a.spec.form, b.spec.form)
                || !same_modifier(a.spec.modifier, b.spec.modifier)
            {
                panic!("the partition parts of a record enum's members must have the same types and encodings");
            }
            p += 1;
        }
        i += 1;
    }
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Same kind and bucket count (bucket fields may be named differently per member).
const fn same_salt(a: Salt, b: Salt) -> bool {
    matches!(
        (a, b),
        (Salt::None, Salt::None)
            | (Salt::Hash { .. }, Salt::Hash { .. })
            | (Salt::Random { .. }, Salt::Random { .. })
            | (Salt::Bucket { .. }, Salt::Bucket { .. })
    ) && a.buckets() == b.buckets()
}

const fn same_form(a: Form, b: Form) -> bool {
    match (a, b) {
        (Form::Delimited, Form::Delimited) | (Form::Last, Form::Last) => true,
        (Form::Fixed(x), Form::Fixed(y)) => x == y,
        _ => false,
    }
}

const fn same_modifier(a: Modifier, b: Modifier) -> bool {
    matches!(
        (a, b),
        (Modifier::None, Modifier::None)
            | (Modifier::Desc, Modifier::Desc)
            | (Modifier::Reversed, Modifier::Reversed)
            | (Modifier::Md5, Modifier::Md5)
    )
}
