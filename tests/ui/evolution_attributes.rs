use cellar::prelude::*;

fn two() -> u32 {
    2
}

#[derive(Entity)]
struct Evolving {
    #[cellar(key, default)]
    id: u64,
    #[cellar(default)]
    nickname: Option<String>,
    #[cellar(counter, default)]
    logins: i64,
    #[cellar(default = "not a path")]
    level: u32,
    #[cellar(default = "two", default)]
    rank: u32,
    #[cellar(counter, rename_from = "l")]
    visits: i64,
    #[cellar(column = "e", rename_from = "e")]
    email: String,
    #[cellar(rename_from = "e")]
    phone: String,
    #[cellar(aliases = ["x", "x"])]
    city: String,
    #[cellar(aliases = "x")]
    zip: String,
    #[cellar(skip, default)]
    cache: u32,
}

fn main() {}
