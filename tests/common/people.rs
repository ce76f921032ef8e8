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

/// Every index query answers what the data rows imply.
pub fn check_index_queries(people: &Repository<Person>, context: &str) {
    let stored = people.scan().to_vec().unwrap();
    for email in 0..20u8 {
        let email = person(0, email, 0, 0, None).email;
        let want = stored.iter().find(|p| p.email == email).map(|p| p.id);
        let got = people.index(Person::BY_EMAIL).get(email.clone()).unwrap().map(|p| p.id);
        assert_eq!(got, want, "{context}: by_email {email}");
    }
    for city in ["Oslo", "Lima", "Pune"] {
        let mut want: Vec<&Person> = stored.iter().filter(|p| p.city == city).collect();
        want.sort_by_key(|p| (p.age, p.id));
        let want: Vec<u32> = want.iter().map(|p| p.id).collect();
        let by_city = people.index(Person::BY_CITY_AGE);
        let keys: Vec<u32> =
            by_city.scan().prefix((city.to_string(),)).keys().unwrap().into_iter().map(|k| k.id).collect();
        assert_eq!(keys, want, "{context}: by_city_age keys {city}");
        let got: Vec<u32> = by_city.scan().prefix((city.to_string(),)).to_vec().unwrap().iter().map(|p| p.id).collect();
        assert_eq!(got, want, "{context}: by_city_age {city}");
        // Covered reads answer from the index rows' copies: they must be the data's.
        for entry in by_city.scan().prefix((city.to_string(),)).entries().unwrap() {
            let data = stored.iter().find(|p| p.id == entry.key.id).expect("a key the scan returned");
            let copies = (entry.get::<String>("city").unwrap(), entry.get::<u8>("age").unwrap());
            assert_eq!(copies, (data.city.clone(), data.age), "{context}: by_city_age copies of {}", data.id);
            assert_eq!(entry.get::<String>("name").unwrap(), data.name, "{context}: by_city_age copies");
        }
    }
    for tag in ["t0", "t1"] {
        let want: Vec<u32> = stored.iter().filter(|p| p.tag.as_deref() == Some(tag)).map(|p| p.id).collect();
        let got: Vec<u32> = people
            .index(Person::BY_TAG)
            .scan()
            .prefix(tag.to_string())
            .keys()
            .unwrap()
            .into_iter()
            .map(|k| k.id)
            .collect();
        assert_eq!(got, want, "{context}: by_tag {tag}");
    }
}

/// Verifies the three indexes of [`Person`]: nothing but unverified entries (left by writes a
/// crash or fault cut short) may be found. Returns how many of those there were.
pub fn verify_only_leftovers(people: &Repository<Person>, context: &str) -> u64 {
    let mut leftovers = 0;
    for index in [
        people.verify_index(Person::BY_EMAIL),
        people.verify_index(Person::BY_CITY_AGE),
        people.verify_index(Person::BY_TAG),
    ] {
        let report = index.run().unwrap();
        assert_eq!(
            (report.missing, report.outdated, report.stale, report.violations),
            (0, 0, 0, 0),
            "{context}: only unverified leftovers may remain\n{report}"
        );
        leftovers += report.unverified;
    }
    leftovers
}

/// Repairs the three indexes of [`Person`].
pub fn repair_indexes(people: &Repository<Person>) {
    for index in [
        people.verify_index(Person::BY_EMAIL).repair(),
        people.verify_index(Person::BY_CITY_AGE).repair(),
        people.verify_index(Person::BY_TAG).repair(),
    ] {
        index.run().unwrap();
    }
}

/// Asserts that verification of the three indexes of [`Person`] finds nothing.
pub fn assert_indexes_clean(people: &Repository<Person>, context: &str) {
    for index in [
        people.verify_index(Person::BY_EMAIL),
        people.verify_index(Person::BY_CITY_AGE),
        people.verify_index(Person::BY_TAG),
    ] {
        let report = index.run().unwrap();
        assert!(report.is_clean(), "{context}: after repair\n{report}");
    }
}
