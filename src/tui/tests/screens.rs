//! Every view of `exactly top` at 80×24 and 120×40, drawn from fixture databases (empty, busy,
//! hostile) with a fixed clock, compared with the accepted screens in `snapshots/` beside this
//! file.
use super::drive::*;
use super::fixture::*;
use super::hostile::hostile;
use crate::tui::{App, Focus, Request};
use crossterm::event::KeyCode;

const SIZES: [(u16, u16); 2] = [(80, 24), (120, 40)];

fn snap_views(name: &str, f: &Fixture) {
    for (w, h) in SIZES {
        for (k, view) in [
            ('1', "jobs"),
            ('2', "unknown"),
            ('3', "approvals"),
            ('4', "events"),
        ] {
            let mut app = app_for(f);
            press(&mut app, &mut f.store(), &[key(k)]);
            insta::assert_snapshot!(
                format!("{name}_{view}_{w}x{h}"),
                render(&mut app, w, h).backend()
            );
        }
    }
}

/// Opens the detail of the selected row (the poll task's answer included).
fn open_detail(app: &mut App, f: &Fixture) {
    press(app, &mut f.store(), &[code(KeyCode::Enter)]);
}

#[test]
fn empty_views() {
    snap_views("empty", &empty());
}

#[test]
fn busy_views() {
    snap_views("busy", &busy());
}

#[test]
fn hostile_views() {
    snap_views("hostile", &hostile());
}

#[test]
fn busy_details_and_popups() {
    let f = busy();
    for (w, h) in SIZES {
        let shot = |app: &mut App, what: &str| {
            insta::assert_snapshot!(format!("busy_{what}_{w}x{h}"), render(app, w, h).backend());
        };
        // Job detail: sync-crm overruns its interval and lease.
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("1G"));
        open_detail(&mut app, &f);
        assert!(matches!(&app.detail, Some(d) if d.focus == Focus::Job("sync-crm".into())));
        shot(&mut app, "job_detail");
        // Effect detail of the oldest unknown.
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("2"));
        open_detail(&mut app, &f);
        shot(&mut app, "effect_detail");
        // Help, confirmation of an approval, the resolve chooser.
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("?"));
        shot(&mut app, "help");
        press(&mut app, &mut f.store(), &keys("?"));
        assert!(app.legend, "? in the help shows the legend");
        shot(&mut app, "legend");
        press(&mut app, &mut f.store(), &keys("j"));
        shot(&mut app, "legend_next");
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("3a"));
        shot(&mut app, "confirm_approve");
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("2r"));
        shot(&mut app, "resolve_choose");
        // The probe of invoices (the second job by name): it says it sends nothing.
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("1jP"));
        shot(&mut app, "confirm_probe");
    }
}

/// `r n y` on an effect whose sender may still be sending: the second, red confirmation names
/// the sender and its lease's end (issue 20, item 7).
#[test]
fn in_flight_force_confirmation() {
    let (f, _) = in_flight();
    for (w, h) in SIZES {
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("4"));
        open_detail(&mut app, &f);
        press(&mut app, &mut f.store(), &keys("rny"));
        insta::assert_snapshot!(
            format!("in_flight_force_{w}x{h}"),
            render(&mut app, w, h).backend()
        );
    }
}

