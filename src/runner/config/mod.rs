//! The jobs file: its text parsed (`parse.rs`) and each `[[job]]` validated (`validate.rs`)
//! into a [`Job`] (`job.rs`) with its retry policy (`retry.rs`) and daylight-saving policy
//! (`dst_policy.rs`), its `[[notify]]` tables (`notify_config.rs`), every mistake a
//! [`Problem`] placed on its line (`problem.rs`, `positions.rs`); the lint and all that
//! `exactly check` says of a file (`lint.rs`, `check.rs`); and each job's definition as the
//! registry keeps it (`definitions.rs`).
pub(crate) mod check;
pub(crate) mod definitions;
pub(crate) mod dst_policy;
pub(crate) mod job;
pub(crate) mod lint;
pub(crate) mod notify_config;
pub(crate) mod parse;
pub(crate) mod positions;
pub(crate) mod problem;
pub(crate) mod retry;
mod validate;

pub(crate) use parse::parse;
pub(crate) use problem::Severity;
