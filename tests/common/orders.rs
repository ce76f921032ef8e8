//! The seeds' order aggregate — Order → ShippingLocation → LineItem — declared once per
//! storage strategy, with identical fields, for tests that run every strategy.

/// Declares `Order`, `ShippingLocation` and `LineItem` in a module per strategy.
macro_rules! order_types {
    ($module:ident, $strategy:literal, $table:literal) => {
        pub mod $module {
            use cellar::prelude::*;

            #[derive(Aggregate, Debug, Clone, PartialEq)]
            #[cellar(table = $table, strategy = $strategy)]
            pub struct Order {
                #[cellar(partition)]
                pub customer: u64,
                #[cellar(key)]
                pub order_no: u64,
                #[cellar(column = "s")]
                pub status: String,
                #[cellar(column = "n")]
                pub note: Option<String>,
                #[cellar(children)]
                pub ship_to: Vec<ShippingLocation>,
            }

            #[derive(Part, Debug, Clone, PartialEq)]
            pub struct ShippingLocation {
                #[cellar(key)]
                pub loc: u16,
                #[cellar(column = "l1")]
                pub line1: String,
                #[cellar(column = "c")]
                pub city: String,
                #[cellar(column = "z")]
                pub zip: String,
                #[cellar(children)]
                pub items: Vec<LineItem>,
            }

            #[derive(Part, Debug, Clone, PartialEq)]
            pub struct LineItem {
                #[cellar(key)]
                pub line: u16,
                #[cellar(column = "k")]
                pub sku: String,
                #[cellar(column = "q")]
                pub qty: u32,
                #[cellar(column = "p")]
                pub price_cents: i64,
            }
        }
    };
}

order_types!(normalized, "normalized", "orders_n");
order_types!(single_table, "single_table", "orders_s");
order_types!(denormalized, "denormalized", "orders_d");
order_types!(blob, "blob", "orders_b");

/// Runs `$body` once per strategy with `$m` naming the strategy's module.
#[allow(unused_macros)]
macro_rules! for_each_strategy {
    (|$m:ident| $body:block) => {{
        {
            use $crate::common::orders::normalized as $m;
            $body
        }
        {
            use $crate::common::orders::single_table as $m;
            $body
        }
        {
            use $crate::common::orders::denormalized as $m;
            $body
        }
        {
            use $crate::common::orders::blob as $m;
            $body
        }
    }};
}
#[allow(unused_imports)]
pub(crate) use for_each_strategy;
