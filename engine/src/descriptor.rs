//! Table and column-family descriptors: the schema a table is created and altered with.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Bloom filter kind kept in each SSTable of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BloomType {
    /// No bloom filter.
    None,
    /// Keyed by row: lets a Get skip files that do not hold the row.
    Row,
    /// Keyed by row and by row+qualifier: also skips files for single-column Gets.
    RowCol,
}

/// Block compression of a family's SSTables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Compression {
    /// Blocks stored as is.
    None,
    /// LZ4 block compression: fast, modest ratio.
    Lz4,
    /// Zstandard level 3: slower, better ratio.
    Zstd,
}

/// How far a write travels before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Durability {
    /// Not logged: lost if the process dies before the memstore is flushed.
    SkipWal,
    /// Logged into a user-space buffer written out shortly after; a killed process may lose
    /// the last fraction of a second.
    AsyncWal,
    /// Written to the operating system before acknowledging: survives a killed process.
    #[default]
    SyncWal,
    /// Written and `fdatasync`ed before acknowledging (group commit): survives power loss.
    FsyncWal,
}

/// Settings of one column family.
///
/// Built with [`FamilyDescriptor::new`] and a setter per setting, so that a minor release can
/// add settings without breaking callers (the struct is `#[non_exhaustive]`); the fields stay
/// public to read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FamilyDescriptor {
    /// Family name (printable, no `:`).
    pub name: String,
    /// Versions kept per column (default 1).
    pub max_versions: u32,
    /// Versions kept even when expired by TTL (default 0).
    pub min_versions: u32,
    /// Time to live in seconds; `None` keeps cells forever.
    pub ttl_secs: Option<u64>,
    /// Keep deleted cells readable by time-range reads until versions or TTL remove them.
    pub keep_deleted_cells: bool,
    /// Bloom filter kind (default `Row`).
    pub bloom: BloomType,
    /// Target uncompressed data-block size in bytes (default 64 KiB).
    pub block_size: u32,
    /// Block compression (default none).
    pub compression: Compression,
    /// Give this family's blocks priority in the block cache.
    pub in_memory: bool,
}

impl FamilyDescriptor {
    /// A family with HBase's defaults.
    pub fn new(name: impl Into<String>) -> Self {
        FamilyDescriptor {
            name: name.into(),
            max_versions: 1,
            min_versions: 0,
            ttl_secs: None,
            keep_deleted_cells: false,
            bloom: BloomType::Row,
            block_size: 64 * 1024,
            compression: Compression::None,
            in_memory: false,
        }
    }

    /// Sets the number of versions kept per column.
    pub fn max_versions(mut self, n: u32) -> Self {
        self.max_versions = n;
        self
    }

    /// Sets the number of versions kept despite TTL.
    pub fn min_versions(mut self, n: u32) -> Self {
        self.min_versions = n;
        self
    }

    /// Sets the time to live in seconds.
    pub fn ttl_secs(mut self, secs: u64) -> Self {
        self.ttl_secs = Some(secs);
        self
    }

    /// Keeps deleted cells for time-range reads.
    pub fn keep_deleted_cells(mut self, keep: bool) -> Self {
        self.keep_deleted_cells = keep;
        self
    }

    /// Sets the bloom filter kind.
    pub fn bloom(mut self, bloom: BloomType) -> Self {
        self.bloom = bloom;
        self
    }

    /// Sets the data-block size in bytes: a block ends at the first row boundary past it, or
    /// inside a row once half a block of that row is in it.
    pub fn block_size(mut self, bytes: u32) -> Self {
        self.block_size = bytes;
        self
    }

    /// Sets block compression.
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    /// Gives the family block-cache priority.
    pub fn in_memory(mut self, in_memory: bool) -> Self {
        self.in_memory = in_memory;
        self
    }

    /// TTL in milliseconds, if any.
    pub(crate) fn ttl_ms(&self) -> Option<u64> {
        self.ttl_secs.map(|s| s.saturating_mul(1000))
    }

    /// Checks the settings for consistency.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the offending setting.
    pub fn validate(&self) -> Result<()> {
        if self.name.is_empty() || self.name.len() > 255 {
            return Err(Error::invalid("family", "family name must be 1 to 255 bytes"));
        }
        if self.name.bytes().any(|b| b == b':' || !(0x21..0x7f).contains(&b)) {
            return Err(Error::invalid(
                "family",
                format!("family name `{}` must be printable ASCII without `:` or spaces", self.name),
            ));
        }
        if self.max_versions == 0 {
            return Err(Error::invalid("VERSIONS", "max versions must be at least 1"));
        }
        if self.min_versions > self.max_versions {
            return Err(Error::invalid("MIN_VERSIONS", "min versions must not exceed max versions"));
        }
        if self.ttl_secs == Some(0) {
            return Err(Error::invalid("TTL", "TTL must be positive"));
        }
        if !(1024..=16 * 1024 * 1024).contains(&self.block_size) {
            return Err(Error::invalid("BLOCKSIZE", "block size must be between 1 KiB and 16 MiB"));
        }
        Ok(())
    }
}

