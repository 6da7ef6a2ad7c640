//! The Checklist view (`5`): the ten rules as columns, the cursor's cell, its evidence and fix,
//! drawn from a checklist value (the judgement itself is tested with `exactly doctor`'s tests).
use super::drive::*;
use super::fixture::*;
use crate::checklist::{Checklist, Rule, RuleResult, Subject, SubjectName, Verdict};
use crate::tui::state::Popup;
use crate::tui::{App, Reply};
use crossterm::event::KeyCode;

/// Three subjects: a job keyed by its run, a healthy one, and an action outside any job.
pub(super) fn checklist() -> Checklist {
    let subject = |name: SubjectName, bad: &[(Rule, Verdict, &str, &str)]| Subject {
        name,
        rules: Rule::ALL.map(|rule| match bad.iter().find(|(r, ..)| *r == rule) {
            Some((_, verdict, evidence, fix)) => RuleResult {
                rule,
                verdict: *verdict,
                evidence: evidence.to_string(),
                fix: fix.to_string(),
            },
            None => RuleResult {
                rule,
                verdict: Verdict::Ok,
                evidence: "kept".into(),
                fix: "nothing to do".into(),
            },
        }),
    };
    Checklist {
        taken_at: NOW.into(),
        subjects: vec![
            subject(SubjectName::Job("daily-digest".into()), &[]),
            subject(
                SubjectName::Job("invoices".into()),
                &[
                    (
                        Rule::KeyFromFacts,
                        Verdict::Fail,
                        "send-invoice reached done 3 times for customer-42 in one interval; \
                         inputs differ only in run_id",
                        "derive the key from the facts acted on: drop run_id from --input",
                    ),
                    (
                        Rule::Counters,
                        Verdict::Warn,
                        "suppressed is 0 over 48 runs: dedupe untested",
                        "exactly probe invoices",
                    ),
                ],
            ),
            subject(
                SubjectName::Action("notify-slack".into()),
                &[(
                    Rule::FarSide,
                    Verdict::Fail,
                    "no observer, no far side declared: an unknown cannot be settled",
                    "give the action an observer, or far_side = \"dedupes\" in the jobs file",
                )],
            ),
        ],
    }
}

fn app_with_checklist(color: bool) -> (App, Fixture) {
    let f = busy();
    let mut app = app_for(&f);
    app.color = color;
    app.on_reply(Reply::Checklist(Box::new(checklist())));
    (app, f)
}

#[test]
fn the_checklist_view_shows_each_rule_per_job_and_the_cell_under_the_cursor() {
    for (w, h) in [(80, 24), (120, 40)] {
        let (mut app, f) = app_with_checklist(true);
        press(&mut app, &mut f.store(), &keys("5"));
        insta::assert_snapshot!(
            format!("checklist_view_{w}x{h}"),
            render(&mut app, w, h).backend()
        );
        // invoices, rule 3: its evidence and fix under the table, then in full on Enter.
        press(&mut app, &mut f.store(), &keys("jll"));
        let screen = render(&mut app, w, h).backend().to_string();
        assert!(screen.contains("[✘]"), "{screen}");
        assert!(
            screen.contains("3 keys from facts, not runs · invoices"),
            "{screen}"
        );
        press(&mut app, &mut f.store(), &[code(KeyCode::Enter)]);
        insta::assert_snapshot!(
            format!("checklist_cell_{w}x{h}"),
            render(&mut app, w, h).backend()
        );
    }
}

#[test]
fn without_colours_the_cells_are_plain_letters() {
    let (mut app, f) = app_with_checklist(false);
    press(&mut app, &mut f.store(), &keys("5"));
    insta::assert_snapshot!(
        "checklist_view_no_color_80x24",
        render(&mut app, 80, 24).backend()
    );
}

#[test]
fn h_and_l_move_between_the_ten_rules_and_enter_opens_the_cell() {
    let (mut app, f) = app_with_checklist(true);
    press(&mut app, &mut f.store(), &keys("5"));
    press(&mut app, &mut f.store(), &keys("h"));
    assert_eq!(
        app.selected_rule(),
        Rule::LeaseToken,
        "stays at the first rule"
    );
    press(&mut app, &mut f.store(), &keys("lllllllllllll"));
    assert_eq!(app.selected_rule(), Rule::Counters, "stops at the tenth");
    press(&mut app, &mut f.store(), &[code(KeyCode::Left)]);
    assert_eq!(app.selected_rule(), Rule::ApprovalsOnce);
    press(&mut app, &mut f.store(), &keys("j"));
    press(&mut app, &mut f.store(), &[code(KeyCode::Enter)]);
    assert_eq!(
        app.popup,
        Some(Popup::Rule {
            subject: "invoices".into(),
            rule: Rule::ApprovalsOnce
        })
    );
    press(&mut app, &mut f.store(), &[code(KeyCode::Esc)]);
    assert_eq!(app.popup, None);
    // Worst first: invoices (a fail and a warning) before notify-slack (a fail).
    press(&mut app, &mut f.store(), &keys("s"));
    let order: Vec<&str> = app
        .checklist_rows()
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(order, ["invoices", "notify-slack", "daily-digest"]);
}

#[test]
fn the_job_count_says_how_many_jobs_fail_a_rule() {
    let (mut app, _f) = app_with_checklist(true);
    let screen = render(&mut app, 120, 40).backend().to_string();
    // notify-slack fails too, but it is an action outside any job.
    assert!(screen.contains("[1 Jobs 5 (1✘)]"), "{screen}");
    assert!(screen.contains("5 Checklist 3!"), "{screen}");
}
