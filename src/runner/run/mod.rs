//! One run of a firing: its spec (`spec.rs`) and its course (`execute.rs`, what comes before
//! its command in `before.rs`): the lease held and
//! the end recorded (`hold.rs`, renewed for all runs at once by `renewer.rs`), database
//! connections lent for a moment (`lend.rs`), its output (`output.rs`), the processes an earlier
//! run of the firing left (`procs.rs`) and its dead man's switch (`ping.rs`).
mod before;
pub(crate) mod execute;
mod hold;
pub(crate) mod lend;
mod output;
pub(crate) mod ping;
pub(crate) mod procs;
mod renewer;
pub(crate) mod spec;
