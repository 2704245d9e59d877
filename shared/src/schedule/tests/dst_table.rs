//! Every fire instant over each 2026 transition of New York, Berlin and Sydney, computed
//! by hand (local time in the comment), against `next_after` from the window start and
//! from many resume points inside the window.
//!
//! 2026 transitions (checked against chrono-tz):
//! - America/New_York: 03-08 02:00 EST -> 03:00 EDT (07:00Z); 11-01 02:00 EDT -> 01:00 EST (06:00Z)
//! - Europe/Berlin: 03-29 02:00 CET -> 03:00 CEST (01:00Z); 10-25 03:00 CEST -> 02:00 CET (01:00Z)
//! - Australia/Sydney: 04-05 03:00 AEDT -> 02:00 AEST (04-04 16:00Z);
//!   10-04 02:00 AEST -> 03:00 AEDT (10-03 16:00Z)

use chrono_tz::America::New_York;
use chrono_tz::Australia::Sydney;
use chrono_tz::Europe::Berlin;
use chrono_tz::Tz;

use super::{at, now};
use crate::schedule::Schedule;

struct Case {
    zone: Tz,
    expr: &'static str,
    /// Window `(from, to]`.
    from: &'static str,
    to: &'static str,
    expected: &'static [&'static str],
}

const CASES: &[Case] = &[
    // ---------------- New York, spring forward 2026-03-08 ----------------
    Case {
        zone: New_York,
        expr: "30 2 * * *",
        from: "2026-03-07T12:00:00Z",
        to: "2026-03-09T12:00:00Z",
        expected: &[
            "2026-03-08T07:00:00Z", // 02:30 does not exist: 03:00 EDT
            "2026-03-09T06:30:00Z", // 02:30 EDT
        ],
    },
    Case {
        zone: New_York,
        expr: "30 1 * * *",
        from: "2026-03-07T12:00:00Z",
        to: "2026-03-09T12:00:00Z",
        expected: &[
            "2026-03-08T06:30:00Z", // 01:30 EST
            "2026-03-09T05:30:00Z", // 01:30 EDT
        ],
    },
    Case {
        zone: New_York,
        expr: "0 1-2 * * *",
        from: "2026-03-07T12:00:00Z",
        to: "2026-03-09T12:00:00Z",
        expected: &[
            "2026-03-08T06:00:00Z", // 01:00 EST
            "2026-03-08T07:00:00Z", // 02:00 does not exist: 03:00 EDT
            "2026-03-09T05:00:00Z", // 01:00 EDT
            "2026-03-09T06:00:00Z", // 02:00 EDT
        ],
    },
    Case {
        zone: New_York,
        expr: "0 * * * *",
        from: "2026-03-08T04:30:00Z", // 03-07 23:30 EST
        to: "2026-03-08T09:30:00Z",   // 05:30 EDT
        expected: &[
            "2026-03-08T05:00:00Z", // 00:00 EST
            "2026-03-08T06:00:00Z", // 01:00 EST
            "2026-03-08T07:00:00Z", // 03:00 EDT (no 02:00)
            "2026-03-08T08:00:00Z", // 04:00 EDT
            "2026-03-08T09:00:00Z", // 05:00 EDT
        ],
    },
    Case {
        zone: New_York,
        expr: "*/15 * * * *",
        from: "2026-03-08T05:50:00Z", // 00:50 EST
        to: "2026-03-08T07:20:00Z",   // 03:20 EDT
        expected: &[
            "2026-03-08T06:00:00Z", // 01:00 EST
            "2026-03-08T06:15:00Z", // 01:15 EST
            "2026-03-08T06:30:00Z", // 01:30 EST
            "2026-03-08T06:45:00Z", // 01:45 EST
            "2026-03-08T07:00:00Z", // 03:00 EDT (02:xx skipped)
            "2026-03-08T07:15:00Z", // 03:15 EDT
        ],
    },
    Case {
        zone: New_York,
        expr: "0 */2 * * *",
        from: "2026-03-08T04:30:00Z", // 03-07 23:30 EST
        to: "2026-03-08T10:30:00Z",   // 06:30 EDT
        expected: &[
            "2026-03-08T05:00:00Z", // 00:00 EST
            // 02:00 does not exist: elapsed-time schedules skip it
            "2026-03-08T08:00:00Z", // 04:00 EDT
            "2026-03-08T10:00:00Z", // 06:00 EDT
        ],
    },
    // ---------------- New York, fall back 2026-11-01 ----------------
    Case {
        zone: New_York,
        expr: "30 2 * * *",
        from: "2026-10-31T12:00:00Z",
        to: "2026-11-02T12:00:00Z",
        expected: &[
            "2026-11-01T07:30:00Z", // 02:30 EST (02:xx is not repeated in New York)
            "2026-11-02T07:30:00Z", // 02:30 EST
        ],
    },
    Case {
        zone: New_York,
        expr: "30 1 * * *",
        from: "2026-10-31T12:00:00Z",
        to: "2026-11-02T12:00:00Z",
        expected: &[
            "2026-11-01T05:30:00Z", // 01:30 EDT, first pass only (not 06:30Z EST)
            "2026-11-02T06:30:00Z", // 01:30 EST
        ],
    },
    Case {
        zone: New_York,
        expr: "0 1-2 * * *",
        from: "2026-10-31T12:00:00Z",
        to: "2026-11-02T12:00:00Z",
        expected: &[
            "2026-11-01T05:00:00Z", // 01:00 EDT, first pass only
            "2026-11-01T07:00:00Z", // 02:00 EST
            "2026-11-02T06:00:00Z", // 01:00 EST
            "2026-11-02T07:00:00Z", // 02:00 EST
        ],
    },
    Case {
        zone: New_York,
        expr: "0 * * * *",
        from: "2026-11-01T03:30:00Z", // 10-31 23:30 EDT
        to: "2026-11-01T08:30:00Z",   // 03:30 EST
        expected: &[
            "2026-11-01T04:00:00Z", // 00:00 EDT
            "2026-11-01T05:00:00Z", // 01:00 EDT
            "2026-11-01T06:00:00Z", // 01:00 EST (second pass)
            "2026-11-01T07:00:00Z", // 02:00 EST
            "2026-11-01T08:00:00Z", // 03:00 EST
        ],
    },
    Case {
        zone: New_York,
        expr: "*/15 * * * *",
        from: "2026-11-01T04:50:00Z", // 00:50 EDT
        to: "2026-11-01T07:20:00Z",   // 02:20 EST
        expected: &[
            "2026-11-01T05:00:00Z", // 01:00 EDT
            "2026-11-01T05:15:00Z", // 01:15 EDT
            "2026-11-01T05:30:00Z", // 01:30 EDT
            "2026-11-01T05:45:00Z", // 01:45 EDT
            "2026-11-01T06:00:00Z", // 01:00 EST
            "2026-11-01T06:15:00Z", // 01:15 EST
            "2026-11-01T06:30:00Z", // 01:30 EST
            "2026-11-01T06:45:00Z", // 01:45 EST
            "2026-11-01T07:00:00Z", // 02:00 EST
            "2026-11-01T07:15:00Z", // 02:15 EST
        ],
    },
    Case {
        zone: New_York,
        expr: "0 */2 * * *",
        from: "2026-11-01T03:30:00Z", // 10-31 23:30 EDT
        to: "2026-11-01T10:30:00Z",   // 05:30 EST
        expected: &[
            "2026-11-01T04:00:00Z", // 00:00 EDT
            "2026-11-01T07:00:00Z", // 02:00 EST
            "2026-11-01T09:00:00Z", // 04:00 EST
        ],
    },
    // ---------------- Berlin, spring forward 2026-03-29 ----------------
    Case {
        zone: Berlin,
        expr: "30 2 * * *",
        from: "2026-03-28T12:00:00Z",
        to: "2026-03-30T12:00:00Z",
        expected: &[
            "2026-03-29T01:00:00Z", // 02:30 does not exist: 03:00 CEST
            "2026-03-30T00:30:00Z", // 02:30 CEST
        ],
    },
    Case {
        zone: Berlin,
        expr: "45 2 * * *",
        from: "2026-03-28T12:00:00Z",
        to: "2026-03-30T12:00:00Z",
        expected: &[
            "2026-03-29T01:00:00Z", // 02:45 does not exist: 03:00 CEST
            "2026-03-30T00:45:00Z", // 02:45 CEST
        ],
    },
    Case {
        zone: Berlin,
        expr: "0 1-2 * * *",
        from: "2026-03-28T12:00:00Z",
        to: "2026-03-30T12:00:00Z",
        expected: &[
            "2026-03-29T00:00:00Z", // 01:00 CET
            "2026-03-29T01:00:00Z", // 02:00 does not exist: 03:00 CEST
            "2026-03-29T23:00:00Z", // 03-30 01:00 CEST
            "2026-03-30T00:00:00Z", // 02:00 CEST
        ],
    },
    Case {
        zone: Berlin,
        expr: "0 2-3 * * *",
        from: "2026-03-28T12:00:00Z",
        to: "2026-03-30T12:00:00Z",
        expected: &[
            "2026-03-29T01:00:00Z", // 02:00 (gap) and 03:00 CEST: one fire at 03:00 CEST
            "2026-03-30T00:00:00Z", // 02:00 CEST
            "2026-03-30T01:00:00Z", // 03:00 CEST
        ],
    },
    Case {
        zone: Berlin,
        expr: "0 * * * *",
        from: "2026-03-28T22:30:00Z", // 23:30 CET
        to: "2026-03-29T03:30:00Z",   // 05:30 CEST
        expected: &[
            "2026-03-28T23:00:00Z", // 00:00 CET
            "2026-03-29T00:00:00Z", // 01:00 CET
            "2026-03-29T01:00:00Z", // 03:00 CEST
            "2026-03-29T02:00:00Z", // 04:00 CEST
            "2026-03-29T03:00:00Z", // 05:00 CEST
        ],
    },
    Case {
        zone: Berlin,
        expr: "*/15 * * * *",
        from: "2026-03-29T00:20:00Z", // 01:20 CET
        to: "2026-03-29T01:20:00Z",   // 03:20 CEST
        expected: &[
            "2026-03-29T00:30:00Z", // 01:30 CET
            "2026-03-29T00:45:00Z", // 01:45 CET
            "2026-03-29T01:00:00Z", // 03:00 CEST
            "2026-03-29T01:15:00Z", // 03:15 CEST
        ],
    },
    Case {
        zone: Berlin,
        expr: "0 */2 * * *",
        from: "2026-03-28T22:30:00Z", // 23:30 CET
        to: "2026-03-29T05:30:00Z",   // 07:30 CEST
        expected: &[
            "2026-03-28T23:00:00Z", // 00:00 CET
            // 02:00 does not exist: skipped
            "2026-03-29T02:00:00Z", // 04:00 CEST
            "2026-03-29T04:00:00Z", // 06:00 CEST
        ],
    },
    // ---------------- Berlin, fall back 2026-10-25 ----------------
    Case {
        zone: Berlin,
        expr: "30 2 * * *",
        from: "2026-10-24T12:00:00Z",
        to: "2026-10-26T12:00:00Z",
        expected: &[
            "2026-10-25T00:30:00Z", // 02:30 CEST, first pass only (not 01:30Z CET)
            "2026-10-26T01:30:00Z", // 02:30 CET
        ],
    },
    Case {
        zone: Berlin,
        expr: "45 2 * * *",
        from: "2026-10-24T12:00:00Z",
        to: "2026-10-26T12:00:00Z",
        expected: &[
            "2026-10-25T00:45:00Z", // 02:45 CEST, first pass only
            "2026-10-26T01:45:00Z", // 02:45 CET
        ],
    },
    Case {
        zone: Berlin,
        expr: "0 1-2 * * *",
        from: "2026-10-24T12:00:00Z",
        to: "2026-10-26T12:00:00Z",
        expected: &[
            "2026-10-24T23:00:00Z", // 10-25 01:00 CEST
            "2026-10-25T00:00:00Z", // 02:00 CEST, first pass only
            "2026-10-26T00:00:00Z", // 01:00 CET
            "2026-10-26T01:00:00Z", // 02:00 CET
        ],
    },
    Case {
        zone: Berlin,
        expr: "0 2-3 * * *",
        from: "2026-10-24T12:00:00Z",
        to: "2026-10-26T12:00:00Z",
        expected: &[
            "2026-10-25T00:00:00Z", // 02:00 CEST, first pass only
            "2026-10-25T02:00:00Z", // 03:00 CET
            "2026-10-26T01:00:00Z", // 02:00 CET
            "2026-10-26T02:00:00Z", // 03:00 CET
        ],
    },
    Case {
        zone: Berlin,
        expr: "0 * * * *",
        from: "2026-10-24T21:30:00Z", // 23:30 CEST
        to: "2026-10-25T03:30:00Z",   // 04:30 CET
        expected: &[
            "2026-10-24T22:00:00Z", // 00:00 CEST
            "2026-10-24T23:00:00Z", // 01:00 CEST
            "2026-10-25T00:00:00Z", // 02:00 CEST
            "2026-10-25T01:00:00Z", // 02:00 CET (second pass)
            "2026-10-25T02:00:00Z", // 03:00 CET
            "2026-10-25T03:00:00Z", // 04:00 CET
        ],
    },
    Case {
        zone: Berlin,
        expr: "*/15 * * * *",
        from: "2026-10-24T23:50:00Z", // 01:50 CEST
        to: "2026-10-25T02:05:00Z",   // 03:05 CET
        expected: &[
            "2026-10-25T00:00:00Z", // 02:00 CEST
            "2026-10-25T00:15:00Z", // 02:15 CEST
            "2026-10-25T00:30:00Z", // 02:30 CEST
            "2026-10-25T00:45:00Z", // 02:45 CEST
            "2026-10-25T01:00:00Z", // 02:00 CET
            "2026-10-25T01:15:00Z", // 02:15 CET
            "2026-10-25T01:30:00Z", // 02:30 CET
            "2026-10-25T01:45:00Z", // 02:45 CET
            "2026-10-25T02:00:00Z", // 03:00 CET
        ],
    },
    Case {
        zone: Berlin,
        expr: "0 */2 * * *",
        from: "2026-10-24T21:30:00Z", // 23:30 CEST
        to: "2026-10-25T05:30:00Z",   // 06:30 CET
        expected: &[
            "2026-10-24T22:00:00Z", // 00:00 CEST
            "2026-10-25T00:00:00Z", // 02:00 CEST
            "2026-10-25T01:00:00Z", // 02:00 CET (second pass)
            "2026-10-25T03:00:00Z", // 04:00 CET
            "2026-10-25T05:00:00Z", // 06:00 CET
        ],
    },
    // ---------------- Sydney, fall back 2026-04-05 ----------------
    Case {
        zone: Sydney,
        expr: "30 2 * * *",
        from: "2026-04-03T13:00:00Z", // 04-04 00:00 AEDT
        to: "2026-04-05T20:00:00Z",   // 04-06 06:00 AEST
        expected: &[
            "2026-04-03T15:30:00Z", // 04-04 02:30 AEDT
            "2026-04-04T15:30:00Z", // 04-05 02:30 AEDT, first pass only
            "2026-04-05T16:30:00Z", // 04-06 02:30 AEST
        ],
    },
    Case {
        zone: Sydney,
        expr: "45 2 * * *",
        from: "2026-04-03T13:00:00Z",
        to: "2026-04-05T20:00:00Z",
        expected: &[
            "2026-04-03T15:45:00Z", // 04-04 02:45 AEDT
            "2026-04-04T15:45:00Z", // 04-05 02:45 AEDT, first pass only
            "2026-04-05T16:45:00Z", // 04-06 02:45 AEST
        ],
    },
    Case {
        zone: Sydney,
        expr: "0 1-2 * * *",
        from: "2026-04-03T13:00:00Z",
        to: "2026-04-05T20:00:00Z",
        expected: &[
            "2026-04-03T14:00:00Z", // 04-04 01:00 AEDT
            "2026-04-03T15:00:00Z", // 04-04 02:00 AEDT
            "2026-04-04T14:00:00Z", // 04-05 01:00 AEDT
            "2026-04-04T15:00:00Z", // 04-05 02:00 AEDT, first pass only
            "2026-04-05T15:00:00Z", // 04-06 01:00 AEST
            "2026-04-05T16:00:00Z", // 04-06 02:00 AEST
        ],
    },
    Case {
        zone: Sydney,
        expr: "0 2-3 * * *",
        from: "2026-04-03T13:00:00Z",
        to: "2026-04-05T20:00:00Z",
        expected: &[
            "2026-04-03T15:00:00Z", // 04-04 02:00 AEDT
            "2026-04-03T16:00:00Z", // 04-04 03:00 AEDT
            "2026-04-04T15:00:00Z", // 04-05 02:00 AEDT, first pass only
            "2026-04-04T17:00:00Z", // 04-05 03:00 AEST
            "2026-04-05T16:00:00Z", // 04-06 02:00 AEST
            "2026-04-05T17:00:00Z", // 04-06 03:00 AEST
        ],
    },
    Case {
        zone: Sydney,
        expr: "0 * * * *",
        from: "2026-04-04T13:30:00Z", // 04-05 00:30 AEDT
        to: "2026-04-04T18:30:00Z",   // 04:30 AEST
        expected: &[
            "2026-04-04T14:00:00Z", // 01:00 AEDT
            "2026-04-04T15:00:00Z", // 02:00 AEDT
            "2026-04-04T16:00:00Z", // 02:00 AEST (second pass)
            "2026-04-04T17:00:00Z", // 03:00 AEST
            "2026-04-04T18:00:00Z", // 04:00 AEST
        ],
    },
    Case {
        zone: Sydney,
        expr: "*/15 * * * *",
        from: "2026-04-04T14:50:00Z", // 01:50 AEDT
        to: "2026-04-04T17:05:00Z",   // 03:05 AEST
        expected: &[
            "2026-04-04T15:00:00Z", // 02:00 AEDT
            "2026-04-04T15:15:00Z", // 02:15 AEDT
            "2026-04-04T15:30:00Z", // 02:30 AEDT
            "2026-04-04T15:45:00Z", // 02:45 AEDT
            "2026-04-04T16:00:00Z", // 02:00 AEST
            "2026-04-04T16:15:00Z", // 02:15 AEST
            "2026-04-04T16:30:00Z", // 02:30 AEST
            "2026-04-04T16:45:00Z", // 02:45 AEST
            "2026-04-04T17:00:00Z", // 03:00 AEST
        ],
    },
    Case {
        zone: Sydney,
        expr: "0 */2 * * *",
        from: "2026-04-04T13:30:00Z", // 04-05 00:30 AEDT
        to: "2026-04-04T20:30:00Z",   // 06:30 AEST
        expected: &[
            "2026-04-04T15:00:00Z", // 02:00 AEDT
            "2026-04-04T16:00:00Z", // 02:00 AEST (second pass)
            "2026-04-04T18:00:00Z", // 04:00 AEST
            "2026-04-04T20:00:00Z", // 06:00 AEST
        ],
    },
    // ---------------- Sydney, spring forward 2026-10-04 ----------------
    Case {
        zone: Sydney,
        expr: "30 2 * * *",
        from: "2026-10-02T14:00:00Z", // 10-03 00:00 AEST
        to: "2026-10-04T20:00:00Z",   // 10-05 07:00 AEDT
        expected: &[
            "2026-10-02T16:30:00Z", // 10-03 02:30 AEST
            "2026-10-03T16:00:00Z", // 10-04 02:30 does not exist: 03:00 AEDT
            "2026-10-04T15:30:00Z", // 10-05 02:30 AEDT
        ],
    },
    Case {
        zone: Sydney,
        expr: "45 2 * * *",
        from: "2026-10-02T14:00:00Z",
        to: "2026-10-04T20:00:00Z",
        expected: &[
            "2026-10-02T16:45:00Z", // 10-03 02:45 AEST
            "2026-10-03T16:00:00Z", // 10-04 02:45 does not exist: 03:00 AEDT
            "2026-10-04T15:45:00Z", // 10-05 02:45 AEDT
        ],
    },
    Case {
        zone: Sydney,
        expr: "0 1-2 * * *",
        from: "2026-10-02T14:00:00Z",
        to: "2026-10-04T20:00:00Z",
        expected: &[
            "2026-10-02T15:00:00Z", // 10-03 01:00 AEST
            "2026-10-02T16:00:00Z", // 10-03 02:00 AEST
            "2026-10-03T15:00:00Z", // 10-04 01:00 AEST
            "2026-10-03T16:00:00Z", // 10-04 02:00 does not exist: 03:00 AEDT
            "2026-10-04T14:00:00Z", // 10-05 01:00 AEDT
            "2026-10-04T15:00:00Z", // 10-05 02:00 AEDT
        ],
    },
    Case {
        zone: Sydney,
        expr: "0 2-3 * * *",
        from: "2026-10-02T14:00:00Z",
        to: "2026-10-04T20:00:00Z",
        expected: &[
            "2026-10-02T16:00:00Z", // 10-03 02:00 AEST
            "2026-10-02T17:00:00Z", // 10-03 03:00 AEST
            "2026-10-03T16:00:00Z", // 10-04 02:00 (gap) and 03:00 AEDT: one fire
            "2026-10-04T15:00:00Z", // 10-05 02:00 AEDT
            "2026-10-04T16:00:00Z", // 10-05 03:00 AEDT
        ],
    },
    Case {
        zone: Sydney,
        expr: "0 * * * *",
        from: "2026-10-03T13:30:00Z", // 10-03 23:30 AEST
        to: "2026-10-03T18:30:00Z",   // 10-04 05:30 AEDT
        expected: &[
            "2026-10-03T14:00:00Z", // 00:00 AEST
            "2026-10-03T15:00:00Z", // 01:00 AEST
            "2026-10-03T16:00:00Z", // 03:00 AEDT
            "2026-10-03T17:00:00Z", // 04:00 AEDT
            "2026-10-03T18:00:00Z", // 05:00 AEDT
        ],
    },
    Case {
        zone: Sydney,
        expr: "*/15 * * * *",
        from: "2026-10-03T15:20:00Z", // 01:20 AEST
        to: "2026-10-03T16:20:00Z",   // 03:20 AEDT
        expected: &[
            "2026-10-03T15:30:00Z", // 01:30 AEST
            "2026-10-03T15:45:00Z", // 01:45 AEST
            "2026-10-03T16:00:00Z", // 03:00 AEDT
            "2026-10-03T16:15:00Z", // 03:15 AEDT
        ],
    },
    Case {
        zone: Sydney,
        expr: "0 */2 * * *",
        from: "2026-10-03T13:30:00Z", // 10-03 23:30 AEST
        to: "2026-10-03T20:30:00Z",   // 10-04 06:30 AEDT
        expected: &[
            "2026-10-03T14:00:00Z", // 00:00 AEST
            // 02:00 does not exist: skipped
            "2026-10-03T17:00:00Z", // 04:00 AEDT
            "2026-10-03T19:00:00Z", // 06:00 AEDT
        ],
    },
];

