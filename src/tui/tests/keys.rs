//! The dashboard's keys against a real SQLite database: the same key sequences an operator
//! types, through the same `serve` the poll task runs, then the rows checked.
use super::drive::*;
use super::fixture::*;
use crate::tui::screen::View;
use crate::tui::state::{Popup, Typing};
use crate::tui::Pending;
use crossterm::event::KeyCode;

fn approval_state(f: &Fixture, key: &str) -> (String, Option<String>) {
    let a = exactly::approval::get(&mut f.store(), &crate::EffectKey::from(key))
        .expect("read")
        .expect("approval row");
    (a.state.to_string(), a.decided_by)
}

fn effect_state(f: &Fixture, key: &str) -> (String, Option<String>) {
    let r = exactly::effect::get(&mut f.store(), &crate::EffectKey::from(key))
        .expect("read")
        .expect("ledger row");
    (r.state.to_string(), r.resolved_by)
}

/// The pending approval of the busy fixture (the only one).
fn pending_key(f: &Fixture) -> String {
    snapshot(f).pending_approvals[0].effect_key.to_string()
}

#[test]
fn approve_with_3_a_y() {
    let f = busy();
    let key = pending_key(&f);
    let mut app = app_for(&f);
    let mut store = f.store();
    press(&mut app, &mut store, &keys("3a"));
    assert!(
        matches!(&app.popup, Some(Popup::Confirm(Pending::Approve { key: k, .. })) if *k == key)
    );
    assert_eq!(
        approval_state(&f, &key).0,
        "pending",
        "nothing happens before y"
    );
    press(&mut app, &mut store, &keys("y"));
    let (state, by) = approval_state(&f, &key);
    assert_eq!(state, "approved");
    assert_eq!(by.as_deref(), Some(exactly::actor().as_str()));
    let status = app.status.clone().expect("status");
    assert!(
        status.ok && status.text.starts_with(&format!("approved {key}")),
        "{status:?}"
    );
    // The poll after the action moved it from pending to approved-but-unused.
    let snap = app.snap.as_ref().expect("snapshot");
    assert!(snap.pending_approvals.is_empty());
    assert!(snap.unused_approvals.iter().any(|a| a.effect_key == key));
}

#[test]
fn deny_with_3_d_y_cancels_the_effect() {
    let f = busy();
    let key = pending_key(&f);
    let mut app = app_for(&f);
    press(&mut app, &mut f.store(), &keys("3dy"));
    assert_eq!(approval_state(&f, &key).0, "denied");
    assert_eq!(effect_state(&f, &key).0, "cancelled");
}

#[test]
fn resolve_happened_not_happened_cancel() {
    for (how, want) in [('h', "done"), ('n', "claimed"), ('c', "cancelled")] {
        let f = busy();
        let key = snapshot(&f).unknown[0].effect_key.clone();
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("2r"));
        assert!(matches!(&app.popup, Some(Popup::Resolve { key: k, .. }) if *k == key));
        press(&mut app, &mut f.store(), &[key_of(how)]);
        assert!(matches!(
            &app.popup,
            Some(Popup::Confirm(Pending::Resolve { .. }))
        ));
        assert_eq!(
            effect_state(&f, &key).0,
            "unknown",
            "nothing happens before y"
        );
        press(&mut app, &mut f.store(), &keys("y"));
        let (state, by) = effect_state(&f, &key);
        assert_eq!(state, want, "resolve with {how}");
        assert_eq!(by.as_deref(), Some(exactly::actor().as_str()));
        let status = app.status.clone().expect("status");
        assert!(
            status.ok && status.text.contains(&format!("unknown → {want}")),
            "{status:?}"
        );
        assert!(app
            .snap
            .as_ref()
            .expect("snap")
            .unknown
            .iter()
            .all(|u| u.effect_key != key));
    }
}

fn key_of(c: char) -> crossterm::event::KeyEvent {
    key(c)
}

