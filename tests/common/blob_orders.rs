//! Versioned types shared by the blob tests: an order document with three versions
//! (`document`), a `blob` aggregate with two (`aggregate`), and a note whose first version was
//! a headerless `serde` column (`note`).

/// An order document: v1 in bincode, v2 added the currency, v3 (current, MessagePack with
/// zstd) keeps lines instead of a total and refuses currencies that are not ISO codes.
pub mod document {
    use cellar::prelude::*;
    use serde::{Deserialize, Serialize};

    /// As first shipped (bincode).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct OrderV1 {
        pub id: u64,
        pub customer: String,
        pub total_cents: i64,
    }

    /// Version 2 added the currency (MessagePack).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct OrderV2 {
        pub id: u64,
        pub customer: String,
        pub total_cents: i64,
        pub currency: String,
    }

    /// The current order (version 3).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Versioned)]
    #[cellar(blob(version = 3, codec = "msgpack", compress = "zstd", history(1 = OrderV1 via "bincode", 2 = OrderV2)))]
    pub struct Order {
        pub id: u64,
        pub customer: String,
        pub currency: String,
        pub lines: Vec<(String, u32, i64)>,
    }

    impl From<OrderV1> for OrderV2 {
        fn from(v: OrderV1) -> Self {
            // Everything sold before version 2 was in euros.
            OrderV2 { id: v.id, customer: v.customer, total_cents: v.total_cents, currency: "EUR".into() }
        }
    }

    impl TryFrom<OrderV2> for Order {
        type Error = String;

        fn try_from(v: OrderV2) -> Result<Self, String> {
            if v.currency.len() != 3 {
                return Err(format!("order {} has currency {:?}, not an ISO code", v.id, v.currency));
            }
            Ok(Order {
                id: v.id,
                customer: v.customer,
                currency: v.currency,
                lines: vec![("total".into(), 1, v.total_cents)],
            })
        }
    }
}

/// A `blob` aggregate that declares its versions: v1 was a flat list of skus in bincode.
pub mod aggregate {
    use cellar::prelude::*;
    use serde::{Deserialize, Serialize};

    /// The order as first shipped.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct OrderV1 {
        pub customer: u64,
        pub order_no: u64,
        pub skus: Vec<String>,
    }

    #[derive(Aggregate, Versioned, Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[cellar(table = "vorders", strategy = "blob", blob(version = 2, codec = "msgpack", history(1 = OrderV1 via "bincode")))]
    pub struct Order {
        #[cellar(partition)]
        pub customer: u64,
        #[cellar(key)]
        pub order_no: u64,
        #[cellar(column = "s")]
        pub status: String,
        #[cellar(children)]
        pub lines: Vec<Line>,
    }

    #[derive(Part, Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Line {
        #[cellar(key)]
        pub n: u16,
        #[cellar(column = "k")]
        pub sku: String,
    }

    impl From<OrderV1> for Order {
        fn from(v: OrderV1) -> Self {
            let lines = (1..).zip(v.skus).map(|(n, sku)| Line { n, sku }).collect();
            Order { customer: v.customer, order_no: v.order_no, status: "migrated".into(), lines }
        }
    }
}

/// A note whose first version was a plain MessagePack column, before blobs had headers.
pub mod note {
    use cellar::prelude::*;
    use serde::{Deserialize, Serialize};

    /// As first stored: a `#[cellar(serde)]` column.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct NoteV1 {
        pub text: String,
    }

    /// The note now: versioned, its first version the headerless column.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Versioned)]
    #[cellar(blob(version = 2, legacy = 1, history(1 = NoteV1)))]
    pub struct Note {
        pub text: String,
        pub pinned: bool,
    }

    impl From<NoteV1> for Note {
        fn from(v: NoteV1) -> Self {
            Note { text: v.text, pinned: false }
        }
    }
}
