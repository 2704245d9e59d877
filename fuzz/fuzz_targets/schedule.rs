//! Schedule parsing and next-fire computation, against an oracle written here from the
//! rules of docs/config.md alone (no code shared with `shared/src/schedule`): a naive
//! minute-by-minute scan of a bounded window in the job's zone.
//!
//! - A generated 5-field expression (or descriptor) must parse, and the fires
//!   `Schedule::next_after` gives over the window must be exactly the oracle's: strictly
//!   increasing, never two at one instant, none missing, none extra; `next_after` from a
//!   random instant inside the window is the oracle's first fire after it.
//! - `@every N` fires exactly on the multiples of N seconds since the epoch.
//! - Any other text: parsing never panics; what parses fires strictly increasingly.
//! - A job's time controls (`Schedule::combine`, `Schedule::bounded`): up to three
//!   generated expressions (`schedules`), up to two generated 5-field exclusions and up to
//!   three excluded local dates (`exclude`, calendars), `start_at`/`end_at` inside the
//!   window, and `H` or `H(A-B)` in the first expression's minute field: the fires are
//!   exactly the oracle's union of each expression's own fires, each instant once, less
//!   those whose local minute an exclusion matches or whose local date is excluded,
//!   within the bounds. For `H`, the oracle takes the value cronq resolved (checked to lie
//!   in the item's range, and the same when resolved again), then fires as for that value.
//!
//! The oracle's rules: a field matches by its own list; day of month and day of week are
//! both required when either starts with `*`, else either is enough (crontab); a schedule
//! whose minute or hour field starts with `*` runs by elapsed time (every instant whose
//! local time matches, so both passes of a repeated hour and none of a skipped one); every
//! other one is pinned to wall-clock times: a local time that occurs twice runs at its
//! first occurrence, one skipped by a gap runs once at the first instant after the gap.

#![no_main]

use arbitrary::Arbitrary;
use chrono::{DateTime, Datelike, Duration, NaiveDateTime, Offset, TimeZone, Timelike, Utc};
use chrono_tz::{TZ_VARIANTS, Tz};
use cronq_shared::schedule::{Bounds, Exclusions, Schedule, ScheduleError};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
enum Atom {
    Star,
    StarStep(u8),
    Value(u8),
    Range(u8, u8),
    RangeStep(u8, u8, u8),
}

#[derive(Debug, Arbitrary)]
struct FieldSpec {
    atoms: Vec<Atom>,
    names: bool,
    /// Day of month only: `L`, the month's last day.
    last: bool,
    /// Day of week only: `DOW#N`, the Nth such weekday of the month.
    nth: Option<(u8, u8)>,
}

/// `H` in the first expression's minute field: `H`, or `H(A-B)`.
#[derive(Debug, Arbitrary)]
enum Hash {
    Plain,
    Range(u8, u8),
}

#[derive(Debug, Arbitrary)]
struct Controls {
    members: Vec<[FieldSpec; 5]>,
    exclude: Vec<[FieldSpec; 5]>,
    /// Excluded local dates, as days after the window's first.
    dates: Vec<u8>,
    /// `start_at` and `end_at`, as minutes into the window.
    start: Option<u16>,
    end: Option<u16>,
    hash: Option<Hash>,
    name: u16,
}

#[derive(Debug, Arbitrary)]
enum Form {
    Cron([FieldSpec; 5]),
    Descriptor(u8, bool),
    Every(u32),
    Raw(String),
    Controlled(Controls),
}

#[derive(Debug, Arbitrary)]
struct Input {
    form: Form,
    zone: u16,
    start: u32,
    near_transition: bool,
    probe: u32,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Minute,
    Hour,
    Dom,
    Month,
    Dow,
}

impl Kind {
    fn bounds(self) -> (u32, u32) {
        match self {
            Kind::Minute => (0, 59),
            Kind::Hour => (0, 23),
            Kind::Dom => (1, 31),
            Kind::Month => (1, 12),
            Kind::Dow => (0, 7),
        }
    }
}

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 8] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"];

/// One field: its text, and the oracle's own description of what it matches.
struct Field {
    text: String,
    /// `values[v]`: value v matches (day of week 7 folded onto 0).
    values: Vec<bool>,
    last: bool,
    nth: Option<(u32, u32)>,
}