/// The schema of a table.
///
/// Built with [`TableDescriptor::new`], [`TableDescriptor::family`] and a setter per setting,
/// so that a minor release can add settings without breaking callers (the struct is
/// `#[non_exhaustive]`); the fields stay public to read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TableDescriptor {
    /// Table name: letters, digits, `_`, `-`, `.`; not starting with `.` or `-`.
    pub name: String,
    /// Column families, in name order.
    pub families: Vec<FamilyDescriptor>,
    /// Default durability of writes to this table.
    pub durability: Durability,
    /// Region split threshold in bytes.
    pub max_region_size: u64,
    /// Where regions may split (absent in manifests written before split policies existed).
    #[serde(default)]
    pub split_policy: crate::SplitPolicy,
}

impl TableDescriptor {
    /// A table with no families yet (add at least one before creating it).
    pub fn new(name: impl Into<String>) -> Self {
        TableDescriptor {
            name: name.into(),
            families: Vec::new(),
            durability: Durability::SyncWal,
            max_region_size: 10 * 1024 * 1024 * 1024,
            split_policy: crate::SplitPolicy::MidKey,
        }
    }

    /// Adds a family.
    pub fn family(mut self, family: FamilyDescriptor) -> Self {
        self.families.push(family);
        self.families.sort_by(|a, b| a.name.cmp(&b.name));
        self
    }

    /// Sets the table's default durability.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Sets the region split threshold.
    pub fn max_region_size(mut self, bytes: u64) -> Self {
        self.max_region_size = bytes;
        self
    }

    /// Sets where regions may split.
    pub fn split_policy(mut self, policy: crate::SplitPolicy) -> Self {
        self.split_policy = policy;
        self
    }

    /// The family called `name`.
    pub fn get_family(&self, name: &[u8]) -> Option<&FamilyDescriptor> {
        self.families.iter().find(|f| f.name.as_bytes() == name)
    }

    /// Checks the name and every family.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the offending setting.
    pub fn validate(&self) -> Result<()> {
        validate_table_name(&self.name)?;
        if self.families.is_empty() {
            return Err(Error::invalid("families", "a table needs at least one column family"));
        }
        for (i, f) in self.families.iter().enumerate() {
            f.validate()?;
            if self.families[..i].iter().any(|g| g.name == f.name) {
                return Err(Error::invalid("families", format!("family `{}` is listed twice", f.name)));
            }
        }
        if self.max_region_size < 1024 * 1024 {
            return Err(Error::invalid("MAX_FILESIZE", "max region size must be at least 1 MiB"));
        }
        self.split_policy.validate()
    }
}

/// Checks a table name: 1–255 bytes of `[A-Za-z0-9_.-]`, not starting with `.` or `-`.
///
/// # Errors
/// [`Error::InvalidArgument`] with the reason.
pub fn validate_table_name(name: &str) -> Result<()> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if name.is_empty() || name.len() > 255 {
        return Err(Error::invalid("table", "table name must be 1 to 255 characters"));
    }
    if name.starts_with(['.', '-']) || !name.chars().all(ok_char) {
        return Err(Error::invalid(
            "table",
            format!("illegal table name `{name}`: use letters, digits, `_`, `-`, `.`, not leading `.` or `-`"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names() {
        for ok in ["t", "test", "my_table-1.v2"] {
            validate_table_name(ok).unwrap();
        }
        for bad in ["", ".meta", "-x", "a b", "ta:ble", "é"] {
            assert!(validate_table_name(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn family_settings_are_checked() {
        assert!(FamilyDescriptor::new("f").validate().is_ok());
        assert!(FamilyDescriptor::new("").validate().is_err());
        assert!(FamilyDescriptor::new("a:b").validate().is_err());
        assert!(FamilyDescriptor::new("f").max_versions(0).validate().is_err());
        assert!(FamilyDescriptor::new("f").max_versions(2).min_versions(3).validate().is_err());
        assert!(FamilyDescriptor::new("f").block_size(10).validate().is_err());
    }

    #[test]
    fn family_setters_set_their_fields() {
        let f = FamilyDescriptor::new("f")
            .max_versions(5)
            .min_versions(2)
            .ttl_secs(3600)
            .keep_deleted_cells(true)
            .bloom(BloomType::RowCol)
            .block_size(8 * 1024)
            .compression(Compression::Zstd)
            .in_memory(true);
        assert_eq!(f.name, "f");
        assert_eq!((f.max_versions, f.min_versions, f.ttl_secs), (5, 2, Some(3600)));
        assert!(f.keep_deleted_cells && f.in_memory);
        assert_eq!((f.bloom, f.block_size, f.compression), (BloomType::RowCol, 8 * 1024, Compression::Zstd));
        f.validate().unwrap();
    }

    #[test]
    fn table_setters_set_their_fields() {
        let t = TableDescriptor::new("t")
            .family(FamilyDescriptor::new("b"))
            .family(FamilyDescriptor::new("a"))
            .durability(Durability::FsyncWal)
            .max_region_size(2 << 20)
            .split_policy(crate::SplitPolicy::KeyPrefix { length: 4 });
        assert_eq!(t.name, "t");
        assert_eq!(t.families.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!((t.durability, t.max_region_size), (Durability::FsyncWal, 2 << 20));
        assert_eq!(t.split_policy, crate::SplitPolicy::KeyPrefix { length: 4 });
        t.validate().unwrap();
    }

    #[test]
    fn duplicate_families_rejected() {
        let t = TableDescriptor::new("t").family(FamilyDescriptor::new("f")).family(FamilyDescriptor::new("f"));
        assert!(t.validate().is_err());
        assert!(TableDescriptor::new("t").validate().is_err());
    }
}
