//! An indexed entity for the index tests: a unique email, a composite index on city and age
//! that copies the name (covered reads), and a sparse index on an optional tag.

use cellar::prelude::*;

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "people", index(name = "by_city_age", on(city, age), include(name)))]
pub struct Person {
    #[cellar(key)]
    pub id: u32,
    #[cellar(column = "n")]
    pub name: String,
    #[cellar(column = "e", index = "by_email", unique)]
    pub email: String,
    #[cellar(column = "c")]
    pub city: String,
    #[cellar(column = "a")]
    pub age: u8,
    #[cellar(column = "t", index = "by_tag")]
    pub tag: Option<String>,
    #[cellar(version)]
    pub version: u64,
}

/// A person with fields derived from a few small numbers (values collide on purpose).
pub fn person(id: u32, email: u8, city: u8, age: u8, tag: Option<u8>) -> Person {
    Person {
        id,
        name: format!("person {id}.{age}"),
        email: format!("p{email}@example.com"),
        city: ["Oslo", "Lima", "Pune"][usize::from(city) % 3].to_string(),
        age,
        tag: tag.map(|t| format!("t{t}")),
        version: 0,
    }
}
