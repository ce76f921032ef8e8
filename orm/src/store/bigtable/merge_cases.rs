//! ReadRows chunk merging, case by case.
//!
//! The cases follow the case classes of Google's published ReadRows conformance cases
//! (googleapis/conformance-tests, bigtable/v2/readrows.json), written here as our own data in
//! Cellar's terms, plus the classes Cellar adds: reversed scans, its millisecond timestamps,
//! its cell order, and a split value's pieces adding up to the announced size.
//!
//! A chunk is written as space-separated fields: `k:` row key, `f:` family, `q:` qualifier
//! (`q:` alone is the empty qualifier), `t:` timestamp in milliseconds, `us:` timestamp in
//! microseconds, `v:` value (piece), `n:` value_size, and the flags `labels`, `reset`, `commit`;
//! the empty string is a chunk with nothing set. A cell is written `key family:qualifier@ms=value`;
//! consecutive cells with one key make one row.
//!
//! Cellar never asks for labels and stores none: a labelled chunk merges like an unlabelled one
//! (the cases with `labels` expect exactly the cells without them), but labels on a split
//! value's continuation are still refused.

use std::panic::{catch_unwind, AssertUnwindSafe};

use bytes::Bytes;

use super::{Chunk, ChunkError, RowMerger};
use crate::store::{Row, StoredCell};

struct Case {
    name: &'static str,
    reverse: bool,
    chunks: &'static [&'static str],
    /// The rows delivered: all of them, or those delivered before the error.
    rows: &'static [&'static str],
    error: bool,
}

