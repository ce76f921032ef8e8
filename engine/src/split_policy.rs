//! Split policies: where a region may be cut. By default anywhere (at the middle of its data);
//! with a key-prefix policy never between two rows that share a prefix, so rows written
//! together by a [`crate::MultiRowMutation`] (an aggregate's rows) always share a region —
//! HBase's `KeyPrefixRegionSplitPolicy` and `DelimitedKeyPrefixRegionSplitPolicy`, and a
//! composite form for typed keys.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::query::prefix_successor;
use crate::{Error, Result};

/// Where a table's regions may split. Part of the [`crate::TableDescriptor`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub enum SplitPolicy {
    /// At the middle of the region's data (the default).
    #[default]
    MidKey,
    /// Rows sharing their first `length` bytes stay in one region (HBase's
    /// `KeyPrefixRegionSplitPolicy`).
    KeyPrefix {
        /// Prefix length in bytes.
        length: u32,
    },
    /// Rows sharing the bytes before the first `delimiter` stay in one region (HBase's
    /// `DelimitedKeyPrefixRegionSplitPolicy`).
    DelimitedKeyPrefix {
        /// The delimiter (one or more bytes).
        delimiter: Vec<u8>,
    },
    /// Rows sharing a prefix made of these fields, in order, stay in one region: for composite
    /// keys mixing fixed-width and terminated parts (the object mapper's typed keys).
    Fields(Vec<PrefixField>),
}

/// One field of a [`SplitPolicy::Fields`] prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum PrefixField {
    /// Exactly this many bytes.
    Fixed(u32),
    /// Everything up to and including the first occurrence of this terminator.
    Terminated(Vec<u8>),
}

impl SplitPolicy {
    /// The prefix rows must share to stay in one region (their group):
    ///
    /// - `MidKey`: the whole row (every row is a group of its own);
    /// - `KeyPrefix { length }`: the first `length` bytes, or the whole row if it is shorter;
    /// - `DelimitedKeyPrefix { delimiter }`: the bytes before the first `delimiter`, or the
    ///   whole row if it has none (as HBase does);
    /// - `Fields`: the fields in order — `Fixed(n)` takes `n` bytes, `Terminated(t)` takes
    ///   everything up to and including the first `t` at or after its position — or the whole
    ///   row if it ends before the last field does.
    ///
    /// A split never cuts strictly inside a group: it cuts at a group's first key (see
    /// [`crate::Engine::split`]; split keys given when the table is created are taken as
    /// given). Under `KeyPrefix` and `Fields` a group's rows are contiguous in key order, so
    /// that keeps every group in one region. Under
    /// `DelimitedKeyPrefix` it keeps together the rows holding the delimiter (`p#…`), but a
    /// row without one (`p`) may be separated from them when keys below the delimiter byte
    /// follow `p` (`p\x01#…`), as in HBase.
    ///
    /// # Examples
    /// ```
    /// use cellar_engine::{PrefixField, SplitPolicy};
    /// let fields = SplitPolicy::Fields(vec![PrefixField::Fixed(2), PrefixField::Terminated(b"\0".to_vec())]);
    /// assert_eq!(fields.group_prefix(b"t1alice\0order-7"), b"t1alice\0");
    /// assert_eq!(SplitPolicy::KeyPrefix { length: 4 }.group_prefix(b"user0042"), b"user");
    /// assert_eq!(SplitPolicy::DelimitedKeyPrefix { delimiter: b"#".to_vec() }.group_prefix(b"a#b#c"), b"a");
    /// ```
    pub fn group_prefix<'a>(&self, row: &'a [u8]) -> &'a [u8] {
        match self {
            SplitPolicy::MidKey => row,
            SplitPolicy::KeyPrefix { length } => &row[..row.len().min(*length as usize)],
            SplitPolicy::DelimitedKeyPrefix { delimiter } => match find(row, delimiter) {
                Some(i) => &row[..i],
                None => row,
            },
            SplitPolicy::Fields(fields) => {
                let mut pos = 0usize;
                for field in fields {
                    let next = match field {
                        PrefixField::Fixed(n) => pos.checked_add(*n as usize).filter(|&end| end <= row.len()),
                        PrefixField::Terminated(t) => find(&row[pos..], t).map(|i| pos + i + t.len()),
                    };
                    match next {
                        Some(end) => pos = end,
                        None => return row,
                    }
                }
                &row[..pos]
            }
        }
    }

    /// Checks the policy's parameters.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the parameter: a prefix length of 0, an empty
    /// delimiter or terminator, or no fields.
    pub fn validate(&self) -> Result<()> {
        match self {
            SplitPolicy::MidKey => Ok(()),
            SplitPolicy::KeyPrefix { length } if *length == 0 => {
                Err(Error::invalid("PREFIX_LENGTH", "the key prefix length must be at least 1"))
            }
            SplitPolicy::KeyPrefix { .. } => Ok(()),
            SplitPolicy::DelimitedKeyPrefix { delimiter } if delimiter.is_empty() => {
                Err(Error::invalid("DELIMITER", "the key prefix delimiter must not be empty"))
            }
            SplitPolicy::DelimitedKeyPrefix { .. } => Ok(()),
            SplitPolicy::Fields(fields) if fields.is_empty() => {
                Err(Error::invalid("PREFIX_FIELDS", "a field prefix needs at least one field"))
            }
            SplitPolicy::Fields(fields) => {
                for (i, f) in fields.iter().enumerate() {
                    match f {
                        PrefixField::Terminated(t) if t.is_empty() => {
                            return Err(Error::invalid(
                                "PREFIX_FIELDS",
                                format!("field {i}: the terminator must not be empty"),
                            ))
                        }
                        _ => {}
                    }
                }
                Ok(())
            }
        }
    }

    /// Where to cut a region `[start, end)` (empty `end` = unbounded) near `row` without
    /// splitting a group: the first key of `row`'s group if that lies strictly inside the
    /// region, else the first key after the group if that does; `None` if neither (the region
    /// holds nothing but that group). `accept` may veto a candidate (the engine refuses cuts
    /// that would leave a daughter empty). Under `MidKey` the cut is `row` itself.
    pub(crate) fn snap(
        &self,
        row: &[u8],
        (start, end): (&[u8], &[u8]),
        mut accept: impl FnMut(&[u8]) -> Result<bool>,
    ) -> Result<Option<Bytes>> {
        let inside = |cut: &[u8]| cut > start && (end.is_empty() || cut < end);
        let group = self.group_prefix(row);
        let after = match self {
            SplitPolicy::MidKey => None,
            _ => prefix_successor(group),
        };
        for cut in std::iter::once(group).chain(after.as_deref()) {
            if inside(cut) && accept(cut)? {
                return Ok(Some(Bytes::copy_from_slice(cut)));
            }
        }
        Ok(None)
    }
}

