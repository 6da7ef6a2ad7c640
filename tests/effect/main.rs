//! `exactly effect` and the ledger under it: answers to lost replies, the interleaving proof, the
//! one-transaction path, the process and its signals, the sender's faults.

#[path = "../support/mod.rs"]
mod support;

mod answers;
mod commits;
mod escape;
mod interleave;
mod one_transaction;
mod probe;
mod process;
mod sender;
