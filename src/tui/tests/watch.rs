//! The poll task reads the database again only when something may have changed.
use crate::tui::{Reply, Watch};
use crate::Access;
use std::time::Duration;

fn kind(r: &Reply) -> &'static str {
    match r {
        Reply::Snapshot(_) => "snapshot",
        Reply::Unchanged(_) => "unchanged",
        Reply::PollFailed(_) => "failed",
        _ => "other",
    }
}

/// An idle dashboard reads nothing until another connection commits or a lease it shows
/// runs out; then it reads the whole snapshot again.
#[test]
fn an_idle_dashboard_reads_again_only_after_a_commit_or_a_lease_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let path = path.to_str().unwrap();
    let mut writer = crate::open(Some(path), Access::Write).unwrap();
    crate::lease::claim(
        &mut writer,
        &crate::JobName::from("far"),
        "a",
        Duration::from_secs(3600),
    )
    .unwrap();
    let mut reader = crate::open(Some(path), Access::ReadOnly).unwrap();
    let mut watch = Watch::default();
    assert_eq!(kind(&watch.poll(&mut reader)), "snapshot");
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
    match watch.poll(&mut reader) {
        Reply::Snapshot(s) => {
            let j = s.jobs.iter().find(|j| j.job_key == "soon").unwrap();
            assert!(j.lease_left_s.unwrap_or(0) <= 0, "{j:?}");
        }
        other => panic!("expected a fresh snapshot after the lease ended, got {other:?}"),
    }
    assert_eq!(kind(&watch.poll(&mut reader)), "unchanged");
}