impl Field {
    fn build(kind: Kind, spec: &FieldSpec) -> Field {
        let (lo, hi) = kind.bounds();
        // A day of month named is at most 28: it exists in every month, so each expression
        // fires (a never-firing one is refused, which is not the point here).
        let named_hi = if kind == Kind::Dom { 28 } else { hi };
        // A step is at most the field's largest value (docs/config.md).
        let largest_step = if kind == Kind::Dow { 6 } else { hi };
        let val = |v: u8| lo + u32::from(v) % (named_hi - lo + 1);
        let step = |s: u8| 1 + u32::from(s) % largest_step;
        let name = |v: u32| -> String {
            match kind {
                Kind::Month if spec.names => MONTHS[(v - 1) as usize].to_owned(),
                Kind::Dow if spec.names => DAYS[v as usize].to_owned(),
                _ => v.to_string(),
            }
        };
        let mut values = vec![false; (hi + 1) as usize];
        let mut parts = Vec::new();
        let set = |from: u32, to: u32, by: u32, values: &mut Vec<bool>| {
            let mut v = from;
            while v <= to {
                values[v as usize] = true;
                v += by;
            }
        };
        for atom in spec.atoms.iter().take(3) {
            match *atom {
                Atom::Star => {
                    parts.push("*".to_owned());
                    set(lo, hi, 1, &mut values);
                }
                Atom::StarStep(s) => {
                    let s = step(s);
                    parts.push(format!("*/{s}"));
                    set(lo, hi, s, &mut values);
                }
                Atom::Value(v) => {
                    let v = val(v);
                    parts.push(name(v));
                    set(v, v, 1, &mut values);
                }
                Atom::Range(a, b) => {
                    let (a, mut b) = (val(a).min(val(b)), val(a).max(val(b)));
                    parts.push(format!("{}-{}", name(a), name(b)));
                    if kind == Kind::Dow && spec.names && a == 0 && b == 7 {
                        // `SUN-SUN` is Sunday alone (docs/config.md).
                        b = 0;
                    }
                    set(a, b, 1, &mut values);
                }
                Atom::RangeStep(a, b, s) => {
                    let (a, b) = (val(a).min(val(b)), val(a).max(val(b)));
                    let s = step(s);
                    parts.push(format!("{a}-{b}/{s}"));
                    set(a, b, s, &mut values);
                }
            }
        }
        let mut last = false;
        let mut nth = None;
        if kind == Kind::Dom && spec.last {
            parts.push("L".to_owned());
            last = true;
        }
        if kind == Kind::Dow {
            if let Some((d, n)) = spec.nth {
                let (d, n) = (u32::from(d) % 7, 1 + u32::from(n) % 4);
                parts.push(format!("{}#{n}", name(d)));
                nth = Some((d, n));
            }
        }
        if parts.is_empty() {
            parts.push("*".to_owned());
            set(lo, hi, 1, &mut values);
        }
        if kind == Kind::Dow && values[7] {
            values[0] = true;
        }
        Field {
            text: parts.join(","),
            values,
            last,
            nth,
        }
    }

    fn has(&self, v: u32) -> bool {
        self.values.get(v as usize).copied().unwrap_or(false)
    }
}

struct Cron {
    min: Field,
    hour: Field,
    dom: Field,
    month: Field,
    dow: Field,
}

impl Cron {
    fn text(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.min.text, self.hour.text, self.dom.text, self.month.text, self.dow.text
        )
    }

    fn pinned(&self) -> bool {
        !(self.min.text.starts_with('*') || self.hour.text.starts_with('*'))
    }

    fn matches(&self, t: NaiveDateTime) -> bool {
        if t.second() != 0 || !self.min.has(t.minute()) || !self.hour.has(t.hour()) {
            return false;
        }
        if !self.month.has(t.month()) {
            return false;
        }
        let last_day = last_day_of_month(t.year(), t.month());
        let dom = self.dom.has(t.day()) || (self.dom.last && t.day() == last_day);
        let weekday = t.weekday().num_days_from_sunday();
        let dow = self.dow.has(weekday)
            || self
                .dow
                .nth
                .is_some_and(|(d, n)| d == weekday && (t.day() - 1) / 7 + 1 == n);
        if self.dom.text.starts_with('*') || self.dow.text.starts_with('*') {
            dom && dow
        } else {
            dom || dow
        }
    }
}

