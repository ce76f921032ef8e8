//! `#[cellar(crate = "...")]`: every derive, expanded inside this crate, where `::cellar` does
//! not resolve, so a path the attribute did not reach fails to compile.

use serde::{Deserialize, Serialize};

use crate::orm::{Db, Entity as _};
use crate::{Aggregate, Entity, Part, Record, Versioned};

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(crate = "crate", table = "people")]
struct Person {
    #[cellar(partition)]
    team: String,
    #[cellar(key, hash = "md5")]
    id: String,
    #[cellar(index = "by_name")]
    name: String,
    #[cellar(counter)]
    visits: i64,
    #[cellar(serde)]
    tags: Option<Vec<String>>,
    #[cellar(blob)]
    card: Card,
    #[cellar(default)]
    age: u32,
    #[cellar(columns(family = "m"))]
    marks: std::collections::BTreeMap<u32, String>,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(crate = "crate", table = "people", record_type = 2)]
struct Pet {
    #[cellar(partition)]
    team: String,
    #[cellar(key)]
    name: String,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(crate = "crate", table = "people", record_type = 3)]
struct Badge {
    #[cellar(partition)]
    team: String,
    #[cellar(key)]
    n: u32,
}

#[derive(Record, Debug)]
#[cellar(crate = "crate")]
enum TeamRow {
    Pet(Pet),
    Badge(Badge),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CardV1 {
    text: String,
}

#[derive(Versioned, Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cellar(crate = "crate", blob(version = 2, history(1 = CardV1)))]
struct Card {
    text: String,
    stars: u8,
}

impl From<CardV1> for Card {
    fn from(v: CardV1) -> Card {
        Card { text: v.text, stars: 0 }
    }
}

#[derive(Aggregate, Debug, Clone, PartialEq)]
#[cellar(crate = "crate", table = "orders")]
struct Order {
    #[cellar(key)]
    id: u64,
    #[cellar(children)]
    lines: Vec<Line>,
}

#[derive(Part, Debug, Clone, PartialEq)]
#[cellar(crate = "crate")]
struct Line {
    #[cellar(key)]
    n: u16,
    sku: String,
}

#[test]
fn every_derive_takes_the_path_to_cellar() -> crate::Result<()> {
    let db = Db::open_temporary()?;
    let people = db.repo::<Person>()?;
    let ada = Person {
        team: "core".into(),
        id: "p1".into(),
        name: "Ada".into(),
        visits: 0,
        tags: Some(vec!["x".into()]),
        card: Card { text: "hi".into(), stars: 5 },
        age: 36,
        marks: [(1, "a".to_string())].into(),
    };
    people.put(&ada)?;
    assert_eq!(people.get(ada.key())?, Some(ada.clone()));
    assert_eq!(Person::SCHEMA.indexes.len(), 1);

    let pets = db.repo::<Pet>()?;
    let rex = Pet { team: "core".into(), name: "Rex".into() };
    pets.put(&rex)?;
    assert_eq!(<TeamRow as crate::orm::Record>::MEMBERS.len(), 2);
    match TeamRow::from(rex) {
        TeamRow::Pet(pet) => assert_eq!(pet.name, "Rex"),
        TeamRow::Badge(badge) => panic!("a pet read as badge {}", badge.n),
    }

    let orders = db.aggregates::<Order>()?;
    let order = Order { id: 7, lines: vec![Line { n: 1, sku: "a".into() }] };
    orders.put(&order)?;
    assert_eq!(orders.get(7)?, Some(order));
    Ok(())
}
