//! `exactly mcp -- SERVER…`: the MCP gateway (docs/mcp.md), its lease claimed at start and
//! renewed while it serves.
use super::*;
use crate::mcp::{self as gateway, Config};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Args, Debug)]
pub(crate) struct McpArgs {
    /// The gateway's file: which tools are guarded and how (default: every tool not annotated
    /// readOnlyHint is guarded, keyed by all its arguments).
    #[arg(long, value_name = "FILE")]
    pub config: Option<String>,
    /// The gateway's job: its effects' job, its lease's name.
    #[arg(long, default_value = "mcp", value_parser = lease::job_name)]
    pub name: crate::JobName,
    /// A streamable-HTTP MCP server to be the client of (http:// or https://), instead of a
    /// server command.
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    pub url: Option<String>,
    /// The MCP server to start, speaking MCP on its stdin/stdout.
    #[arg(
        last = true,
        required_unless_present = "url",
        value_name = "SERVER_COMMAND"
    )]
    pub command: Vec<String>,
}

pub(super) fn mcp_cmd(db: &Option<String>, a: McpArgs) -> Result<i32> {
    if let Some(u) = &a.url {
        // The HTTP client's TLS needs the `tls` feature's provider, even for http:// URLs.
        if cfg!(not(feature = "tls")) {
            return Err(Error::Usage(
                "--url needs a build with the tls feature (this one has none)".into(),
            ));
        }
        if !(u.starts_with("http://") || u.starts_with("https://")) {
            return Err(Error::Usage(format!(
                "--url {} is not an http:// or https:// URL",
                inert(u)
            )));
        }
    }
    let config = match &a.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let dur = config.gateway_lease()?;
    let mut store = open(db)?;
    let owner = lease::default_owner();
    let waited_until = std::time::Instant::now() + config.lease_wait()?;
    let token = loop {
        match lease::claim(&mut store, &a.name, &owner, dur)? {
            lease::Claim::Won { token } => break token,
            lease::Claim::Held { owner, until, .. } => {
                if std::time::Instant::now() >= waited_until {
                    eprintln!(
                        "exactly: another gateway ({}) holds the lease of {} until {}; \
                         set wait_for_lease in the file to wait for it",
                        inert(&owner),
                        inert(&a.name),
                        time::fmt(until)
                    );
                    return Ok(3);
                }
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
        }
    };
    // A gateway started again (each MCP client session starts one) remembers its tokens too.
    if let token_memory::Seen::Below { highest, file } =
        token_memory::claimed(&mut store, &a.name, token.get())
    {
        return leases::refuse_claim(&mut store, &a.name, token, highest, &file);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let renewer = {
        // Reopened as the gateway opened it: `db_name` hides a PostgreSQL password.
        let (stop, job, db) = (stop.clone(), a.name.clone(), crate::reopener(&store));
        std::thread::spawn(move || renew(&db, &job, token, dur, &stop))
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the gateway's runtime", e))?;
    let served = rt.block_on(gateway::serve(gateway::Options {
        db: db.clone(),
        name: a.name.clone(),
        token,
        config,
        command: a.command,
        url: a.url,
    }));
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    stop.store(true, Ordering::SeqCst);
    let _ = renewer.join();
    lease::release(&mut store, &a.name, token)?;
    served.map(|()| 0)
}

/// Renews the gateway's lease a third of the way through, until told to stop.
fn renew(
    db: &crate::StoreOpener,
    job: &crate::JobName,
    token: crate::Token,
    dur: std::time::Duration,
    stop: &AtomicBool,
) {
    let every = dur / lease::RENEWALS_PER_LEASE;
    let mut next = std::time::Instant::now() + every;
    let mut store = None;
    let mut told = false;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(100));
        if std::time::Instant::now() < next {
            continue;
        }
        next = std::time::Instant::now() + every;
        if store.is_none() {
            // Tried again at each renewal (a server restarting comes back), said once: an
            // unrenewed lease is taken by the next claim and this gateway's writes fenced.
            match db.open() {
                Ok(s) => store = Some(s),
                Err(e) if !told => {
                    told = true;
                    eprintln!(
                        "exactly: the gateway cannot open the database to renew its lease of \
                         {}: {}",
                        inert(job),
                        inert(&e.to_string())
                    );
                }
                Err(_) => {}
            }
        }
        let Some(s) = store.as_mut() else { continue };
        match lease::renew(s, job, token, dur) {
            Ok(true) => {}
            Ok(false) => {
                eprintln!(
                    "exactly: the gateway's lease of {} is no longer under its token (taken \
                     over, or raised by a database failover); its writes are fenced",
                    inert(job)
                );
                return;
            }
            Err(e) => eprintln!(
                "exactly: renewing the gateway's lease: {}",
                inert(&e.to_string())
            ),
        }
    }
}
