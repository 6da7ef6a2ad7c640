//! Tests of the store (crates/store) that read through the floors above it: the snapshot a
//! reading becomes, the jobs' rules. They lived beside the store's code until the store became
//! a crate of its own, which cannot name the library.
mod bad_times;
mod clock;
mod read;
mod windows;
