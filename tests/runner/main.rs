//! The scheduler, `exactly run`, with real processes on real jobs files and databases.

#[path = "../support/mod.rs"]
mod support;

mod ahead;
mod approval;
mod burst;
mod cages;
mod capacity;
mod check;
mod clock;
mod controls;
mod definitions;
mod faults;
mod helpers;
mod lease;
mod lease_warnings;
mod log;
mod notify;
mod outage;
mod overlap;
mod ping;
mod policy;
mod reload;
mod resume;
mod share;
mod spawner;
mod timeout;
mod two_schedulers;
