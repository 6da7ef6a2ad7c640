//! The core through the real binary and the library: leases, fencing, the ledger, approvals,
//! concurrent callers, a person's resolution, the demo, and the tests' own database plumbing.

#[path = "../support/mod.rs"]
mod support;

mod cli;
mod concurrency_cli;
mod demo;
mod kill;
mod prop;
mod resolve_in_flight;
mod support_backend;
mod token_memory;
