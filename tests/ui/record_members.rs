use cellar::prelude::*;

#[derive(Entity)]
#[cellar(table = "crm", record_type = 1)]
struct Customer {
    #[cellar(partition)]
    id: u64,
}

#[derive(Entity)]
#[cellar(table = "sales", record_type = 2)]
struct Order {
    #[cellar(partition)]
    customer: u64,
    #[cellar(key)]
    number: u32,
}

#[derive(Entity)]
#[cellar(table = "crm", record_type = 1)]
struct Invoice {
    #[cellar(partition)]
    customer: u64,
    #[cellar(key)]
    number: u32,
}

#[derive(Entity)]
#[cellar(table = "crm", record_type = 3)]
struct Visit {
    #[cellar(partition)]
    customer: String,
    #[cellar(key)]
    at: u64,
}

#[derive(Record)]
enum OtherTable {
    Customer(Customer),
    Order(Order),
}

#[derive(Record)]
enum SameRecordType {
    Customer(Customer),
    Invoice(Invoice),
}

#[derive(Record)]
enum OtherPartition {
    Customer(Customer),
    Visit(Visit),
}

fn main() {}
