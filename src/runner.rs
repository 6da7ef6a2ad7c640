//! The scheduler (`exactly run`) and its operator controls. (Being built: see issue 3.)
use crate::{Error, Result};
use clap::Args;

#[derive(Args, Debug)]
pub struct RunArgs {
    pub jobs: String,
    #[arg(long)]
    pub owner: Option<String>,
}
#[derive(Args, Debug)]
pub struct CheckArgs {
    pub jobs: String,
}
#[derive(Args, Debug)]
pub struct TriggerArgs {
    pub job: String,
}
#[derive(Args, Debug)]
pub struct PauseArgs {
    pub job: String,
    #[arg(long)]
    pub note: Option<String>,
}
#[derive(Args, Debug)]
pub struct ResumeArgs {
    pub job: String,
}
#[derive(Args, Debug)]
pub struct BackfillArgs {
    pub job: String,
    #[arg(long)]
    pub from: String,
    #[arg(long)]
    pub to: String,
}

fn todo() -> Result<i32> {
    Err(Error::Store("this command is not built yet".into()))
}
pub fn run_main(_db: &Option<String>, _a: RunArgs) -> Result<i32> {
    todo()
}
pub fn check_main(_db: &Option<String>, _a: CheckArgs) -> Result<i32> {
    todo()
}
pub fn trigger_main(_db: &Option<String>, _a: TriggerArgs) -> Result<i32> {
    todo()
}
pub fn pause_main(_db: &Option<String>, _a: PauseArgs) -> Result<i32> {
    todo()
}
pub fn resume_main(_db: &Option<String>, _a: ResumeArgs) -> Result<i32> {
    todo()
}
pub fn backfill_main(_db: &Option<String>, _a: BackfillArgs) -> Result<i32> {
    todo()
}
