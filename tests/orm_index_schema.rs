//! What `#[derive(Entity)]` generates for secondary indexes: the index specs in the schema,
//! a typed constant per index, encoders from stored cells to index parts, and keys decoded
//! from row keys alone.

use bytes::Bytes;
use cellar::orm::index::{encode_optional, Index};
use cellar::orm::key::{encode_part, Form, Modifier, PartSpec};
use cellar::orm::store::{Row, StoredCell};
use cellar::orm::value::Column;
use cellar::prelude::*;

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "crm", index(name = "by_city_name", on(city, name(desc)), include(email)))]
struct Customer {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "n")]
    name: String,
    #[cellar(column = "e", index = "by_email", unique)]
    email: String,
    #[cellar(column = "c")]
    city: String,
    #[cellar(column = "p", index = "by_phone")]
    phone: Option<String>,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "files", record_type = 2)]
struct File {
    #[cellar(partition, hash = "md5", column = "o")]
    owner: String,
    #[cellar(key)]
    name: String,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "tickets", index(name = "by_all", on(code, opened(desc), priority, tag(hash = "md5"))))]
struct Ticket {
    #[cellar(key)]
    id: u64,
    #[cellar(column = "k", fixed = 4)]
    code: String,
    #[cellar(column = "o")]
    opened: Timestamp,
    #[cellar(column = "p")]
    priority: Option<u8>,
    #[cellar(column = "t")]
    tag: String,
    #[cellar(column = "r", fixed = 3, index = "by_region")]
    region: Option<String>,
}

#[test]
fn the_schema_lists_struct_level_indexes_then_field_level_ones() {
    let indexes = Customer::SCHEMA.indexes;
    let names: Vec<&str> = indexes.iter().map(|i| i.name).collect();
    assert_eq!(names, ["by_city_name", "by_email", "by_phone"]);

    // Columns in field order: name 0, email 1, city 2, phone 3.
    let by_city_name = &indexes[0];
    let fields: Vec<(&str, usize)> = by_city_name.parts.iter().map(|p| (p.field, p.column)).collect();
    assert_eq!(fields, [("city", 2), ("name", 0)]);
    assert_eq!(by_city_name.parts[0].spec, PartSpec::new("city", Form::Delimited));
    assert_eq!(by_city_name.parts[1].spec, PartSpec::new("name", Form::Delimited).with(Modifier::Desc));
    assert_eq!(by_city_name.parts[1].type_name, "String");
    assert!(!by_city_name.unique);
    assert_eq!(by_city_name.include, [1]);

    let by_email = &indexes[1];
    assert_eq!((by_email.parts.len(), by_email.parts[0].field, by_email.parts[0].column), (1, "email", 1));
    assert!(by_email.unique);
    assert!(by_email.include.is_empty());

    let by_phone = &indexes[2];
    assert_eq!((by_phone.parts[0].field, by_phone.parts[0].column), ("phone", 3));
    assert_eq!(by_phone.parts[0].type_name, "Option<String>");
    assert_eq!(by_phone.parts[0].spec.modifier, Modifier::None);
    assert!(!by_phone.unique);

    assert!(File::SCHEMA.indexes.is_empty());
}

#[test]
fn parts_take_fixed_widths_and_modifiers_and_up_to_four_fields() {
    let _: Index<Ticket, (String, Timestamp, u8, String)> = Ticket::BY_ALL;
    let specs: Vec<PartSpec> = Ticket::BY_ALL.spec().parts.iter().map(|p| p.spec).collect();
    assert_eq!(
        specs,
        [
            PartSpec::new("code", Form::Fixed(4)),
            PartSpec::new("opened", Form::Delimited).with(Modifier::Desc),
            PartSpec::new("priority", Form::Delimited),
            PartSpec::new("tag", Form::Delimited).with(Modifier::Md5),
        ]
    );
    let code = &Ticket::BY_ALL.spec().parts[0];
    let mut out = Vec::new();
    assert_eq!((code.encode)(Some(b"AB"), &code.spec, &mut out), Ok(true));
    assert_eq!(out, b"AB\0\0");
    assert!((code.encode)(Some(b"ABCDE"), &code.spec, &mut out).is_err());
    let region = &Ticket::BY_REGION.spec().parts[0];
    assert_eq!(region.spec, PartSpec::new("region", Form::Fixed(3)));
}

