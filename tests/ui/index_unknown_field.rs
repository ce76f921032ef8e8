use cellar::prelude::*;

// Every field an index names must exist.
#[derive(Entity)]
#[cellar(table = "crm", index(name = "by_town", on(town), include(mail)))]
struct Customer {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "c")]
    city: String,
    #[cellar(column = "e")]
    email: String,
}

fn main() {}
