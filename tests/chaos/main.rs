//! `exactly chaos`: its scenarios, the scheduler's, and the harness's own ability to fail.

#[path = "../support/mod.rs"]
mod support;

mod failover;
mod scenarios;
mod sched;
mod selfcheck;
