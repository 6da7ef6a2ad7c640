//! The scheduler's log, through `tracing`: one line per event on stderr, filtered by `RUST_LOG`
//! (default `info`), as text (`2026-12-01T23:00:00.000Z WARN job=name message`) or as one JSON
//! object per line (`--log-format json`, `EXACTLY_LOG_FORMAT=json`).
//!
//! An event names its job in the field `job` (`tracing::warn!(job = %name, "…")`); an event of
//! no one job leaves it out (`job=-` in text). The job and the message are made inert for a
//! terminal ([`crate::sanitize::inert`]): a job's output quoted in a message cannot move the
//! cursor of whoever tails the log.
use crate::sanitize::inert;
use std::fmt::Write as _;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::{format, FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// `TIME LEVEL job=JOB message`, for people and `grep`.
    #[default]
    Text,
    /// One JSON object per line: `time`, `level`, `job` (when the event has one), `message`.
    Json,
}

/// The variable that chooses the format where no `--log-format` is given.
pub(crate) const FORMAT_VAR: &str = "EXACTLY_LOG_FORMAT";

impl LogFormat {
    /// The format `EXACTLY_LOG_FORMAT` names (`json`, else text).
    pub(crate) fn from_env() -> LogFormat {
        match std::env::var(FORMAT_VAR) {
            Ok(v) if v.trim().eq_ignore_ascii_case("json") => LogFormat::Json,
            _ => LogFormat::Text,
        }
    }
}

/// Installs the process's one log subscriber: `RUST_LOG` filters (default `info`, `warn` for
/// the MCP SDK; a directive it cannot read is left out), lines go to stderr in `format`. A
/// second call changes nothing.
pub(crate) fn init(format: LogFormat) {
    let mut filter = EnvFilter::builder()
        .with_default_directive(Level::INFO.into())
        .from_env_lossy();
    // The MCP SDK's own lines (`exactly mcp`) say every message passed; its warnings stay.
    if std::env::var_os("RUST_LOG").is_none() {
        if let Ok(d) = "rmcp=warn".parse() {
            filter = filter.add_directive(d);
        }
    }
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // A closed stderr (`exactly run 2>&1 | head`) loses the log, never the scheduler.
        .with_writer(std::io::stderr)
        .event_format(Lines(format))
        .finish();
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// One event at a level chosen at run time (`tracing`'s macros take a fixed one).
pub(crate) fn line(level: Level, job: &str, msg: &str) {
    match level {
        Level::ERROR => tracing::error!(job = %job, "{msg}"),
        Level::WARN => tracing::warn!(job = %job, "{msg}"),
        Level::INFO => tracing::info!(job = %job, "{msg}"),
        Level::DEBUG => tracing::debug!(job = %job, "{msg}"),
        _ => tracing::trace!(job = %job, "{msg}"),
    }
}

/// The level a word names (`"WARN"`), else INFO.
pub(crate) fn level(word: &str) -> Level {
    word.parse().unwrap_or(Level::INFO)
}

/// The event formatter of both formats.
struct Lines(LogFormat);

/// An event's fields: its job, its message, and any other field as `name=value`.
#[derive(Default)]
struct Fields {
    job: Option<String>,
    message: String,
    rest: Vec<(String, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, format!("{value:?}"));
    }
}

impl Fields {
    fn put(&mut self, field: &Field, value: String) {
        match field.name() {
            "message" => self.message = value,
            "job" => self.job = Some(value),
            name => self.rest.push((name.to_string(), value)),
        }
    }
}

impl<S, N> FormatEvent<S, N> for Lines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: format::Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let mut f = Fields::default();
        event.record(&mut f);
        let level = event.metadata().level();
        writeln!(
            writer,
            "{}",
            render(self.0, &crate::time::now_text(), level, &f)
        )
    }
}

