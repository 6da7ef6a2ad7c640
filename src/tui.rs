//! The dashboard (`exactly top`). (Being built: see issue 4.)
use crate::{Error, Result};
use clap::Args;

#[derive(Args, Debug)]
pub struct TopArgs {
    #[arg(long, default_value = "1s")]
    pub refresh: String,
    #[arg(long)]
    pub read_only: bool,
    #[arg(long)]
    pub no_color: bool,
}

pub fn top_main(_db: &Option<String>, _a: TopArgs) -> Result<i32> {
    Err(Error::Store("this command is not built yet".into()))
}
