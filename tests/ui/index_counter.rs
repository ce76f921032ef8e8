use cellar::prelude::*;

// A counter changes by increment, without a read: no index can follow it.
#[derive(Entity)]
#[cellar(table = "crm", index(name = "by_city", on(city), include(orders)))]
struct Customer {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "c")]
    city: String,
    #[cellar(counter, column = "o")]
    orders: i64,
    #[cellar(counter, column = "v", index = "by_visits")]
    visits: i64,
}

fn main() {}
