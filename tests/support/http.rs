//! A real HTTP server on 127.0.0.1 that records every request it is sent (a webhook's or a
//! ping's far side) and answers with the status a test sets.
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

/// One request as the server got it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub body: String,
    pub idempotency_key: Option<String>,
    /// The status it was answered with.
    pub status: u16,
}

pub struct Recorder {
    pub url: String,
    seen: Arc<Mutex<Vec<Request>>>,
    status: Arc<AtomicU16>,
    server: Arc<tiny_http::Server>,
}

impl Recorder {
    /// Starts the server on a free port; it answers 200 until told otherwise.
    pub fn start() -> Recorder {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind a test server"));
        let port = server.server_addr().to_ip().expect("an IP address").port();
        let (seen, status) = (
            Arc::new(Mutex::new(Vec::new())),
            Arc::new(AtomicU16::new(200)),
        );
        let (s, st, srv) = (seen.clone(), status.clone(), server.clone());
        std::thread::spawn(move || {
            for mut rq in srv.incoming_requests() {
                let mut body = String::new();
                let _ = rq.as_reader().read_to_string(&mut body);
                let code = st.load(Ordering::SeqCst);
                let key = rq
                    .headers()
                    .iter()
                    .find(|h| h.field.equiv("Idempotency-Key"))
                    .map(|h| h.value.to_string());
                s.lock().expect("recorder lock").push(Request {
                    method: rq.method().to_string(),
                    path: rq.url().to_string(),
                    body,
                    idempotency_key: key,
                    status: code,
                });
                let _ = rq.respond(tiny_http::Response::from_string("ok").with_status_code(code));
            }
        });
        Recorder {
            url: format!("http://127.0.0.1:{port}"),
            seen,
            status,
            server,
        }
    }
    /// Answers every later request with `code`.
    pub fn answer(&self, code: u16) {
        self.status.store(code, Ordering::SeqCst);
    }
    pub fn requests(&self) -> Vec<Request> {
        self.seen.lock().expect("recorder lock").clone()
    }
    /// The requests answered 2xx (delivered).
    pub fn delivered(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| (200..300).contains(&r.status))
            .collect()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.server.unblock();
    }
}