impl Cron {
    /// Whether an exclusion written as this 5-field expression matches local time `t`:
    /// any second of a minute it matches (docs/config.md, "Exclusions").
    fn excludes(&self, t: NaiveDateTime) -> bool {
        self.matches(t.with_second(0).expect("second 0 exists"))
    }

    fn build(specs: &[FieldSpec; 5]) -> Cron {
        Cron {
            min: Field::build(Kind::Minute, &specs[0]),
            hour: Field::build(Kind::Hour, &specs[1]),
            dom: Field::build(Kind::Dom, &specs[2]),
            month: Field::build(Kind::Month, &specs[3]),
            dow: Field::build(Kind::Dow, &specs[4]),
        }
    }
}

fn last_day_of_month(year: i32, month: u32) -> u32 {
    let (y, m) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    chrono::NaiveDate::from_ymd_opt(y, m, 1)
        .and_then(|d| d.pred_opt())
        .map_or(28, |d| d.day())
}

fn local(tz: Tz, t: DateTime<Utc>) -> NaiveDateTime {
    t.with_timezone(&tz).naive_local()
}

/// The oracle: every fire in `(from, to]`, scanning each UTC minute from a day before.
fn oracle(cron: &Cron, tz: Tz, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let pinned = cron.pinned();
    let mut fires = Vec::new();
    let mut latest: Option<NaiveDateTime> = None;
    let mut t = from - Duration::days(1);
    while t <= to {
        let l = local(tz, t);
        let fire = if pinned {
            match latest {
                // A wall time seen before (the second pass of a repeated hour).
                Some(prev) if l <= prev => false,
                Some(prev) => {
                    // Local minutes the clock jumped over run at this first instant after.
                    let mut skipped = prev + Duration::minutes(1);
                    let mut any = cron.matches(l);
                    while skipped < l {
                        any |= cron.matches(skipped);
                        skipped += Duration::minutes(1);
                    }
                    latest = Some(l);
                    any
                }
                None => {
                    latest = Some(l);
                    cron.matches(l)
                }
            }
        } else {
            cron.matches(l)
        };
        if fire && t > from {
            fires.push(t);
        }
        t += Duration::minutes(1);
    }
    fires
}

fn descriptor(index: u8) -> (&'static str, [&'static str; 5]) {
    match index % 7 {
        0 => ("@yearly", ["0", "0", "1", "1", "*"]),
        1 => ("@annually", ["0", "0", "1", "1", "*"]),
        2 => ("@monthly", ["0", "0", "1", "*", "*"]),
        3 => ("@weekly", ["0", "0", "*", "*", "0"]),
        4 => ("@daily", ["0", "0", "*", "*", "*"]),
        5 => ("@midnight", ["0", "0", "*", "*", "*"]),
        _ => ("@hourly", ["0", "*", "*", "*", "*"]),
    }
}

/// A field the oracle builds from fixed text (a descriptor's expansion).
fn fixed(kind: Kind, text: &str) -> Field {
    let (lo, hi) = kind.bounds();
    let mut values = vec![false; (hi + 1) as usize];
    if text == "*" {
        for v in lo..=hi {
            values[v as usize] = true;
        }
    } else {
        let v: usize = text.parse().expect("a number");
        values[v] = true;
    }
    Field {
        text: text.to_owned(),
        values,
        last: false,
        nth: None,
    }
}

/// The first UTC hour at which `tz`'s offset changes, within a year after `from`.
fn next_transition(tz: Tz, from: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let offset = |t: DateTime<Utc>| tz.offset_from_utc_datetime(&t.naive_utc()).fix();
    let first = offset(from);
    (1..=366 * 24)
        .map(|h| from + Duration::hours(h))
        .find(|t| offset(*t) != first)
}

