//! `cargo xtask bench`: the performance measures of SPEC §12.
//!
//! Placeholder: the benchmark needs the daemon's request path, so it arrives with it.

use anyhow::{Result, bail};

pub(crate) fn run() -> Result<()> {
    bail!("the benchmark arrives with the daemon front (SPEC §12); there is nothing to measure yet")
}
