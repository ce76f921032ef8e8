//! A TCP proxy that breaks connections on purpose: it forwards bytes between a client and a
//! server and, once armed, cuts every open connection after the server has sent a given number
//! of bytes more. What a network failure, a restarted front end or a dropped stream looks like
//! to a gRPC client. It can also hold what the client sends until released: a request that
//! was built, then reached the server late. It counts the connections clients open and close,
//! and what each one carried.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

#[derive(Default)]
struct State {
    /// Server-to-client bytes left before the cut; negative when disarmed.
    budget: AtomicI64,
    /// Connections cut so far.
    cuts: AtomicU64,
    /// Open connections, to cut them all at once.
    open: Mutex<Vec<TcpStream>>,
    stopped: AtomicBool,
    /// Client-to-server bytes wait while set.
    holding: AtomicBool,
    /// Reads from clients that waited on the hold.
    held: AtomicU64,
    /// Connections accepted so far.
    accepted: AtomicU64,
    /// Connections whose client has closed them (its sending side).
    closed: AtomicU64,
    /// Bytes each connection's client has sent, in the order they were accepted.
    sent: Mutex<Vec<Arc<AtomicU64>>>,
}

/// A running proxy; stops accepting when dropped.
pub struct Proxy {
    /// `host:port` to connect to instead of the server.
    pub addr: String,
    state: Arc<State>,
}

impl Proxy {
    /// Starts a proxy in front of `server` (`host:port`).
    pub fn start(server: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let addr = listener.local_addr().expect("bound").to_string();
        let state = Arc::new(State { budget: AtomicI64::new(-1), ..State::default() });
        let server = server.to_string();
        let shared = state.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if shared.stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(upstream) = TcpStream::connect(&server) else { continue };
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                let sent = Arc::new(AtomicU64::new(0));
                shared.sent.lock().unwrap().push(sent.clone());
                let _ = client.set_nodelay(true);
                let _ = upstream.set_nodelay(true);
                if let (Ok(c), Ok(u)) = (client.try_clone(), upstream.try_clone()) {
                    shared.open.lock().unwrap().extend([c, u]);
                }
                pump(
                    client.try_clone().unwrap(),
                    upstream.try_clone().unwrap(),
                    shared.clone(),
                    Direction::ToServer(sent),
                );
                pump(upstream, client, shared.clone(), Direction::ToClient);
            }
        });
        Proxy { addr, state }
    }

    /// Cuts the connections once the server has sent `bytes` more bytes.
    pub fn cut_after(&self, bytes: i64) {
        self.state.budget.store(bytes, Ordering::SeqCst);
    }

    /// Holds everything clients send from now until [`Proxy::release`].
    pub fn hold(&self) {
        self.state.held.store(0, Ordering::SeqCst);
        self.state.holding.store(true, Ordering::SeqCst);
    }

    /// How many reads from clients are waiting on (or waited on) the hold.
    pub fn held(&self) -> u64 {
        self.state.held.load(Ordering::SeqCst)
    }

    /// Sends on what the hold kept.
    pub fn release(&self) {
        self.state.holding.store(false, Ordering::SeqCst);
    }

    /// How many times connections were cut.
    pub fn cuts(&self) -> u64 {
        self.state.cuts.load(Ordering::SeqCst)
    }

    /// How many connections clients have opened through the proxy.
    pub fn connections(&self) -> u64 {
        self.state.accepted.load(Ordering::SeqCst)
    }

    /// How many of them their clients have closed.
    pub fn closed(&self) -> u64 {
        self.state.closed.load(Ordering::SeqCst)
    }

    /// The bytes clients have sent on each connection so far, in the order they were opened.
    pub fn sent_per_connection(&self) -> Vec<u64> {
        self.state.sent.lock().unwrap().iter().map(|n| n.load(Ordering::SeqCst)).collect()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        self.release();
        let _ = TcpStream::connect(&self.addr);
        cut_all(&self.state);
    }
}

fn cut_all(state: &State) {
    for s in state.open.lock().unwrap().drain(..) {
        let _ = s.shutdown(Shutdown::Both);
    }
}

enum Direction {
    /// Counting the bytes into the connection's counter.
    ToServer(Arc<AtomicU64>),
    ToClient,
}

/// Copies `from` to `to` on a thread. Towards the server it waits while the proxy holds;
/// towards the client it counts the bytes against the budget and cuts every connection when
/// it runs out.
fn pump(mut from: TcpStream, mut to: TcpStream, state: Arc<State>, direction: Direction) {
    thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if let Direction::ToServer(sent) = &direction {
                sent.fetch_add(n as u64, Ordering::SeqCst);
            }
            if matches!(direction, Direction::ToServer(_)) && state.holding.load(Ordering::SeqCst) {
                state.held.fetch_add(1, Ordering::SeqCst);
                while state.holding.load(Ordering::SeqCst) {
                    thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            if matches!(direction, Direction::ToClient) {
                let before = state.budget.load(Ordering::SeqCst);
                if before >= 0 {
                    let left = before - n as i64;
                    if left < 0 {
                        state.budget.store(-1, Ordering::SeqCst);
                        state.cuts.fetch_add(1, Ordering::SeqCst);
                        // Send what the budget allows, then drop every connection.
                        let _ = to.write_all(&buf[..before as usize]);
                        cut_all(&state);
                        break;
                    }
                    state.budget.store(left, Ordering::SeqCst);
                }
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
        if matches!(direction, Direction::ToServer(_)) {
            state.closed.fetch_add(1, Ordering::SeqCst);
        }
    });
}
