//! Why a schedule string was refused, worded for the person who wrote it.

/// Why a schedule string was refused.
///
/// The `Display` text is a user message that reads after the schedule text, without the
/// file, job or field: the config layer prints
/// `cronq.toml: job "x": schedule: "61 0 * * *" is not a cron expression: minute 61 is outside 0-59`.
/// The texts are stable (CLI tests assert them):
///
/// | variant | message |
/// |---|---|
/// | [`Empty`](Self::Empty) | `is empty: give a cron expression, such as "30 3 * * *", or "@every 5m"` |
/// | [`FieldCount`](Self::FieldCount) | `is not a cron expression: expected 5, 6 or 7 fields, got 4` |
/// | [`Field`](Self::Field) | `is not a cron expression: <detail>`, the detail being one of the forms below |
/// | [`UnknownDescriptor`](Self::UnknownDescriptor) | `is not a schedule: unknown descriptor "@foo"; use @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or "@every DURATION"` |
/// | [`MissingDuration`](Self::MissingDuration) | `is not a schedule: @every needs a duration, such as "@every 5m"` |
/// | [`NotADuration`](Self::NotADuration) | `"5x" is not a duration: use a number and a unit, such as "90s", "5m" or "1h 30m"` |
/// | [`TooShort`](Self::TooShort) | `"500ms" is shorter than 1s: @every needs at least one second` |
/// | [`Fractional`](Self::Fractional) | `"1500ms" is not a whole number of seconds: @every needs whole seconds, such as "90s"` |
/// | [`NeverFires`](Self::NeverFires) | `can never fire: <reason>`, the reason being one of the forms below |
/// | [`NotAnExclusion`](Self::NotAnExclusion) | `is not an exclusion: use a date such as "2026-12-25" or a cron expression such as "0 12 * * *"` (an `exclude` entry that is `@…` or a date that does not exist) |
///
/// Field details (`<field>` is `second`, `minute`, `hour`, `day-of-month`, `month`,
/// `day-of-week` or `year`; `<allowed>` is `0-59`, `0-23`, `1-31`, `1-12 or JAN-DEC`,
/// `0-7 or SUN-SAT` or `1970-2999`):
/// - `<field> 61 is outside <allowed>` (a number out of range)
/// - `<field> "x" is not a value in <allowed>` (neither a number nor a name of that field)
/// - `<field> range "5-2" goes backwards: write the smaller value first`
/// - `<field> step in "*/0" must be a number in 1-<largest value of the field>`
/// - `<field> "5/10" needs * or a range before the /: write "*/10" or "5-59/10"`
/// - `<field> "1,,2" has an empty list item`
/// - `<field> "5L": L, W, # and ? are only allowed in day-of-month and day-of-week`
/// - `day-of-month "3#2": # is only allowed in day-of-week`
/// - `day-of-week "5W": W is only allowed in day-of-month`
/// - `day-of-month "L5" is not valid: use L (last day), LW (last weekday) or a day with W, such as 15W`
/// - `day-of-week "L" needs a weekday before L, such as 5L for the last Friday of the month`
/// - `day-of-week "5#6": the number after # must be 1-5`
/// - (never expected) croner's own message, with `field` = `pattern`, should croner refuse
///   a pattern these checks let through
///
/// Never-fire reasons:
/// - `no date matches its day-of-month, month and day-of-week fields` (such as February 30)
/// - `its last year, 2020, is past`
/// - `no date from now on matches its day-of-month, month, day-of-week and year fields`
/// - `its last time, 2026-01-01T00:00:00+01:00, is past`
/// - `none of its times from now on exist in <zone>` (only dates whose times fall in a
///   daylight-saving gap) or, for `@every`, `its next time is out of range`
/// - `its exclusions remove every occurrence from now on` (`exclude` and calendars)
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The text is empty or blank.
    #[error("is empty: give a cron expression, such as \"30 3 * * *\", or \"@every 5m\"")]
    Empty,
    /// A cron expression with the wrong number of fields.
    #[error("is not a cron expression: expected 5, 6 or 7 fields, got {got}")]
    FieldCount {
        /// How many whitespace-separated fields it has.
        got: usize,
    },
    /// One field is wrong.
    #[error("is not a cron expression: {detail}")]
    Field {
        /// The field's name: `minute`, `day-of-week`, ...
        field: &'static str,
        /// What is wrong with it, starting with the field name.
        detail: String,
    },
    /// An `@word` that is not a descriptor.
    #[error(
        "is not a schedule: unknown descriptor {descriptor:?}; use @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or \"@every DURATION\""
    )]
    UnknownDescriptor {
        /// The text as written.
        descriptor: String,
    },
    /// `@every` with nothing after it.
    #[error("is not a schedule: @every needs a duration, such as \"@every 5m\"")]
    MissingDuration,
    /// `@every` followed by something humantime does not read.
    #[error(
        "{text:?} is not a duration: use a number and a unit, such as \"90s\", \"5m\" or \"1h 30m\""
    )]
    NotADuration {
        /// The duration text as written.
        text: String,
    },
    /// `@every` shorter than one second.
    #[error("{text:?} is shorter than 1s: @every needs at least one second")]
    TooShort {
        /// The duration text as written.
        text: String,
    },
    /// `@every` with a fraction of a second.
    #[error(
        "{text:?} is not a whole number of seconds: @every needs whole seconds, such as \"90s\""
    )]
    Fractional {
        /// The duration text as written.
        text: String,
    },
    /// A valid expression that has no fire time from now on.
    #[error("can never fire: {reason}")]
    NeverFires {
        /// Why, such as `its last year, 2020, is past`.
        reason: String,
    },
    /// An `exclude` entry that is neither a date nor a cron expression.
    #[error(
        "is not an exclusion: use a date such as \"2026-12-25\" or a cron expression such as \"0 12 * * *\""
    )]
    NotAnExclusion,
}
