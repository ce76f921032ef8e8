use cellar::prelude::*;

#[derive(Entity)]
#[cellar(table = "t", record_type = 1)]
struct A {
    #[cellar(partition)]
    id: u64,
}

#[derive(Record)]
enum Shapes {
    Unit,
    Two(A, A),
    Named { a: A },
}

#[derive(Record)]
struct NotAnEnum(A);

fn main() {}