/// Index of the first occurrence of `needle` in `haystack` (0 for an empty needle, which
/// [`SplitPolicy::validate`] refuses).
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn fields(f: &[PrefixField]) -> SplitPolicy {
        SplitPolicy::Fields(f.to_vec())
    }

    fn term(t: &[u8]) -> PrefixField {
        PrefixField::Terminated(t.to_vec())
    }

    #[test]
    fn mid_key_groups_are_single_rows() {
        assert_eq!(SplitPolicy::MidKey.group_prefix(b"abc"), b"abc");
        assert_eq!(SplitPolicy::default(), SplitPolicy::MidKey);
    }

    #[test]
    fn key_prefix_takes_the_first_bytes() {
        let p = SplitPolicy::KeyPrefix { length: 3 };
        assert_eq!(p.group_prefix(b"abcdef"), b"abc");
        assert_eq!(p.group_prefix(b"abc"), b"abc");
        assert_eq!(p.group_prefix(b"ab"), b"ab", "shorter rows are their own group");
    }

    #[test]
    fn delimited_prefix_stops_before_the_first_delimiter() {
        let p = SplitPolicy::DelimitedKeyPrefix { delimiter: b"#".to_vec() };
        assert_eq!(p.group_prefix(b"user1#2024#x"), b"user1");
        assert_eq!(p.group_prefix(b"#x"), b"");
        assert_eq!(p.group_prefix(b"nodelim"), b"nodelim");
        let multi = SplitPolicy::DelimitedKeyPrefix { delimiter: b"::".to_vec() };
        assert_eq!(multi.group_prefix(b"a:b::c::d"), b"a:b");
        assert_eq!(multi.group_prefix(b"a:b:"), b"a:b:");
    }

    #[test]
    fn fields_walk_fixed_and_terminated_parts() {
        let p = fields(&[PrefixField::Fixed(1), term(b"\x00\x01"), PrefixField::Fixed(2)]);
        assert_eq!(p.group_prefix(b"\x07alice\x00\x01xyrest"), b"\x07alice\x00\x01xy");
        // The terminator is searched from the field's own position, not the row's start.
        assert_eq!(p.group_prefix(b"\x00bob\x00\x01zz"), b"\x00bob\x00\x01zz");
        let p2 = fields(&[PrefixField::Fixed(2), term(b"\x00\x01")]);
        assert_eq!(p2.group_prefix(b"\x00\x01x\x00\x01y"), b"\x00\x01x\x00\x01");
        // Rows ending early are whole groups.
        assert_eq!(p.group_prefix(b"\x07alice"), b"\x07alice", "no terminator");
        assert_eq!(p.group_prefix(b"\x07alice\x00\x01x"), b"\x07alice\x00\x01x", "fixed field cut short");
        assert_eq!(p.group_prefix(b""), b"");
        // A terminator spanning the end of the row does not count.
        assert_eq!(fields(&[term(b"\x00\x01")]).group_prefix(b"ab\x00"), b"ab\x00");
        assert_eq!(fields(&[PrefixField::Fixed(u32::MAX)]).group_prefix(b"ab"), b"ab");
    }

    #[test]
    fn parameters_are_validated() {
        assert!(SplitPolicy::MidKey.validate().is_ok());
        assert!(SplitPolicy::KeyPrefix { length: 1 }.validate().is_ok());
        let err = SplitPolicy::KeyPrefix { length: 0 }.validate().unwrap_err().to_string();
        assert!(err.contains("PREFIX_LENGTH"), "{err}");
        let err = SplitPolicy::DelimitedKeyPrefix { delimiter: Vec::new() }.validate().unwrap_err().to_string();
        assert!(err.contains("DELIMITER"), "{err}");
        assert!(fields(&[]).validate().is_err());
        assert!(fields(&[PrefixField::Fixed(1), term(b"")]).validate().is_err());
        assert!(fields(&[PrefixField::Fixed(1), term(b"\0")]).validate().is_ok());
        // Unvalidated policies never panic.
        assert_eq!(SplitPolicy::DelimitedKeyPrefix { delimiter: Vec::new() }.group_prefix(b"ab"), b"");
        assert_eq!(fields(&[term(b"")]).group_prefix(b"ab"), b"");
    }

    fn snap(p: &SplitPolicy, row: &[u8], start: &[u8], end: &[u8]) -> Option<Bytes> {
        p.snap(row, (start, end), |_| Ok(true)).unwrap()
    }

    #[test]
    fn cuts_snap_to_the_group_start_then_the_group_end() {
        let p = SplitPolicy::KeyPrefix { length: 2 };
        assert_eq!(snap(&p, b"bb7", b"", b""), Some(Bytes::from("bb")));
        assert_eq!(snap(&p, b"bb7", b"a", b"c"), Some(Bytes::from("bb")));
        // The group starts at the region's start: cut after the group.
        assert_eq!(snap(&p, b"bb7", b"bb", b""), Some(Bytes::from("bc")));
        assert_eq!(snap(&p, b"bb7", b"bb1", b"c"), Some(Bytes::from("bc")), "region starting inside the group");
        // The group fills the region.
        assert_eq!(snap(&p, b"bb7", b"bb", b"bc"), None);
        assert_eq!(snap(&p, b"bb7", b"bb", b"bb9"), None);
        assert_eq!(snap(&p, b"\xff\xff7", b"\xff\xff", b""), None, "no key follows the group");
        // A veto moves on to the next candidate.
        let vetoed = p.snap(b"bb7", (b"", b""), |cut| Ok(cut != b"bb")).unwrap();
        assert_eq!(vetoed, Some(Bytes::from("bc")));
        // The mid-key policy cuts at the row itself.
        assert_eq!(snap(&SplitPolicy::MidKey, b"bb7", b"", b""), Some(Bytes::from("bb7")));
        assert_eq!(snap(&SplitPolicy::MidKey, b"bb7", b"bb7", b""), None);
    }

    fn arb_field() -> impl Strategy<Value = PrefixField> {
        prop_oneof![
            (0u32..4).prop_map(PrefixField::Fixed),
            proptest::collection::vec(0u8..3, 1..3).prop_map(PrefixField::Terminated),
        ]
    }

    proptest! {
        /// Rows of a group are contiguous in key order and every cut at a group's first key or
        /// the key after the group falls between groups, never inside one.
        #[test]
        fn fields_groups_are_contiguous_and_cuts_never_split_them(
            policy in proptest::collection::vec(arb_field(), 1..4).prop_map(SplitPolicy::Fields),
            rows in proptest::collection::btree_set(proptest::collection::vec(0u8..4, 0..8), 1..40),
        ) {
            let rows: Vec<Vec<u8>> = rows.into_iter().collect();
            let groups: Vec<&[u8]> = rows.iter().map(|r| policy.group_prefix(r)).collect();
            for (r, g) in rows.iter().zip(&groups) {
                prop_assert!(r.starts_with(g));
            }
            // Contiguous: once a group's run ends, the group never appears again.
            let mut finished = std::collections::HashSet::new();
            for i in 1..groups.len() {
                if groups[i] != groups[i - 1] {
                    prop_assert!(finished.insert(groups[i - 1]), "group {:?} resumes at {:?}", groups[i - 1], rows[i]);
                    prop_assert!(!finished.contains(groups[i]), "group {:?} resumes at {:?}", groups[i], rows[i]);
                }
            }
            for g in &groups {
                let after = prefix_successor(g);
                for cut in std::iter::once(g.to_vec()).chain(after) {
                    for (i, a) in rows.iter().enumerate() {
                        for (j, b) in rows.iter().enumerate() {
                            if groups[i] == groups[j] {
                                prop_assert_eq!(a.as_slice() < cut.as_slice(), b.as_slice() < cut.as_slice(),
                                    "cut {:?} separates {:?} and {:?}", cut, a, b);
                            }
                        }
                    }
                }
            }
        }

        /// The key-prefix policy is the one-field case of `Fields`.
        #[test]
        fn key_prefix_is_a_fixed_field(length in 1u32..6, row in proptest::collection::vec(any::<u8>(), 0..10)) {
            let fixed = SplitPolicy::Fields(vec![PrefixField::Fixed(length)]);
            prop_assert_eq!(SplitPolicy::KeyPrefix { length }.group_prefix(&row), fixed.group_prefix(&row));
        }
    }
}
