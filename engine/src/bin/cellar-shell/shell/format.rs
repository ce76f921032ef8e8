//! Output in the HBase shell's shapes.

use cellar_engine::cell::{to_printable, Cell};
use cellar_engine::descriptor::{BloomType, Compression, Durability, FamilyDescriptor, TableDescriptor};
use cellar_engine::{PrefixField, SplitPolicy};

/// Width of the left column (ROW / COLUMN) in scan and get output.
const LEFT: usize = 34;

/// The header line of scan output.
pub fn scan_header() -> String {
    format!("{:<LEFT$} {}\n", "ROW", "COLUMN+CELL")
}

/// The header line of get output.
pub fn get_header() -> String {
    format!("{:<LEFT$} {}\n", "COLUMN", "CELL")
}

fn cell_body(c: &Cell) -> String {
    if c.cell_type.is_delete() {
        format!("timestamp={}, type={}", c.timestamp, c.cell_type.name())
    } else {
        format!("timestamp={}, value={}", c.timestamp, to_printable(&c.value))
    }
}

fn column_name(c: &Cell) -> String {
    format!("{}:{}", to_printable(&c.family), to_printable(&c.qualifier))
}

/// One scan line: ` row   column=f:q, timestamp=…, value=…`.
pub fn scan_line(c: &Cell) -> String {
    format!(" {:<w$} column={}, {}\n", to_printable(&c.row), column_name(c), cell_body(c), w = LEFT - 1)
}

/// One get line: ` f:q   timestamp=…, value=…`.
pub fn get_line(c: &Cell) -> String {
    format!(" {:<w$} {}\n", column_name(c), cell_body(c), w = LEFT - 1)
}

/// The closing line with a row count and the elapsed time.
pub fn rows_line(rows: usize, seconds: f64) -> String {
    format!("{rows} row(s) in {seconds:.4} seconds\n")
}

fn bloom_name(b: BloomType) -> &'static str {
    match b {
        BloomType::None => "NONE",
        BloomType::Row => "ROW",
        BloomType::RowCol => "ROWCOL",
    }
}

fn compression_name(c: Compression) -> &'static str {
    match c {
        Compression::None => "NONE",
        Compression::Lz4 => "LZ4",
        Compression::Zstd => "ZSTD",
    }
}

/// `{NAME => 'e', BLOOMFILTER => 'ROW', VERSIONS => '1', ...}` as `describe` prints it.
pub fn family_line(f: &FamilyDescriptor) -> String {
    let ttl = match f.ttl_secs {
        None => "FOREVER".to_string(),
        Some(s) => format!("{s} SECONDS"),
    };
    format!(
        "{{NAME => '{}', BLOOMFILTER => '{}', VERSIONS => '{}', IN_MEMORY => '{}', KEEP_DELETED_CELLS => '{}', \
         TTL => '{}', COMPRESSION => '{}', MIN_VERSIONS => '{}', BLOCKSIZE => '{}'}}\n",
        f.name,
        bloom_name(f.bloom),
        f.max_versions,
        f.in_memory,
        if f.keep_deleted_cells { "TRUE" } else { "FALSE" },
        ttl,
        compression_name(f.compression),
        f.min_versions,
        f.block_size
    )
}

/// Bytes as a shell string literal that reads back as the same bytes: single-quoted when
/// printable, else double-quoted with `\xNN` escapes.
fn literal(bytes: &[u8]) -> String {
    if bytes.iter().all(|b| (0x20..0x7f).contains(b) && !matches!(b, b'\'' | b'\\')) {
        return format!("'{}'", String::from_utf8_lossy(bytes));
    }
    let mut out = String::from("\"");
    for &b in bytes {
        if (0x20..0x7f).contains(&b) && !matches!(b, b'"' | b'\\') {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\x{b:02X}"));
        }
    }
    out.push('"');
    out
}

/// `, SPLIT_POLICY => '…', PREFIX_LENGTH => '…'` for a key-prefix policy, in the option
/// names `create` and `alter` accept; nothing for the default mid-key policy.
fn split_policy_attributes(p: &SplitPolicy) -> String {
    match p {
        SplitPolicy::KeyPrefix { length } => {
            format!(", SPLIT_POLICY => 'KeyPrefixRegionSplitPolicy', PREFIX_LENGTH => '{length}'")
        }
        SplitPolicy::DelimitedKeyPrefix { delimiter } => {
            format!(", SPLIT_POLICY => 'DelimitedKeyPrefixRegionSplitPolicy', DELIMITER => {}", literal(delimiter))
        }
        SplitPolicy::Fields(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|f| match f {
                    PrefixField::Fixed(n) => n.to_string(),
                    PrefixField::Terminated(t) => literal(t),
                    // A field kind newer than the shell: shown, though `create` cannot read it back.
                    other => format!("{other:?}"),
                })
                .collect();
            format!(", SPLIT_POLICY => 'FieldsKeyPrefixRegionSplitPolicy', PREFIX_FIELDS => [{}]", fields.join(", "))
        }
        _ => String::new(),
    }
}

/// The body of `describe`.
pub fn describe(t: &TableDescriptor, enabled: bool) -> String {
    let mut out = format!("Table {} is {}\n{}\n", t.name, if enabled { "ENABLED" } else { "DISABLED" }, t.name);
    let durability = match t.durability {
        Durability::SkipWal => "SKIP_WAL",
        Durability::AsyncWal => "ASYNC_WAL",
        Durability::SyncWal => "SYNC_WAL",
        Durability::FsyncWal => "FSYNC_WAL",
    };
    out.push_str(&format!(
        "TABLE ATTRIBUTES => {{DURABILITY => '{durability}', MAX_FILESIZE => '{}'{}}}\n",
        t.max_region_size,
        split_policy_attributes(&t.split_policy)
    ));
    out.push_str("COLUMN FAMILIES DESCRIPTION\n");
    for f in &t.families {
        out.push_str(&family_line(f));
    }
    out
}