/// After the scheduler died: the header says so, NEXT is late, LAST shows the failing job; its
/// runs open with Enter and a run's output with Enter again.
#[test]
fn health_dead_scheduler_failing_job_and_output() {
    let f = health();
    for (w, h) in SIZES {
        let shot = |app: &mut App, what: &str| {
            insta::assert_snapshot!(
                format!("health_{what}_{w}x{h}"),
                render(app, w, h).backend()
            );
        };
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("1"));
        let screen = text(&render(&mut app, w, h));
        assert!(screen.contains("! NO SCHEDULER ALIVE"), "{screen}");
        assert!(
            screen.contains("NEXT") && screen.contains("LAST"),
            "{screen}"
        );
        assert!(screen.contains("failed 3"), "{screen}");
        shot(&mut app, "jobs");
        // nightly-report is the first job by name; its runs, newest first.
        open_detail(&mut app, &f);
        assert!(matches!(&app.detail, Some(d) if d.focus == Focus::Job("nightly-report".into())));
        shot(&mut app, "job_runs");
        // Enter on the newest run: its output, sanitised.
        open_detail(&mut app, &f);
        assert!(matches!(&app.detail, Some(d) if matches!(&d.focus,
            Focus::Run { run_id, .. } if run_id == "nightly-report-t6")));
        let screen = text(&render(&mut app, w, h));
        assert!(
            screen.contains("password authentication failed"),
            "{screen}"
        );
        assert!(screen.contains("giving up after 3 attempts"), "{screen}");
        shot(&mut app, "run_output");
        // Scrolls, and Esc goes back to the runs, then to the jobs.
        // (Scrolling stops where the last line shows.)
        press(&mut app, &mut f.store(), &keys("jj"));
        let most = app.output_max();
        assert_eq!(app.detail.as_ref().map(|d| d.scroll), Some(2.min(most)));
        press(&mut app, &mut f.store(), &[code(KeyCode::Esc)]);
        assert!(matches!(&app.detail, Some(d) if d.focus == Focus::Job("nightly-report".into())));
        // j picks an older run: its output is that run's.
        press(&mut app, &mut f.store(), &keys("jjjj"));
        open_detail(&mut app, &f);
        assert!(matches!(&app.detail, Some(d) if matches!(&d.focus,
            Focus::Run { run_id, .. } if run_id == "nightly-report-t2")));
        let screen = text(&render(&mut app, w, h));
        assert!(screen.contains("uploaded report-ok.csv"), "{screen}");
        press(
            &mut app,
            &mut f.store(),
            &[code(KeyCode::Esc), code(KeyCode::Esc)],
        );
        assert!(app.detail.is_none());
    }
}

/// A run decided ahead of its slot whose command has not started, its lease held from the
/// decision: its job's runs say `pending`, not `running`; in the jobs view the job is not
/// running and its LAST is still the run that ran.
#[test]
fn a_run_waiting_for_its_slot_is_pending_not_running() {
    let f = health();
    let slot = now() + chrono::Duration::seconds(1);
    let token = claim(
        &mut f.store(),
        "nightly-report",
        "sched@web-1:311",
        0,
        slot + chrono::Duration::seconds(3),
    );
    f.sql()
        .execute(
            "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token, \
                 started_at)
             VALUES ('nightly-report-t7', 'nightly-report', ?1, 'sched@web-1:311', ?2, ?1)",
            rusqlite::params![after(1), token],
        )
        .expect("a run decided ahead");
    let mut app = app_for(&f);
    press(&mut app, &mut f.store(), &keys("1"));
    let screen = text(&render(&mut app, 120, 40));
    assert!(screen.contains("failed 3"), "{screen}");
    let row = screen
        .lines()
        .find(|l| l.contains("nightly-report"))
        .unwrap_or_else(|| panic!("no row of nightly-report: {screen}"));
    assert!(!row.contains("running"), "{row}");
    open_detail(&mut app, &f);
    let screen = text(&render(&mut app, 120, 40));
    let row = screen
        .lines()
        .find(|l| l.contains(&format!(" {token} ")) && l.contains(&after(1)))
        .unwrap_or_else(|| panic!("no row of the pending run: {screen}"));
    assert!(row.contains("pending"), "{row}");
    assert!(!screen.contains("running"), "{screen}");
}

#[test]
fn hostile_details_and_popups() {
    let f = hostile();
    for (w, h) in SIZES {
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("2"));
        open_detail(&mut app, &f);
        insta::assert_snapshot!(
            format!("hostile_effect_detail_{w}x{h}"),
            render(&mut app, w, h).backend()
        );
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("3a"));
        insta::assert_snapshot!(
            format!("hostile_confirm_{w}x{h}"),
            render(&mut app, w, h).backend()
        );
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("1"));
        open_detail(&mut app, &f);
        insta::assert_snapshot!(
            format!("hostile_job_detail_{w}x{h}"),
            render(&mut app, w, h).backend()
        );
    }
}

