use cellar::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct OrderV1 {
    id: u64,
}

#[derive(Serialize, Deserialize)]
struct OrderV2 {
    id: u64,
    currency: String,
}

impl From<OrderV1> for OrderV2 {
    fn from(v: OrderV1) -> Self {
        OrderV2 { id: v.id, currency: "EUR".into() }
    }
}

// Nothing turns an OrderV2 into an Order: the chain is broken after version 2.
#[derive(Serialize, Deserialize, Versioned)]
#[cellar(blob(version = 3, history(1 = OrderV1 via "bincode", 2 = OrderV2)))]
struct Order {
    id: u64,
    currency: String,
    lines: Vec<String>,
}

fn main() {}
