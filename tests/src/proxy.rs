//! A fault-injecting proxy for the replica plane, in front of one node's replica listener:
//! the roster names the proxy, the node listens behind it (`cluster.listen_address`). It reads
//! the dialer's replica id from the handshake's first frame (plaintext planes only), so each
//! direction of each pair of nodes has its own rule: pass, drop everything (the connection
//! stays up, as across a partition), or delay every chunk. One proxy can stand in front of
//! several consecutive planes (the metadata plane and each shard's partition group above it),
//! all under the same rules, or one plane under a rule of its own.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What happens to bytes going one way between two replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Pass,
    /// Read and thrown away: a partition that TCP does not notice.
    Drop,
    /// Each chunk is held this long before it goes on.
    Delay(Duration),
}

/// Rules by plane (`None`: every plane without one of its own), dialer and listener.
type Rules = Arc<Mutex<HashMap<(Option<u16>, u8, u8), Rule>>>;

/// One proxy: traffic to replica `to` from every dialer.
pub struct ReplicaProxy {
    pub address: SocketAddr,
    listening: Vec<SocketAddr>,
    to: u8,
    rules: Rules,
    stopped: Arc<AtomicBool>,
}

/// The handshake's first frame: magic (8), auth flag, dialer id, nonce (32).
const HELLO_LEN: usize = 42;

impl ReplicaProxy {
    /// Listens on a free port and forwards to `target`, the listener of replica `to`.
    pub fn start(to: u8, target: SocketAddr) -> std::io::Result<Self> {
        Self::start_planes(to, target, 1)
    }

    /// Listens on `planes` consecutive free ports (the first is `address`), each
    /// forwarding to the port as far above `target`'s.
    pub fn start_planes(to: u8, target: SocketAddr, planes: u16) -> std::io::Result<Self> {
        let first = crate::free_ports(planes);
        let rules: Rules = Arc::default();
        let stopped = Arc::new(AtomicBool::new(false));
        let mut listening = Vec::new();
        for plane in 0..planes {
            let listener = TcpListener::bind(("127.0.0.1", first + plane))?;
            listening.push(listener.local_addr()?);
            let mut behind = target;
            behind.set_port(target.port() + plane);
            let (accept_rules, accept_stopped) = (rules.clone(), stopped.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if accept_stopped.load(Ordering::Relaxed) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    let (rules, stopped) = (accept_rules.clone(), accept_stopped.clone());
                    std::thread::spawn(move || relay(stream, behind, (plane, to), rules, stopped));
                }
            });
        }
        Ok(Self { address: listening[0], listening, to, rules, stopped })
    }

    /// Sets what happens to bytes from replica `from` to this proxy's replica (`inbound`), or
    /// from this proxy's replica back to `from` on connections `from` dialed.
    pub fn set(&self, from: u8, inbound: Rule, outbound: Rule) {
        self.set_on(None, from, inbound, outbound);
    }

    /// `set` for one plane only (0 is the first, the metadata plane).
    pub fn set_plane(&self, plane: u16, from: u8, inbound: Rule, outbound: Rule) {
        self.set_on(Some(plane), from, inbound, outbound);
    }

    fn set_on(&self, plane: Option<u16>, from: u8, inbound: Rule, outbound: Rule) {
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        rules.insert((plane, from, self.to), inbound);
        rules.insert((plane, self.to, from), outbound);
    }

    /// Every rule back to `Pass`.
    pub fn heal(&self) {
        self.rules.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

impl Drop for ReplicaProxy {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::Relaxed);
        // Wakes the accept loops so they see the flag.
        for address in &self.listening {
            let _ = TcpStream::connect(address);
        }
    }
}

fn rule(rules: &Rules, plane: u16, from: u8, to: u8) -> Rule {
    let rules = rules.lock().unwrap_or_else(|p| p.into_inner());
    rules.get(&(Some(plane), from, to)).or_else(|| rules.get(&(None, from, to))).copied().unwrap_or(Rule::Pass)
}

fn relay(mut client: TcpStream, target: SocketAddr, (plane, to): (u16, u8), rules: Rules, stopped: Arc<AtomicBool>) {
    let mut hello = [0u8; HELLO_LEN];
    if client.read_exact(&mut hello).is_err() {
        return;
    }
    let from = hello[9];
    let Ok(mut server) = TcpStream::connect(target) else { return };
    if server.write_all(&hello).is_err() {
        return;
    }
    let (Ok(client_read), Ok(server_read)) = (client.try_clone(), server.try_clone()) else { return };
    let (back_rules, back_stopped) = (rules.clone(), stopped.clone());
    std::thread::spawn(move || pump(server_read, client, &back_rules, (plane, to, from), &back_stopped));
    pump(client_read, server, &rules, (plane, from, to), &stopped);
}

/// Copies `input` to `output` under the rule for `direction` until either side closes.
fn pump(mut input: TcpStream, mut output: TcpStream, rules: &Rules, direction: (u16, u8, u8), stopped: &AtomicBool) {
    let mut buf = vec![0u8; 64 * 1024];
    while !stopped.load(Ordering::Relaxed) {
        let n = match input.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        match rule(rules, direction.0, direction.1, direction.2) {
            Rule::Drop => continue,
            Rule::Delay(pause) => std::thread::sleep(pause),
            Rule::Pass => {}
        }
        if output.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = output.shutdown(std::net::Shutdown::Both);
    let _ = input.shutdown(std::net::Shutdown::Both);
}