#[test]
fn cancel_is_the_default() {
    let f = busy();
    let pending = pending_key(&f);
    for cancel in [
        key('n'),
        code(KeyCode::Esc),
        code(KeyCode::Enter),
        key('x'),
        key('q'),
    ] {
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("3a"));
        press(&mut app, &mut f.store(), &[cancel]);
        // Keys that are not y either cancel or are ignored; none approves.
        press(&mut app, &mut f.store(), &[code(KeyCode::Esc)]);
        assert!(app.popup.is_none());
        assert!(!app.quit, "q in a confirmation cancels, it does not quit");
        assert_eq!(approval_state(&f, &pending).0, "pending");
    }
}

#[test]
fn another_operator_already_approved() {
    let f = busy();
    let key = pending_key(&f);
    let mut app = app_for(&f);
    press(&mut app, &mut f.store(), &keys("3a"));
    // While the confirmation is open, someone else decides.
    exactly::approval::deny(
        &mut f.store(),
        &crate::EffectKey::from(&key),
        "bob@10.0.0.9",
        None,
    )
    .expect("deny");
    press(&mut app, &mut f.store(), &keys("y"));
    let status = app.status.clone().expect("status");
    assert!(!status.ok);
    assert!(
        status.text.contains("was already denied by bob@10.0.0.9"),
        "{status:?}"
    );
    assert_eq!(
        approval_state(&f, &key),
        ("denied".into(), Some("bob@10.0.0.9".into()))
    );
    let screen = text(&render(&mut app, 80, 24));
    assert!(
        screen.contains("! effect") && screen.contains("already denied by bob"),
        "{screen}"
    );
}

#[test]
fn resolve_already_settled_by_someone_else() {
    let f = busy();
    let key = snapshot(&f).unknown[0].effect_key.clone();
    let mut app = app_for(&f);
    press(&mut app, &mut f.store(), &keys("2rh"));
    exactly::approval::resolve(
        &mut f.store(),
        &key,
        exactly::approval::Resolution::Cancel,
        "carol",
        None,
        None,
        false,
    )
    .expect("resolve");
    press(&mut app, &mut f.store(), &keys("y"));
    let status = app.status.clone().expect("status");
    assert!(
        !status.ok
            && status
                .text
                .contains("already cancelled (resolved by carol)"),
        "{status:?}"
    );
    assert_eq!(effect_state(&f, &key).0, "cancelled");
}

#[test]
fn read_only_refuses_every_action() {
    let f = busy();
    let key = pending_key(&f);
    let mut app = app(true);
    app.on_reply(crate::tui::Reply::Snapshot(Box::new(snapshot(&f))));
    for seq in ["3a", "3d", "2r", "1P", "1p"] {
        press(&mut app, &mut f.store(), &keys(seq));
        assert!(
            app.popup.is_none(),
            "{seq} opened a popup in read-only mode"
        );
        let status = app.status.clone().expect("status");
        assert!(status.text.starts_with("read-only:"), "{status:?}");
        press(&mut app, &mut f.store(), &keys("y"));
    }
    assert_eq!(approval_state(&f, &key).0, "pending");
    assert_eq!(snapshot(&f).unknown.len(), 3);
    let screen = text(&render(&mut app, 80, 24));
    assert!(
        screen.contains("READ-ONLY") && screen.contains("read-only: pause/resume refused"),
        "{screen}"
    );
}

#[test]
fn pause_with_a_note_then_resume() {
    let f = busy();
    let mut app = app_for(&f);
    let mut store = f.store();
    // invoices is the second job by name.
    press(&mut app, &mut store, &keys("1gjp"));
    assert!(matches!(
        &app.popup,
        Some(Popup::Typing { what: Typing::PauseNote { job }, .. }) if job == "invoices"
    ));
    press(&mut app, &mut store, &keys("bank maintenance"));
    press(&mut app, &mut store, &[code(KeyCode::Enter)]);
    assert!(matches!(
        &app.popup,
        Some(Popup::Confirm(Pending::Pause { job, note: Some(n) }))
            if job == "invoices" && n == "bank maintenance"
    ));
    press(&mut app, &mut store, &keys("y"));
    let job = snapshot(&f)
        .jobs
        .into_iter()
        .find(|j| j.job_key == "invoices")
        .expect("job");
    assert!(job.paused);
    assert_eq!(job.pause_note.as_deref(), Some("bank maintenance"));
    press(&mut app, &mut store, &keys("py"));
    let job = snapshot(&f)
        .jobs
        .into_iter()
        .find(|j| j.job_key == "invoices")
        .expect("job");
    assert!(!job.paused);
}

