//! The scheduler's loop and what it leans on: the loop (`fire_loop.rs`) and one tick's working
//! set (`tick.rs`), due slots fired in batches (`batches.rs`), missed slots recorded
//! (`missed.rs`), the jobs file reloaded (`reload.rs`), the database's health
//! (`db_health.rs`), wall-clock steps (`clock_steps.rs`), the scheduler's own heartbeat
//! (`liveness.rs`), its share of a file's jobs among its peers (`share.rs`), and its watch over
//! its helper processes, the spawner and the watchdog (`supervise.rs`).
mod batches;
mod clock_steps;
mod db_health;
mod fire_loop;
pub(crate) mod liveness;
mod missed;
mod reload;
mod share;
mod supervise;
mod tick;

pub(crate) use db_health::GIVE_UP_AFTER_DEFAULT;
pub(crate) use fire_loop::{fire_until_stopped, Signals};
pub(crate) use tick::Config;
