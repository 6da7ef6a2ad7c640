//! The far side's client end: one request over its Unix socket, one line of answer. Both the
//! far side's own commands (`chaos/far_side.rs`) and its MCP face (`chaos/mcp_far.rs`) speak
//! through it.

use crate::Result;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// One request, one line of answer.
pub(super) fn request(socket: &Path, line: &str) -> Result<String> {
    let mut conn = UnixStream::connect(socket)?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    conn.write_all(format!("{line}\n").as_bytes())?;
    let mut out = String::new();
    BufReader::new(&conn).read_line(&mut out)?;
    Ok(out.trim_end().to_string())
}
