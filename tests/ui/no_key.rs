use cellar::prelude::*;

#[derive(Entity)]
struct NoKey {
    name: String,
}

fn main() {}
