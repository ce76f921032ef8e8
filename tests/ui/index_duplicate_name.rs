use cellar::prelude::*;

// Index names are unique within an entity, struct-level and field-level alike.
#[derive(Entity)]
#[cellar(table = "crm", index(name = "by_email", on(email)), index(name = "by_city", on(city)))]
struct Customer {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "e", index = "by_email", unique)]
    email: String,
    #[cellar(column = "c", index = "by_city")]
    city: String,
}

fn main() {}