/// One event as its line (without the newline).
fn render(format: LogFormat, time: &str, level: &Level, f: &Fields) -> String {
    let mut message = f.message.clone();
    for (name, value) in &f.rest {
        let _ = write!(message, " {name}={value}");
    }
    let message = inert(&message);
    let job = f.job.as_deref().map(inert);
    match format {
        LogFormat::Text => {
            format!(
                "{time} {level} job={} {message}",
                job.as_deref().unwrap_or("-")
            )
        }
        LogFormat::Json => {
            let s = |v: &str| serde_json::Value::from(v).to_string();
            let job = job
                .map(|j| format!(",\"job\":{}", s(&j)))
                .unwrap_or_default();
            format!(
                "{{\"time\":{},\"level\":{}{job},\"message\":{}}}",
                s(time),
                s(level.as_str()),
                s(&message)
            )
        }
    }
}

/// How often a repeating warning is said again, with its count.
pub(crate) const REPEAT_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// A warning that may repeat every few seconds (a heartbeat on a full disk): said once, then at
/// most once every [`REPEAT_EVERY`] with how many times it happened since, and its end once.
pub(crate) struct Repeating {
    what: &'static str,
    said_at: Option<std::time::Instant>,
    since: u64,
}

impl Repeating {
    /// `what`: the line's prefix (`heartbeat`).
    pub(crate) fn new(what: &'static str) -> Repeating {
        Repeating {
            what,
            said_at: None,
            since: 0,
        }
    }

    /// It failed again with `e`: said now if it is new or a minute has passed.
    pub(crate) fn failed(&mut self, e: &dyn std::fmt::Display) {
        let now = std::time::Instant::now();
        match self.said_at {
            None => {
                tracing::warn!("{}: {e} (said again at most once a minute)", self.what);
                self.said_at = Some(now);
                self.since = 0;
            }
            Some(t) if now.duration_since(t) >= REPEAT_EVERY => {
                tracing::warn!(
                    "{}: {e} ({} times in the last {})",
                    self.what,
                    self.since + 1,
                    crate::time::human_ms(now.duration_since(t).as_millis() as u64)
                );
                self.said_at = Some(now);
                self.since = 0;
            }
            Some(_) => self.since += 1,
        }
    }

    /// It worked: its end is said once, with the failures not said.
    pub(crate) fn ok(&mut self) {
        if self.said_at.take().is_some() {
            tracing::info!(
                "{}: working again ({} more failure(s) since last said)",
                self.what,
                self.since
            );
            self.since = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(job: Option<&str>, message: &str) -> Fields {
        Fields {
            job: job.map(str::to_string),
            message: message.to_string(),
            rest: Vec::new(),
        }
    }

    #[test]
    fn text_is_todays_line_and_inert() {
        let t = "2026-12-01T23:00:00.000Z";
        let f = fields(Some("nightly\u{1b}[2J"), "run 3 ended\nby signal 9");
        assert_eq!(
            render(LogFormat::Text, t, &Level::WARN, &f),
            "2026-12-01T23:00:00.000Z WARN job=nightly run 3 ended by signal 9"
        );
        assert_eq!(
            render(LogFormat::Text, t, &Level::INFO, &fields(None, "stopped")),
            "2026-12-01T23:00:00.000Z INFO job=- stopped"
        );
    }

    #[test]
    fn json_is_one_object_with_time_level_job_and_message() {
        let f = fields(Some("a \"b\""), "done");
        let line = render(LogFormat::Json, "T", &Level::ERROR, &f);
        let v: serde_json::Value = serde_json::from_str(&line).expect("json");
        assert_eq!(v["time"], "T");
        assert_eq!(v["level"], "ERROR");
        assert_eq!(v["job"], "a \"b\"");
        assert_eq!(v["message"], "done");
        let v: serde_json::Value = serde_json::from_str(&render(
            LogFormat::Json,
            "T",
            &Level::INFO,
            &fields(None, "x"),
        ))
        .expect("json");
        assert!(v.get("job").is_none(), "{v}");
    }

    #[test]
    fn level_words_are_tracings() {
        assert_eq!(level("WARN"), Level::WARN);
        assert_eq!(level("ERROR"), Level::ERROR);
        assert_eq!(level("nonsense"), Level::INFO);
    }
}
