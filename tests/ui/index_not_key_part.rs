use cellar::prelude::*;

// `Bytes` is a column type but not a key part: it cannot be indexed.
#[derive(Entity)]
#[cellar(table = "files", index(name = "by_digest", on(digest)))]
struct File {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "d")]
    digest: bytes::Bytes,
    #[cellar(column = "s", index = "by_sum")]
    sum: Option<bytes::Bytes>,
}

fn main() {}
