//! PostgreSQL only: several hosts on one database (clocks, roles, TLS) and the round trips each
//! transition costs.

#[path = "../support/mod.rs"]
mod support;

mod failover_promoted;
mod failover_scheduler;
mod failover_shown;
mod failover_window;
mod fake_failover;
mod hosts;
mod round_trips;