fuzz_target!(|input: Input| {
    let tz = TZ_VARIANTS[input.zone as usize % TZ_VARIANTS.len()];
    // 2000-01-01 plus up to ~80 years, on a whole minute.
    let base = DateTime::from_timestamp(946_684_800, 0).expect("in range");
    let mut from = base + Duration::minutes(i64::from(input.start % (80 * 525_960)));
    if input.near_transition {
        if let Some(t) = next_transition(tz, from) {
            from = t - Duration::hours(30) + Duration::minutes(i64::from(input.probe % 600));
        }
    }
    // A whole-minute UTC offset throughout, so local minutes are UTC minutes.
    let whole_minutes = |t: DateTime<Utc>| {
        tz.offset_from_utc_datetime(&t.naive_utc())
            .fix()
            .local_minus_utc()
            % 60
            == 0
    };

    let cron = match &input.form {
        Form::Raw(text) => {
            if let Ok(schedule) = Schedule::parse_at(text, tz, from) {
                let mut prev = from;
                for t in schedule.iter_after(from).take(50) {
                    assert!(t > prev, "{text:?} in {tz}: {t} after {prev}");
                    prev = t;
                }
            }
            return;
        }
        Form::Every(n) => {
            let n = 1 + i64::from(*n % 200_000);
            let schedule = Schedule::parse_at(&format!("@every {n}s"), tz, from)
                .expect("@every of whole seconds parses");
            let first = (from.timestamp().div_euclid(n) + 1) * n;
            for (k, t) in schedule.iter_after(from).take(50).enumerate() {
                assert_eq!(
                    t.timestamp(),
                    first + n * k as i64,
                    "@every {n}s from {from}"
                );
            }
            return;
        }
        Form::Descriptor(i, upper) => {
            let (word, fields) = descriptor(*i);
            let cron = Cron {
                min: fixed(Kind::Minute, fields[0]),
                hour: fixed(Kind::Hour, fields[1]),
                dom: fixed(Kind::Dom, fields[2]),
                month: fixed(Kind::Month, fields[3]),
                dow: fixed(Kind::Dow, fields[4]),
            };
            let word = if *upper {
                word.to_uppercase()
            } else {
                word.to_owned()
            };
            (word, cron)
        }
        Form::Cron(specs) => {
            let cron = Cron::build(specs);
            (cron.text(), cron)
        }
        Form::Controlled(controls) => {
            if whole_minutes(from) && whole_minutes(from + Duration::days(4)) {
                controlled(controls, tz, from, input.probe);
            }
            return;
        }
    };
    let (text, cron) = cron;
    let to = from + Duration::days(4);
    if !whole_minutes(from) || !whole_minutes(to) {
        return;
    }
    let expected = oracle(&cron, tz, from, to);
    let schedule = match Schedule::parse_at(&text, tz, from) {
        Ok(s) => s,
        // Fields that no date satisfies together (`*/16` days with `FRI#2`): refused as
        // never firing, and the oracle finds nothing either.
        Err(e @ ScheduleError::NeverFires { .. }) => {
            assert!(
                expected.is_empty(),
                "{text:?} in {tz} refused ({e}), but the oracle fires at {expected:?}"
            );
            return;
        }
        Err(e) => panic!("{text:?} in {tz} refused: {e}"),
    };
    let got: Vec<DateTime<Utc>> = schedule.iter_after(from).take_while(|t| *t <= to).collect();
    for pair in got.windows(2) {
        assert!(
            pair[0] < pair[1],
            "{text:?} in {tz}: not strictly increasing: {pair:?}"
        );
    }
    assert_eq!(
        got,
        expected,
        "{text:?} in {tz} from {from} (pinned: {})",
        cron.pinned()
    );
    // From any instant (seconds too) inside the window: the oracle's first fire after it.
    let probe = from + Duration::seconds(i64::from(input.probe % (4 * 86_400)));
    if let Some(want) = expected.iter().find(|t| **t > probe) {
        assert_eq!(
            schedule.next_after(probe),
            Some(*want),
            "{text:?} in {tz} after {probe}"
        );
    }
});

/// The minute value `H`/`H(A-B)` resolved to, read off the resolved text's first field.
fn resolved_minute(schedule: &Schedule) -> u32 {
    let resolved = schedule
        .resolved()
        .expect("an H schedule shows what it resolved to");
    let minute = resolved.split_whitespace().next().expect("a minute field");
    minute
        .parse()
        .unwrap_or_else(|_| panic!("H resolved to one value, got {resolved:?}"))
}

