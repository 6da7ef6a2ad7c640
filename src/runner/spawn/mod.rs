//! How a run's command is started and held so that it dies with its scheduler and stops at its
//! lease's deadline: the command line it is started with and the exec of the `exactly` binary
//! in between (`start.rs`), the spawner, the small process that starts the commands and reaps
//! them (`spawner/`), and the watchdog, the process that holds each command's group and stops
//! it at its deadline (`watchdog.rs`).
pub(crate) mod spawner;
pub(crate) mod start;
pub(crate) mod watchdog;

pub(crate) use spawner::SELF_EXEC;
pub(crate) use start::{exec_command, EXEC_ARG};
