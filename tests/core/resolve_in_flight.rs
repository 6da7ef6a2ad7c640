//! Issue 20, item 7: a person's resolution must not release a sender that may still be sending.
//! Real `exactly effect` processes whose command waits for a file before it delivers (appends
//! the effect key to a "far side" file, which never deduplicates), real databases.
use crate::on_both_backends;
use crate::support;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;
use support::cli::{far_count, split, Env};
use support::{effect_args, strs};

/// The effect every test sends: paying 12.00 into acct-1 as job `pay` under `token`.
fn pay(token: i64) -> support::EffectArgs {
    effect_args("pay", token, "pay", "acct-1").input("amount=12.00")
}

fn key(env: &Env) -> Result<String, String> {
    let args = ["key", "--action", "pay", "--target", "acct-1"];
    let (code, out, err) = env.run(&[&args[..], &["--input", "amount=12.00"]].concat());
    if code != 0 {
        return Err(format!("exactly key exited {code}: {err}"));
    }
    Ok(out.trim().to_string())
}

/// A sender held mid-send: its command waits for `go` to exist, then delivers. Dropped, it is
/// let go and reaped, so a failing test leaves no process behind.
struct Held {
    child: Option<Child>,
    pid: u32,
    go: PathBuf,
}

impl Held {
    /// Starts `exactly effect` (as `host`, when given) and waits until its row is `submitted`.
    fn start(env: &Env, token: i64, far: &Path, host: Option<&str>) -> Result<Held, String> {
        let go = env.path("go");
        let script = format!(
            "while [ ! -e {go} ]; do sleep 0.02; done; echo \"$EXACTLY_EFFECT_KEY\" >> {far}",
            go = go.display(),
            far = far.display()
        );
        let mut c = env.cmd();
        if let Some(h) = host {
            c.env("EXACTLY_HOST", h);
        }
        let child = c
            .args(strs(&pay(token).sh(&script)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn exactly effect: {e}"))?;
        let held = Held {
            pid: child.id(),
            child: Some(child),
            go,
        };
        let k = key(env)?;
        let submitted = support::poll(Duration::from_millis(20), Duration::from_secs(20), || {
            (env.state_of(&k).as_deref() == Some("submitted")).then_some(())
        });
        if submitted.is_none() {
            return Err(format!("{k} never became submitted"));
        }
        Ok(held)
    }

    /// Lets the command deliver; returns `exactly effect`'s (exit code, stdout, stderr).
    fn release(mut self) -> Result<(i32, String, String), String> {
        std::fs::write(&self.go, "").map_err(|e| format!("write {}: {e}", self.go.display()))?;
        let child = self.child.take().ok_or("released twice")?;
        let out = child
            .wait_with_output()
            .map_err(|e| format!("wait for exactly effect: {e}"))?;
        Ok(split(out))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = std::fs::write(&self.go, "");
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A retry of the same effect by the same job, whose command delivers at once.
fn retry(env: &Env, token: i64, far: &Path) -> (i32, String, String) {
    let script = format!("echo \"$EXACTLY_EFFECT_KEY\" >> {}", far.display());
    env.run(&strs(&pay(token).sh(&script)))
}

/// The detail of the last `resolved` event of `key`.
fn resolved_detail(env: &Env, key: &str) -> Option<String> {
    let sql = format!(
        "SELECT detail FROM exactly_events WHERE kind = 'resolved' AND effect_key = '{key}' \
         ORDER BY id DESC"
    );
    support::strings(&env.db, &sql).into_iter().next()
}

on_both_backends! {
    /// `resolve --not-happened` while the sender (alive on this host, its lease live) is still
    /// sending, then a retry: the far side would get it twice. Refused with exit 5, naming the
    /// sender and its deadline; the retry is "in flight" too; one delivery.
    #[test]
    fn not_happened_on_a_live_sender_is_refused_and_the_retry_sends_nothing() {
        let env = Env::new();
        let far = env.path("far.txt");
        let t = env.claim("pay", "10m");
        let k = key(&env).expect("key");
        let held = Held::start(&env, t, &far, None).expect("sender held mid-send");
        let pid = held.pid;
        let (cr, _, er) = env.run(&["resolve", &k, "--not-happened"]);
        let (cy, _, ey) = retry(&env, t, &far);
        let (ca, _, ea) = held.release().expect("first sender");
        assert_eq!(
            far_count(&far, &k),
            1,
            "resolve exit {cr} ({er}); retry exit {cy} ({ey}); first exit {ca} ({ea})"
        );
        assert_eq!(cr, 5, "{er}");
        assert!(er.contains("in flight"), "{er}");
        assert!(er.contains(&format!(":{pid} ")), "names the attempt (host:{pid}): {er}");
        assert!(er.contains("still running on this host (lease until 2"), "{er}");
        assert!(er.contains("--force"), "{er}");
        assert_eq!(er.trim().lines().count(), 1, "{er}");
        assert_eq!(cy, 5, "{ey}");
        assert_eq!(ca, 0, "{ea}");
        assert_eq!(env.state_of(&k).as_deref(), Some("done"));
    }

    /// `resolve --cancel` in flight: the ledger would say `cancelled` while the far side gets
    /// it. Refused with exit 5; the send ends `done`.
    #[test]
    fn cancel_on_a_live_sender_is_refused() {
        let env = Env::new();
        let far = env.path("far.txt");
        let t = env.claim("pay", "10m");
        let k = key(&env).expect("key");
        let held = Held::start(&env, t, &far, None).expect("sender held mid-send");
        let (cr, _, er) = env.run(&["resolve", &k, "--cancel", "--note", "stop it"]);
        let (ca, _, ea) = held.release().expect("first sender");
        let state = env.state_of(&k);
        assert_eq!(
            (far_count(&far, &k), state.as_deref()),
            (1, Some("done")),
            "the ledger must say what the far side got: resolve exit {cr} ({er}); sender exit {ca} \
             ({ea})"
        );
        assert_eq!(cr, 5, "{er}");
        assert!(er.contains("in flight"), "{er}");
        assert_eq!(ca, 0, "{ea}");
    }

    /// A sender on another host (`EXACTLY_HOST`): its process cannot be checked from here, so
    /// its live lease decides, and names the deadline.
    #[test]
    fn a_sender_on_another_host_is_judged_by_its_lease() {
        let env = Env::new();
        let far = env.path("far.txt");
        let t = env.claim("pay", "10m");
        let k = key(&env).expect("key");
        let held = Held::start(&env, t, &far, Some("web-9")).expect("sender held mid-send");
        let (cr, _, er) = env.run(&["resolve", &k, "--happened"]);
        let (ca, _, ea) = held.release().expect("first sender");
        assert_eq!(cr, 5, "{er}");
        assert!(er.contains("attempt web-9:"), "names the sender: {er}");
        assert!(er.contains(" until 2"), "names the lease's end: {er}");
        assert_eq!(ca, 0, "{ea}");
        assert_eq!(far_count(&far, &k), 1);
    }

    /// `--force` resolves as before, and the event says it was forced while in flight.
    #[test]
    fn force_resolves_in_flight_and_says_so() {
        let env = Env::new();
        let far = env.path("far.txt");
        let t = env.claim("pay", "10m");
        let k = key(&env).expect("key");
        let held = Held::start(&env, t, &far, None).expect("sender held mid-send");
        let (cr, out, er) =
            env.run(&["resolve", &k, "--cancel", "--force", "--note", "far side refused it"]);
        assert_eq!(cr, 0, "{er}");
        assert!(out.contains("submitted → cancelled"), "{out}");
        assert!(er.contains("forced") && er.contains("in flight"), "warns: {er}");
        assert_eq!(env.state_of(&k).as_deref(), Some("cancelled"));
        let detail = resolved_detail(&env, &k).expect("a resolved event");
        assert!(detail.contains("forced while in flight"), "{detail}");
        assert!(detail.contains("far side refused it"), "{detail}");
        drop(held);
        // Not in flight (settled already): --force changes nothing else.
        let (c2, _, e2) = env.run(&["resolve", &k, "--happened", "--force"]);
        assert_eq!(c2, 1, "{e2}");
        assert!(e2.contains("already cancelled"), "{e2}");
    }
}
