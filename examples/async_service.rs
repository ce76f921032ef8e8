//! An async service on Cellar: request handlers on a tokio runtime of two workers, each
//! request a task that awaits its reads and writes.
//!
//! 2,000 sign-up requests run at once: each puts an account (a unique index on the email
//! checks that nobody holds it), reads it back by key and by email, and counts a visit. Then a
//! report streams every account page by page, stopping early where it has what it needs;
//! and a request that a client abandons is dropped in the middle of its write, as a crash
//! there would stop it — the index still answers what the data says.
//!
//! Carts are aggregates (a cart and its lines, the lines in a table of their own): 200
//! requests add lines to 20 carts at once, ten to a cart, and every line lands; a cart write
//! abandoned midway leaves the cart as one whole version.
//!
//! On the embedded engine, calls run on Cellar's bounded blocking pool, never on the runtime's
//! two workers; on Bigtable they wait on the network without a thread each. Either way the
//! process runs its 2,000 requests on a handful of threads, which the example counts from
//! `/proc/self/status` (on Linux) and asserts.
//!
//! Everything printed is asserted. Run with `cargo run --release --example async_service`; on
//! Bigtable with `CELLAR_BIGTABLE_URL=bigtable://projects/P/instances/I cargo run --release
//! --features bigtable --example async_service` (the emulator: set `BIGTABLE_EMULATOR_HOST`
//! too).

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Waker};

use cellar::orm::store::POOL_THREADS;
use cellar::orm::{Db, Result};
use cellar::prelude::*;
use futures::StreamExt;

/// Requests in flight at once.
const REQUESTS: u32 = 2_000;

/// An account, as the service declares it.
#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "svc_accounts")]
pub struct Account {
    /// The account number.
    #[cellar(key)]
    pub id: u32,
    /// The sign-in email: one account each.
    #[cellar(column = "e", index = "by_email", unique)]
    pub email: String,
    /// The name shown.
    #[cellar(column = "n")]
    pub name: String,
    /// Visits, counted.
    #[cellar(counter, column = "v")]
    pub visits: i64,
}

/// A shopping cart. Its lines have a table of their own (`normalized`), so a change of a cart
/// writes several tables, through the protocol that keeps the cart whole.
#[derive(Aggregate, Debug, Clone, PartialEq)]
#[cellar(table = "svc_carts", strategy = "normalized")]
pub struct Cart {
    /// The account the cart belongs to.
    #[cellar(key)]
    pub account: u32,
    /// Open or checked out.
    #[cellar(column = "s")]
    pub status: String,
    /// What is in it.
    #[cellar(children)]
    pub lines: Vec<CartLine>,
}

/// One line of a cart.
#[derive(Part, Debug, Clone, PartialEq)]
pub struct CartLine {
    /// The product.
    #[cellar(key)]
    pub sku: u32,
    /// How many.
    #[cellar(column = "q")]
    pub qty: u32,
}

/// Carts the cart requests share.
const CARTS: u32 = 20;
/// Cart requests in flight at once.
const CART_REQUESTS: u32 = 200;

fn account(id: u32) -> Account {
    Account { id, email: format!("user{id}@example.com"), name: format!("User {id}"), visits: 0 }
}

/// The threads of this process (Linux); `None` elsewhere.
fn threads() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|n| n.trim().parse().ok())
}

/// One sign-up request: what a handler would run.
async fn sign_up(accounts: &AsyncRepository<Account>, id: u32) -> Result<i64> {
    let new = account(id);
    accounts.put(&new).await?;
    let by_key = accounts.get(id).await?;
    let by_email = accounts.index(Account::BY_EMAIL).get(new.email.clone()).await?;
    assert_eq!(by_key.map(|a| a.id), Some(id));
    assert_eq!(by_email.map(|a| a.id), Some(id));
    accounts.increment(id, Account::VISITS, 1).await
}

