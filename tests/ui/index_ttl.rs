use cellar::prelude::*;

// Cells of a family with a TTL expire without a write: an index cannot follow them.
#[derive(Entity)]
#[cellar(table = "sessions", ttl = 3600, index(name = "by_user", on(user)))]
struct Session {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "u")]
    user: String,
}

#[derive(Entity)]
#[cellar(table = "events", family_options(name = "hot", ttl = 60))]
struct Event {
    #[cellar(key)]
    id: u64,
    #[cellar(family = "hot", column = "k", index = "by_kind")]
    kind: String,
}

// The write token of an indexed row lives in the default family: it may not expire either.
#[derive(Entity)]
#[cellar(table = "visits", ttl = 60, family_options(name = "k"), index(name = "by_page", on(page)))]
struct Visit {
    #[cellar(key)]
    id: u64,
    #[cellar(family = "k", column = "p")]
    page: String,
}

fn main() {}