/// The job's suppressed duplicates and probe events, as the snapshot shows them.
fn probed(f: &Fixture, job: &str) -> (u64, usize) {
    let snap = snapshot(f);
    let sup = snap
        .jobs
        .iter()
        .find(|j| j.job_key == job)
        .expect("job")
        .duplicates_suppressed;
    let probes = snap
        .events
        .iter()
        .filter(|e| e.kind == exactly::state::EventKind::Probe)
        .count();
    (sup, probes)
}

/// `P` on a job asks first (the confirmation says it sends nothing), and `y` probes it through
/// the same library call as `exactly probe`: the duplicate suppressed, the job's SUP count one
/// up, the result in the status line.
#[test]
fn probe_with_1_shift_p_y() {
    let f = busy();
    let mut app = app_for(&f);
    let mut store = f.store();
    let before = probed(&f, "invoices");
    assert_eq!(before, (1, 0), "invoices had one duplicate suppressed");
    // invoices is the second job by name.
    press(&mut app, &mut store, &keys("1gjP"));
    assert!(matches!(
        &app.popup,
        Some(Popup::Confirm(Pending::Probe { job })) if job == "invoices"
    ));
    let screen = text(&render(&mut app, 80, 24));
    assert!(screen.contains("NOTHING"), "{screen}");
    assert_eq!(probed(&f, "invoices"), before, "nothing happens before y");
    press(&mut app, &mut store, &keys("y"));
    let status = app.status.clone().expect("status");
    assert!(
        status.ok
            && status
                .text
                .starts_with("duplicate suppressed, nothing sent: suppressed 1 → 2;")
            && status.text.contains("probe of job invoices's effect"),
        "{status:?}"
    );
    assert_eq!(probed(&f, "invoices"), (2, 1));
    let job = app
        .snap
        .as_ref()
        .expect("snapshot")
        .jobs
        .iter()
        .find(|j| j.job_key == "invoices");
    assert_eq!(
        job.map(|j| j.duplicates_suppressed),
        Some(2),
        "the poll after it shows it"
    );
    // A job with no done effect: said so, not ok, nothing counted.
    press(&mut app, &mut store, &keys("gP"));
    assert!(matches!(
        &app.popup,
        Some(Popup::Confirm(Pending::Probe { job })) if job == "daily-digest"
    ));
    press(&mut app, &mut store, &keys("n"));
    assert!(app.popup.is_none());
    // Not on a job: nothing to confirm.
    press(&mut app, &mut store, &keys("3P"));
    assert!(app.popup.is_none());
    let status = app.status.clone().expect("status");
    assert!(
        !status.ok && status.text.contains("select a job first"),
        "{status:?}"
    );
}

/// A done effect another program keyed as bytes: `P y` says "dedupe broken" in the status
/// line, not ok, and the Events view marks the probe with `!`; nothing is left reserved.
#[test]
fn probe_finds_a_broken_dedupe() {
    let f = new_db();
    let t = claim(&mut f.store(), "py-invoices", "cron@db-1", 60, ago(-3600));
    f.sql()
        .execute(
            "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state, \
                 created_at, updated_at)
             VALUES (?1, 'py-invoices', 'py-run-1', ?2, 'done', ?3, ?3)",
            rusqlite::params![b"0123456789abcdef0123456789abcdef".to_vec(), t, before(30)],
        )
        .expect("the other program's row");
    let mut app = app_for(&f);
    let mut store = f.store();
    press(&mut app, &mut store, &keys("1Py"));
    let status = app.status.clone().expect("status");
    assert!(
        !status.ok && status.text.starts_with("dedupe broken: "),
        "{status:?}"
    );
    let rows: i64 = f
        .sql()
        .query_row("SELECT count(*) FROM effect_ledger", [], |r| r.get(0))
        .expect("count");
    assert_eq!(rows, 1, "nothing of the probe's is left");
    press(&mut app, &mut store, &keys("4"));
    let screen = text(&render(&mut app, 120, 40));
    let line = screen
        .lines()
        .find(|l| l.contains(" probe "))
        .expect("the probe event");
    assert!(
        line.contains("! ") && line.contains("dedupe broken"),
        "{screen}"
    );
}

