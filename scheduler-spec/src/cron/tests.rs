use super::*;

fn utc(s: &str) -> DateTime<Utc> {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn schedule(expr: &str, tz: &str) -> CronSchedule {
    CronSchedule::parse(expr, tz).unwrap_or_else(|e| panic!("{e}"))
}

fn message(expr: &str) -> String {
    match CronExpr::parse(expr) {
        Ok(_) => "accepted".to_owned(),
        Err(e) => e.to_string(),
    }
}

/// `n` ticks after `from`, each shown on Berlin's wall clock.
fn berlin_ticks(s: &CronSchedule, from: &str, n: usize) -> Vec<String> {
    let mut at = utc(from);
    let mut out = Vec::new();
    for _ in 0..n {
        let Some(t) = s.next_after(at) else { break };
        out.push(
            t.with_timezone(&chrono_tz::Europe::Berlin)
                .format("%m-%d %H:%M:%S %Z")
                .to_string(),
        );
        at = t;
    }
    out
}

/// The first `n` ticks after `from` in UTC, as `YYYY-MM-DD HH:MM:SS`.
fn utc_ticks(expr: &str, from: &str, n: usize) -> Vec<String> {
    let s = schedule(expr, "UTC");
    let mut at = utc(from);
    let mut out = Vec::new();
    for _ in 0..n {
        let Some(t) = s.next_after(at) else { break };
        out.push(t.format("%Y-%m-%d %a %H:%M:%S").to_string());
        at = t;
    }
    out
}

#[test]
fn weekday_numbers_count_as_crontab_does() {
    // 0 and 7 are Sunday, 1 Monday … 6 Saturday, in ranges, lists and steps.
    let monday_to_friday = utc_ticks("0 0 9 * * 1-5", "2026-06-05T12:00:00Z", 3);
    assert_eq!(
        monday_to_friday,
        [
            "2026-06-08 Mon 09:00:00",
            "2026-06-09 Tue 09:00:00",
            "2026-06-10 Wed 09:00:00"
        ]
    );
    for (numbers, names) in [
        ("0 0 9 * * 1-5", "0 0 9 * * MON-FRI"),
        ("0 0 9 * * 0,6", "0 0 9 * * SUN,SAT"),
        ("0 0 9 * * 7", "0 0 9 * * SUN"),
        ("0 0 9 * * 5-7", "0 0 9 * * FRI,SAT,SUN"),
        ("0 0 9 * * */2", "0 0 9 * * SUN,TUE,THU,SAT"),
        ("0 0 9 * * 1/2", "0 0 9 * * MON,WED,FRI"),
        ("0 0 9 * * MON,3", "0 0 9 * * MON,WED"),
    ] {
        assert_eq!(
            utc_ticks(numbers, "2026-06-01T00:00:00Z", 14),
            utc_ticks(names, "2026-06-01T00:00:00Z", 14),
            "{numbers}"
        );
    }
    // Decided on the fields, not on the spaces: a missing space is an error.
    for glued in ["0 0 12 * *1-5", "0 0 12 * JAN1-5", "0 0 12 * * *1-5"] {
        assert!(
            message(glued).starts_with("invalid cron expression"),
            "{glued}: {}",
            message(glued)
        );
    }
    assert_eq!(
        message("0 0 9 * * 8"),
        r#"invalid cron expression "0 0 9 * * 8": the weekday 8 is out of range; weekdays go from 0 to 7 (0 and 7 are Sunday) or SUN to SAT"#
    );
}

#[test]
fn day_of_month_or_weekday_when_both_are_restricted() {
    // Every 13th and every Friday, as in crontab.
    assert_eq!(
        utc_ticks("0 0 12 13 * FRI", "2026-06-01T00:00:00Z", 4),
        [
            "2026-06-05 Fri 12:00:00",
            "2026-06-12 Fri 12:00:00",
            "2026-06-13 Sat 12:00:00",
            "2026-06-19 Fri 12:00:00"
        ]
    );
    assert_eq!(
        utc_ticks("0 0 1,15 * SUN", "2026-06-01T00:00:00Z", 4),
        [
            "2026-06-07 Sun 00:00:00",
            "2026-06-14 Sun 00:00:00",
            "2026-06-15 Mon 00:00:00",
            "2026-06-21 Sun 00:00:00"
        ]
    );
    // With one of them `*` or `?`, the other alone decides.
    assert_eq!(
        utc_ticks("0 0 0 13 * ?", "2026-06-01T00:00:00Z", 1),
        ["2026-06-13 Sat 00:00:00"]
    );
    assert_eq!(
        utc_ticks("0 0 0 ? * FRI", "2026-06-01T00:00:00Z", 1),
        ["2026-06-05 Fri 00:00:00"]
    );
}

#[test]
fn five_fields_and_shorthands_read_as_crontab() {
    assert_eq!(
        utc_ticks("0 9 * * 1-5", "2026-06-05T12:00:00Z", 2),
        ["2026-06-08 Mon 09:00:00", "2026-06-09 Tue 09:00:00"]
    );
    assert_eq!(
        utc_ticks("*/15 * * * *", "2026-06-05T12:00:00Z", 2),
        ["2026-06-05 Fri 12:15:00", "2026-06-05 Fri 12:30:00"]
    );
    for (short, long) in [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ] {
        assert_eq!(
            utc_ticks(short, "2026-06-05T12:00:00Z", 3),
            utc_ticks(long, "2026-06-05T12:00:00Z", 3),
            "{short}"
        );
    }
    assert_eq!(message(" @daily "), "accepted");
    assert_eq!(
        message("@reboot"),
        r#"invalid cron expression "@reboot": @reboot is not supported (a job runs on a schedule, not at start-up); write @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly"#
    );
    assert_eq!(
        message("@dayly"),
        r#"invalid cron expression "@dayly": unknown shorthand @dayly; did you mean "@daily"? write @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly"#
    );
}

#[test]
fn last_nearest_weekday_and_nth_weekday() {
    assert_eq!(
        utc_ticks("0 0 L * *", "2026-01-15T00:00:00Z", 3),
        [
            "2026-01-31 Sat 00:00:00",
            "2026-02-28 Sat 00:00:00",
            "2026-03-31 Tue 00:00:00"
        ]
    );
    assert_eq!(
        utc_ticks("0 0 L-3 * *", "2026-01-15T00:00:00Z", 2),
        ["2026-01-28 Wed 00:00:00", "2026-02-25 Wed 00:00:00"]
    );
    // The 15th of August 2026 is a Saturday, of November a Sunday.
    assert_eq!(
        utc_ticks("0 0 15W * *", "2026-08-01T00:00:00Z", 4),
        [
            "2026-08-14 Fri 00:00:00",
            "2026-09-15 Tue 00:00:00",
            "2026-10-15 Thu 00:00:00",
            "2026-11-16 Mon 00:00:00"
        ]
    );
    // The 1st of August 2026 is a Saturday: its nearest weekday is the 3rd.
    assert_eq!(
        utc_ticks("0 0 1W * *", "2026-07-15T00:00:00Z", 1),
        ["2026-08-03 Mon 00:00:00"]
    );
    assert_eq!(
        utc_ticks("0 0 LW * *", "2026-01-15T00:00:00Z", 2),
        ["2026-01-30 Fri 00:00:00", "2026-02-27 Fri 00:00:00"]
    );
    assert_eq!(
        utc_ticks("0 0 * * FRI#2", "2026-06-01T00:00:00Z", 2),
        ["2026-06-12 Fri 00:00:00", "2026-07-10 Fri 00:00:00"]
    );
    assert_eq!(
        utc_ticks("0 0 * * 5#2", "2026-06-01T00:00:00Z", 2),
        utc_ticks("0 0 * * FRI#2", "2026-06-01T00:00:00Z", 2)
    );
    for last_friday in ["0 0 * * FRI#L", "0 0 * * 5L", "0 0 * * FRIL"] {
        assert_eq!(
            utc_ticks(last_friday, "2026-06-01T00:00:00Z", 2),
            ["2026-06-26 Fri 00:00:00", "2026-07-31 Fri 00:00:00"],
            "{last_friday}"
        );
    }
    // Misplaced, they say where they belong.
    assert_eq!(
        message("0 0 12 * 15W *"),
        r#"invalid cron expression "0 0 12 * 15W *": "15W" in the month field: W (the nearest weekday, like 15W) belongs in the day-of-month field"#
    );
    assert_eq!(
        message("0 0 12 FRI#2 * *"),
        r#"invalid cron expression "0 0 12 FRI#2 * *": "FRI#2" in the day-of-month field: # (the nth weekday, like FRI#2) belongs in the weekday field"#
    );
    assert_eq!(
        message("0 0 12 1W-15 * *"),
        r#"invalid cron expression "0 0 12 1W-15 * *": "1W-15": W names one day (like 15W), not a range or a step; list them: 1W,15W"#
    );
    assert_eq!(
        message("0 0 12 * * FRI#6"),
        r#"invalid cron expression "0 0 12 * * FRI#6": "FRI#6": the nth weekday goes from #1 to #5, or #L for the last"#
    );
}

#[test]
fn errors_are_in_our_words_with_the_right_bounds() {
    for ok in [
        "0 */15 * * * *",
        "0 0 12 * * MON-FRI 2030",
        "@hourly",
        "*/15 * * * *",
    ] {
        assert_eq!(message(ok), "accepted", "{ok}");
    }
    for (expr, reason) in [
        (
            "60 * * * * *",
            "the second 60 is out of range; seconds go from 0 to 59",
        ),
        (
            "0 60 * * * *",
            "the minute 60 is out of range; minutes go from 0 to 59",
        ),
        (
            "0 0 24 * * *",
            "the hour 24 is out of range; hours go from 0 to 23",
        ),
        (
            "0 0 0 32 * *",
            "the day of month 32 is out of range; days of month go from 1 to 31",
        ),
        (
            "0 0 0 0 * *",
            "the day of month 0 is out of range; days of month go from 1 to 31",
        ),
        (
            "0 0 0 1 13 *",
            "the month 13 is out of range; months go from 1 to 12 or JAN to DEC",
        ),
        (
            "0 0 0 1 1 * 2101",
            "the year 2101 is out of range; years go from 1970 to 2100",
        ),
        (
            "0 0 12 * * Mun",
            r#""Mun" is not a weekday; did you mean "MON"? weekdays go from 0 to 7 (0 and 7 are Sunday) or SUN to SAT"#,
        ),
        (
            "0 0 12 * Dez *",
            r#""Dez" is not a month; did you mean "DEC"? months go from 1 to 12 or JAN to DEC"#,
        ),
        (
            "0 x * * * *",
            r#""x" is not a minute; minutes go from 0 to 59"#,
        ),
        ("0 */0 * * * *", r#"the step in "*/0" must be 1 or more"#),
        (
            "0 0 5-1 * * *",
            r#"the range "5-1" runs backwards; write the smaller end first"#,
        ),
        (
            "0 1,,2 * * * *",
            r#"the minute field "1,,2" has an empty item"#,
        ),
        (
            "0 * * * * * * *",
            "it has 8 fields; write 5, 6 or 7 ([sec] min hour day month weekday [year])",
        ),
        (
            " ",
            r#"it is empty; write it like "0 */15 * * * *" ([sec] min hour day month weekday [year])"#,
        ),
    ] {
        assert_eq!(
            message(expr),
            format!("invalid cron expression {expr:?}: {reason}"),
            "{expr}"
        );
    }
    assert!(
        CronSchedule::parse("0 * * * * *", "Mars/Olympus")
            .is_err_and(|e| matches!(e, Error::UnknownTimeZone { .. }))
    );
}

#[test]
fn never_fires_is_a_full_search_from_now() {
    let now = utc("2026-06-01T00:00:00Z");
    let check = |expr: &str| schedule(expr, "UTC").check_fires_after(now);
    assert_eq!(
        check("0 0 0 30 2 *").map_err(|e| e.to_string()),
        Err(r#"cron expression "0 0 0 30 2 *" never fires; check that its day, month and weekday fields can meet and that its years are not all past"#.to_owned())
    );
    assert!(check("0 0 0 1 1 * 2025").is_err());
    // Fire times far away, rare or dense are all found.
    for fires in [
        "* * * * * *",
        "0-58 * * * * *",
        "* * 0-2 * * *",
        "0 0 0 29 2 *",
        "0 0 0 31 12 * 2100",
        "0 0 12 13 * FRI",
    ] {
        assert_eq!(check(fires), Ok(()), "{fires}");
    }
    let last = schedule("0 0 0 31 12 * 2100", "UTC");
    assert_eq!(last.next_after(now), Some(utc("2100-12-31T00:00:00Z")));
    assert_eq!(last.next_after(utc("2100-12-31T00:00:00Z")), None);
    assert_eq!(last.next_after(DateTime::<Utc>::MAX_UTC), None);
    assert_eq!(
        schedule("0 0 0 1 1 *", "UTC").next_after(DateTime::<Utc>::MIN_UTC),
        Some(utc("1970-01-01T00:00:00Z"))
    );
}

#[test]
fn the_ends_of_time_give_none_or_the_first_tick() {
    for zone in ["UTC", "Europe/Berlin", "Pacific/Kiritimati", "Etc/GMT+12"] {
        for expr in ["* * * * * *", "0 30 2 * * *", "0 0 0 1 1 *"] {
            let s = schedule(expr, zone);
            assert_eq!(
                s.next_after(DateTime::<Utc>::MAX_UTC),
                None,
                "{expr} in {zone}"
            );
            assert_eq!(
                s.next_after(utc("+100000-10-31T01:30:00Z")),
                None,
                "{expr} in {zone}"
            );
            let first = s.next_after(DateTime::<Utc>::MIN_UTC);
            assert!(
                first.is_some_and(|t| t.year() <= 1970),
                "{expr} in {zone}: {first:?}"
            );
        }
    }
}

#[test]
fn every_second_fires_every_second() {
    let every = schedule("* * * * * *", "Europe/Berlin");
    let mut at = utc("2026-06-01T10:00:00.250Z");
    for s in 1..=120 {
        let next = every.next_after(at);
        assert_eq!(
            next,
            Some(utc("2026-06-01T10:00:00Z") + TimeDelta::seconds(s))
        );
        at = next.unwrap_or(at);
    }
    let almost = schedule("0-58 * * * * *", "UTC");
    assert_eq!(
        almost.next_after(utc("2026-06-01T10:00:57Z")),
        Some(utc("2026-06-01T10:00:58Z"))
    );
    assert_eq!(
        almost.next_after(utc("2026-06-01T10:00:58Z")),
        Some(utc("2026-06-01T10:01:00Z"))
    );
}

#[test]
fn a_window_of_hours_opens_again_the_next_day() {
    let night = schedule("* * 0-2 * * *", "UTC");
    assert_eq!(
        night.next_after(utc("2026-06-01T02:59:59Z")),
        Some(utc("2026-06-02T00:00:00Z"))
    );
    assert_eq!(
        night.next_after(utc("2026-06-01T12:00:00Z")),
        Some(utc("2026-06-02T00:00:00Z"))
    );
    let yearly = schedule("0 0 0 1 1 *", "Europe/Berlin");
    assert_eq!(
        yearly.next_after(utc("2026-01-01T00:00:00Z")),
        Some(utc("2026-12-31T23:00:00Z"))
    );
}

#[test]
fn berlin_spring_forward_gap() {
    // 2026-03-29: 02:00 CET jumps to 03:00 CEST.
    let fixed = schedule("0 30 2 * * *", "Europe/Berlin");
    assert_eq!(
        berlin_ticks(&fixed, "2026-03-27T12:00:00Z", 4),
        [
            "03-28 02:30:00 CET",
            "03-29 03:00:00 CEST",
            "03-30 02:30:00 CEST",
            "03-31 02:30:00 CEST"
        ]
    );
    // Several times in the gap still fire once, at its end.
    let several = schedule("0 */20 2 * * *", "Europe/Berlin");
    assert_eq!(
        berlin_ticks(&several, "2026-03-28T00:30:00Z", 5),
        [
            "03-28 02:00:00 CET",
            "03-28 02:20:00 CET",
            "03-28 02:40:00 CET",
            "03-29 03:00:00 CEST",
            "03-30 02:00:00 CEST"
        ]
    );
    let wildcard = schedule("0 30 * * * *", "Europe/Berlin");
    assert_eq!(
        berlin_ticks(&wildcard, "2026-03-28T23:45:00Z", 3),
        [
            "03-29 01:30:00 CET",
            "03-29 03:30:00 CEST",
            "03-29 04:30:00 CEST"
        ]
    );
    let every_second = schedule("* * * * * *", "Europe/Berlin");
    assert_eq!(
        berlin_ticks(&every_second, "2026-03-29T00:59:58Z", 3),
        [
            "03-29 01:59:59 CET",
            "03-29 03:00:00 CEST",
            "03-29 03:00:01 CEST"
        ]
    );
    let night = schedule("* * 0-2 * * *", "Europe/Berlin");
    assert_eq!(
        berlin_ticks(&night, "2026-03-29T00:59:58Z", 3),
        [
            "03-29 01:59:59 CET",
            "03-29 03:00:00 CEST",
            "03-30 00:00:00 CEST"
        ]
    );
}

#[test]
fn berlin_fall_back_repeated_hour() {
    // 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:xx happens twice.
    let fixed = schedule("0 30 2 * * *", "Europe/Berlin");
    assert_eq!(
        berlin_ticks(&fixed, "2026-10-23T12:00:00Z", 3),
        [
            "10-24 02:30:00 CEST",
            "10-25 02:30:00 CEST",
            "10-26 02:30:00 CET"
        ]
    );
    // From inside the repeated hour, either pass.
    assert_eq!(
        berlin_ticks(&fixed, "2026-10-25T00:40:00Z", 1),
        ["10-26 02:30:00 CET"]
    );
    assert_eq!(
        berlin_ticks(&fixed, "2026-10-25T01:10:00Z", 1),
        ["10-26 02:30:00 CET"]
    );
    let wildcard = schedule("0 0/30 * * * *", "Europe/Berlin");
    assert_eq!(
        berlin_ticks(&wildcard, "2026-10-24T23:15:00Z", 6),
        [
            "10-25 01:30:00 CEST",
            "10-25 02:00:00 CEST",
            "10-25 02:30:00 CEST",
            "10-25 02:00:00 CET",
            "10-25 02:30:00 CET",
            "10-25 03:00:00 CET"
        ]
    );
    // From inside the first pass, the second pass is still ahead.
    assert_eq!(
        berlin_ticks(&wildcard, "2026-10-25T00:40:00Z", 3),
        [
            "10-25 02:00:00 CET",
            "10-25 02:30:00 CET",
            "10-25 03:00:00 CET"
        ]
    );
    let every_second = schedule("* * * * * *", "Europe/Berlin");
    assert_eq!(
        berlin_ticks(&every_second, "2026-10-25T00:59:58Z", 3),
        [
            "10-25 02:59:59 CEST",
            "10-25 02:00:00 CET",
            "10-25 02:00:01 CET"
        ]
    );
}

/// One second of a window on a zone's wall clock.
struct Second {
    at: DateTime<Utc>,
    wall: NaiveDateTime,
    /// This wall time was already shown earlier (a repeated hour's second pass).
    repeated: bool,
    /// The wall times skipped just before this second (a gap), if any.
    skipped: Option<(NaiveDateTime, NaiveDateTime)>,
}

/// Every second in `(from, until]` on `tz`'s wall clock.
fn seconds(tz: Tz, from: DateTime<Utc>, until: DateTime<Utc>) -> Vec<Second> {
    let mut out = Vec::new();
    let mut before = from.with_timezone(&tz).naive_local();
    let mut t = from + TimeDelta::seconds(1);
    while t <= until {
        let wall = t.with_timezone(&tz).naive_local();
        let repeated = match tz.from_local_datetime(&wall) {
            LocalResult::Ambiguous(first, _) => first.with_timezone(&Utc) != t,
            _ => false,
        };
        let skipped =
            (wall - before > TimeDelta::seconds(1)).then(|| (before + TimeDelta::seconds(1), wall));
        out.push(Second {
            at: t,
            wall,
            repeated,
            skipped,
        });
        before = wall;
        t += TimeDelta::seconds(1);
    }
    out
}

/// Whether `s` is a tick, by the rule read straight off the docs: its wall time
/// matches (a repeated time's second pass only with wildcard hours), or, with
/// fixed hours, it ends a gap holding a matching wall time.
fn is_tick(cron: &CronSchedule, s: &Second) -> bool {
    let fixed = cron.expr().has_fixed_hours();
    let matches = |w: NaiveDateTime| cron.expr().matches(w);
    if matches(s.wall) {
        return !(fixed && s.repeated);
    }
    if let (true, Some((mut w, end))) = (fixed, s.skipped) {
        while w < end {
            if matches(w) {
                return true;
            }
            w += TimeDelta::seconds(1);
        }
    }
    false
}

#[test]
fn next_after_agrees_with_the_rule_second_by_second_around_transitions() {
    let exprs = [
        "*/2 * * * * *",
        "0 */15 * * * *",
        "0 30 2 * * *",
        "0 */20 2 * * *",
        "* * 0-2 * * *",
        "0 0,30 1-3 * * *",
        "59 59 1 * * *",
        "0 15 * * * *",
    ];
    // (zone, two hours or so before a transition)
    let transitions = [
        ("Europe/Berlin", "2026-03-28T23:00:00Z"),
        ("Europe/Berlin", "2026-10-24T23:00:00Z"),
        ("America/New_York", "2026-03-08T05:00:00Z"),
        ("America/New_York", "2026-11-01T04:00:00Z"),
        // Lord Howe Island shifts by 30 minutes.
        ("Australia/Lord_Howe", "2026-04-04T13:00:00Z"),
        ("Australia/Lord_Howe", "2026-10-03T13:30:00Z"),
        ("UTC", "2026-06-01T00:00:00Z"),
    ];
    for (zone, from) in transitions {
        let from = utc(from);
        let until = from + TimeDelta::hours(4);
        let tz = crate::parse_time_zone(zone).unwrap();
        assert!(
            zone == "UTC" || offset_at(tz, from) != offset_at(tz, until),
            "no transition in the window for {zone}"
        );
        let window = seconds(tz, from, until);
        for expr in exprs {
            let s = schedule(expr, zone);
            let want: Vec<_> = window
                .iter()
                .filter(|second| is_tick(&s, second))
                .map(|second| second.at)
                .collect();
            // The chain of ticks.
            let mut got = Vec::new();
            let mut at = from;
            while let Some(next) = s.next_after(at).filter(|n| *n <= until) {
                assert!(next > at, "{expr} in {zone}: {next} is not after {at}");
                got.push(next);
                at = next;
            }
            assert_eq!(got, want, "{expr} in {zone}");
            // From any instant, not only from ticks, sub-second ones included.
            let mut at = from;
            while at < until {
                if let Some(&expected) = want.iter().find(|w| **w > at) {
                    assert_eq!(
                        s.next_after(at),
                        Some(expected),
                        "{expr} in {zone} after {at}"
                    );
                }
                at += TimeDelta::milliseconds(97_300);
            }
        }
    }
}

#[test]
fn day_rules_mix_in_lists_and_never_firing_ones_are_found() {
    assert_eq!(
        utc_ticks("0 0 0 1,L * *", "2026-01-15T00:00:00Z", 3),
        [
            "2026-01-31 Sat 00:00:00",
            "2026-02-01 Sun 00:00:00",
            "2026-02-28 Sat 00:00:00"
        ]
    );
    // `L` with a weekday: either one.
    assert_eq!(
        utc_ticks("0 0 L * MON", "2026-01-25T12:00:00Z", 3),
        [
            "2026-01-26 Mon 00:00:00",
            "2026-01-31 Sat 00:00:00",
            "2026-02-02 Mon 00:00:00"
        ]
    );
    let now = utc("2026-06-01T00:00:00Z");
    for never in ["0 0 0 L-30 2 *", "0 0 0 31W 2 *", "0 0 0 30 2 * 2030-2040"] {
        let started = std::time::Instant::now();
        assert!(
            schedule(never, "Europe/Berlin")
                .check_fires_after(now)
                .is_err(),
            "{never}"
        );
        assert!(
            started.elapsed().as_secs() < 5,
            "{never}: {:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        schedule("0 0 0 * 2 FRI#5", "UTC").next_after(now),
        Some(utc("2036-02-29T00:00:00Z"))
    );
}
