//! One notification's delivery as an effect of the ledger: a hook command fed the JSON on
//! stdin, or a webhook POSTed it with the effect key as `Idempotency-Key`. Whether anything may
//! have left decides the failure: nothing (refused, a 4xx/5xx answer, exit 75) is
//! [`Failure::NotSent`] and is tried again at the next evaluation; maybe (a timeout after the
//! request was written, a hook that failed otherwise) is [`Failure::Lost`], and the
//! notification is `unknown` until an operator resolves it: it is never sent twice by itself.
use crate::effect::{Effect, Failure, Observation};
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a hook or a webhook may take.
pub(super) const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// A hook command, given the notification on stdin.
pub(super) struct Hook<'a> {
    pub argv: &'a [String],
    pub body: String,
    pub cwd: Option<&'a std::path::Path>,
}

impl Effect for Hook<'_> {
    fn perform(&mut self, effect_key: &str) -> Result<String, Failure> {
        let Some((prog, args)) = self.argv.split_first() else {
            return Err(Failure::NotSent("empty hook".into()));
        };
        let mut cmd = Command::new(prog);
        cmd.args(args)
            .env("EXACTLY_EFFECT_KEY", effect_key)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if let Some(dir) = self.cwd {
            cmd.current_dir(dir);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| Failure::NotSent(format!("cannot start hook {prog:?}: {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A hook that does not read its stdin is its own business.
            let _ = stdin.write_all(self.body.as_bytes());
        }
        let until = Instant::now() + DELIVERY_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(s)) if s.success() => return Ok("hook exited 0".into()),
                Ok(Some(s)) if s.code() == Some(75) => {
                    return Err(Failure::NotSent("hook exited 75: nothing sent".into()))
                }
                Ok(Some(s)) => return Err(Failure::Lost(format!("hook ended {s}"))),
                Ok(None) if Instant::now() >= until => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Failure::Lost("hook ran past 10s: stopped".into()));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(Failure::Lost(format!("lost the hook: {e}"))),
            }
        }
    }

    fn observe(&mut self, _key: &str) -> Observation {
        Observation::CantTell("a hook cannot be asked whether it ran".into())
    }
}

/// A webhook, POSTed the notification as JSON.
pub(super) struct Webhook<'a> {
    pub url: &'a str,
    pub body: String,
}

impl Effect for Webhook<'_> {
    fn perform(&mut self, effect_key: &str) -> Result<String, Failure> {
        let agent = crate::runner::run::ping::agent(DELIVERY_TIMEOUT);
        let sent = agent
            .post(self.url)
            .set("Content-Type", "application/json")
            .set("Idempotency-Key", effect_key)
            .send_string(&self.body);
        match sent {
            Ok(r) => Ok(format!("HTTP {}", r.status())),
            // The server answered and took nothing: a chat webhook acts only on 2xx.
            Err(ureq::Error::Status(code, _)) => {
                Err(Failure::NotSent(format!("webhook answered HTTP {code}")))
            }
            Err(ureq::Error::Transport(t)) => {
                use ureq::ErrorKind as K;
                let why = format!("webhook: {t}");
                match t.kind() {
                    // Nothing reached the server.
                    K::InvalidUrl
                    | K::UnknownScheme
                    | K::Dns
                    | K::InsecureRequestHttpsOnly
                    | K::ConnectionFailed
                    | K::InvalidProxyUrl
                    | K::ProxyConnect
                    | K::ProxyUnauthorized => Err(Failure::NotSent(why)),
                    // The request may have been written: a timeout, a reset, a garbled answer.
                    _ => Err(Failure::Lost(why)),
                }
            }
        }
    }

    fn observe(&mut self, _key: &str) -> Observation {
        Observation::CantTell("a webhook cannot be asked whether it was delivered".into())
    }
}
