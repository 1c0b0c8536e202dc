use super::*;

fn report(statuses: &[Status]) -> Report {
    Report {
        mode: Mode::Environment,
        checks: statuses
            .iter()
            .map(|&status| Check::new("state_dir", status, "s"))
            .collect(),
    }
}

#[test]
fn only_a_failed_check_fails_the_report() {
    assert!(report(&[Status::Ok, Status::Warn, Status::Skip]).passed());
    assert!(!report(&[Status::Ok, Status::Fail]).passed());
}

#[test]
fn text_has_one_line_per_check_with_the_next_step() {
    let r = Report {
        mode: Mode::Live,
        checks: vec![
            Check::ok("live.healthz", "the daemon answers"),
            Check::fail("live.route", "passes through").next("start a session"),
        ],
    };
    let text = r.to_text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0], "ok   live.healthz: the daemon answers");
    assert_eq!(
        lines[1],
        "fail live.route: passes through -> next: start a session"
    );
    assert!(lines[2].starts_with("FAILED: 1 ok, 0 warn, 1 fail"));
}

#[test]
fn json_has_the_documented_fields() {
    let r = report(&[Status::Warn]);
    let json = r.to_json();
    assert_eq!(json["schema_version"], 1);
    assert_eq!(json["mode"], "environment");
    assert_eq!(json["ok"], true);
    assert_eq!(json["counts"]["warn"], 1);
    let check = &json["checks"][0];
    assert_eq!(check["id"], "state_dir");
    assert_eq!(check["status"], "warn");
    assert_eq!(check["summary"], "s");
    assert!(check["next_step"].is_null());
    assert!(check["details"].is_object());
}