fn is_control(c: char) -> bool {
    let u = c as u32;
    u < 0x20
        || u == 0x7f
        || (0x80..=0x9f).contains(&u)
        || matches!(u, 0x202a..=0x202e | 0x2066..=0x2069 | 0x200e | 0x200f | 0x061c)
}

/// No cell of any screen drawn from the hostile database holds a control character, an escape
/// or a bidi override, at any size including narrow ones.
#[test]
fn hostile_screens_hold_no_control_characters() {
    let f = hostile();
    for (w, h) in [(80, 24), (120, 40), (60, 15), (200, 50)] {
        for keys_pressed in ["1", "2", "3", "4", "3a", "2r", "2rh", "?", "1p", "/evil"] {
            for open in [false, true] {
                let mut app = app_for(&f);
                press(&mut app, &mut f.store(), &keys(keys_pressed));
                if open && app.popup.is_none() {
                    press(&mut app, &mut f.store(), &[code(KeyCode::Enter)]);
                }
                let term = render(&mut app, w, h);
                let buf = term.backend().buffer();
                for y in 0..h {
                    for x in 0..w {
                        let sym = buf[(x, y)].symbol();
                        assert!(
                            !sym.chars().any(is_control),
                            "control character {sym:?} at {x},{y} after {keys_pressed:?} \
                             (open {open}, {w}x{h}):\n{}",
                            text(&term)
                        );
                    }
                }
                // The hostile text itself reached the screen (made harmless), so the loop
                // above checked cells that came from the attacker's rows.
                let screen = text(&term);
                assert!(
                    keys_pressed == "?"
                        || ["evil", "k3y", "請求書", "AAAA", "mallory", "own"]
                            .iter()
                            .any(|m| screen.contains(m)),
                    "no hostile text on screen after {keys_pressed:?} (open {open}, \
                     {w}x{h}):\n{screen}"
                );
            }
        }
    }
    // A run's output, the rawest text there is: job, Enter (its runs), Enter (the output).
    for (w, h) in [(80, 24), (120, 40), (60, 15)] {
        let mut app = app_for(&f);
        press(
            &mut app,
            &mut f.store(),
            &[key('1'), code(KeyCode::Enter), code(KeyCode::Enter)],
        );
        assert!(matches!(&app.detail, Some(d) if matches!(d.focus, Focus::Run { .. })));
        let term = render(&mut app, w, h);
        let screen = text(&term);
        assert!(
            screen.contains("line 1") && screen.contains("end"),
            "{screen}"
        );
        let buf = term.backend().buffer();
        for y in 0..h {
            for x in 0..w {
                let sym = buf[(x, y)].symbol();
                assert!(
                    !sym.chars().any(is_control),
                    "control character {sym:?} at {x},{y} in a run's output ({w}x{h}):\n{screen}"
                );
            }
        }
    }
}

/// A poll that fails keeps the last data on screen and says how stale it is.
#[test]
fn failed_poll_keeps_data_and_says_stale() {
    let f = busy();
    let mut app = app_for(&f);
    app.on_reply(crate::tui::Reply::PollFailed(
        "database /x is locked".into(),
    ));
    let later = now() + chrono::Duration::seconds(42);
    let mut term =
        ratatui::Terminal::new(ratatui::backend::TestBackend::new(80, 24)).expect("term");
    term.draw(|fr| crate::tui::draw(fr, &app, later))
        .expect("draw");
    let screen = text(&term);
    assert!(screen.contains("STALE 43s"), "{screen}");
    assert!(
        screen.contains("poll failed (showing data from 43s ago): database /x is locked"),
        "{screen}"
    );
    assert!(screen.contains("invoices"), "{screen}");
    let _ = Request::Poll;
}

