//! The jobs file: its text parsed (`parse.rs`) and each `[[job]]` validated (`validate.rs`)
//! into a [`Job`] (`job.rs`) with its retry policy (`retry.rs`) and daylight-saving policy
//! (`dst_policy.rs`), its `[[notify]]` tables (`notify_config.rs`), every mistake a
//! [`Problem`] placed on its line (`problem.rs`, `positions.rs`); the lint and all that
//! `exactly check` says of a file (`lint.rs`, `check.rs`); and each job's definition as the
//! registry keeps it (`definitions.rs`).
pub mod check;
pub mod definitions;
pub mod dst_policy;
pub mod job;
pub mod lint;
pub mod notify_config;
pub mod parse;
pub mod positions;
pub mod problem;
pub mod retry;
mod validate;

pub use parse::parse;
pub use problem::Severity;
