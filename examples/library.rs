//! Adoption path 3: call the library from your own program.
//!
//! `cargo run --example library -- /tmp/lib.db` claims the job's lease, then sends a "payment"
//! to a far side (a file) under the ledger's guard. Run it twice: the second run suppresses
//! the duplicate instead of paying again.
use exactly::effect::{self, Ctx, Effect, Failure, Observation, Outcome, Spec};
use exactly::{lease, JobName, Store};
use std::io::Write;
use std::time::Duration;

/// The far side: appends a line per payment; observable after the fact by reading it back.
struct Pay {
    ledger_file: String,
}

impl Effect for Pay {
    fn perform(&mut self, effect_key: &str) -> Result<String, Failure> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.ledger_file)
            .map_err(|e| Failure::NotSent(e.to_string()))?;
        writeln!(f, "{effect_key} paid 120.00 EUR").map_err(|e| Failure::Lost(e.to_string()))?;
        Ok(format!("payment {effect_key} accepted"))
    }

    fn observe(&mut self, effect_key: &str) -> Observation {
        match std::fs::read_to_string(&self.ledger_file) {
            Ok(s) if s.lines().any(|l| l.starts_with(effect_key)) => Observation::Happened(None),
            Ok(_) => Observation::NotHappened,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Observation::NotHappened,
            Err(e) => Observation::CantTell(e.to_string()),
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "exactly.db".into());
    let mut store = Store::open(&db)?;
    let job = JobName::from("monthly-rent");
    let token = match lease::claim(&mut store, &job, "example", Duration::from_secs(60))? {
        lease::Claim::Won { token } => token,
        lease::Claim::Held { owner, .. } => {
            println!("another worker ({owner}) holds the lease; nothing to do");
            return Ok(());
        }
    };
    // The key covers what changes the consequence: payee, amount, month. Not the run.
    let spec = Spec::new("pay-rent", "landlord-7")
        .input("amount", "120.00")
        .input("currency", "EUR")
        .input("month", "2026-11");
    let mut pay = Pay {
        ledger_file: format!("{db}.far-side.txt"),
    };
    let outcome = effect::run(&mut store, &Ctx::new(&job, token), &spec, &mut pay)?;
    match &outcome {
        Outcome::Done { response, .. } => println!("done: {response}"),
        Outcome::DuplicateSuppressed { .. } => println!("duplicate suppressed: already paid"),
        other => println!("{other:?}"),
    }
    lease::release(&mut store, &job, token)?;
    Ok(())
}
