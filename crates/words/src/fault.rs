//! Named fault points in the real code path. `EXACTLY_FAULT=after_send:pause=200ms` makes the
//! process announce `exactly-fault: after_send` on stderr and pause there, so a harness can
//! `SIGKILL` it at exactly that line; `EXACTLY_FAULT=after_send:kill` kills itself there.
//! Several specs may be joined with `,`. `EXACTLY_FAULT=finish_reply_lost` loses the reply to
//! the COMMIT that records an effect's outcome, once (see `Store::lose_next_reply`).

/// A named point in the real code path, as `EXACTLY_FAULT` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// `claimed` is committed and nothing is sent. An effect that reserves and submits in one
    /// transaction has no such moment, so an attempt told to stop here reserves in a
    /// transaction of its own (the path every effect awaiting approval takes).
    AfterClaim,
    /// `submitted` is committed; the far side has not been called.
    AfterSubmitted,
    /// The far side answered; the outcome is not recorded yet.
    AfterSend,
    /// `done` is committed.
    AfterDone,
    /// The reply to the COMMIT that records an effect's outcome is lost, once.
    FinishReplyLost,
    /// A scheduler's heartbeat.
    Heartbeat,
    /// A run's end is recorded (`run_end:fail=DUR`: it cannot be, for that long).
    RunEnd,
    /// A run's command is about to be handed to the spawner (`before_spawn:pause=DUR`: the
    /// scheduler is slow to start it, which its run's start lag shows).
    BeforeSpawn,
    /// The schema of a new (or older) SQLite database is written, not yet committed: another
    /// process opening the file now finds it without tables.
    SchemaCreate,
    /// The spawner started a run's command and has not said so yet (`spawner_reply:pause=DUR`:
    /// a spawner slow to answer; the run still counts from its command's own start).
    SpawnerReply,
    /// The scheduler is about to hand a run it won to the thread that starts its command
    /// (`hand_off:pause=DUR`, once per run: a scheduler slow to start a burst, as on a small
    /// machine busy starting the burst's processes).
    HandOff,
}

impl Point {
    /// The points an effect passes, in order.
    pub const EFFECT: [Point; 4] = [
        Point::AfterClaim,
        Point::AfterSubmitted,
        Point::AfterSend,
        Point::AfterDone,
    ];

    /// The point's name in `EXACTLY_FAULT`.
    pub fn name(self) -> &'static str {
        match self {
            Point::AfterClaim => "after_claim",
            Point::AfterSubmitted => "after_submitted",
            Point::AfterSend => "after_send",
            Point::AfterDone => "after_done",
            Point::FinishReplyLost => "finish_reply_lost",
            Point::Heartbeat => "heartbeat",
            Point::RunEnd => "run_end",
            Point::BeforeSpawn => "before_spawn",
            Point::SchemaCreate => "schema_create",
            Point::SpawnerReply => "spawner_reply",
            Point::HandOff => "hand_off",
        }
    }
}

/// `EXACTLY_FAULT`, read once per process: points sit on every write path, and reading the
/// environment takes a lock and a scan each time.
fn spec() -> Option<&'static str> {
    static SPEC: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    SPEC.get_or_init(|| std::env::var("EXACTLY_FAULT").ok())
        .as_deref()
}

/// Whether `EXACTLY_FAULT` names the point (a caller with two ways to do something takes the
/// one that passes it).
pub fn armed(point: Point) -> bool {
    let name = point.name();
    spec().is_some_and(|spec| {
        spec.split(',')
            .any(|part| part.split_once(':').map_or(part, |(p, _)| p).trim() == name)
    })
}

/// Whether `EXACTLY_FAULT` names the point, true the first time it is asked only: a fault
/// that stands for a one-off event (a reply lost on the network) must let the retry through.
pub fn once(point: Point) -> bool {
    static FIRED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    armed(point) && !FIRED.swap(true, std::sync::atomic::Ordering::SeqCst)
}

/// How long the point fails, when `EXACTLY_FAULT` says `NAME:fail=DUR` (e.g. a run's end that
/// cannot be recorded for 1.5 s after its first try: `run_end:fail=1500ms`).
pub fn fails_for(point: Point) -> Option<std::time::Duration> {
    let name = point.name();
    spec()?.split(',').find_map(|part| {
        let (point, action) = part.split_once(':')?;
        let d = action.trim().strip_prefix("fail=")?;
        (point.trim() == name)
            .then(|| crate::time::parse_duration(d).ok())
            .flatten()
    })
}

/// Called at each named point; does nothing unless `EXACTLY_FAULT` names it.
pub fn point(point: Point) {
    if let Some(spec) = spec() {
        act(spec, point.name());
    }
}

/// A point of another program's, named by it, whose spec is read from `var` (the chaos far
/// side's client has its own points and variable).
pub fn point_of(var: &str, name: &str) {
    if let Ok(spec) = std::env::var(var) {
        act(&spec, name);
    }
}

/// Does what `spec` says at the point `name`, if it names it.
fn act(spec: &str, name: &str) {
    for part in spec.split(',') {
        let (point, action) = part.split_once(':').unwrap_or((part, "pause=0ms"));
        if point.trim() != name {
            continue;
        }
        eprintln!("exactly-fault: {name}");
        let action = action.trim();
        if action == "kill" {
            // SAFETY: raising a signal on ourselves has no memory-safety preconditions.
            unsafe {
                libc::raise(libc::SIGKILL);
            }
        } else if let Some(d) = action.strip_prefix("pause=") {
            if let Ok(d) = crate::time::parse_duration(d) {
                std::thread::sleep(d);
            }
        }
    }
}
