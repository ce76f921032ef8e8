use cellar::prelude::*;

#[derive(Entity)]
#[cellar(table = "t", colour = "red")]
struct Bad {
    #[cellar(key, fixed = 4)]
    id: u64,
    #[cellar(column = "n")]
    name: String,
    #[cellar(column = "n")]
    nickname: String,
    #[cellar(counter)]
    visits: String,
    #[cellar(shiny)]
    other: u8,
}

fn main() {}
