//! The poll task reads the database again only when something may have changed.
use crate::tui::{Reply, Watch};
use crate::Access;
use std::time::Duration;

fn kind(replies: &[Reply]) -> String {
    let words: Vec<&str> = replies
        .iter()
        .map(|r| match r {
            Reply::Snapshot(_) => "snapshot",
            Reply::Unchanged(_) => "unchanged",
            Reply::PollFailed(_) => "failed",
            Reply::Checklist(_) => "checklist",
            _ => "other",
        })
        .collect();
    words.join("+")
}

/// A database in `dir` where job `far` holds an hour's lease: its writer and a reader.
fn far_lease(dir: &std::path::Path) -> (crate::Store, crate::Store) {
    let path = dir.join("w.db");
    let path = path.to_str().unwrap();
    let mut writer = crate::open(Some(path), Access::Write).unwrap();
    crate::lease::claim(
        &mut writer,
        &crate::JobName::from("far"),
        "a",
        Duration::from_secs(3600),
    )
    .unwrap();
    let reader = crate::open(Some(path), Access::ReadOnly).unwrap();
    (writer, reader)
}

/// An idle dashboard reads nothing until another connection commits or a lease it shows
/// runs out; then it reads the whole snapshot again.
#[test]
fn an_idle_dashboard_reads_again_only_after_a_commit_or_a_lease_end() {
    let dir = tempfile::tempdir().unwrap();
    let (mut writer, mut reader) = far_lease(dir.path());
    let mut watch = Watch::default();
    // The first full read judges the ten rules too; the next ones keep the checklist's pace.
    assert_eq!(kind(&watch.poll(&mut reader)), "snapshot+checklist");
    assert_eq!(kind(&watch.poll(&mut reader)), "unchanged");
    assert_eq!(kind(&watch.poll(&mut reader)), "unchanged");
    // Another connection commits: read again, then quiet again.
    crate::lease::claim(
        &mut writer,
        &crate::JobName::from("soon"),
        "a",
        Duration::from_millis(1500),
    )
    .unwrap();
    assert_eq!(kind(&watch.poll(&mut reader)), "snapshot");
    assert_eq!(kind(&watch.poll(&mut reader)), "unchanged");
    // No commit, but the lease shown has ended: what the snapshot says may be wrong now.
    std::thread::sleep(Duration::from_millis(1600));
    match watch.poll(&mut reader).remove(0) {
        Reply::Snapshot(s) => {
            let j = s.jobs.iter().find(|j| j.job_key == "soon").unwrap();
            assert!(j.lease_left_s.unwrap_or(0) <= 0, "{j:?}");
        }
        other => panic!("expected a fresh snapshot after the lease ended, got {other:?}"),
    }
    assert_eq!(kind(&watch.poll(&mut reader)), "unchanged");
}

/// The checklist reads run histories: a dashboard judges it with a full read at most every
/// `JUDGE_AT_MOST_EVERY`, also when an action or a detail read made the next read a full one.
#[test]
fn the_checklist_is_judged_at_its_own_pace() {
    let dir = tempfile::tempdir().unwrap();
    let (mut writer, mut reader) = far_lease(dir.path());
    let mut watch = Watch::default();
    let first = watch.poll(&mut reader);
    match first.get(1) {
        Some(Reply::Checklist(c)) => {
            let names: Vec<&str> = c.subjects.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, ["far"], "{c:?}");
        }
        other => panic!("expected the checklist after the first snapshot, got {other:?}"),
    }
    crate::lease::claim(
        &mut writer,
        &crate::JobName::from("near"),
        "a",
        Duration::from_secs(60),
    )
    .unwrap();
    assert_eq!(kind(&watch.poll(&mut reader)), "snapshot");
    watch.forget();
    assert_eq!(kind(&watch.poll(&mut reader)), "snapshot");
    // Due again: judged with the next full read.
    watch.judged_long_ago();
    assert_eq!(kind(&watch.poll(&mut reader)), "unchanged");
    watch.forget();
    assert_eq!(kind(&watch.poll(&mut reader)), "snapshot+checklist");
}

/// On a large ledger a judgement takes seconds: an idle dashboard does not judge again while
/// nothing is committed (until `JUDGE_STALE`), and a busy one waits `JUDGE_SHARE` times
/// as long as the last judgement took.
#[test]
fn an_idle_dashboard_does_not_judge_the_checklist_again() {
    let dir = tempfile::tempdir().unwrap();
    let (mut writer, mut reader) = far_lease(dir.path());
    let mut watch = Watch::default();
    assert_eq!(kind(&watch.poll(&mut reader)), "snapshot+checklist");
    // Long past CHECKLIST_EVERY, nothing committed: a full read (the backstop), no judgement.
    watch.judged_at(Duration::from_secs(120), Duration::from_millis(10));
    watch.forget();
    assert_eq!(kind(&watch.poll(&mut reader)), "snapshot");
    // Past CHECKLIST_STALE: time alone moves some rules.
    watch.judged_at(crate::checklist::JUDGE_STALE, Duration::from_millis(10));
    watch.forget();
    assert_eq!(kind(&watch.poll(&mut reader)), "snapshot+checklist");
    // Something committed, but the last judgement took 3 s: not before 150 s.
    crate::lease::claim(
        &mut writer,
        &crate::JobName::from("near"),
        "a",
        Duration::from_secs(60),
    )
    .unwrap();
    watch.judged_at(Duration::from_secs(120), Duration::from_secs(3));
    assert_eq!(kind(&watch.poll(&mut reader)), "snapshot");
    watch.judged_at(Duration::from_secs(151), Duration::from_secs(3));
    watch.forget();
    assert_eq!(kind(&watch.poll(&mut reader)), "snapshot+checklist");
}
