//! A job's dead man's switch (`ping = "https://hc-ping.com/<uuid>"`, healthchecks.io's
//! convention): `POST {ping}/start` as a run starts, `POST {ping}` when it ends `ok`, `POST
//! {ping}/fail` with the outcome and exit code in the body otherwise, each with `?rid=` (the run's
//! id as a UUID, healthchecks' run id) so the start and end of runs that overlap pair up. Best
//! effort: the pings go
//! from a thread of their own, in order, each bounded by [`PING_TIMEOUT`]; a failed ping is a
//! log line, never the run's failure, and never holds up its command.
use crate::state::RunOutcome;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long one ping may take (connect, send, answer).
pub(crate) const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// Checks a `ping` value: an absolute http(s) URL with a host, no spaces, no query or fragment
/// (a suffix is appended to its path). Returns it without a trailing slash.
pub(crate) fn check_url(url: &str) -> Result<String, String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| format!("ping = {url:?} is not an http:// or https:// URL"))?;
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("ping = {url:?} holds spaces or control characters"));
    }
    if url.contains(['?', '#']) {
        return Err(format!(
            "ping = {url:?} has a query or fragment; /start and /fail are appended to its path"
        ));
    }
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') {
        return Err(format!("ping = {url:?} names no host"));
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// The HTTP agent every ping and webhook uses: bounded in time, no redirects followed blindly
/// beyond ureq's default.
pub(crate) fn agent(timeout: Duration) -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout_connect(timeout)
        .timeout(timeout)
        .user_agent(concat!("exactly/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// A run's id as healthchecks' `rid`, which must be a UUID: the first 16 bytes of the id's
/// SHA-256, marked as a version 8 (custom) UUID. The same run id gives the same rid.
pub(crate) fn rid(run_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut b: [u8; 16] = Sha256::digest(run_id.as_bytes())[..16]
        .try_into()
        .unwrap_or([0; 16]);
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The pings of one run: `/start` is sent at once; [`Pinger::ended`] sends the last one after it.
pub(crate) struct Pinger {
    tx: Option<mpsc::Sender<(String, String)>>,
    run_id: String,
}

impl Pinger {
    /// Starts pinging for a run of `job` (nothing when it has no `ping`).
    pub(crate) fn start(
        job: &str,
        url: Option<&str>,
        run_id: &str,
        not_before: Option<Instant>,
    ) -> Pinger {
        let Some(url) = url else {
            return Pinger {
                tx: None,
                run_id: run_id.to_string(),
            };
        };
        let (tx, rx) = mpsc::channel::<(String, String)>();
        let rid = rid(run_id);
        let _ = tx.send((
            format!("{url}/start?rid={rid}"),
            format!("run_id={run_id}\n"),
        ));
        let job = job.to_string();
        // Detached: a ping never holds up the run, nor the scheduler's shutdown.
        std::thread::spawn(move || {
            // A run decided ahead of its slot starts at the slot: so does its start ping.
            if let Some(wait) = not_before.map(|at| at.saturating_duration_since(Instant::now())) {
                std::thread::sleep(wait);
            }
            let agent = agent(PING_TIMEOUT);
            for (to, body) in rx {
                if let Err(e) = agent.post(&to).send_string(&body) {
                    tracing::warn!(job = %job, "ping {to} failed: {e}");
                }
            }
        });
        Pinger {
            tx: Some(tx),
            run_id: run_id.to_string(),
        }
    }

    /// The run's end: success on `ok`, `/log` (told, not judged) for a run waiting for
    /// approval, `/fail` with the outcome and exit code otherwise.
    pub(crate) fn ended(mut self, url: Option<&str>, outcome: &RunOutcome, exit_code: Option<i32>) {
        let (Some(tx), Some(url)) = (self.tx.take(), url) else {
            return;
        };
        let code = exit_code.map(|c| c.to_string()).unwrap_or_default();
        let run_id = &self.run_id;
        let body = format!("run_id={run_id}\noutcome={outcome}\nexit_code={code}\n");
        let rid = rid(run_id);
        let to = match outcome {
            RunOutcome::Ok => format!("{url}?rid={rid}"),
            RunOutcome::AwaitingApproval => format!("{url}/log?rid={rid}"),
            _ => format!("{url}/fail?rid={rid}"),
        };
        let _ = tx.send((to, body));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rid_is_a_uuid_of_its_run() {
        let a = rid("nightly-t7");
        assert_eq!(a, rid("nightly-t7"));
        assert_ne!(a, rid("nightly-t8"));
        let shape: Vec<usize> = a.split('-').map(str::len).collect();
        assert_eq!(shape, [8, 4, 4, 4, 12], "{a}");
        assert_eq!(&a[14..15], "8", "version 8: {a}");
    }

    #[test]
    fn urls_are_checked() {
        assert_eq!(
            check_url("https://hc-ping.com/abc/").as_deref(),
            Ok("https://hc-ping.com/abc")
        );
        assert!(check_url("http://127.0.0.1:8080/x").is_ok());
        for bad in [
            "hc-ping.com/x",
            "ftp://a/b",
            "https:///x",
            "https://a b",
            "https://a/x?y=1",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }
}
