use cellar::prelude::*;

#[derive(Entity)]
#[cellar(bucket(field = "missing", buckets = 4))]
struct Bad {
    #[cellar(partition, reverse_ts)]
    host: String,
    #[cellar(key, hash = "sha1")]
    id: String,
    #[cellar(key, reversed)]
    name: String,
}

fn main() {}