#[test]
fn each_index_has_a_typed_constant() {
    assert_eq!(Customer::BY_EMAIL.spec().name, "by_email");
    assert_eq!(Customer::BY_CITY_NAME.spec().name, "by_city_name");
    assert_eq!(Customer::BY_PHONE.spec().name, "by_phone");
    let _: Index<Customer, (String, String)> = Customer::BY_CITY_NAME;
    let _: Index<Customer, String> = Customer::BY_EMAIL;
    // An optional field is indexed by the type inside the `Option`.
    let _: Index<Customer, String> = Customer::BY_PHONE;
}

#[test]
fn encoders_turn_stored_cells_into_index_parts() {
    for part in Customer::BY_CITY_NAME.spec().parts {
        let mut out = Vec::new();
        assert_eq!((part.encode)(Some(b"Oslo"), &part.spec, &mut out), Ok(true));
        let mut expected = Vec::new();
        encode_part(&"Oslo".to_string(), &part.spec, &mut expected).unwrap();
        assert_eq!(out, expected, "{}", part.field);
    }
    // `name` is descending: its encoding differs from `city`'s.
    let parts = Customer::BY_CITY_NAME.spec().parts;
    let (mut asc, mut desc) = (Vec::new(), Vec::new());
    (parts[0].encode)(Some(b"Oslo"), &parts[0].spec, &mut asc).unwrap();
    (parts[1].encode)(Some(b"Oslo"), &parts[1].spec, &mut desc).unwrap();
    assert_ne!(asc, desc);

    // A required field's missing cell is an error; an optional one's is not indexed.
    let email = &Customer::BY_EMAIL.spec().parts[0];
    assert!((email.encode)(None, &email.spec, &mut Vec::new()).is_err());
    let phone = &Customer::BY_PHONE.spec().parts[0];
    let mut out = Vec::new();
    assert_eq!((phone.encode)(None, &phone.spec, &mut out), Ok(false));
    assert!(out.is_empty());
    assert_eq!(encode_optional::<String>(None, &phone.spec, &mut out), Ok(false));
    let cell = Some("+47 555".to_string()).encode_cell().unwrap();
    assert_eq!((phone.encode)(Some(&cell), &phone.spec, &mut out), Ok(true));
    let mut expected = Vec::new();
    encode_part(&"+47 555".to_string(), &phone.spec, &mut expected).unwrap();
    assert_eq!(out, expected);
}

#[test]
fn keys_decode_from_rows() {
    let bare = |key: &[u8]| Row { key: Bytes::copy_from_slice(key), cells: Vec::new() };
    let row_key = Customer::row_key(&CustomerKey { id: 7 }).unwrap().for_write();
    assert_eq!(Customer::key_from_row(&bare(&row_key)), Ok(CustomerKey { id: 7 }));
    assert!(Customer::key_from_row(&bare(&row_key[..3])).is_err());

    // A hashed key part's value comes from its column, checked against the digest.
    let key = FileKey { owner: "ada".into(), name: "notes.txt".into() };
    let row_key = File::row_key(&key).unwrap().for_write();
    let owner = |value: &str| StoredCell {
        family: Bytes::from_static(b"d"),
        qualifier: Bytes::from_static(b"o"),
        timestamp: 1,
        value: Bytes::copy_from_slice(value.as_bytes()),
    };
    let with_owner = |value: &str| Row { key: row_key.clone(), cells: vec![owner(value)] };
    assert_eq!(File::key_from_row(&with_owner("ada")), Ok(key));
    let err = File::key_from_row(&bare(&row_key)).unwrap_err();
    assert_eq!(err.column.as_deref(), Some("d:o"), "{err:?}");
    assert!(File::key_from_row(&with_owner("bob")).is_err(), "the digest does not match");
    // A row of another record type is told as such.
    let mut other = row_key.to_vec();
    other[16] = 3;
    assert!(File::key_from_row(&bare(&other)).unwrap_err().other_record_type);
}

#[test]
fn layouts_list_the_indexes() {
    let layout = Customer::layout().to_string();
    let tail = &layout[layout.find("indexes").expect("an indexes section")..];
    assert_eq!(
        tail,
        "indexes (table `crm_idx`):\n  by_city_name  on (city, name desc), includes (email)\n  by_email  on (email), unique\n  by_phone  on (phone)\n"
    );
}
