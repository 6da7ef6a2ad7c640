//! The dashboard side of `exactly mcp`: a held call approved with `exactly top`'s keys in a
//! real terminal (tmux).
use crate::{lines, outcome, support, World};
use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};

/// A terminal (tmux) on its own server, shut down with the test.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(name: &str) -> Tmux {
        let t = Tmux {
            socket: format!("exactly-mcp-{name}-{}", std::process::id()),
        };
        let status = Command::new("tmux")
            .args([
                "-L",
                &t.socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "t",
            ])
            .args(["-x", "120", "-y", "40", "env PS1='$ ' sh"])
            .status()
            .expect("tmux is required by this test (.ci/run installs it)");
        assert!(status.success(), "tmux new-session failed");
        t
    }

    fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.cmd(&["send-keys", "-t", "t", k]);
        }
    }

    fn wait_for(&self, what: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = self.cmd(&["capture-pane", "-p", "-t", "t"]);
            if s.contains(what) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "screen never showed {what:?}:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

/// A held call approved with the dashboard's keys in a real terminal: `exactly top` shows it
/// pending with its terms (the tool, the target, the arguments), `3 a y` approves it, and the
/// held call goes, once.
#[test]
fn a_held_call_approved_in_the_dashboard() {
    let w = World::new();
    let c = w.client(
        json!([["book_table", {"restaurant": "Chez Nous", "guests": 2}]]),
        &[],
    );
    let until = Instant::now() + Duration::from_secs(60);
    while !w.env.db.exists() || !w.env.run(&["status"]).1.contains("pending approvals 1") {
        assert!(
            Instant::now() < until,
            "the held call never asked for approval"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let t = Tmux::start("approve");
    t.wait_for("$");
    t.keys(&[
        &format!(
            "EXACTLY_ACTOR=tmux-op {} --db {} top",
            support::bin(),
            w.env.db_str()
        ),
        "Enter",
    ]);
    t.keys(&["3"]);
    let s = t.wait_for("Pending approval (1)");
    assert!(s.contains("MCP tool book_table on Chez Nous"), "{s}");
    t.keys(&["a"]);
    t.wait_for("Confirm: approve");
    t.keys(&["y"]);
    t.wait_for("as tmux-op");
    let out = c.wait_with_output().expect("client");
    let answers = lines(&String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{answers:?}\n{err}");
    assert_eq!(outcome(&answers[1]), "done", "{answers:?}\n{err}");
    assert_eq!(w.sent(), ["booked|Chez Nous|2"]);
    t.keys(&["q"]);
}