#[test]
fn filter_then_act_on_the_filtered_row() {
    let f = busy();
    let mut app = app_for(&f);
    let snap = snapshot(&f);
    let target = snap
        .unknown
        .iter()
        .find(|u| u.job_key == "invoices")
        .expect("unknown of invoices")
        .effect_key
        .clone();
    press(&mut app, &mut f.store(), &keys("2/invo"));
    press(&mut app, &mut f.store(), &[code(KeyCode::Enter)]);
    assert_eq!(app.unknown().len(), 1);
    press(&mut app, &mut f.store(), &keys("rny"));
    assert_eq!(effect_state(&f, &target).0, "claimed");
    // Esc clears the filter.
    press(&mut app, &mut f.store(), &[code(KeyCode::Esc)]);
    assert!(app.filter.is_empty());
}

#[test]
fn the_cursor_stays_on_its_row_when_rows_arrive() {
    let f = busy();
    let mut app = app_for(&f);
    press(&mut app, &mut f.store(), &keys("2G"));
    let chosen = app.unknown()[app.selected(View::Unknown)]
        .effect_key
        .clone();
    // A new unknown effect, older than all others, arrives with the next poll.
    f.sql()
        .execute(
            "INSERT INTO effect_ledger (effect_key, job_key, run_id, state, created_at, updated_at)
             VALUES ('newcomer', 'x', 'r', 'unknown', ?1, ?1)",
            [before(99_999)],
        )
        .expect("insert");
    pump(&mut app, &mut f.store(), crate::tui::Request::Poll);
    assert_eq!(app.unknown()[0].effect_key, "newcomer");
    let now_selected = app.unknown()[app.selected(View::Unknown)]
        .effect_key
        .clone();
    assert_eq!(now_selected, chosen);
}

/// Events follow the newest row as events arrive (as `tail -f`), until the cursor moves away;
/// `F` follows again. Before: the cursor stayed on its row and the newest went above the view.
#[test]
fn events_follow_the_newest_until_the_cursor_moves() {
    let f = busy();
    let mut app = app_for(&f);
    let mut store = f.store();
    press(&mut app, &mut store, &keys("4"));
    assert!(app.follow);
    let add = |detail: &str| {
        f.sql()
            .execute(
                "INSERT INTO exactly_events (at, kind, job_key, detail) VALUES (?1, \
                 'run_started', 'x', ?2)",
                [before(0), detail.to_string()],
            )
            .expect("insert");
    };
    add("first newcomer");
    pump(&mut app, &mut store, crate::tui::Request::Poll);
    let sel = |app: &crate::tui::App| app.events()[app.selected(View::Events)].detail.clone();
    assert_eq!(sel(&app).as_deref(), Some("first newcomer"));
    press(&mut app, &mut store, &keys("j"));
    assert!(!app.follow, "moving the cursor stops following");
    let held = sel(&app);
    add("second newcomer");
    pump(&mut app, &mut store, crate::tui::Request::Poll);
    assert_eq!(sel(&app), held, "not following: the cursor keeps its row");
    press(&mut app, &mut store, &keys("F"));
    assert!(app.follow);
    assert_eq!(sel(&app).as_deref(), Some("second newcomer"));
}

