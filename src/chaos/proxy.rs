//! A TCP forwarder between schedulers and a PostgreSQL server that the harness can cut: while
//! it is down, every open connection is reset and new ones are closed at once — what a client
//! sees of a server that stopped — and raising it lets them connect again. The shared server
//! itself is never stopped (other scenarios and tests use it).
use crate::{Error, Result};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub(crate) struct Proxy {
    pub port: u16,
    down: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    /// Forwards 127.0.0.1:`port` to `target` (host:port).
    pub(crate) fn start(target: &str) -> Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let down = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::new(Mutex::new(Vec::new()));
        let (d, o, target) = (down.clone(), open.clone(), target.to_string());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if d.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let pair = [client.try_clone(), server.try_clone()];
                if let Ok(mut list) = o.lock() {
                    list.extend(pair.into_iter().flatten());
                }
                // A cut made while this one was being connected reaches it too.
                if d.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    let _ = server.shutdown(Shutdown::Both);
                    continue;
                }
                pipe(client.try_clone(), server.try_clone());
                pipe(server.try_clone(), client.try_clone());
            }
        });
        Ok(Proxy { port, down, open })
    }

    /// Cuts every connection and refuses new ones.
    pub(crate) fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        if let Ok(mut list) = self.open.lock() {
            for s in list.drain(..) {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }

    /// Lets connections through again.
    pub(crate) fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
    }

    /// `url` with its host and port replaced by this proxy's.
    pub(crate) fn url_for(&self, url: &str) -> Result<String> {
        let (head, rest) = url
            .split_once('@')
            .ok_or_else(|| Error::Usage("the PostgreSQL URL has no user@host part".into()))?;
        let tail = rest.find(['/', '?']).map(|i| &rest[i..]).unwrap_or("");
        Ok(format!("{head}@127.0.0.1:{}{tail}", self.port))
    }
}

/// The server's host:port in a PostgreSQL URL (port 5432 when it names none).
pub(crate) fn target_of(url: &str) -> Result<String> {
    let rest = url
        .split_once('@')
        .map(|(_, r)| r)
        .ok_or_else(|| Error::Usage("the PostgreSQL URL has no user@host part".into()))?;
    let hostport = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    Ok(if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:5432")
    })
}

fn pipe(from: std::io::Result<TcpStream>, to: std::io::Result<TcpStream>) {
    let (Ok(mut from), Ok(mut to)) = (from, to) else {
        return;
    };
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
    });
}
