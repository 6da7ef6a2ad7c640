//! A run past its job's `timeout` is stopped: SIGTERM to its process group, SIGKILL after a
//! short grace; the run ends `timeout`, an effect it had `submitted` becomes `unknown`, the
//! lease is released and the next firing runs.
use crate::on_both_backends;
use crate::support;
use std::time::Duration;
use support::runner::*;

on_both_backends! {
    #[test]
    fn a_run_past_its_timeout_is_stopped_with_its_whole_process_group() {
        let site = Site::new();
        // The command ignores SIGTERM (and so does what it starts): only SIGKILL ends it.
        let cmd = sh("echo $$ > pid.$EXACTLY_FENCING_TOKEN; trap '' TERM; \
             $X effect --action send --target far --input slot=$EXACTLY_SCHEDULED_AT \
             -- sh -c 'sleep 30 & echo $! > child.$EXACTLY_FENCING_TOKEN; wait'");
        site.write_jobs(&format!(
            "[[job]]\nname = \"slow\"\nevery = \"2s\"\nlease = \"1s\"\noverlap = \"coalesce\"\n\
             timeout = \"1s\"\ncommand = {cmd}\n"
        ));
        let mut s = site.start("s", "5s");
        assert!(
            wait_until(Duration::from_secs(6), || site.exists("child.1")),
            "{}",
            site.log("s")
        );
        let (pid, child) = (pid_in(&site, "pid.1"), pid_in(&site, "child.1"));
        assert!(
            wait_until(Duration::from_secs(8), || site.count(
                "SELECT count(*) FROM exactly_runs WHERE fencing_token = 1 AND ended_at IS NOT NULL"
            ) == 1),
            "the run never ended: {}",
            site.log("s")
        );
        assert!(
            wait_until(Duration::from_secs(2), || !alive(pid) && !alive(child)),
            "the timed-out command's process group lives on ({pid}, {child})"
        );
        assert_eq!(
            site.strings("SELECT outcome FROM exactly_runs WHERE fencing_token = 1"),
            ["timeout"]
        );
        assert_eq!(
            site.strings("SELECT state FROM effect_ledger WHERE fencing_token = 1"),
            ["unknown"],
            "the effect it had submitted is unknown"
        );
        // The next firing is not blocked by it.
        assert!(
            wait_until(Duration::from_secs(6), || site.exists("pid.2")),
            "the next firing never ran: {}",
            site.log("s")
        );
        assert_eq!(
            s.term(Duration::from_secs(15)),
            Some(0),
            "{}",
            site.log("s")
        );
        assert!(site.counter("run_timeout") >= 1);
        assert_eq!(
            site.count("SELECT count(*) FROM exactly_runs WHERE outcome IS NULL"),
            0
        );
    }
}
