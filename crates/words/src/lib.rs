//! The words of `exactly`, its bottom floor: what every floor above says and none of them owns.
//!
//! The identities a call could swap ([`JobName`], [`EffectKey`], [`Token`]); the states as
//! enums ([`state`]); fixed-width UTC time ([`time`]); the effect key ([`key`]); inert text
//! ([`sanitize`]); fault points ([`fault`]); who sends ([`sender`]) and who acts ([`actor`],
//! [`host`]); the cage a command runs in ([`contain`]); the rules every layer agrees on
//! ([`policy`]); when a job fires ([`schedule`]); and the errors ([`Error`]).
//!
//! This crate depends on no other crate of the workspace, so nothing here can name the store,
//! the library's operations or the application: the compiler keeps this floor. The library
//! `exactly` re-exports all of it at the same paths (`exactly::time::Ts`, `exactly::Error`,
//! `exactly::JobName`, `exactly::actor`, …).
#![warn(missing_docs)]
pub mod contain;
mod error;
pub mod fault;
mod identity;
mod ids;
pub mod key;
pub mod policy;
pub mod sanitize;
pub mod schedule;
pub mod sender;
pub mod state;
pub mod time;

pub use error::{DbSource, Error, Missing, Result};
pub use identity::{actor, actor_from, host, hostname, os_user, user};
pub use ids::{EffectKey, JobName, Token};
