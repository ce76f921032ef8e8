use std::collections::{BTreeMap, HashMap};

use cellar::Entity;

#[derive(Entity)]
#[cellar(table = "t")]
struct NotAMap {
    #[cellar(key)]
    id: u64,
    #[cellar(columns(family = "p"))]
    points: HashMap<u16, f64>,
}

#[derive(Entity)]
#[cellar(table = "t")]
struct SharedFamily {
    #[cellar(key)]
    id: u64,
    #[cellar(family = "p")]
    name: String,
    #[cellar(columns(family = "p"))]
    points: BTreeMap<u16, f64>,
    #[cellar(columns(family = "d"))]
    more: BTreeMap<u16, f64>,
}

#[derive(Entity)]
#[cellar(table = "t", index(name = "by_points", on(points)))]
struct Indexed {
    #[cellar(key)]
    id: u64,
    #[cellar(columns(family = "p", lazy), column = "x")]
    points: BTreeMap<u16, f64>,
    #[cellar(columns(prefix = "a", sorted))]
    other: BTreeMap<u16, f64>,
}

#[derive(Entity)]
#[cellar(table = "t")]
struct NoKeyEncoding {
    #[cellar(key)]
    id: u64,
    #[cellar(columns(family = "p"))]
    points: BTreeMap<(u8, u8), f64>,
}

fn main() {}