/// Screens at 100×30 as text, each after pressing its keys (Enter opens a detail).
fn capture(f: &Fixture, steps: &[&str]) -> String {
    let mut out = String::new();
    for k in steps {
        let mut app = app_for(f);
        for c in k.chars() {
            if c == '\n' {
                open_detail(&mut app, f);
            } else {
                press(&mut app, &mut f.store(), &[key(c)]);
            }
        }
        let screen = text(&render(&mut app, 100, 30));
        for line in screen.lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

/// What `UPDATE_ASSETS=1` does with a stale file: writes the new text and fails anyway, so a
/// run that rewrote something never passes (run again without it to check).
fn rewrite_or_fail(path: &str, have: &str, want: &str, what: &str) {
    if have == want {
        return;
    }
    if std::env::var_os("UPDATE_ASSETS").is_some() {
        std::fs::write(path, want).expect("write");
        panic!("{what} was stale and is rewritten: run again without UPDATE_ASSETS");
    }
    assert_eq!(have, want, "{what} is stale: run with UPDATE_ASSETS=1");
}

/// Reads a file that must be there (a missing asset fails, it is not read as empty).
fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Replaces the text from `open` to `close` (both included) with `block`.
fn splice(text: &str, open: &str, close: &str, block: &str) -> String {
    let start = text
        .find(open)
        .unwrap_or_else(|| panic!("the file has a {open} block"));
    let end = text[start..]
        .find(close)
        .unwrap_or_else(|| panic!("the file closes the {open} block"))
        + start
        + close.len();
    format!("{}{block}{}", &text[..start], &text[end..])
}

/// `assets/top.txt`, the capture the README shows, is the busy fixture's Jobs and Unknown views
/// at 100×30; `assets/top-health.txt` (docs/dashboard.md, "A failing job, with no scheduler
/// alive") is the health fixture's Jobs view and the failing run's output; docs/dashboard.md's
/// key table is the same table `?` shows. One test, in order (assets, then docs/dashboard.md,
/// then README), so two tests never race on the same file.
#[test]
fn readme_keys_and_captures_are_current() {
    let root = env!("CARGO_MANIFEST_DIR");
    let top = capture(&busy(), &["1", "2"]);
    let top_health = capture(&health(), &["1", "1\n\n"]);
    for (name, want) in [("top.txt", &top), ("top-health.txt", &top_health)] {
        let path = format!("{root}/assets/{name}");
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        rewrite_or_fail(&path, &have, want, &format!("assets/{name}"));
    }
    let path = format!("{root}/docs/dashboard.md");
    let dashboard = read(&path);
    let keys = format!(
        "<!-- keys -->\n{}<!-- /keys -->",
        crate::tui::input::markdown()
    );
    let health_block = format!(
        "<!-- health-capture -->\n```text\n{}\n```\n<!-- /health-capture -->",
        read(&format!("{root}/assets/top-health.txt")).trim_end()
    );
    let counters = format!(
        "<!-- counters -->\n{}<!-- /counters -->",
        crate::tui::view::header::markdown_counters()
    );
    let mut want = splice(&dashboard, "<!-- keys -->", "<!-- /keys -->", &keys);
    want = splice(&want, "<!-- counters -->", "<!-- /counters -->", &counters);
    want = splice(
        &want,
        "<!-- health-capture -->",
        "<!-- /health-capture -->",
        &health_block,
    );
    rewrite_or_fail(
        &path,
        &dashboard,
        &want,
        "docs/dashboard.md's key table, counter table or health capture",
    );
    // README's first text block is the dashboard's capture.
    let path = format!("{root}/README.md");
    let readme = read(&path);
    let block = format!(
        "```text\n{}\n```",
        read(&format!("{root}/assets/top.txt")).trim_end()
    );
    let a = readme.find("```text\n").expect("README has a text block");
    let b = readme[a..].find("\n```\n").expect("the text block ends") + a;
    let want = format!("{}{block}{}", &readme[..a], &readme[b + 4..]);
    rewrite_or_fail(&path, &readme, &want, "README's capture");
}

/// The counters' words of the header as drawn at `w` columns (the line above `last 24h`).
fn header_words(f: &Fixture, w: u16) -> Vec<String> {
    let mut app = app_for(f);
    let screen = text(&render(&mut app, w, 30));
    let lines: Vec<&str> = screen.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains(" last 24h "))
        .expect("the counters");
    lines[at - 1]
        .split("  ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// One vocabulary for the counters: the header says the same words at 80, 100 and 120 columns
/// as the legend (`?` twice) and docs/dashboard.md's counter table. (Before, at 120 columns the
/// header said "dup suppressed … claimed unsent … approved unused", words neither the legend
/// nor the docs used.)
#[test]
fn the_header_legend_and_docs_use_one_vocabulary_for_the_counters() {
    let f = busy();
    let docs = read(&format!("{}/docs/dashboard.md", env!("CARGO_MANIFEST_DIR")));
    let table: Vec<String> = docs
        .lines()
        .skip_while(|l| !l.starts_with("| counter | means |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('`').nth(1).map(str::to_string))
        .collect();
    assert_eq!(
        table.len(),
        7,
        "docs/dashboard.md's counter table: {table:?}"
    );
    let mut app = app_for(&f);
    press(&mut app, &mut f.store(), &keys("??"));
    let legend = text(&render(&mut app, 124, 40));
    for w in [80, 100, 120] {
        assert_eq!(header_words(&f, w), table, "the header at {w} columns");
    }
    for word in &table {
        assert!(
            legend.contains(&format!(" {word} ")),
            "the legend lacks {word}:\n{legend}"
        );
    }
}

/// The EVERY column shows an interval's value whole (`10s`, not `every 1…`) at 80, 100 and 120
/// columns: the word is what the column's title already says.
#[test]
fn the_every_column_shortens_the_word_not_the_value() {
    let f = busy();
    add_job(
        &f.sql(),
        "poll-feed",
        Some("every 10s"),
        10,
        5,
        "coalesce",
        None,
    );
    add_job(
        &f.sql(),
        "slow-sync",
        Some("every 1h 30m"),
        5400,
        600,
        "coalesce",
        None,
    );
    for w in [80, 100, 120] {
        let mut app = app_for(&f);
        let screen = text(&render(&mut app, w, 30));
        let row = |job: &str| {
            screen
                .lines()
                .find(|l| l.contains(job))
                .unwrap_or_else(|| panic!("no row for {job} at {w} columns:\n{screen}"))
                .to_string()
        };
        let (poll, slow) = (row("poll-feed"), row("slow-sync"));
        assert!(
            poll.contains(" 10s ") && !poll.contains('…'),
            "at {w} columns: {poll}"
        );
        assert!(
            slow.contains(" 1h30m ") && !slow.contains('…'),
            "at {w} columns: {slow}"
        );
        // A cron schedule, wider than the column, takes cells the job names leave over.
        let daily = row("daily-digest");
        assert!(daily.contains(" 0 7 * * * "), "at {w} columns: {daily}");
    }
}

/// The Jobs view with interval jobs registered by a jobs file (`every 10s`), at 80, 100 and 120
/// columns: the header's words and the EVERY column as accepted.
#[test]
fn jobs_with_intervals_at_80_100_and_120_columns() {
    let f = busy();
    add_job(
        &f.sql(),
        "poll-feed",
        Some("every 10s"),
        10,
        5,
        "coalesce",
        None,
    );
    add_job(
        &f.sql(),
        "slow-sync",
        Some("every 1h 30m"),
        5400,
        600,
        "coalesce",
        None,
    );
    for w in [80, 100, 120] {
        let mut app = app_for(&f);
        insta::assert_snapshot!(
            format!("intervals_jobs_{w}x24"),
            render(&mut app, w, 24).backend()
        );
    }
}
