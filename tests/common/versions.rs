//! Versions of one order aggregate whose shape and values all follow from a version number,
//! so a reader can tell a whole version from a torn one.

/// Declares `version(m, customer, order_no, v) -> m::Order` and `version_of(&m::Order) -> Option<u64>`
/// (the version if the order is exactly one).
macro_rules! versions {
    ($m:ident) => {
        pub mod $m {
            use $crate::common::orders::$m::*;

            /// Version `v` of order (customer, order_no): 1–3 locations of 0–3 lines; every
            /// location's city and every line's quantity name the version.
            pub fn version(customer: u64, order_no: u64, v: u64) -> Order {
                let locations = 1 + (v % 3) as u16;
                let mut line = 0u16;
                Order {
                    customer,
                    order_no,
                    status: format!("v{v}"),
                    note: (v % 2 == 0).then(|| format!("note {v}")),
                    ship_to: (1..=locations)
                        .map(|loc| ShippingLocation {
                            loc,
                            line1: format!("{loc} Main St"),
                            city: format!("city-v{v}"),
                            zip: format!("{v:05}"),
                            items: (0..(v + u64::from(loc)) % 4)
                                .map(|_| {
                                    line += 1;
                                    LineItem { line, sku: format!("sku-{line}"), qty: v as u32, price_cents: v as i64 }
                                })
                                .collect(),
                        })
                        .collect(),
                }
            }

            /// The version `order` is, if it is exactly one of them.
            pub fn version_of(order: &Order) -> Option<u64> {
                let v: u64 = order.status.strip_prefix('v')?.parse().ok()?;
                (version(order.customer, order.order_no, v) == *order).then_some(v)
            }
        }
    };
}

versions!(normalized);
versions!(single_table);
versions!(denormalized);
versions!(blob);

/// Runs `$body` with `$repo` the aggregate repository of strategy number `$s` (0 normalized,
/// 1 single-table, 2 denormalized, 3 blob) on `$db`, and `$v` that strategy's versions module.
#[allow(unused_macros)]
macro_rules! with_strategy {
    ($db:expr, $s:expr, |$repo:ident, $v:ident| $body:block) => {
        match $s {
            0 => {
                use $crate::common::versions::normalized as $v;
                let $repo = $db.aggregates::<$crate::common::orders::normalized::Order>().unwrap();
                $body
            }
            1 => {
                use $crate::common::versions::single_table as $v;
                let $repo = $db.aggregates::<$crate::common::orders::single_table::Order>().unwrap();
                $body
            }
            2 => {
                use $crate::common::versions::denormalized as $v;
                let $repo = $db.aggregates::<$crate::common::orders::denormalized::Order>().unwrap();
                $body
            }
            _ => {
                use $crate::common::versions::blob as $v;
                let $repo = $db.aggregates::<$crate::common::orders::blob::Order>().unwrap();
                $body
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use with_strategy;
