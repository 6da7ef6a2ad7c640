use super::*;

/// A job's command (argv as TOML) that records when it started: one line per run appended to
/// `file`, "EPOCH_SECONDS JOB SLOT", from bash's own clock (`$EPOCHREALTIME`: no `date` process,
/// so the stamp is the command's first instruction). `n` makes each job's command distinct (the
/// duplicate-registration lint). One `write` with `O_APPEND` per line: runs never interleave.
pub(crate) fn stamp_command(file: &Path, n: usize) -> Res<String> {
    let script = format!(
        "echo \"$EPOCHREALTIME $EXACTLY_JOB $EXACTLY_SCHEDULED_AT\" >> {}",
        shell_quote(path_str(file)?)
    );
    let toml = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    Ok(format!(
        "[\"bash\", \"-c\", {}, \"stamp\", \"{n}\"]",
        toml(&script)
    ))
}

/// One run's stamp: (job, slot as written, command start minus slot in ms).
pub(crate) struct Stamp {
    pub(crate) job: String,
    pub(crate) slot: String,
    pub(crate) slot_ms: i64,
    pub(crate) lag_ms: f64,
}

/// The stamps in `file` (a line that does not parse is an error: a run wrote it half).
pub(crate) fn read_stamps(file: &Path) -> Res<Vec<Stamp>> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for line in text.lines() {
        let mut w = line.split(' ');
        let (Some(at), Some(job), Some(slot)) = (w.next(), w.next(), w.next()) else {
            return Err(format!("stamp line {line:?} is not 'SECONDS JOB SLOT'").into());
        };
        let at: f64 = at
            .replace(',', ".")
            .parse()
            .map_err(|e| format!("stamp line {line:?}: {e}"))?;
        let slot_ms = exactly::time::parse(slot)
            .ok_or_else(|| format!("stamp line {line:?}: slot is not a timestamp"))?
            .timestamp_millis();
        out.push(Stamp {
            job: job.to_string(),
            slot: slot.to_string(),
            slot_ms,
            lag_ms: at * 1000.0 - slot_ms as f64,
        });
    }
    Ok(out)
}
