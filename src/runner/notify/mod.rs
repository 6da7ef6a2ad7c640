//! The `[[notify]]` rules at work: the notifier that evaluates them and sends each notification
//! once through the effect ledger (`notifier.rs`), one delivery by hook or webhook (`send.rs`),
//! and `exactly watch`, a host that only notifies (`watch.rs`). The tables themselves are
//! parsed in `config/notify_config.rs`.
pub(crate) mod notifier;
mod send;
pub(crate) mod watch;
