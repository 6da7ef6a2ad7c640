//! The dashboard's tests: fixture databases written through the library with a pinned clock
//! (`fixture.rs`), every view drawn into ratatui's `TestBackend` and compared with the accepted
//! screens in `snapshots/` (`screens.rs`), and the keys an operator types checked against the
//! rows they change (`keys.rs`).
mod checklist;
mod drive;
mod fixture;
mod hostile;
mod keys;
mod screens;
mod watch;
