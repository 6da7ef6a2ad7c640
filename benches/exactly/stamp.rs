use super::*;

/// The jobs' command: a tiny C program that appends its own start time (wall clock, first
/// thing in `main`), the slot it was started for and its job to a file, in one write so the
/// lines of concurrent commands never mix. Compiled once per bench run with `cc` (the linker
/// the Rust toolchain already needs). With `EXACTLY_BENCH_STAMP_CGROUP` set it also writes the
/// cgroup it runs in (v2 path, then v1 freezer path, `-` for none), read after the clock so
/// the start it records is not delayed: how the containment part checks each run's cage.
const STAMP_C: &str = r#"#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static void cgroups(char *v2, char *v1, size_t cap) {
    char buf[4096];
    int fd = open("/proc/self/cgroup", O_RDONLY);
    if (fd < 0) return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return;
    buf[n] = 0;
    for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n")) {
        char *a = strchr(l, ':');
        char *b = a ? strchr(a + 1, ':') : NULL;
        if (!b) continue;
        *b = 0;
        if (a[1] == 0) snprintf(v2, cap, "%s", b + 1);
        else if (strstr(a + 1, "freezer")) snprintf(v1, cap, "%s", b + 1);
    }
}
int main(int argc, char **argv) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (argc < 2) return 2;
    const char *slot = getenv("EXACTLY_SCHEDULED_AT");
    const char *job = getenv("EXACTLY_JOB");
    char v2[200] = "-", v1[200] = "-";
    if (getenv("EXACTLY_BENCH_STAMP_CGROUP")) cgroups(v2, v1, sizeof v2);
    char line[1024];
    int n = getenv("EXACTLY_BENCH_STAMP_CGROUP")
        ? snprintf(line, sizeof line, "%lld%09ld %s %s %s %s\n", (long long)ts.tv_sec,
                   ts.tv_nsec, slot ? slot : "-", job ? job : "-", v2, v1)
        : snprintf(line, sizeof line, "%lld%09ld %s %s\n", (long long)ts.tv_sec, ts.tv_nsec,
                   slot ? slot : "-", job ? job : "-");
    if (n < 0 || n >= (int)sizeof line) return 1;
    int fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) return 1;
    return write(fd, line, n) == n ? 0 : 1;
}
"#;

/// The compiled stamp program (built on first use).
fn stamp_program() -> Res<PathBuf> {
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = bench_dir().map_err(|e| e.to_string())?;
            let src = dir.join("stamp.c");
            let bin = dir.join("stamp");
            std::fs::write(&src, STAMP_C).map_err(|e| e.to_string())?;
            let out = Command::new("cc")
                .args(["-O2", "-o"])
                .arg(&bin)
                .arg(&src)
                .output()
                .map_err(|e| format!("cannot run cc to build the stamp command: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "cc failed to build the stamp command: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Ok(bin)
        })
        .clone()
        .map_err(Into::into)
}

/// A command (argv) that records when it started (see [`STAMP_C`]).
pub(crate) fn stamp_argv(file: &Path) -> Res<Vec<String>> {
    Ok(vec![
        path_str(&stamp_program()?)?.to_string(),
        path_str(file)?.to_string(),
    ])
}

/// [`stamp_argv`] as a TOML array for a jobs file; `n` makes each job's command distinct (the
/// duplicate-registration lint).
pub(crate) fn stamp_command(file: &Path, n: usize) -> Res<String> {
    let mut argv = stamp_argv(file)?;
    argv.push(n.to_string());
    let toml = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let items: Vec<String> = argv.iter().map(|a| toml(a)).collect();
    Ok(format!("[{}]", items.join(", ")))
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
        let (Some(ns), Some(slot), Some(job)) = (w.next(), w.next(), w.next()) else {
            return Err(format!("stamp line {line:?} is not 'NANOSECONDS SLOT JOB'").into());
        };
        let at: f64 = ns
            .parse::<f64>()
            .map_err(|e| format!("stamp line {line:?}: {e}"))?
            / 1e9;
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
