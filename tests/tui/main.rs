//! The dashboard, `exactly top`, driven in a real terminal (tmux).

mod tmux;
