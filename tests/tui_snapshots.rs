//! Every view of `exactly top` at 80×24 and 120×40, drawn from fixture databases (empty, busy,
//! hostile) with a fixed clock, compared with the accepted screens in `tests/snapshots/`.
mod tui_support;

use crossterm::event::KeyCode;
use exactly::tui::{App, Focus, Request};
use tui_support::*;

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
                render(&app, w, h).backend()
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
        let shot = |app: &App, what: &str| {
            insta::assert_snapshot!(format!("busy_{what}_{w}x{h}"), render(app, w, h).backend());
        };
        // Job detail: sync-crm overruns its interval and lease.
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("1G"));
        open_detail(&mut app, &f);
        assert!(matches!(&app.detail, Some(d) if d.focus == Focus::Job("sync-crm".into())));
        shot(&app, "job_detail");
        // Effect detail of the oldest unknown.
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("2"));
        open_detail(&mut app, &f);
        shot(&app, "effect_detail");
        // Help, confirmation of an approval, the resolve chooser.
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("?"));
        shot(&app, "help");
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("3a"));
        shot(&app, "confirm_approve");
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("2r"));
        shot(&app, "resolve_choose");
    }
}

/// After the scheduler died: the header says so, NEXT is late, LAST shows the failing job; its
/// runs open with Enter and a run's output with Enter again.
#[test]
fn health_dead_scheduler_failing_job_and_output() {
    let f = health();
    for (w, h) in SIZES {
        let shot = |app: &App, what: &str| {
            insta::assert_snapshot!(
                format!("health_{what}_{w}x{h}"),
                render(app, w, h).backend()
            );
        };
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("1"));
        let screen = text(&render(&app, w, h));
        assert!(screen.contains("! NO SCHEDULER ALIVE"), "{screen}");
        assert!(
            screen.contains("NEXT") && screen.contains("LAST"),
            "{screen}"
        );
        assert!(screen.contains("failed 3"), "{screen}");
        shot(&app, "jobs");
        // nightly-report is the first job by name; its runs, newest first.
        open_detail(&mut app, &f);
        assert!(matches!(&app.detail, Some(d) if d.focus == Focus::Job("nightly-report".into())));
        shot(&app, "job_runs");
        // Enter on the newest run: its output, sanitised.
        open_detail(&mut app, &f);
        assert!(matches!(&app.detail, Some(d) if matches!(&d.focus,
            Focus::Run { run_id, .. } if run_id == "nightly-report-t6")));
        let screen = text(&render(&app, w, h));
        assert!(
            screen.contains("password authentication failed"),
            "{screen}"
        );
        assert!(screen.contains("giving up after 3 attempts"), "{screen}");
        shot(&app, "run_output");
        // Scrolls, and Esc goes back to the runs, then to the jobs.
        // (Scrolling stops where the last line shows.)
        press(&mut app, &mut f.store(), &keys("jj"));
        let most = app.output_max.get();
        assert_eq!(app.detail.as_ref().map(|d| d.scroll), Some(2.min(most)));
        press(&mut app, &mut f.store(), &[code(KeyCode::Esc)]);
        assert!(matches!(&app.detail, Some(d) if d.focus == Focus::Job("nightly-report".into())));
        // j picks an older run: its output is that run's.
        press(&mut app, &mut f.store(), &keys("jjjj"));
        open_detail(&mut app, &f);
        assert!(matches!(&app.detail, Some(d) if matches!(&d.focus,
            Focus::Run { run_id, .. } if run_id == "nightly-report-t2")));
        let screen = text(&render(&app, w, h));
        assert!(screen.contains("uploaded report-ok.csv"), "{screen}");
        press(
            &mut app,
            &mut f.store(),
            &[code(KeyCode::Esc), code(KeyCode::Esc)],
        );
        assert!(app.detail.is_none());
    }
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
            render(&app, w, h).backend()
        );
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("3a"));
        insta::assert_snapshot!(
            format!("hostile_confirm_{w}x{h}"),
            render(&app, w, h).backend()
        );
        let mut app = app_for(&f);
        press(&mut app, &mut f.store(), &keys("1"));
        open_detail(&mut app, &f);
        insta::assert_snapshot!(
            format!("hostile_job_detail_{w}x{h}"),
            render(&app, w, h).backend()
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
    let mut screens = 0;
    for (w, h) in [(80, 24), (120, 40), (60, 15), (200, 50)] {
        for keys_pressed in ["1", "2", "3", "4", "3a", "2r", "2rh", "?", "1p", "/evil"] {
            for open in [false, true] {
                let mut app = app_for(&f);
                press(&mut app, &mut f.store(), &keys(keys_pressed));
                if open && app.popup.is_none() {
                    press(&mut app, &mut f.store(), &[code(KeyCode::Enter)]);
                }
                let term = render(&app, w, h);
                let buf = term.backend().buffer();
                for y in 0..h {
                    for x in 0..w {
                        let sym = buf[(x, y)].symbol();
                        assert!(
                            !sym.chars().any(is_control),
                            "control character {sym:?} at {x},{y} after {keys_pressed:?} (open {open}, {w}x{h}):\n{}",
                            text(&term)
                        );
                    }
                }
                screens += 1;
            }
        }
    }
    assert_eq!(screens, 80);
    // A run's output, the rawest text there is: job, Enter (its runs), Enter (the output).
    for (w, h) in [(80, 24), (120, 40), (60, 15)] {
        let mut app = app_for(&f);
        press(
            &mut app,
            &mut f.store(),
            &[key('1'), code(KeyCode::Enter), code(KeyCode::Enter)],
        );
        assert!(matches!(&app.detail, Some(d) if matches!(d.focus, Focus::Run { .. })));
        let term = render(&app, w, h);
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
    app.on_reply(exactly::tui::Reply::PollFailed(
        "database /x is locked".into(),
    ));
    let later = now() + chrono::Duration::seconds(42);
    let mut term =
        ratatui::Terminal::new(ratatui::backend::TestBackend::new(80, 24)).expect("term");
    term.draw(|fr| exactly::tui::draw(fr, &app, later))
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
fn capture(f: &tui_support::Fixture, steps: &[&str]) -> String {
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
        let screen = text(&render(&app, 100, 30));
        for line in screen.lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

/// Writes (with `UPDATE_ASSETS=1`) or checks an asset file.
fn asset_is_current(name: &str, out: &str) {
    let path = format!("{}/assets/{name}", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("UPDATE_ASSETS").is_some() {
        std::fs::create_dir_all(concat!(env!("CARGO_MANIFEST_DIR"), "/assets")).expect("mkdir");
        std::fs::write(&path, out).expect("write");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        have, out,
        "assets/{name} is stale: run with UPDATE_ASSETS=1"
    );
}

/// `assets/top.txt`, the capture the README shows, is the busy fixture's Jobs and Unknown views
/// at 100×30; `assets/top-health.txt` (README's "Is it healthy?") is the health fixture's Jobs
/// view and the failing run's output. This keeps them true to the code (`UPDATE_ASSETS=1`
/// rewrites them).
#[test]
fn readme_capture_is_current() {
    asset_is_current("top.txt", &capture(&busy(), &["1", "2"]));
    asset_is_current("top-health.txt", &capture(&health(), &["1", "1\n\n"]));
}

/// README's key table and dashboard capture come from the code: the same table `?` shows, and
/// the capture in assets/top.txt. `UPDATE_ASSETS=1` rewrites them.
#[test]
fn readme_keys_and_capture_are_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
    let readme = std::fs::read_to_string(path).expect("README.md");
    let keys = format!(
        "<!-- keys -->\n{}<!-- /keys -->",
        exactly::tui::input::markdown()
    );
    let capture = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/top.txt"))
        .expect("assets/top.txt");
    let block = format!("```text\n{}\n```", capture.trim_end());
    let health = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/assets/top-health.txt"
    ))
    .expect("assets/top-health.txt");
    let health_block = format!(
        "<!-- health-capture -->\n```text\n{}\n```\n<!-- /health-capture -->",
        health.trim_end()
    );
    let (hs, he) = (
        readme
            .find("<!-- health-capture -->")
            .expect("README has a <!-- health-capture --> block"),
        readme
            .find("<!-- /health-capture -->")
            .expect("README closes the health-capture block")
            + "<!-- /health-capture -->".len(),
    );
    let start = readme
        .find("<!-- keys -->")
        .expect("README has a <!-- keys --> block");
    let end = readme
        .find("<!-- /keys -->")
        .expect("README closes the keys block")
        + "<!-- /keys -->".len();
    if std::env::var_os("UPDATE_ASSETS").is_some() {
        let readme = format!("{}{health_block}{}", &readme[..hs], &readme[he..]);
        let start = readme.find("<!-- keys -->").expect("keys block");
        let end = readme.find("<!-- /keys -->").expect("keys block end") + "<!-- /keys -->".len();
        let mut new = format!("{}{keys}{}", &readme[..start], &readme[end..]);
        if let Some(a) = new.find("```text\n") {
            if let Some(b) = new[a..].find("\n```\n").map(|b| a + b) {
                new = format!("{}{block}{}", &new[..a], &new[b + 4..]);
            }
        }
        std::fs::write(path, new).expect("write README");
        return;
    }
    assert_eq!(
        &readme[start..end],
        keys,
        "README's key table is stale: run with UPDATE_ASSETS=1"
    );
    assert!(
        readme.contains(&block),
        "README's capture differs from assets/top.txt: run with UPDATE_ASSETS=1"
    );
    assert_eq!(
        &readme[hs..he],
        health_block,
        "README's health capture differs from assets/top-health.txt: run with UPDATE_ASSETS=1"
    );
}