/// Runs the service's workload on `db`.
pub fn run(db: &Db) -> Result<()> {
    let accounts = db.repo::<Account>()?.to_async();
    let before = threads();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| cellar::Error::Store(format!("no runtime: {e}")))?;

    let (peak, visits) = runtime.block_on(async {
        let tasks: Vec<_> = (0..REQUESTS)
            .map(|id| {
                let accounts = accounts.clone();
                tokio::spawn(async move { sign_up(&accounts, id).await })
            })
            .collect();
        // The thread count while every request is in flight.
        let peak = threads();
        let mut visits = 0;
        for task in tasks {
            visits += task.await.map_err(|e| cellar::Error::Store(format!("a request panicked: {e}")))??;
        }
        Ok::<_, cellar::Error>((peak, visits))
    })?;
    println!("{REQUESTS} sign-ups on 2 workers: {visits} visits counted");
    assert_eq!(visits, i64::from(REQUESTS));
    if let (Some(before), Some(peak)) = (before, peak) {
        let added = peak.saturating_sub(before);
        println!("threads: {before} before the runtime, {peak} with every request in flight");
        // Two workers, the blocking pool at most, and the Bigtable client's own runtime.
        assert!(added <= 2 + POOL_THREADS + 4, "{added} threads added for {REQUESTS} requests");
    }

    // A report streams the accounts a page at a time; it stops once it has a hundred.
    let report = runtime.block_on(async {
        let mut names = accounts.scan().stream().take(100);
        let mut seen = Vec::new();
        while let Some(account) = names.next().await {
            seen.push(account?.id);
        }
        Ok::<_, cellar::Error>(seen)
    })?;
    println!("report: the first {} accounts, ids {}..={}", report.len(), report[0], report[report.len() - 1]);
    assert_eq!(report, (0..100).collect::<Vec<_>>());
    let total = runtime.block_on(async { accounts.scan().stream().count().await });
    println!("accounts stored: {total}");
    assert_eq!(total, REQUESTS as usize);

    // A client gives up on a request after its first step: the future is dropped mid-write.
    let mut changed = account(7);
    changed.email = "seven@example.com".into();
    {
        let mut abandoned = pin!(accounts.put(&changed));
        let _ = abandoned.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    }
    let by_email = accounts.index(Account::BY_EMAIL);
    let (old, new) = runtime.block_on(async {
        let old = by_email.get("user7@example.com".into()).await?;
        let new = by_email.get("seven@example.com".into()).await?;
        Ok::<_, cellar::Error>((old.map(|a| a.email), new.map(|a| a.email)))
    })?;
    let stored = runtime.block_on(accounts.get(7))?.map(|a| a.email);
    // Whichever way the write went, the index answers what the data row holds.
    assert!(old.is_some() != new.is_some(), "one email finds account 7: {old:?} {new:?}");
    assert_eq!(old.or(new), stored);
    println!("an abandoned write: the index finds account 7 by the email its row holds");
    carts(db, &runtime)
}

/// The cart requests: lines added to shared carts at once, and a cart write abandoned midway.
fn carts(db: &Db, runtime: &tokio::runtime::Runtime) -> Result<()> {
    let carts = db.aggregates::<Cart>()?.to_async();
    let added = runtime.block_on(async {
        for account in 0..CARTS {
            carts.put(&Cart { account, status: "open".into(), lines: Vec::new() }).await?;
        }
        // Ten requests per cart, each adding a line of its own: they take turns, none is lost.
        let tasks: Vec<_> = (0..CART_REQUESTS)
            .map(|n| {
                let carts = carts.clone();
                tokio::spawn(async move {
                    let line = CartLine { sku: 1_000 + n, qty: 1 + n % 3 };
                    carts.children(n % CARTS, Cart::LINES).put(&line).await
                })
            })
            .collect();
        for task in tasks {
            task.await.map_err(|e| cellar::Error::Store(format!("a request panicked: {e}")))??;
        }
        let mut lines = 0;
        let mut stream = carts.scan().stream();
        while let Some(cart) = stream.next().await {
            let cart = cart?;
            assert_eq!(cart.lines.len() as u32, CART_REQUESTS / CARTS, "cart {}", cart.account);
            lines += cart.lines.len();
        }
        Ok::<_, cellar::Error>(lines)
    })?;
    println!("{CART_REQUESTS} cart requests on {CARTS} carts: {added} lines added");
    assert_eq!(added, CART_REQUESTS as usize);

    // A checkout abandoned by its client: the task is stopped after a few of its steps.
    let before = runtime.block_on(carts.get(3))?.expect("cart 3 is stored");
    let checked_out = Cart { status: "checked out".into(), lines: vec![CartLine { sku: 1, qty: 1 }], ..before.clone() };
    runtime.block_on(async {
        let task = tokio::spawn({
            let (carts, cart) = (carts.clone(), checked_out.clone());
            async move { carts.put(&cart).await }
        });
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        task.abort();
        let _ = task.await;
    });
    let after = runtime.block_on(carts.get(3))?;
    assert!(after == Some(before) || after == Some(checked_out), "cart 3 is one whole version: {after:?}");
    println!("an abandoned cart write: cart 3 reads as one whole version");
    Ok(())
}

/// Runs on the embedded engine, or on Bigtable when `CELLAR_BIGTABLE_URL` names an instance
/// (feature `bigtable`).
pub fn main() -> Result<()> {
    #[cfg(feature = "bigtable")]
    let db = match std::env::var("CELLAR_BIGTABLE_URL") {
        Ok(url) => Db::connect(&url)?,
        Err(_) => Db::open_temporary()?,
    };
    #[cfg(not(feature = "bigtable"))]
    let db = Db::open_temporary()?;
    run(&db)?;
    println!("async_service: ok");
    Ok(())
}