fn controlled(c: &Controls, tz: Tz, from: DateTime<Utc>, probe: u32) {
    let to = from + Duration::days(4);
    let job = format!("job-{}", c.name);
    let mut crons: Vec<Cron> = c.members.iter().take(3).map(Cron::build).collect();
    if crons.is_empty() {
        return;
    }
    let mut texts: Vec<String> = crons.iter().map(Cron::text).collect();
    if let Some(hash) = &c.hash {
        let (item, lo, hi) = match *hash {
            Hash::Plain => ("H".to_owned(), 0, 59),
            Hash::Range(a, b) => {
                let (a, b) = (u32::from(a) % 60, u32::from(b) % 60);
                let (a, b) = (a.min(b), a.max(b));
                (format!("H({a}-{b})"), a, b)
            }
        };
        let rest: Vec<&str> = texts[0].split_whitespace().skip(1).collect();
        let text = format!("{item} {}", rest.join(" "));
        let alone = Schedule::parse_for_job(&text, tz, &job, from)
            .unwrap_or_else(|e| panic!("{text:?} for {job} in {tz} refused: {e}"));
        let value = resolved_minute(&alone);
        assert!(
            (lo..=hi).contains(&value),
            "{text:?} for {job}: H resolved to {value}, outside {lo}-{hi}"
        );
        let again = Schedule::parse_for_job(&text, tz, &job, to).expect("parsed once");
        assert_eq!(
            again.resolved(),
            alone.resolved(),
            "{text:?} for {job}: H moved"
        );
        let mut values = vec![false; 60];
        values[value as usize] = true;
        crons[0].min = Field {
            text: item,
            values,
            last: false,
            nth: None,
        };
        texts[0] = text;
    }
    let members: Vec<Schedule> = texts
        .iter()
        .map(|t| {
            Schedule::parse_for_job(t, tz, &job, from)
                .unwrap_or_else(|e| panic!("{t:?} for {job} in {tz} refused: {e}"))
        })
        .collect();
    let exclusions: Vec<Cron> = c.exclude.iter().take(2).map(Cron::build).collect();
    let first_day = local(tz, from).date();
    let dates: Vec<chrono::NaiveDate> = c
        .dates
        .iter()
        .take(3)
        .map(|d| first_day + Duration::days(i64::from(*d % 5)))
        .collect();
    let mut exclude = Exclusions::new();
    for e in &exclusions {
        exclude
            .add(&e.text(), &job)
            .unwrap_or_else(|err| panic!("exclusion {:?} refused: {err}", e.text()));
    }
    for d in &dates {
        exclude
            .add(&d.format("%Y-%m-%d").to_string(), &job)
            .expect("a date is an exclusion");
    }
    let window = 4 * 1440;
    let at = |m: u16| from + Duration::minutes(i64::from(m) % window);
    let (start, end) = match (c.start.map(at), c.end.map(at)) {
        (Some(a), Some(b)) => (Some(a.min(b)), Some(a.max(b))),
        other => other,
    };

    // The oracle: each expression's own fires, merged, each instant once, less the excluded.
    let mut expected: Vec<DateTime<Utc>> = crons
        .iter()
        .flat_map(|cron| oracle(cron, tz, from, to))
        .collect();
    expected.sort();
    expected.dedup();
    expected.retain(|t| {
        let l = local(tz, *t);
        !exclusions.iter().any(|e| e.excludes(l)) && !dates.contains(&l.date())
    });
    let unbounded = expected.len();
    expected.retain(|t| start.is_none_or(|s| *t >= s) && end.is_none_or(|e| *t <= e));

    let label = format!(
        "{texts:?} except {:?} and {dates:?} in {tz} from {from}, bounds {start:?}..{end:?}",
        exclusions.iter().map(Cron::text).collect::<Vec<_>>()
    );
    let combined = match Schedule::combine(members, exclude, from) {
        Ok(s) => s,
        Err(e) => {
            // Refused as never firing (before the bounds): then the oracle finds nothing
            // left in the window either.
            assert_eq!(unbounded, 0, "{label}: refused ({e}) but the oracle fires");
            return;
        }
    };
    let schedule = combined.bounded(Bounds { start, end });
    let got: Vec<DateTime<Utc>> = schedule.iter_after(from).take_while(|t| *t <= to).collect();
    for pair in got.windows(2) {
        assert!(
            pair[0] < pair[1],
            "{label}: not strictly increasing: {pair:?}"
        );
    }
    assert_eq!(got, expected, "{label}");
    let probe = from + Duration::seconds(i64::from(probe % (4 * 86_400)));
    if let Some(want) = expected.iter().find(|t| **t > probe) {
        assert_eq!(
            schedule.next_after(probe),
            Some(*want),
            "{label} after {probe}"
        );
    }
}
