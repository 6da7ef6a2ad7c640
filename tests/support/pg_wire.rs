//! A relay between PostgreSQL clients and their server that counts what crosses it: round trips
//! (a simple `Query`, or an extended-protocol `Sync`), statements the server completed
//! (`CommandComplete`), statements parsed (`Parse`: a prepare) and transactions the server
//! ended idle (a `ReadyForQuery` saying idle after a statement completed: a commit, or an
//! autocommit statement; a `ROLLBACK` counted apart). Counts that do not depend on the machine's
//! load, taken on the wire of a real connection, without the library's cooperation. Shared by
//! the tests (`tests/support/`) and the bench (`benches/exactly/`).
#![allow(dead_code)]
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// What crossed the relay since it started.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Client requests that wait for the server's `ReadyForQuery`: `Query` and `Sync`.
    pub round_trips: u64,
    /// Those of them that were an empty `Query` (a check that the connection is alive).
    pub pings: u64,
    /// Statements the server completed (`CommandComplete`), `BEGIN` and `COMMIT` included.
    pub statements: u64,
    /// Statements the client asked the server to parse (`Parse`: a prepare, or an unnamed one).
    pub parses: u64,
    /// Transactions that ended committed: an autocommit statement, or a `COMMIT`.
    pub commits: u64,
    /// Transactions rolled back by a `ROLLBACK`.
    pub rollbacks: u64,
}

impl std::ops::Sub for Counts {
    type Output = Counts;
    fn sub(self, o: Counts) -> Counts {
        Counts {
            round_trips: self.round_trips - o.round_trips,
            pings: self.pings - o.pings,
            statements: self.statements - o.statements,
            parses: self.parses - o.parses,
            commits: self.commits - o.commits,
            rollbacks: self.rollbacks - o.rollbacks,
        }
    }
}

#[derive(Default)]
struct Shared {
    round_trips: AtomicU64,
    pings: AtomicU64,
    statements: AtomicU64,
    parses: AtomicU64,
    commits: AtomicU64,
    rollbacks: AtomicU64,
    stop: AtomicBool,
}

/// The relay: listening on 127.0.0.1 (`url` reaches the server through it) until dropped.
pub struct Relay {
    /// The URL given, its host and port replaced by the relay's.
    pub url: String,
    shared: Arc<Shared>,
    port: u16,
}

