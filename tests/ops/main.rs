//! What an operator uses: metrics and alert rules, health and JSON commands, the command line's
//! manners, the shipped samples, the toolbox, and README's runnable blocks.

#[path = "../support/mod.rs"]
mod support;

mod commands;
mod doctor;
mod health;
mod json;
mod manners;
mod prometheus_rules;
mod readme_blocks;
mod samples;
mod toolbox;