#[test]
fn every_fire_across_2026_transitions_matches_the_hand_computed_table() {
    for case in CASES {
        let schedule = Schedule::parse_at(case.expr, case.zone, now())
            .unwrap_or_else(|e| panic!("{:?}: {e}", case.expr));
        let (from, to) = (at(case.from), at(case.to));
        let expected: Vec<_> = case.expected.iter().map(|s| at(s)).collect();
        let got: Vec<_> = schedule.iter_after(from).take_while(|t| *t <= to).collect();
        assert_eq!(
            got,
            expected,
            "{} in {} from {}",
            case.expr,
            case.zone.name(),
            case.from
        );
    }
}

/// A producer resuming from any instant (a restart, a failover) gets the same next fire.
#[test]
fn resuming_anywhere_in_the_window_gives_the_next_hand_computed_fire() {
    for case in CASES {
        let schedule = Schedule::parse_at(case.expr, case.zone, now())
            .unwrap_or_else(|e| panic!("{:?}: {e}", case.expr));
        let (from, to) = (at(case.from), at(case.to));
        let expected: Vec<_> = case.expected.iter().map(|s| at(s)).collect();
        let mut probes: Vec<_> = std::iter::successors(Some(from), |t| {
            Some(*t + chrono::Duration::minutes(5)).filter(|t| *t <= to)
        })
        .collect();
        for e in &expected {
            probes.extend([
                *e - chrono::Duration::seconds(1),
                *e,
                *e + chrono::Duration::milliseconds(500),
            ]);
        }
        for probe in probes {
            let Some(want) = expected.iter().find(|e| **e > probe) else {
                continue;
            };
            assert_eq!(
                schedule.next_after(probe),
                Some(*want),
                "{} in {} resumed from {probe}",
                case.expr,
                case.zone.name()
            );
        }
    }
}
