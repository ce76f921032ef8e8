//! 2,000 asynchronous calls in flight at once on the Bigtable backend (the emulator), from a
//! tokio runtime of two workers: 2,000 puts of an entity with a unique index, then 2,000 gets,
//! each a task of its own. Every call succeeds, every get answers what was put, and the
//! process runs them on a handful of threads — the calls wait on the network, not on a thread
//! each. A test binary of its own, so that no other test's threads are counted.

mod common;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cellar::prelude::*;
use common::backend::bigtable_store;

/// Calls in flight at once.
const CALLERS: u32 = 2_000;
/// The most threads the process may run while they are.
const MAX_THREADS: usize = 16;

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "load_accounts")]
struct Account {
    #[cellar(key)]
    id: u32,
    #[cellar(column = "e", index = "by_email", unique)]
    email: String,
    #[cellar(column = "n")]
    name: String,
}

fn account(id: u32) -> Account {
    Account { id, email: format!("user{id}@example.com"), name: format!("User {id}") }
}

/// The process's threads now, from `/proc/self/status`.
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("a Threads: line")
}

/// What one phase saw.
#[derive(Debug)]
struct Phase<T> {
    answers: Vec<T>,
    /// The most calls started and not yet answered at once.
    peak_in_flight: usize,
    /// The process's threads when the calls in flight first reached each of [`MARKS`].
    at_marks: Vec<(usize, usize)>,
    /// The most threads seen at any point of the phase (sampled every millisecond).
    max_threads: usize,
    took: Duration,
}

/// Calls in flight at which the process's threads are read: nine in ten of them, and all.
/// A call or two may answer before the last has started, so the first is the one a phase is
/// sure to reach.
const MARKS: [usize; 2] = [CALLERS as usize * 9 / 10, CALLERS as usize];

/// Calls started (polled once, and waiting) and not yet answered.
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    peak: AtomicUsize,
    /// `(calls in flight, threads)` at each of [`MARKS`] reached.
    at_marks: Mutex<Vec<(usize, usize)>>,
}

impl InFlight {
    /// Runs `call`, counted in flight from its first poll that does not answer until it
    /// answers.
    async fn track<T>(&self, call: impl Future<Output = T>) -> T {
        let mut call = Box::pin(call);
        let mut started = false;
        let answer = std::future::poll_fn(|cx| {
            let polled = call.as_mut().poll(cx);
            if polled.is_pending() && !started {
                started = true;
                let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
                // A mark is reached once: the count passes it going up at most once per call.
                if MARKS.contains(&now) && self.peak.load(Ordering::SeqCst) < now {
                    self.at_marks.lock().unwrap().push((now, threads()));
                }
                self.peak.fetch_max(now, Ordering::SeqCst);
            }
            polled
        })
        .await;
        if started {
            self.now.fetch_sub(1, Ordering::SeqCst);
        }
        answer
    }
}

/// `CALLERS` tasks on `runtime`, each running `call(id)` once all are spawned; the threads are
/// sampled while they run.
fn phase<T, F>(runtime: &tokio::runtime::Runtime, call: impl Fn(u32) -> F) -> Phase<T>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let in_flight = Arc::new(InFlight::default());
    // Every task waits for the last one to be spawned, so that the calls start together.
    let gate = Arc::new(tokio::sync::Barrier::new(CALLERS as usize));
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..CALLERS)
        .map(|id| {
            let (in_flight, gate, done, call) = (in_flight.clone(), gate.clone(), done.clone(), call(id));
            runtime.spawn(async move {
                gate.wait().await;
                let answer = in_flight.track(call).await;
                done.fetch_add(1, Ordering::SeqCst);
                answer
            })
        })
        .collect();
    let mut max_threads = threads();
    while done.load(Ordering::SeqCst) < CALLERS as usize {
        std::thread::sleep(Duration::from_millis(1));
        max_threads = max_threads.max(threads());
    }
    let answers = runtime.block_on(async {
        let mut answers = Vec::with_capacity(tasks.len());
        for task in tasks {
            answers.push(task.await.expect("a task panicked"));
        }
        answers
    });
    let at_marks = std::mem::take(&mut *in_flight.at_marks.lock().unwrap());
    Phase {
        answers,
        peak_in_flight: in_flight.peak.load(Ordering::SeqCst),
        at_marks,
        max_threads,
        took: started.elapsed(),
    }
}

/// Prints what a phase saw and checks that its calls were in flight together, on at most
/// [`MAX_THREADS`] threads.
fn check_threads<T>(name: &str, phase: &Phase<T>) {
    let marks: Vec<String> = phase.at_marks.iter().map(|(n, t)| format!("{t} threads with {n} in flight")).collect();
    println!(
        "{name}: {CALLERS} calls in {:.2?}, at most {} in flight at once; {}; at most {} threads during the phase",
        phase.took,
        phase.peak_in_flight,
        marks.join(", "),
        phase.max_threads
    );
    assert!(
        phase.peak_in_flight >= MARKS[0],
        "{name}: only {} of {CALLERS} calls were in flight at once",
        phase.peak_in_flight
    );
    for &(n, t) in &phase.at_marks {
        assert!(t <= MAX_THREADS, "{name}: {t} threads with {n} calls in flight (at most {MAX_THREADS})");
    }
    assert!(
        phase.max_threads <= MAX_THREADS,
        "{name}: {} threads for {CALLERS} calls (at most {MAX_THREADS})",
        phase.max_threads
    );
}

#[test]
fn two_thousand_async_calls_in_flight_run_on_a_handful_of_threads() {
    let Some(store) = bigtable_store() else { return };
    let db = Db::with_store(Arc::new(store));
    let accounts = db.repo::<Account>().expect("the table").to_async();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().expect("a runtime");
    println!("{} threads before the calls", threads());

    let puts = phase(&runtime, |id| {
        let accounts = accounts.clone();
        async move { accounts.put(&account(id)).await }
    });
    check_threads("puts", &puts);
    for (id, put) in puts.answers.iter().enumerate() {
        assert!(put.is_ok(), "put {id}: {put:?}");
    }

    let gets = phase(&runtime, |id| {
        let accounts = accounts.clone();
        async move { accounts.get(id).await }
    });
    check_threads("gets", &gets);
    for (id, got) in (0..CALLERS).zip(gets.answers) {
        assert_eq!(got.expect("a get"), Some(account(id)), "get {id}");
    }

    // The unique index answers for every account too (one task, a few at a time).
    let by_email = accounts.index(Account::BY_EMAIL);
    let found = runtime.block_on(async {
        let mut found = Vec::new();
        for id in (0..CALLERS).step_by(97) {
            found.push((id, by_email.get(account(id).email).await.expect("an index get")));
        }
        found
    });
    for (id, account_found) in found {
        assert_eq!(account_found, Some(account(id)), "by_email of {id}");
    }
}