impl Relay {
    /// A relay to the server `url` names (`postgres://user:pass@host:port/db?…`, no TLS).
    pub fn start(url: &str) -> io::Result<Relay> {
        let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{why}: {url}"));
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("not a URL"))?;
        let (auth, hostpart) = match rest.rsplit_once('@') {
            Some((a, h)) => (format!("{a}@"), h),
            None => (String::new(), rest),
        };
        let end = hostpart.find(['/', '?']).unwrap_or(hostpart.len());
        let (server, tail) = hostpart.split_at(end);
        let server = if server.contains(':') {
            server.to_string()
        } else {
            format!("{server}:5432")
        };
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.stop.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                let (s, server) = (s.clone(), server.clone());
                std::thread::spawn(move || {
                    if let Err(e) = relay(client, &server, s) {
                        eprintln!("pg_wire relay: {e}");
                    }
                });
            }
        });
        Ok(Relay {
            url: format!("{scheme}://{auth}127.0.0.1:{port}{tail}"),
            shared,
            port,
        })
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        let s = &self.shared;
        Counts {
            round_trips: s.round_trips.load(Ordering::SeqCst),
            pings: s.pings.load(Ordering::SeqCst),
            statements: s.statements.load(Ordering::SeqCst),
            parses: s.parses.load(Ordering::SeqCst),
            commits: s.commits.load(Ordering::SeqCst),
            rollbacks: s.rollbacks.load(Ordering::SeqCst),
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // Wakes the accepting thread so that it sees the stop; open relays end with their
        // connections.
        self.shared.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Relays one connection both ways, counting.
fn relay(client: TcpStream, server: &str, s: Arc<Shared>) -> io::Result<()> {
    let upstream = TcpStream::connect(server)?;
    client.set_nodelay(true)?;
    upstream.set_nodelay(true)?;
    // Single-byte answers the server owes to SSL or GSS encryption requests (sent before the
    // startup message, answered without a message type).
    let owed = Arc::new(AtomicU64::new(0));
    let (c_in, c_out) = (client.try_clone()?, client);
    let (u_in, u_out) = (upstream.try_clone()?, upstream);
    let (s2, owed2) = (s.clone(), owed.clone());
    let back = std::thread::spawn(move || from_server(u_in, c_out, &s2, &owed2));
    let forth = from_client(c_in, u_out, &s, &owed);
    let back = back
        .join()
        .map_err(|_| io::Error::other("the relay's server side panicked"))?;
    forth.and(back)
}

/// Reads messages of `from` into `buf` and passes each to `on`, writing all bytes to `to`.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    mut next: impl FnMut(&[u8]) -> Option<usize>,
) -> io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        // Whole messages are counted; a partial one waits for its rest.
        let mut at = 0;
        while let Some(len) = next(&buf[at..]) {
            at += len;
        }
        buf.drain(..at);
        if to.write_all(&chunk[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    Ok(())
}

/// A typed message's whole length (type byte and length word included), if all of it is here.
fn typed(buf: &[u8]) -> Option<usize> {
    let len = u32::from_be_bytes(buf.get(1..5)?.try_into().ok()?) as usize + 1;
    (buf.len() >= len).then_some(len)
}

fn from_client(from: TcpStream, to: TcpStream, s: &Shared, owed: &AtomicU64) -> io::Result<()> {
    let mut started = false;
    pump(from, to, |buf| {
        if !started {
            // Untyped: a length word, then the protocol version or a request code.
            let len = u32::from_be_bytes(buf.get(0..4)?.try_into().ok()?) as usize;
            let code = u32::from_be_bytes(buf.get(4..8)?.try_into().ok()?);
            if buf.len() < len {
                return None;
            }
            match code {
                80_877_103 | 80_877_104 => {
                    owed.fetch_add(1, Ordering::SeqCst);
                }
                _ => started = true,
            }
            return Some(len);
        }
        let len = typed(buf)?;
        match buf[0] {
            b'Q' | b'S' => {
                s.round_trips.fetch_add(1, Ordering::SeqCst);
                // A query string of its terminating NUL alone.
                if buf[0] == b'Q' && len == 6 {
                    s.pings.fetch_add(1, Ordering::SeqCst);
                }
            }
            b'P' => {
                s.parses.fetch_add(1, Ordering::SeqCst);
            }
            _ => {}
        }
        Some(len)
    })
}

fn from_server(from: TcpStream, to: TcpStream, s: &Shared, owed: &AtomicU64) -> io::Result<()> {
    // Since the last ReadyForQuery: whether a statement completed, and whether the last one
    // was a ROLLBACK.
    let (mut ran, mut rolled_back) = (false, false);
    pump(from, to, |buf| {
        if owed.load(Ordering::SeqCst) > 0 && !buf.is_empty() {
            owed.fetch_sub(1, Ordering::SeqCst);
            return Some(1);
        }
        let len = typed(buf)?;
        match buf[0] {
            b'C' => {
                s.statements.fetch_add(1, Ordering::SeqCst);
                ran = true;
                rolled_back = buf[5..len].starts_with(b"ROLLBACK");
            }
            b'Z' => {
                // Idle again after a statement: a transaction ended.
                if ran && buf.get(5) == Some(&b'I') {
                    let n = if rolled_back {
                        &s.rollbacks
                    } else {
                        &s.commits
                    };
                    n.fetch_add(1, Ordering::SeqCst);
                }
                if buf.get(5) == Some(&b'I') {
                    ran = false;
                }
            }
            _ => {}
        }
        Some(len)
    })
}
