//! A fault-injecting TCP proxy for Kafka connections, placed between clients and a broker
//! (the broker advertises the proxy's address, so clients reach it for every request).
//!
//! Faults, all adjustable while running:
//! - `drop_response_per_mille`: before forwarding a *response* frame (the broker has received
//!   and processed the request), cut the connection instead — the client never learns the
//!   outcome and retries, which is exactly the case idempotence must make harmless;
//! - `cut_all()`: close every open connection at once;
//! - `delay_ms`: hold each forwarded chunk this long;
//! - `blackhole`: accept and read but forward nothing (a partition).
//!
//! Randomness comes from a seeded generator, so a failing run can be replayed.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
pub struct Faults {
    pub drop_response_per_mille: AtomicU32,
    pub delay_ms: AtomicU64,
    pub blackhole: AtomicBool,
    /// Responses dropped so far (connections cut before a response).
    pub dropped: AtomicU64,
}

pub struct Proxy {
    pub port: u16,
    target: Arc<AtomicU16>,
    pub faults: Arc<Faults>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
}

/// xorshift64*: small, seeded, good enough for fault schedules.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

impl Proxy {
    /// Listen on a free 127.0.0.1 port; forward to `target_port` (settable later).
    pub fn start(target_port: u16, seed: u64) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let target = Arc::new(AtomicU16::new(target_port));
        let faults = Arc::new(Faults::default());
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (t, f, c, s) = (target.clone(), faults.clone(), conns.clone(), stop.clone());
        let rng = Arc::new(Mutex::new(Rng(seed | 1)));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", t.load(Ordering::Relaxed))) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let (Ok(c1), Ok(s1)) = (client.try_clone(), server.try_clone()) {
                    let mut g = c.lock().unwrap_or_else(|e| e.into_inner());
                    g.push(c1);
                    g.push(s1);
                }
                let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else { continue };
                let f1 = f.clone();
                std::thread::spawn(move || pipe_requests(client, server, f1));
                let (f2, r2) = (f.clone(), rng.clone());
                std::thread::spawn(move || pipe_responses(server2, client2, f2, r2));
            }
        });
        Ok(Proxy { port, target, faults, conns, stop })
    }

    pub fn set_target(&self, port: u16) {
        self.target.store(port, Ordering::Relaxed);
    }

    /// Cut every open connection now.
    pub fn cut_all(&self) {
        let mut g = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        for s in g.drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.cut_all();
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wake the accept loop
    }
}

fn pause(f: &Faults) {
    let d = f.delay_ms.load(Ordering::Relaxed);
    if d > 0 {
        std::thread::sleep(Duration::from_millis(d));
    }
}

/// Client → broker: copy bytes (subject to delay and blackhole).
fn pipe_requests(mut from: TcpStream, mut to: TcpStream, f: Arc<Faults>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if f.blackhole.load(Ordering::Relaxed) {
            continue;
        }
        pause(&f);
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

/// Broker → client, frame by frame, so a response can be dropped (by cutting the connection)
/// after the broker has acted on its request.
fn pipe_responses(mut from: TcpStream, mut to: TcpStream, f: Arc<Faults>, rng: Arc<Mutex<Rng>>) {
    loop {
        let mut len = [0u8; 4];
        if from.read_exact(&mut len).is_err() {
            break;
        }
        let size = i32::from_be_bytes(len).max(0) as usize;
        let mut frame = vec![0u8; size];
        if from.read_exact(&mut frame).is_err() {
            break;
        }
        let p = f.drop_response_per_mille.load(Ordering::Relaxed);
        let roll = rng.lock().unwrap_or_else(|e| e.into_inner()).next() % 1000;
        if p > 0 && roll < u64::from(p) {
            f.dropped.fetch_add(1, Ordering::Relaxed);
            break;
        }
        if f.blackhole.load(Ordering::Relaxed) {
            continue;
        }
        pause(&f);
        if to.write_all(&len).and_then(|_| to.write_all(&frame)).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

/// A proxy on every directed broker-to-broker Raft link of an `n`-broker cluster, so faults can
/// cut the network *between* brokers (clients keep reaching every broker). Broker `i` (0-based,
/// node id `i + 1`) is started with `--controller-quorum-voters` = [`Links::voters_for`]`(i)`:
/// itself at its own Raft port, every peer `j` through the proxy of link `i → j` (the broker
/// dials a peer at the address its own voter list names). A link carries the requests of its
/// dialling broker and their responses, so blackholing `i → j` and `j → i` cuts the pair.
pub struct Links {
    raft_ports: Vec<u16>,
    /// `(from, to)` → the proxy `from` dials to reach `to`.
    proxies: std::collections::BTreeMap<(usize, usize), Proxy>,
}

impl Links {
    /// Free Raft ports for `n` brokers and a proxy on each directed link between them.
    pub fn new(n: usize, seed: u64) -> std::io::Result<Links> {
        let raft_ports: Vec<u16> = (0..n).map(|_| crate::free_port()).collect();
        let mut proxies = std::collections::BTreeMap::new();
        for from in 0..n {
            for to in (0..n).filter(|t| *t != from) {
                let s = seed.wrapping_mul(31).wrapping_add((from * n + to) as u64);
                proxies.insert((from, to), Proxy::start(raft_ports[to], s)?);
            }
        }
        Ok(Links { raft_ports, proxies })
    }

    /// Broker `i`'s `controller.quorum.voters`.
    pub fn voters_for(&self, i: usize) -> String {
        (0..self.raft_ports.len())
            .map(|j| {
                let port = if j == i { self.raft_ports[j] } else { self.proxies[&(i, j)].port };
                format!("{}@127.0.0.1:{port}", j + 1)
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Cut broker `i` off from every other broker (both directions); other links stay up.
    pub fn isolate(&self, i: usize) {
        for ((from, to), p) in &self.proxies {
            if *from == i || *to == i {
                p.faults.blackhole.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Close every open connection on every link, cutting nothing: the brokers reconnect at
    /// once (as when a broker drops a connection whose request timed out).
    pub fn reset(&self) {
        for p in self.proxies.values() {
            p.cut_all();
        }
    }

    /// True if some link is cut.
    pub fn any_cut(&self) -> bool {
        self.proxies.values().any(|p| p.faults.blackhole.load(Ordering::Relaxed))
    }

    /// Restore every link. Connections opened while it was cut are closed first (a blackhole
    /// drops bytes mid-frame, so they cannot carry on); the brokers reconnect.
    pub fn heal(&self) {
        for p in self.proxies.values() {
            if p.faults.blackhole.load(Ordering::Relaxed) {
                p.cut_all();
                p.faults.blackhole.store(false, Ordering::Relaxed);
            }
        }
    }
}
