//! The dashboard, `exactly top`, driven in a real terminal (tmux).

#[path = "../support/mod.rs"]
mod support;

mod tmux;
