//! The live demo (`exactly demo`). (Being built: see issue 6.)
use crate::{Error, Result};
use clap::Args;

#[derive(Args, Debug)]
pub struct DemoArgs {
    #[arg(long)]
    pub no_ui: bool,
    #[arg(long = "for")]
    pub dur: Option<String>,
}

pub fn demo_main(_db: &Option<String>, _a: DemoArgs) -> Result<i32> {
    Err(Error::Store("this command is not built yet".into()))
}
