//! Wall-clock steps, seen by the scheduler between two ticks. Slots are wall-clock instants
//! (a firing's identity is (job, slot)), so the scheduler reads the wall clock; but how much
//! time really passed comes from the monotonic clock, which NTP, an operator's `date -s` or a
//! VM resumed from a snapshot do not move. When the two disagree by more than [`STEP`], the
//! wall clock was stepped: every job's next slot is worked out again from the new time.
//!
//! - Back: a job whose cursor is ahead of the new time would stay silent until the wall clock
//!   caught up with it again (a day, for a clock that was a day fast). Its cursor goes back to
//!   the new time, so it keeps firing at its interval; a slot that was already fired before the
//!   step is a recorded duplicate when it comes round again (the firings table's key), not a
//!   second run.
//! - Forward: the slots the jump passed over are due at once, and the catch-up rules decide
//!   (those older than the job's catch-up window are recorded missed, the rest fire late).
use crate::time::{self, Ts};
use std::time::{Duration, Instant};

/// A disagreement between the two clocks beyond this is a step, not a slow tick (a tick that
/// waited on a locked database is slow on both clocks alike).
pub(super) const STEP: Duration = Duration::from_secs(2);

/// Which way the wall clock moved, and by how much more (or less) than time really passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Back(Duration),
    Forward(Duration),
}

impl Step {
    /// The WARN line's text.
    pub(super) fn describe(&self) -> String {
        let (way, by) = match self {
            Step::Back(d) => ("back", d),
            Step::Forward(d) => ("forward", d),
        };
        format!(
            "wall clock stepped {way} by {}: \
             every job's next firing is worked out again from the new time",
            // The tick's own few milliseconds are noise: whole seconds.
            time::human_ms((by.as_millis() as u64 + 500) / 1000 * 1000)
        )
    }
}

/// The two clocks as last read together.
pub(super) struct Clock {
    wall: Ts,
    mono: Instant,
}

impl Clock {
    pub(super) fn new(wall: Ts) -> Clock {
        Clock {
            wall,
            mono: Instant::now(),
        }
    }

    /// Reads the monotonic clock beside `wall` (the wall clock just read): the step since the
    /// last reading, if any, and the previous reading's instant on the new wall clock (the
    /// moment the last tick really happened, which is where a step back resumes from).
    pub(super) fn observe(&mut self, wall: Ts) -> (Option<Step>, Ts) {
        let mono = Instant::now();
        let really = mono.duration_since(self.mono);
        let really_ms = really.as_millis() as i64;
        let walled_ms = (wall - self.wall).num_milliseconds();
        let before = wall - chrono::Duration::milliseconds(really_ms);
        self.wall = wall;
        self.mono = mono;
        let off = walled_ms - really_ms;
        let step = if off.unsigned_abs() as u128 <= STEP.as_millis() {
            None
        } else if off < 0 {
            Some(Step::Back(Duration::from_millis(off.unsigned_abs())))
        } else {
            Some(Step::Forward(Duration::from_millis(off as u64)))
        };
        (step, before)
    }
}

/// Where a job's cursor goes after a step: back to the last tick's instant on the new clock
/// when the step left it in the future; unchanged otherwise (a forward step leaves the catch-up
/// rules to decide about the slots it passed over).
pub(super) fn cursor_after(step: Step, cursor: Ts, last_tick: Ts) -> Ts {
    match step {
        Step::Back(_) => cursor.min(last_tick),
        Step::Forward(_) => cursor,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Ts {
        time::parse(s).expect("test timestamp")
    }

    #[test]
    fn a_tick_is_not_a_step_but_an_hour_back_is() {
        let t0 = ts("2026-03-01T10:00:00.000Z");
        let mut c = Clock::new(t0);
        // Real time passes with the wall clock: no step.
        std::thread::sleep(Duration::from_millis(20));
        let (step, _) = c.observe(t0 + chrono::Duration::milliseconds(20));
        assert_eq!(step, None);
        // The wall clock goes back an hour between two ticks.
        let back = t0 - chrono::Duration::hours(1);
        let (step, last) = c.observe(back);
        match step {
            Some(Step::Back(d)) => assert!(d >= Duration::from_secs(3599), "{d:?}"),
            other => panic!("{other:?}"),
        }
        assert!(last <= back && back - last < chrono::Duration::seconds(1));
        // A job fired up to t0 resumes from the new time; one behind it keeps its cursor.
        assert_eq!(cursor_after(Step::Back(Duration::ZERO), t0, last), last);
        let early = back - chrono::Duration::hours(1);
        assert_eq!(cursor_after(Step::Back(Duration::ZERO), early, last), early);
        let (step, _) = c.observe(back + chrono::Duration::hours(2));
        assert!(matches!(step, Some(Step::Forward(_))), "{step:?}");
        assert!(Step::Back(Duration::from_secs(3600))
            .describe()
            .starts_with("wall clock stepped back by 1h00m:"));
    }
}
