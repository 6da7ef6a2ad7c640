//! `exactly metrics`: the snapshot as OpenMetrics/Prometheus text, printed or served.
use super::*;

#[derive(Args, Debug)]
pub(crate) struct MetricsArgs {
    /// Serve /metrics over HTTP on this address (e.g. 127.0.0.1:9464) until interrupted; each
    /// scrape reads a fresh snapshot (the ten rules are judged again at most every 15 s, and
    /// on a large ledger at most 1/50 of the time).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Print OpenMetrics text (with `# EOF`) instead of the Prometheus text format.
    #[arg(long)]
    pub openmetrics: bool,
}

pub(super) const OPENMETRICS_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub(super) const TEXT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub(super) fn metrics_cmd(db: &Option<String>, a: MetricsArgs) -> Result<i32> {
    // A server keeps the last judgement of the ten rules and judges again at the pace the
    // dashboard does: on a million-row ledger a judgement takes seconds, and a scrape comes
    // every 15 s. Each scrape reads a fresh snapshot.
    let mut pace = crate::checklist::Pace::default();
    let mut judged: Option<crate::checklist::Checklist> = None;
    let mut render = |openmetrics: bool| -> Result<String> {
        let mut store = open_read_only(db)?;
        let snap = Snapshot::read(&mut store)?;
        if judged.is_none() || pace.due(true) {
            judged = Some(pace.check(&mut store, &Default::default())?);
        }
        let checklist = judged.as_ref();
        Ok(if openmetrics {
            snap.to_openmetrics_with(checklist)
        } else {
            snap.to_prometheus_with(checklist)
        })
    };
    let Some(addr) = a.listen else {
        print!("{}", render(a.openmetrics)?);
        return Ok(0);
    };
    // Refuse a database that cannot be read before listening, not at the first scrape.
    render(false)?;
    let server = tiny_http::Server::http(addr.as_str())
        .map_err(|e| Error::Usage(format!("cannot listen on {}: {e}", inert(&addr))))?;
    eprintln!("exactly: serving http://{}/metrics", inert(&addr));
    for req in server.incoming_requests() {
        let path = req.url().split('?').next().unwrap_or("");
        let reply = if path != "/metrics" {
            tiny_http::Response::from_string("not found; try /metrics\n").with_status_code(404)
        } else {
            // Prometheus asks for OpenMetrics in Accept when it wants it.
            let om = req.headers().iter().any(|h| {
                h.field.equiv("Accept") && h.value.as_str().contains("application/openmetrics-text")
            });
            match render(om) {
                Ok(body) => {
                    let ct = if om { OPENMETRICS_TYPE } else { TEXT_TYPE };
                    let mut r = tiny_http::Response::from_string(body);
                    if let Ok(h) = tiny_http::Header::from_bytes("Content-Type", ct) {
                        r = r.with_header(h);
                    }
                    r
                }
                // A scrape that fails says why; the next scrape tries again.
                Err(e) => tiny_http::Response::from_string(format!("exactly: {e}\n"))
                    .with_status_code(503),
            }
        };
        if let Err(e) = req.respond(reply) {
            eprintln!("exactly: metrics: could not answer a scrape: {e}");
        }
    }
    Ok(0)
}