/// A stream that merges into `rows`.
const fn ok(name: &'static str, chunks: &'static [&'static str], rows: &'static [&'static str]) -> Case {
    Case { name, reverse: false, chunks, rows, error: false }
}

/// A stream the merger refuses after delivering `rows` (and nothing of the row it fails in).
const fn bad(name: &'static str, chunks: &'static [&'static str], rows: &'static [&'static str]) -> Case {
    Case { name, reverse: false, chunks, rows, error: true }
}

impl Case {
    /// The same case on a reversed scan.
    const fn rev(self) -> Case {
        Case { reverse: true, ..self }
    }
}

const CASES: &[Case] = &[
    // Single rows, unsplit cells.
    ok("simple row with timestamp", &["k:RK f:A q:C t:100 v:value commit"], &["RK A:C@100=value"]),
    ok("missing timestamp is 0", &["k:RK f:A q:C v:value commit"], &["RK A:C@0=value"]),
    ok("empty cell value", &["k:RK f:A q:C commit"], &["RK A:C@0="]),
    ok("empty qualifier", &["k:RK f:A q: t:1 v:x commit"], &["RK A:@1=x"]),
    ok(
        "bare commit is one more empty cell at 0",
        &["k:RK f:A q:C t:100 v:value", "commit"],
        &["RK A:C@100=value", "RK A:C@0="],
    ),
    ok(
        "empty chunks are empty cells at 0",
        &["k:RK f:A q:C t:100 v:value", "", "commit"],
        &["RK A:C@100=value", "RK A:C@0=", "RK A:C@0="],
    ),
    ok(
        "two cells in one column",
        &["k:RK f:A q:C t:99 v:value-1", "t:98 v:value-2 commit"],
        &["RK A:C@99=value-1", "RK A:C@98=value-2"],
    ),
    ok(
        "two qualifiers",
        &["k:RK f:A q:C t:99 v:value-1", "q:D t:98 v:value-2 commit"],
        &["RK A:C@99=value-1", "RK A:D@98=value-2"],
    ),
    ok(
        "two families",
        &["k:RK f:A q:C t:99 v:value-1", "f:B q:E t:98 v:value-2 commit"],
        &["RK A:C@99=value-1", "RK B:E@98=value-2"],
    ),
    ok(
        "same qualifier in two families",
        &["k:RK f:A q:C t:100 v:value", "f:B q:C v:value-1 commit"],
        &["RK A:C@100=value", "RK B:C@0=value-1"],
    ),
    ok(
        "labels are dropped",
        &["k:RK f:A q:C t:99 labels v:value-1", "t:98 labels v:value-2 commit"],
        &["RK A:C@99=value-1", "RK A:C@98=value-2"],
    ),
    // Cellar's cell order: family, qualifier, newest first, whatever order the server sends.
    ok("families sorted", &["k:RK f:Z q:C t:1 v:z", "f:A q:C t:2 v:a commit"], &["RK A:C@2=a", "RK Z:C@1=z"]),
    ok("versions newest first", &["k:RK f:A q:C t:1 v:old", "t:2 v:new commit"], &["RK A:C@2=new", "RK A:C@1=old"]),
    ok("microseconds truncate to milliseconds", &["k:RK f:A q:C us:1999 v:x commit"], &["RK A:C@1=x"]),
    // Split values.
    ok("split cell", &["k:RK f:A q:C t:100 v:v n:5", "v:alue commit"], &["RK A:C@100=value"]),
    ok(
        "split cell, bare commit",
        &["k:RK f:A q:C t:100 v:v n:5", "v:alue", "commit"],
        &["RK A:C@100=value", "RK A:C@0="],
    ),
    ok("split cell ended by an empty bare commit", &["k:RK f:A q:C t:1 v:value n:5", "commit"], &["RK A:C@1=value"]),
    ok(
        "split four ways, labels on the first piece",
        &["k:RK f:A q:C t:100 labels v:v n:9", "v:a n:9", "v:l n:9", "v:ue-VAL commit"],
        &["RK A:C@100=value-VAL"],
    ),
    ok(
        "two split cells",
        &["k:RK f:A q:C t:99 v:v n:7", "v:alue-1", "t:98 v:v n:7", "v:alue-2 commit"],
        &["RK A:C@99=value-1", "RK A:C@98=value-2"],
    ),
    ok(
        "split cells in two qualifiers",
        &["k:RK f:A q:C t:99 v:v n:7", "v:alue-1", "q:D t:98 v:v n:7", "v:alue-2 commit"],
        &["RK A:C@99=value-1", "RK A:D@98=value-2"],
    ),
    ok(
        "multi-split cells in two qualifiers",
        &["k:RK f:A q:C t:99 v:v n:7", "v:a n:7", "v:lue-1", "q:D t:98 v:v n:7", "v:a n:7", "v:lue-2 commit"],
        &["RK A:C@99=value-1", "RK A:D@98=value-2"],
    ),
    ok(
        "split cells in two families",
        &["k:RK f:A q:C t:99 v:v n:7", "v:alue-1", "f:B q:E t:98 v:v n:7", "v:alue-2 commit"],
        &["RK A:C@99=value-1", "RK B:E@98=value-2"],
    ),
    // Several rows.
    ok(
        "two rows",
        &["k:RK_1 f:A q:C t:100 v:value commit", "k:RK_2 f:A q:C t:100 v:value commit"],
        &["RK_1 A:C@100=value", "RK_2 A:C@100=value"],
    ),
    ok(
        "two rows, implicit timestamp",
        &["k:RK_1 f:A q:C v:value commit", "k:RK_2 f:A q:C t:100 v:value commit"],
        &["RK_1 A:C@0=value", "RK_2 A:C@100=value"],
    ),
    ok(
        "two rows, empty value",
        &["k:RK_1 f:A q:C commit", "k:RK_2 f:A q:C t:100 v:value commit"],
        &["RK_1 A:C@0=", "RK_2 A:C@100=value"],
    ),
    ok(
        "two rows, one with two cells",
        &["k:RK_1 f:A q:C t:99 v:value-1", "t:98 v:value-2 commit", "k:RK_2 f:B q:D t:97 v:value-3 commit"],
        &["RK_1 A:C@99=value-1", "RK_1 A:C@98=value-2", "RK_2 B:D@97=value-3"],
    ),
    ok(
        "two rows, two columns each",
        &[
            "k:RK_1 f:A q:C t:99 v:value-1",
            "q:D t:98 v:value-2 commit",
            "k:RK_2 f:B q:E t:97 v:value-3",
            "q:F t:96 v:value-4 commit",
        ],
        &["RK_1 A:C@99=value-1", "RK_1 A:D@98=value-2", "RK_2 B:E@97=value-3", "RK_2 B:F@96=value-4"],
    ),
    ok(
        "two rows, two families each",
        &[
            "k:RK_1 f:A q:C t:99 v:value-1",
            "f:B q:E t:98 v:value-2 commit",
            "k:RK_2 f:M q:O t:97 v:value-3",
            "f:N q:P t:96 v:value-4 commit",
        ],
        &["RK_1 A:C@99=value-1", "RK_1 B:E@98=value-2", "RK_2 M:O@97=value-3", "RK_2 N:P@96=value-4"],
    ),
    ok(
        "two rows, some cells labelled",
        &[
            "k:RK_1 f:A q:C t:99 labels v:value-1",
            "t:98 v:value-2 commit",
            "k:RK_2 f:B q:D t:97 labels v:value-3",
            "t:96 v:value-4 commit",
        ],
        &["RK_1 A:C@99=value-1", "RK_1 A:C@98=value-2", "RK_2 B:D@97=value-3", "RK_2 B:D@96=value-4"],
    ),
    ok(
        "two rows of split cells, same timestamp",
        &["k:RK_1 f:A q:C t:100 v:v n:7", "v:alue-1 commit", "k:RK_2 f:A q:C t:100 v:v n:7", "v:alue-2 commit"],
        &["RK_1 A:C@100=value-1", "RK_2 A:C@100=value-2"],
    ),
    ok(
        "two rows descending",
        &["k:RK_2 f:A q:C t:1 v:two commit", "k:RK_1 f:A q:C t:1 v:one commit"],
        &["RK_2 A:C@1=two", "RK_1 A:C@1=one"],
    )
    .rev(),
    ok(
        "two rows of split cells descending",
        &["k:RK_2 f:A q:C t:1 v:t n:3", "v:wo commit", "k:RK_1 f:A q:C t:1 v:o n:3", "v:ne commit"],
        &["RK_2 A:C@1=two", "RK_1 A:C@1=one"],
    )
    .rev(),
    // Resets.
    ok("no data after reset", &["k:RK f:A q:C t:100 v:value", "reset"], &[]),
    ok(
        "simple reset",
        &["k:RK f:A q:C t:100 v:value", "reset", "k:RK f:A q:C t:100 v:value commit"],
        &["RK A:C@100=value"],
    ),
    ok(
        "reset to a new value",
        &["k:RK f:A q:C t:100 v:value-1", "reset", "k:RK f:A q:C t:100 v:value-2 commit"],
        &["RK A:C@100=value-2"],
    ),
    ok(
        "reset to a new qualifier",
        &["k:RK f:A q:C t:100 v:value-1", "reset", "k:RK f:A q:D t:100 v:value-1 commit"],
        &["RK A:D@100=value-1"],
    ),
    ok(
        "reset after two cells",
        &["k:RK f:A q:C t:100 v:value-1", "t:98 v:value-2", "reset", "k:RK f:A q:C t:100 v:value-2 commit"],
        &["RK A:C@100=value-2"],
    ),
    ok(
        "reset, then two cells",
        &["k:RK f:A q:C t:100 v:value-1", "reset", "k:RK f:A q:C t:100 v:value-2", "t:97 v:value-3 commit"],
        &["RK A:C@100=value-2", "RK A:C@97=value-3"],
    ),
    ok(
        "two resets",
        &[
            "k:RK f:A q:C t:100 v:value-1",
            "reset",
            "k:RK f:A q:C t:100 v:value-2",
            "reset",
            "k:RK f:A q:C t:100 v:value-3 commit",
        ],
        &["RK A:C@100=value-3"],
    ),
    ok(
        "reset, then two columns of another family",
        &["k:RK f:A q:C t:100 v:value-1", "reset", "k:RK f:B q:C t:100 v:value-2", "q:D t:97 v:value-3 commit"],
        &["RK B:C@100=value-2", "RK B:D@97=value-3"],
    ),
    ok(
        "reset to a new row",
        &["k:RK_1 f:A q:C t:100 v:value-1", "reset", "k:RK_2 f:A q:C t:100 v:value-2 commit"],
        &["RK_2 A:C@100=value-2"],
    ),
    ok(
        "reset inside a split value",
        &["k:RK f:A q:C t:100 labels v:v n:10", "v:a n:10", "reset", "k:RK_1 f:A q:C t:100 v:value-1 commit"],
        &["RK_1 A:C@100=value-1"],
    ),
    ok(
        "reset between committed rows, to a lower key than the reset one",
        &["k:RK_1 f:A q:C t:1 v:one commit", "k:RK_3 f:A q:C t:1 v:three", "reset", "k:RK_2 f:A q:C t:1 v:two commit"],
        &["RK_1 A:C@1=one", "RK_2 A:C@1=two"],
    ),
    ok(
        "reset to a new row descending",
        &["k:RK_3 f:A q:C t:1 v:three commit", "k:RK_2 f:A q:C t:1 v:two", "reset", "k:RK_1 f:A q:C t:1 v:one commit"],
        &["RK_3 A:C@1=three", "RK_1 A:C@1=one"],
    )
    .rev(),
    // Invalid: cells outside a row.
    bad("no commit", &["k:RK f:A q:C t:100 v:value"], &[]),
    bad("no cell key before commit", &["commit"], &[]),
    bad("no cell key before value", &["t:100 v:value"], &[]),
    bad("empty row key on a new row", &["f:A q:C t:1 v:x commit"], &[]),
    bad("new row without family", &["k:RK q:C t:1 v:x commit"], &[]),
    bad("new row without qualifier", &["k:RK f:A t:1 v:x commit"], &[]),
    bad("new family without qualifier", &["k:RK f:A q:C t:99 v:value-1", "f:B t:98 v:value-2 commit"], &[]),
    bad(
        "next row does not inherit the family",
        &["k:RK_1 f:A q:C t:1 v:one commit", "k:RK_2 t:1 v:two commit"],
        &["RK_1 A:C@1=one"],
    ),
    bad(
        "new row missing row key",
        &["k:RK_1 f:A q:C t:100 v:value commit", "t:100 v:value commit"],
        &["RK_1 A:C@100=value"],
    ),
    bad("two commits", &["k:RK f:A q:C t:1 v:x commit", "commit"], &["RK A:C@1=x"]),
    // Invalid: rows not committed or out of order.
    bad("no commit between rows", &["k:RK_1 f:A q:C t:100 v:value", "k:RK_2 f:A q:C t:100 v:value"], &[]),
    bad("no commit after first row", &["k:RK_1 f:A q:C t:100 v:value", "k:RK_2 f:A q:C t:100 v:value commit"], &[]),
    bad(
        "last row missing commit",
        &["k:RK_1 f:A q:C t:100 v:value commit", "k:RK_2 f:A q:C t:100 v:value"],
        &["RK_1 A:C@100=value"],
    ),
    bad(
        "last row missing commit descending",
        &["k:RK_2 f:A q:C t:100 v:value commit", "k:RK_1 f:A q:C t:100 v:value"],
        &["RK_2 A:C@100=value"],
    )
    .rev(),
    bad(
        "duplicate row key",
        &["k:RK_1 f:A q:C t:100 v:value commit", "k:RK_1 f:B q:D t:100 v:value commit"],
        &["RK_1 A:C@100=value"],
    ),
    bad(
        "duplicate row key descending",
        &["k:RK_1 f:A q:C t:100 v:value commit", "k:RK_1 f:B q:D t:100 v:value commit"],
        &["RK_1 A:C@100=value"],
    )
    .rev(),
    bad(
        "rows descending on a forward scan",
        &["k:RK_2 f:A q:C t:1 v:two commit", "k:RK_1 f:A q:C t:1 v:one commit"],
        &["RK_2 A:C@1=two"],
    ),
    bad(
        "rows ascending on a reversed scan",
        &["k:RK_1 f:A q:C t:1 v:one commit", "k:RK_2 f:A q:C t:1 v:two commit"],
        &["RK_1 A:C@1=one"],
    )
    .rev(),
    bad(
        "reset row restarts behind the last committed row",
        &["k:RK_2 f:A q:C t:1 v:two commit", "k:RK_3 f:A q:C t:1 v:three", "reset", "k:RK_1 f:A q:C t:1 v:one commit"],
        &["RK_2 A:C@1=two"],
    ),
    // Invalid: resets.
    bad("bare reset", &["reset"], &[]),
    bad("reset before any row", &["reset", "k:RK f:A q:C t:100 v:value"], &[]),
    bad("reset after a commit", &["k:RK f:A q:C t:1 v:x commit", "reset"], &["RK A:C@1=x"]),
    bad("missing key after reset", &["k:RK f:A q:C t:100 v:value", "reset", "t:100 v:value commit"], &[]),
    bad("commit after reset without a row", &["k:RK f:A q:C t:100 v:value", "reset", "commit"], &[]),
    bad("reset with a value piece", &["k:RK f:A q:C t:100 labels v:v n:10", "v:a n:10 reset"], &[]),
    bad("reset with a row key", &["k:RK f:A q:C t:1 v:x", "k:RK reset"], &[]),
    bad("reset with a column", &["k:RK f:A q:C t:1 v:x", "f:A q:C reset"], &[]),
    bad("reset with a timestamp", &["k:RK f:A q:C t:1 v:x", "t:1 reset"], &[]),
    bad("reset with labels", &["k:RK f:A q:C t:1 v:x", "labels reset"], &[]),
    // Invalid: split values.
    bad("commit inside a split value", &["k:RK f:A q:C t:100 labels v:v n:10", "v:a n:10 commit"], &[]),
    bad("value size without a split", &["k:RK f:A q:C t:1 v:value n:5 commit"], &[]),
    bad("stream ends inside a split value", &["k:RK f:A q:C t:1 v:v n:5"], &[]),
    bad("row key changes inside a split value", &["k:RK_1 f:A q:C t:1 v:v n:5", "k:RK_2 v:alue commit"], &[]),
    bad("new qualifier inside a split value", &["k:RK f:A q:C t:1 v:v n:5", "q:D v:alue commit"], &[]),
    bad("new family inside a split value", &["k:RK f:A q:C t:1 v:v n:5", "f:B q:C v:alue commit"], &[]),
    bad("timestamp on a split continuation", &["k:RK f:A q:C t:1 v:v n:5", "t:2 v:alue commit"], &[]),
    bad("labels on a split continuation", &["k:RK f:A q:C t:1 labels v:v n:5", "labels v:alue commit"], &[]),
    bad(
        "split value interrupted by a new cell",
        &["k:RK_1 f:A q:C t:1 v:one commit", "k:RK_2 f:A q:C t:2 v:v n:5", "t:1 v:other commit"],
        &["RK_1 A:C@1=one"],
    ),
    bad("split value shorter than announced", &["k:RK f:A q:C t:1 v:v n:9", "v:alue commit"], &[]),
    bad("split value longer than announced", &["k:RK f:A q:C t:1 v:v n:3", "v:alue commit"], &[]),
    bad("first piece longer than announced", &["k:RK f:A q:C t:1 v:value n:3", "v:s commit"], &[]),
    bad("announced size changes", &["k:RK f:A q:C t:1 v:v n:5", "v:a n:6", "v:lue commit"], &[]),
    bad("negative value size", &["k:RK f:A q:C t:1 v:x n:-1 commit"], &[]),
    bad("negative value size on a continuation", &["k:RK f:A q:C t:1 v:v n:5", "v:alue n:-1 commit"], &[]),
    bad("huge announced size", &["k:RK f:A q:C t:1 v:v n:2147483647", "v:alue commit"], &[]),
    // Invalid: timestamps Cellar cannot hold.
    bad("negative timestamp", &["k:RK f:A q:C us:-5000 v:x commit"], &[]),
    bad("negative timestamp under a millisecond", &["k:RK f:A q:C us:-1 v:x commit"], &[]),
];

fn bytes(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn chunk(spec: &str) -> Chunk {
    let mut c = Chunk::default();
    for field in spec.split_whitespace() {
        match field.split_once(':') {
            Some(("k", v)) => c.row_key = bytes(v),
            Some(("f", v)) => c.family = Some(v.to_string()),
            Some(("q", v)) => c.qualifier = Some(bytes(v)),
            Some(("t", v)) => c.timestamp_micros = v.parse::<i64>().expect("timestamp") * 1000,
            Some(("us", v)) => c.timestamp_micros = v.parse().expect("timestamp"),
            Some(("v", v)) => c.value = bytes(v),
            Some(("n", v)) => c.value_size = v.parse().expect("value size"),
            None if field == "labels" => c.has_labels = true,
            None if field == "reset" => c.reset_row = true,
            None if field == "commit" => c.commit_row = true,
            _ => panic!("bad chunk field {field:?}"),
        }
    }
    c
}

fn rows(cells: &[&str]) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for spec in cells {
        let parse = || {
            let (key, rest) = spec.split_once(' ')?;
            let (family, rest) = rest.split_once(':')?;
            let (qualifier, rest) = rest.split_once('@')?;
            let (timestamp, value) = rest.split_once('=')?;
            Some((key, family, qualifier, timestamp.parse().ok()?, value))
        };
        let (key, family, qualifier, timestamp, value) = parse().unwrap_or_else(|| panic!("bad cell {spec:?}"));
        let cell = StoredCell { family: bytes(family), qualifier: bytes(qualifier), timestamp, value: bytes(value) };
        match rows.last_mut() {
            Some(row) if row.key == key.as_bytes() => row.cells.push(cell),
            _ => rows.push(Row { key: bytes(key), cells: vec![cell] }),
        }
    }
    rows
}

/// Feeds `chunks` to a merger: the rows it delivered, and its error (which ends the stream).
fn run(chunks: &[Chunk], reverse: bool) -> (Vec<Row>, Option<ChunkError>) {
    let mut merger = RowMerger::new(reverse);
    let mut rows = Vec::new();
    for chunk in chunks {
        match merger.push(chunk.clone()) {
            Ok(row) => rows.extend(row),
            Err(e) => return (rows, Some(e)),
        }
    }
    (rows, merger.finish().err())
}

/// `chunks` with the row key repeated on every chunk of a row, as the emulator sends them.
fn with_repeated_keys(chunks: &[Chunk]) -> Vec<Chunk> {
    let mut key = Bytes::new();
    chunks
        .iter()
        .map(|c| {
            let mut c = c.clone();
            if c.reset_row {
                key = Bytes::new();
            } else if c.row_key.is_empty() {
                c.row_key = key.clone();
            } else {
                key = c.row_key.clone();
            }
            if c.commit_row {
                key = Bytes::new();
            }
            c
        })
        .collect()
}

#[test]
fn every_case_class() {
    let mut failures = Vec::new();
    for case in CASES {
        let chunks: Vec<Chunk> = case.chunks.iter().map(|s| chunk(s)).collect();
        let want = rows(case.rows);
        let mut streams = vec![("", chunks.clone())];
        if !case.error {
            streams.push((" (row key on every chunk)", with_repeated_keys(&chunks)));
        }
        for (variant, stream) in streams {
            let name = format!("{}{variant}{}", case.name, if case.reverse { " (reversed scan)" } else { "" });
            match catch_unwind(AssertUnwindSafe(|| run(&stream, case.reverse))) {
                Err(_) => failures.push(format!("{name}: panicked")),
                Ok((got, error)) => {
                    if got != want {
                        failures.push(format!("{name}: delivered {got:?}, want {want:?}"));
                    }
                    match (error, case.error) {
                        (Some(e), false) => failures.push(format!("{name}: refused ({e})")),
                        (None, true) => failures.push(format!("{name}: accepted")),
                        _ => {}
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), CASES.len(), failures.join("\n"));
}

/// Cellar drops labels: every valid stream merges into the same rows with its labels removed.
#[test]
fn labels_never_change_the_cells() {
    for case in CASES.iter().filter(|c| !c.error) {
        let chunks: Vec<Chunk> = case.chunks.iter().map(|s| chunk(s)).collect();
        let unlabelled: Vec<Chunk> = chunks.iter().cloned().map(|c| Chunk { has_labels: false, ..c }).collect();
        assert_eq!(run(&chunks, case.reverse), run(&unlabelled, case.reverse), "{}", case.name);
    }
}