#[test]
fn views_sort_freeze_help_and_quit() {
    let f = busy();
    let mut app = app_for(&f);
    let mut store = f.store();
    press(&mut app, &mut store, &[code(KeyCode::Tab)]);
    assert_eq!(app.view, View::Unknown);
    press(&mut app, &mut store, &keys("1s"));
    assert_eq!(
        app.jobs()[0].job_key,
        "daily-digest",
        "sorted by p99, longest first"
    );
    press(&mut app, &mut store, &keys("f"));
    assert!(app.frozen);
    exactly::approval::approve(
        &mut f.store(),
        &crate::EffectKey::from(&pending_key(&f)),
        "bob",
        None,
    )
    .expect("approve");
    pump(&mut app, &mut store, crate::tui::Request::Poll);
    assert_eq!(
        app.snap.as_ref().expect("snap").pending_approvals.len(),
        1,
        "frozen"
    );
    press(&mut app, &mut store, &keys("f"));
    assert_eq!(
        app.snap.as_ref().expect("snap").pending_approvals.len(),
        0,
        "unfrozen"
    );
    press(&mut app, &mut store, &keys("?"));
    assert!(matches!(app.popup, Some(Popup::Help)) && !app.legend);
    press(&mut app, &mut store, &[code(KeyCode::Tab)]);
    assert!(matches!(app.popup, Some(Popup::Help)) && app.legend);
    press(&mut app, &mut store, &[code(KeyCode::Esc)]);
    assert!(app.popup.is_none());
    press(&mut app, &mut store, &keys("q"));
    assert!(app.quit);
    let mut app = app_for(&f);
    press(
        &mut app,
        &mut store,
        &[crossterm::event::KeyEvent::new(
            KeyCode::Char('c'),
            crossterm::event::KeyModifiers::CONTROL,
        )],
    );
    assert!(app.quit);
}

#[test]
fn an_open_effect_detail_follows_new_data() {
    let f = busy();
    let key = snapshot(&f).unknown[0].effect_key.clone();
    let mut app = app_for(&f);
    press(
        &mut app,
        &mut f.store(),
        &[key_of('2'), code(KeyCode::Enter)],
    );
    let state_shown =
        |app: &crate::tui::App| match app.detail.as_ref().and_then(|d| d.loaded.as_ref()) {
            Some(crate::tui::Loaded::Effect { row: Some(r), .. }) => r.state.clone(),
            other => panic!("no effect detail loaded: {other:?}"),
        };
    assert_eq!(state_shown(&app), "unknown");
    // Another operator settles it; the next poll brings the detail up to date.
    exactly::approval::resolve(
        &mut f.store(),
        &key,
        exactly::approval::Resolution::Happened,
        "bob",
        None,
        None,
        false,
    )
    .expect("resolve");
    pump(&mut app, &mut f.store(), crate::tui::Request::Poll);
    assert_eq!(state_shown(&app), "done");
}

/// The job names on screen, top to bottom, and the one the cursor is on (marked `>`).
fn jobs_on_screen(screen: &str) -> (Vec<String>, Option<String>) {
    let mut names = vec![];
    let mut selected = None;
    for line in screen.lines() {
        let Some(name) = line
            .split_whitespace()
            .find(|w| w.starts_with("job-") && w.len() == 7)
        else {
            continue;
        };
        if line.starts_with('>') {
            selected = Some(name.to_string());
        }
        names.push(name.to_string());
    }
    (names, selected)
}

