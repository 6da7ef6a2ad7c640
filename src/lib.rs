//! `exactly` — exactly-once *effect* for scheduled jobs and agents.
//!
//! A second run of a job can do nothing new and cannot pretend it did:
//! - a [lease] per job, claimed in one atomic statement, with a monotonic fencing token;
//! - an [effect key](key::effect_key) derived from the facts acted on, not the run;
//! - an [effect ledger](effect) with four states, `unknown` among them, settled before any retry;
//! - [approvals](approval) stored against the effect key and consumed once;
//! - counters and a [`snapshot::Snapshot`] the dashboard, `status` and `metrics` render.
//!
//! ```no_run
//! use exactly::{effect, lease, JobName, Store};
//! use exactly::effect::{Effect, Failure, Observation, Spec};
//!
//! struct SendInvoice;
//! impl Effect for SendInvoice {
//!     fn perform(&mut self, effect_key: &str) -> Result<String, Failure> {
//!         // call the far side, passing effect_key as its idempotency key
//!         Ok(format!("sent {effect_key}"))
//!     }
//!     fn observe(&mut self, _effect_key: &str) -> Observation {
//!         // ask the far side whether it already has this effect
//!         Observation::NotHappened
//!     }
//! }
//!
//! # fn main() -> Result<(), exactly::Error> {
//! let mut store = Store::open("exactly.db")?;
//! let job = JobName::from("invoices");
//! let token = match lease::claim(
//!     &mut store,
//!     &job,
//!     "worker-1",
//!     std::time::Duration::from_secs(60),
//! )? {
//!     lease::Claim::Won { token } => token,
//!     lease::Claim::Held { .. } => return Ok(()), // someone else runs it
//! };
//! let ctx = effect::Ctx::new(&job, token);
//! let spec = Spec::new("send-invoice", "customer-42")
//!     .input("amount", "120.00")
//!     .input("month", "2026-11");
//! let outcome = effect::run(&mut store, &ctx, &spec, &mut SendInvoice)?;
//! println!("{outcome:?}");
//! lease::release(&mut store, &job, token)?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
pub mod approval;
#[cfg(test)]
mod boundary;
pub mod checklist;
mod database;
pub mod effect;
pub mod firing;
pub mod health;
pub mod jobs;
pub mod json;
pub mod lease;
pub mod metrics;
pub mod snapshot;
pub mod status;
#[cfg(test)]
mod store_tests;
pub mod wrapped;

/// The store, the floor above the words: its own crate (`crates/store`), here at the path the
/// library has always named it by.
use exactly_store as store;

/// The words, the floor below the store: their own crate (`crates/words`), here at the paths
/// they always had.
pub use exactly_words::{contain, fault, key, policy, sanitize, schedule, sender, state, time};

/// The database handle: opaque; every operation on it is a library function in the domain
/// modules ([`lease`], [`effect`], [`approval`], [`jobs`], [`firing`], [`metrics`]).
pub use store::{sync_wait_bound, Access, Store, StoreOpener, SCHEMA_VERSION};

pub use database::{
    database_identity, db_exists, db_identity, db_name, db_path, is_server_db, may_write, open,
    read_plans, refuse_new_databases, reopener, shown_db, state_dir, writable,
};
pub use exactly_words::{actor, actor_from, host, hostname, os_user, user};
pub use exactly_words::{DbSource, EffectKey, Error, JobName, Missing, Result, Token};
