//! Split policies: where a region may be cut. By default anywhere (at the middle of its data);
//! with a key-prefix policy never between two rows that share a prefix, so rows written
//! together by a [`crate::MultiRowMutation`] (an aggregate's rows) always share a region —
//! HBase's `KeyPrefixRegionSplitPolicy` and `DelimitedKeyPrefixRegionSplitPolicy`, and a
//! composite form for typed keys.

use serde::{Deserialize, Serialize};

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
