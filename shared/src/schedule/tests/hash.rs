//! `H`: stable values pinned as literals, spread over many names, each form, and errors.

use chrono_tz::UTC;

use super::super::{Interner, Schedule, ScheduleError};
use super::{at, now};

fn resolve(text: &str, job: &str) -> String {
    Schedule::parse_for_job(text, UTC, job, now())
        .unwrap_or_else(|e| panic!("{text:?} for {job:?}: {e}"))
        .resolved()
        .unwrap_or_else(|| panic!("{text:?} has H"))
        .to_owned()
}

fn refused(text: &str, job: &str) -> String {
    Schedule::parse_for_job(text, UTC, job, now())
        .unwrap_err()
        .to_string()
}

/// Pinned: a change of the hash (or of how a field picks from it) fails here, because it
/// would move every `H` job of every deployment (G4).
#[test]
fn values_are_pinned_literals() {
    let cases = [
        ("H * * * *", "backup", "12 * * * *"),
        ("H * * * *", "report", "35 * * * *"),
        ("H H * * *", "backup", "12 20 * * *"),
        ("H H H H H H", "backup", "26 12 20 5 12 5"),
        ("H H H H H H", "report", "18 35 0 4 11 6"),
        ("H H H H H H", "a", "37 59 8 20 12 1"),
        ("H/15 * * * *", "backup", "12-59/15 * * * *"),
        ("H/15 * * * *", "report", "5-59/15 * * * *"),
        ("H(0-29) * * * *", "a", "29 * * * *"),
        ("H(0-29)/10 * * * *", "backup", "2-29/10 * * * *"),
        ("H(0-29)/10 * * * *", "a", "9-29/10 * * * *"),
        ("0 0 H * *", "a", "0 0 20 * *"),
        ("0 0 * H *", "report", "0 0 * 11 *"),
        ("0 0 * * H", "report", "0 0 * * 6"),
        ("0 0 * * H(MON-FRI)", "backup", "0 0 * * 2"),
        ("H,30 * * * *", "report", "35,30 * * * *"),
    ];
    for (text, job, want) in cases {
        assert_eq!(resolve(text, job), want, "{text:?} for {job:?}");
    }
}

#[test]
fn resolved_times_follow_the_resolution() {
    let s = Schedule::parse_for_job("H H * * *", UTC, "backup", now()).unwrap();
    assert_eq!(s.as_str(), "H H * * *", "the text stays as written");
    assert_eq!(
        s.next_after(at("2026-01-01T00:00:00Z")),
        Some(at("2026-01-01T20:12:00Z"))
    );
}

#[test]
fn a_field_does_not_depend_on_the_others() {
    for job in ["backup", "report", "a", "x.y-z_1"] {
        let minute = resolve("H * * * *", job);
        let minute = minute.split(' ').next().unwrap();
        for text in ["H H * * *", "H 3 1 * *", "H H H H H"] {
            assert_eq!(resolve(text, job).split(' ').next().unwrap(), minute);
        }
        assert_eq!(
            resolve("0 H * * *", job).split(' ').nth(1),
            resolve("H H * * *", job).split(' ').nth(1),
        );
    }
}

#[test]
fn many_names_spread_over_the_range() {
    let mut minutes = [0u32; 60];
    let mut hours = [0u32; 24];
    let mut days = [0u32; 28];
    for i in 0..6000 {
        let job = format!("job-{i}");
        let r = resolve("H H H * *", &job);
        let v: Vec<usize> = r.split(' ').take(3).map(|f| f.parse().unwrap()).collect();
        minutes[v[0]] += 1;
        hours[v[1]] += 1;
        days[v[2] - 1] += 1;
    }
    // 100 per minute, 250 per hour, ~214 per day on average: within half of it.
    assert!(
        minutes.iter().all(|&n| (50..=150).contains(&n)),
        "{minutes:?}"
    );
    assert!(hours.iter().all(|&n| (125..=375).contains(&n)), "{hours:?}");
    assert!(days.iter().all(|&n| (107..=321).contains(&n)), "{days:?}");
}

#[test]
fn each_form_stays_in_its_range() {
    for i in 0..500 {
        let job = format!("j{i}");
        let sec: u32 = resolve("H * * * * *", &job)
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(sec < 60);
        let m: u32 = resolve("H(10-14) * * * *", &job)
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!((10..=14).contains(&m), "{m}");
        let stepped = resolve("H(10-29)/5 * * * *", &job);
        let first: u32 = stepped.split('-').next().unwrap().parse().unwrap();
        assert!((10..15).contains(&first), "{stepped}");
        assert!(stepped.ends_with("-29/5 * * * *"), "{stepped}");
        let dom: u32 = resolve("0 0 H * *", &job)
            .split(' ')
            .nth(2)
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=28).contains(&dom), "a day every month has: {dom}");
        let dow: u32 = resolve("0 0 * * H", &job)
            .split(' ')
            .nth(4)
            .unwrap()
            .parse()
            .unwrap();
        assert!(dow <= 6, "{dow}");
    }
}

#[test]
fn bad_forms_name_the_field() {
    assert_eq!(
        refused("H(30-10) * * * *", "a"),
        "is not a cron expression: minute \"H(30-10)\" has an empty range: write the smaller value first, such as H(10-30)"
    );
    assert_eq!(
        refused("0 H/0 * * *", "a"),
        "is not a cron expression: hour step in \"H/0\" must be a number in 1-24"
    );
    assert_eq!(
        refused("H(0-9)/20 * * * *", "a"),
        "is not a cron expression: minute step in \"H(0-9)/20\" must be a number in 1-10"
    );
    assert_eq!(
        refused("Hx * * * *", "a"),
        "is not a cron expression: minute \"Hx\" is not valid: use H, H/STEP, H(A-B) or H(A-B)/STEP, such as H(0-29)/10"
    );
    assert_eq!(
        refused("H(0-61) * * * *", "a"),
        "is not a cron expression: minute 61 is outside 0-59"
    );
    assert_eq!(
        refused("0 0 0 1 1 * H", "a"),
        "is not a cron expression: year \"H\": H is not allowed in the year field"
    );
    let err = Schedule::parse_at("H * * * *", UTC, now()).unwrap_err();
    assert!(
        matches!(
            err,
            ScheduleError::Field {
                field: "minute",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        refused("@every H", "a").contains("is not a duration"),
        "H has no meaning in @every"
    );
}

#[test]
fn names_are_not_h() {
    // THU has an H, but is a weekday name, not an H item.
    let s = Schedule::parse_for_job("0 9 * * THU", UTC, "a", now()).unwrap();
    assert_eq!(s.resolved(), None);
}

#[test]
fn interner_shares_by_resolution() {
    let mut interner = Interner::new(now());
    let a = interner.parse_for_job("H * * * *", UTC, "backup").unwrap();
    let b = interner.parse_for_job("H * * * *", UTC, "backup").unwrap();
    let c = interner.parse_for_job("H * * * *", UTC, "report").unwrap();
    assert!(a.shares_parsed(&b));
    assert_ne!(a, c, "another resolution is another schedule");
    let plain = interner.parse_for_job("12 * * * *", UTC, "backup").unwrap();
    assert_ne!(a, plain, "the text as written differs");
    assert_eq!(interner.len(), 3);
}
