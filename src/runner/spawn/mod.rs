//! How a run's command is started so that it dies with its scheduler: the command line it is
//! started with and the exec of the `exactly` binary in between (`start.rs`), and the spawner,
//! the small process that starts the commands and reaps them (`spawner/`).
pub mod spawner;
pub mod start;

pub use spawner::SELF_EXEC;
pub use start::{exec_command, EXEC_ARG};
