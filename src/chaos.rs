//! The kill-mid-effect harness (`exactly chaos`). (Being built: see issue 5.)
use crate::{Error, Result};
use clap::Args;

#[derive(Args, Debug)]
pub struct ChaosArgs {
    #[arg(long, default_value_t = 100)]
    pub iterations: u32,
    #[arg(long)]
    pub json: bool,
}

pub fn chaos_main(_db: &Option<String>, _a: ChaosArgs) -> Result<i32> {
    Err(Error::Store("this command is not built yet".into()))
}
