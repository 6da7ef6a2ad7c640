//! `exactly mcp --url`: the gateway as the client of a streamable-HTTP server (the official
//! Python SDK's, on 127.0.0.1), guarding its calls as it guards a command's.
use crate::{here, mail, outcome, World};
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The server, killed with the test.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The test server over streamable HTTP on a free port, `w`'s gateway its client.
fn serve(w: &mut World, env: &[(&str, &std::path::Path)]) -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut cmd = Command::new(&w.py);
    cmd.arg(here("mail_server.py"))
        .args(["http", &port.to_string()])
        .env("MAIL_OUTBOX", &w.outbox)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let server = Server(cmd.spawn().expect("start the HTTP server"));
    let until = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < until, "the HTTP server never listened");
        std::thread::sleep(Duration::from_millis(100));
    }
    w.url = Some(format!("http://127.0.0.1:{port}/mcp"));
    server
}

#[test]
fn a_streamable_http_server_is_guarded_the_same() {
    let mut w = World::new();
    let _server = serve(&mut w, &[]);
    let (answers, err) = w.answers(json!([
        mail("gina@example.com", "over http"),
        mail("gina@example.com", "over http"),
        ["list_sent", {}],
    ]));
    assert_eq!(outcome(&answers[1]), "done", "{answers:?}\n{err}");
    assert_eq!(
        outcome(&answers[2]),
        "duplicate_suppressed",
        "{answers:?}\n{err}"
    );
    assert_eq!(
        outcome(&answers[3]),
        "(none: passed through)",
        "{answers:?}"
    );
    let sent = w.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    let key = w.mail_key("gina@example.com", "over http", "hello");
    assert!(sent[0].ends_with(&format!("key={key}")), "{sent:?}");
}

/// A tool mcp.toml declares `idempotency_header = true` for sends its effect key as the
/// `Idempotency-Key` header of its call; a tool it does not declare it for sends none.
#[test]
fn the_effect_key_goes_as_an_idempotency_key_where_declared() {
    let mut w = World::guarded();
    let heard = w.env.path("headers");
    let _server = serve(&mut w, &[("MAIL_HEADERS", heard.as_path())]);
    let (answers, err) = w.answers(json!([mail("jo@example.com", "no header")]));
    assert_eq!(outcome(&answers[1]), "done", "{answers:?}\n{err}");
    w.write_config_text(
        "lease = \"3s\"\nwait_for_lease = \"30s\"\n\n[[tool]]\nname = \"send_email\"\n\
         target = \"to\"\nidempotency_header = true\n",
    );
    let (answers, err) = w.answers(json!([mail("kim@example.com", "header")]));
    assert_eq!(outcome(&answers[1]), "done", "{answers:?}\n{err}");
    let key = w.mail_key("kim@example.com", "header", "hello");
    let got = std::fs::read_to_string(&heard).expect("the server's header file");
    assert_eq!(
        got,
        format!("jo@example.com|-\nkim@example.com|{key}\n"),
        "the headers the server got"
    );
}