/// A long list scrolls as ratatui scrolls: a page at a time with PgDn, the last page with End,
/// and Up from the bottom moves the cursor without moving the window (the app keeps where the
/// window starts between frames).
#[test]
fn scrolls_200_jobs_a_page_at_a_time() {
    let f = empty();
    let c = f.sql();
    for i in 0..200 {
        add_job(&c, &format!("job-{i:03}"), None, 60, 30, "coalesce", None);
    }
    let mut app = app_for(&f);
    let mut store = f.store();
    let mut step = |app: &mut crate::tui::App, k: Vec<crossterm::event::KeyEvent>| {
        press(app, &mut store, &k);
        jobs_on_screen(&text(&render(app, 100, 30)))
    };
    let range = |a: usize, b: usize| (a..=b).map(|i| format!("job-{i:03}")).collect::<Vec<_>>();
    let sel = |i: usize| Some(format!("job-{i:03}"));
    // 30 lines: a body of 23, 20 table rows under the header and 2 note lines; a page is 21.
    assert_eq!(step(&mut app, vec![]), (range(0, 19), sel(0)));
    let pgdn = || vec![code(KeyCode::PageDown)];
    assert_eq!(step(&mut app, pgdn()), (range(2, 21), sel(21)));
    assert_eq!(step(&mut app, pgdn()), (range(23, 42), sel(42)));
    assert_eq!(
        step(&mut app, vec![code(KeyCode::End)]),
        (range(180, 199), sel(199))
    );
    assert_eq!(
        step(&mut app, vec![code(KeyCode::Up)]),
        (range(180, 199), sel(198))
    );
    assert_eq!(
        step(&mut app, vec![code(KeyCode::PageUp)]),
        (range(177, 196), sel(177))
    );
    assert_eq!(step(&mut app, keys("g")), (range(0, 19), sel(0)));
}

/// Issue 20, item 7: `r` on an effect whose sender may still be sending. The first `y` asks the
/// ledger, which refuses; a second, red confirmation names the sender and its lease's end, and
/// only `F` resolves (with force). A reflexive second `y` does nothing, Esc cancels.
#[test]
fn resolving_an_effect_in_flight_needs_a_second_confirmation() {
    let (f, key) = in_flight();
    let mut app = app_for(&f);
    let mut store = f.store();
    press(&mut app, &mut store, &keys("4"));
    open_effect_detail(&mut app, &mut store, &key);
    press(&mut app, &mut store, &keys("rny"));
    let Some(Popup::Force(Pending::Resolve {
        key: k,
        force: Some(s),
        ..
    })) = &app.popup
    else {
        panic!("no second confirmation: {:?}", app.popup);
    };
    assert_eq!(k, &key);
    assert_eq!(s.attempt.as_deref(), Some(ATTEMPT));
    assert_eq!(s.until.map(crate::time::fmt), Some(after(600)));
    let status = app.status.clone().expect("status");
    assert!(
        !status.ok && status.text.contains("in flight"),
        "{status:?}"
    );
    assert_eq!(
        effect_state(&f, &key).0,
        "submitted",
        "the first y changed nothing"
    );
    press(&mut app, &mut store, &keys("y"));
    assert!(matches!(app.popup, Some(Popup::Force(_))), "y is not F");
    assert_eq!(effect_state(&f, &key).0, "submitted");
    press(&mut app, &mut store, &[code(KeyCode::Esc)]);
    assert!(app.popup.is_none());
    assert_eq!(effect_state(&f, &key).0, "submitted", "Esc cancels");

    press(&mut app, &mut store, &keys("rnyF"));
    assert!(app.popup.is_none(), "{:?}", app.popup);
    let (state, by) = effect_state(&f, &key);
    assert_eq!(state, "claimed");
    assert_eq!(by.as_deref(), Some(exactly::actor().as_str()));
    let status = app.status.clone().expect("status");
    assert!(
        status.ok
            && status
                .text
                .contains("forced while in flight: attempt web-1:4242"),
        "{status:?}"
    );
    let events =
        exactly::effect::events(&mut f.store(), &crate::EffectKey::from(&key)).expect("events");
    let last = events
        .iter()
        .rev()
        .find(|e| e.kind == "resolved")
        .expect("a resolved event");
    assert!(
        last.detail
            .as_deref()
            .unwrap_or("")
            .contains("forced while in flight"),
        "{last:?}"
    );
}

/// Opens the effect detail of `key` from the Events view (its newest event is first).
fn open_effect_detail(app: &mut crate::tui::App, store: &mut exactly::Store, key: &str) {
    press(app, store, &[code(KeyCode::Enter)]);
    assert!(
        matches!(&app.detail, Some(d) if d.focus == crate::tui::Focus::Effect(key.into())),
        "{:?}",
        app.detail.as_ref().map(|d| &d.focus)
    );
}
