//! The scenarios that need the scheduler: `deploy-restart` and `blue-green` run the real
//! `exactly run` on a jobs file whose command sends through `exactly effect`.
use super::{Harness, Tally};
use crate::{Error, Result};
use indicatif::ProgressBar;

pub fn run(
    name: &str,
    _h: &mut Harness,
    _t: &mut Tally,
    _n: u32,
    _bar: &ProgressBar,
) -> Result<()> {
    Err(Error::Store(format!(
        "scenario {name} needs the scheduler (`exactly run`), which this build does not have yet"
    )))
}
