//! The `exactly` command: the command line, the scheduler (`exactly run`), the dashboard
//! (`exactly top`), the chaos harness and the demo. It is an application of the `exactly`
//! library and acts only through the library's operations (`src/lib.rs`).
#![warn(unreachable_pub)]
mod chaos;
mod cli;
mod demo;
mod mcp;
mod runner;
mod tui;

// The library under the names the application's modules use (`crate::lease`, `crate::open`).
use exactly::{
    actor, approval, checklist, contain, database_identity, db_exists, db_identity, db_name,
    db_path, effect, fault, firing, health, host, is_server_db, jobs, json, key, lease, may_write,
    open, policy, refuse_new_databases, reopener, sanitize, schedule, sender, shown_db, snapshot,
    state, sync_wait_bound, time, wrapped, Access, EffectKey, Error, JobName, Result, Store,
    StoreOpener, Token, SCHEMA_VERSION,
};

fn main() {
    std::process::exit(cli::main());
}
