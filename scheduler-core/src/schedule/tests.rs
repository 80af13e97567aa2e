use super::*;

#[test]
fn lease_slots_share_out_every_tick_once() {
    let every = Schedule::every(Duration::from_secs(10))
        .compile()
        .unwrap_or_else(|e| panic!("{e}"));
    let from = utc("2026-12-01T00:00:05Z");
    let slots: Vec<Compiled> = (0..3).map(|k| every.slot(3, k, 10_000)).collect();
    let mut seen = Vec::new();
    for (k, slot) in slots.iter().enumerate() {
        let mut at = from;
        for _ in 0..4 {
            let tick = slot
                .next_after(at)
                .unwrap_or_else(|| panic!("slot {k} ends"));
            assert_eq!(Compiled::slot_of(tick, 10_000, 3) as usize, k);
            seen.push(tick);
            at = tick.at();
        }
    }
    seen.sort();
    let mut whole = Vec::new();
    let mut at = from;
    for _ in 0..12 {
        let tick = every.next_after(at).unwrap_or_else(|| panic!("ends"));
        whole.push(tick);
        at = tick.at();
    }
    assert_eq!(seen, whole, "each tick in exactly one slot, none lost");
    // A slot's window is the job's period, not the slot's.
    assert_eq!(slots[1].period_after(whole[0]), TimeDelta::seconds(10));
}

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .unwrap_or_default()
}

fn ticks(schedule: &Schedule, from: &str, n: usize) -> Vec<String> {
    let compiled = schedule.compile().unwrap_or_else(|e| panic!("{e}"));
    let mut at = utc(from);
    let mut out = Vec::new();
    for _ in 0..n {
        let Some(t) = compiled.next_after(at) else {
            break;
        };
        out.push(
            t.at()
                .with_timezone(&chrono_tz::Europe::Berlin)
                .format("%m-%d %H:%M %Z")
                .to_string(),
        );
        at = t.at();
    }
    out
}

#[test]
fn every_is_aligned_to_the_epoch() {
    let s = Schedule::every(Duration::from_secs(30))
        .compile()
        .unwrap_or_else(|e| panic!("{e}"));
    let t = s.next_after(utc("2026-11-30T10:00:07.5Z"));
    assert_eq!(t.map(Tick::at), Some(utc("2026-11-30T10:00:30Z")));
    // Exactly on a boundary: the next one, strictly after.
    assert_eq!(
        s.next_after(utc("2026-11-30T10:00:30Z")).map(Tick::at),
        Some(utc("2026-11-30T10:01:00Z"))
    );
    // Every instance agrees whatever instant it starts from.
    let s7 = Schedule::every(Duration::from_secs(7))
        .compile()
        .unwrap_or_else(|e| panic!("{e}"));
    let a = s7
        .next_after(utc("2026-11-30T10:00:00Z"))
        .map(|t| t.at().timestamp());
    assert_eq!(a.map(|s| s % 7), Some(0));
    assert_eq!(
        s.latest_at_or_before(utc("2026-11-30T10:00:59Z"), TimeDelta::seconds(60))
            .map(Tick::at),
        Some(utc("2026-11-30T10:00:30Z"))
    );
    assert_eq!(
        s.latest_at_or_before(utc("2026-11-30T10:00:59Z"), TimeDelta::seconds(10)),
        None
    );
}

/// The latest ticks of a range, found from its end, are those a walk through the
/// whole range finds: for dense and sparse schedules, ranges that hold fewer ticks
/// than asked for, and ranges that reach back before 1970.
#[test]
fn the_latest_ticks_of_a_range_are_found_from_its_end() {
    let until = utc("2026-11-30T10:00:59.5Z");
    // Each schedule with its latest tick at or before `until`.
    let every_400_days = 86_400_000 * 400;
    let schedules = [
        (Schedule::every(Duration::from_millis(1)), until),
        (
            Schedule::every(Duration::from_secs(7)),
            DateTime::from_timestamp(until.timestamp() / 7 * 7, 0).unwrap_or_default(),
        ),
        (
            Schedule::every(Duration::from_secs(86_400 * 400)),
            DateTime::from_timestamp_millis(
                until.timestamp_millis() / every_400_days * every_400_days,
            )
            .unwrap_or_default(),
        ),
        (
            Schedule::cron("0 */15 * * * *"),
            utc("2026-11-30T10:00:00Z"),
        ),
        (
            Schedule::cron("0 30 9 * * Mon"),
            utc("2026-11-30T09:30:00Z"),
        ),
        (Schedule::cron("0 0 0 29 2 *"), utc("2024-02-29T00:00:00Z")),
        (
            Schedule::cron("0 30 2 * * *").in_time_zone("Europe/Berlin"),
            utc("2026-11-30T01:30:00Z"),
        ),
    ];
    for (schedule, latest) in schedules {
        let compiled = schedule.compile().unwrap_or_else(|e| panic!("{e}"));
        for back in [0, 1, 59, 3_600, 86_400 * 9, 86_400 * 3_000] {
            let since = until - TimeDelta::seconds(back);
            for keep in [1, 2, 5] {
                let gap = compiled.shortest_gap(since).unwrap_or(Duration::MAX);
                if Duration::from_secs(back.unsigned_abs()) > gap.saturating_mul(100_000) {
                    continue; // a walk through the whole range would take too long
                }
                assert_eq!(
                    compiled.latest_ticks(since, until, keep),
                    compiled.ticks_between(since, until, keep),
                    "{schedule:?}, {back} s back, keep {keep}"
                );
            }
        }
        // A window reaching past the calendar's start.
        assert_eq!(
            compiled
                .latest_at_or_before(until, TimeDelta::MAX)
                .map(Tick::at),
            Some(latest),
            "{schedule:?}"
        );
    }
}

#[test]
fn durations_parse_with_units() {
    assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
    assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
    for bad in ["", "30", "s", "30x", "1.5s", "-1s", "99999999999999999999s"] {
        assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
    }
    assert!(matches!(
        "0s".parse::<Schedule>(),
        Err(ScheduleError::PeriodTooShort { .. })
    ));
    assert!("30s".parse::<Schedule>().is_ok());
    assert!("0 */15 * * * *".parse::<Schedule>().is_ok());
}

#[test]
fn bad_cron_and_zones_are_refused() {
    assert!(matches!(
        Schedule::cron("not cron").validate(),
        Err(ScheduleError::InvalidCron { .. })
    ));
    assert!(matches!(
        Schedule::cron("0 0 0 30 2 *").validate(),
        Err(ScheduleError::NeverFires { .. })
    ));
    assert!(matches!(
        Schedule::cron("0 * * * * *")
            .in_time_zone("Mars/Olympus")
            .validate(),
        Err(ScheduleError::UnknownTimeZone { .. })
    ));
}

#[test]
fn berlin_spring_forward_gap() {
    // 2026-03-29: 02:00 CET jumps to 03:00 CEST.
    let fixed = Schedule::cron("0 30 2 * * *").in_time_zone("Europe/Berlin");
    assert_eq!(
        ticks(&fixed, "2026-03-27T12:00:00Z", 4),
        [
            "03-28 02:30 CET",
            "03-29 03:00 CEST",
            "03-30 02:30 CEST",
            "03-31 02:30 CEST"
        ]
    );
    let wildcard = Schedule::cron("0 30 * * * *").in_time_zone("Europe/Berlin");
    assert_eq!(
        ticks(&wildcard, "2026-03-28T23:45:00Z", 3),
        ["03-29 01:30 CET", "03-29 03:30 CEST", "03-29 04:30 CEST"]
    );
}

#[test]
fn berlin_fall_back_repeated_hour() {
    // 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:xx happens twice.
    let fixed = Schedule::cron("0 30 2 * * *").in_time_zone("Europe/Berlin");
    assert_eq!(
        ticks(&fixed, "2026-10-23T12:00:00Z", 3),
        ["10-24 02:30 CEST", "10-25 02:30 CEST", "10-26 02:30 CET"]
    );
    let wildcard = Schedule::cron("0 0/30 * * * *").in_time_zone("Europe/Berlin");
    assert_eq!(
        ticks(&wildcard, "2026-10-24T23:15:00Z", 6),
        [
            "10-25 01:30 CEST",
            "10-25 02:00 CEST",
            "10-25 02:30 CEST",
            "10-25 02:00 CET",
            "10-25 02:30 CET",
            "10-25 03:00 CET"
        ]
    );
}

fn next_ticks(schedule: &Schedule, from: &str, n: usize) -> Vec<DateTime<Utc>> {
    let compiled = schedule.compile().unwrap_or_else(|e| panic!("{e}"));
    let mut at = utc(from);
    let mut out = Vec::new();
    for _ in 0..n {
        let Some(t) = compiled.next_after(at) else {
            break;
        };
        out.push(t.at());
        at = t.at();
    }
    out
}

#[test]
fn every_second_cron_is_accepted_and_fires_every_second() {
    for expr in ["* * * * * *", "0-58 * * * * *"] {
        assert_eq!(Schedule::cron(expr).validate(), Ok(()), "{expr}");
    }
    let every = Schedule::cron("* * * * * *");
    let want: Vec<_> = (1..=5)
        .map(|s| utc("2026-06-01T10:00:00Z") + TimeDelta::seconds(s))
        .collect();
    assert_eq!(next_ticks(&every, "2026-06-01T10:00:00.250Z", 5), want);
    let almost = Schedule::cron("0-58 * * * * *");
    assert_eq!(
        next_ticks(&almost, "2026-06-01T10:00:57Z", 2),
        [utc("2026-06-01T10:00:58Z"), utc("2026-06-01T10:01:00Z")]
    );
}

#[test]
fn a_windowed_cron_fires_again_the_next_night() {
    let night = Schedule::cron("* * 0-2 * * *");
    assert_eq!(
        next_ticks(&night, "2026-06-01T02:59:58Z", 3),
        [
            utc("2026-06-01T02:59:59Z"),
            utc("2026-06-02T00:00:00Z"),
            utc("2026-06-02T00:00:01Z")
        ]
    );
    // The same in Berlin, across the night of the spring-forward gap (02:00–03:00
    // does not exist on 2026-03-29): 00:00–01:59:59 fire, then the gap's end once.
    let berlin = Schedule::cron("* * 0-2 * * *").in_time_zone("Europe/Berlin");
    assert_eq!(
        next_ticks(&berlin, "2026-03-29T00:59:58Z", 3),
        [
            utc("2026-03-29T00:59:59Z"),
            utc("2026-03-29T01:00:00Z"),
            utc("2026-03-29T22:00:00Z")
        ]
    );
}

#[test]
fn messages_are_the_macros() {
    // `#[job]` reports scheduler_spec's errors; build() reports the same words.
    let cases = [
        (Schedule::cron("0 0 24 * * *"), "0 0 24 * * *"),
        (Schedule::cron("0 0 12 * * Mun"), "0 0 12 * * Mun"),
    ];
    for (schedule, expr) in cases {
        let spec = scheduler_spec::CronExpr::parse(expr)
            .err()
            .map(|e| e.to_string());
        let core = schedule.validate().err().map(|e| e.to_string());
        assert!(spec.is_some());
        assert_eq!(core, spec);
    }
    assert_eq!(
        Schedule::cron("0 0 0 30 2 *").validate().err().map(|e| e.to_string()),
        Some(
            "cron expression \"0 0 0 30 2 *\" never fires; check that its day, month and weekday fields can meet and that its years are not all past".to_owned()
        )
    );
    assert_eq!(
        Schedule::cron("0 0 3 * * *")
            .in_time_zone("europe/berlin")
            .validate()
            .err()
            .map(|e| e.to_string()),
        Some("unknown time zone \"europe/berlin\"; did you mean \"Europe/Berlin\"?".to_owned())
    );
    assert_eq!(
        parse_duration("1.5s").err().map(|e| e.to_string()),
        scheduler_spec::parse_duration("1.5s")
            .err()
            .map(|e| e.to_string())
    );
    // A past year never fires again: refused from now, as `#[job]` refuses it.
    assert!(matches!(
        Schedule::cron("0 0 0 1 1 * 2020").validate(),
        Err(ScheduleError::NeverFires { .. })
    ));
}

/// Issue 32's edge "`Slot::next_after` gives up early": a slot's next tick is looked
/// for among at most `max(64 × slots, 1024)` of the schedule's ticks. Checked against
/// a plain walk of the schedule for calendars that share their ticks out unevenly
/// (weekdays, two ticks an hour, month starts, a zone with DST): wherever a slot has
/// a tick, `next_after` finds the same first one; it answers `None` only for a slot
/// the walk never reaches (every tick belongs to exactly one slot, so the others run
/// them all).
#[test]
fn a_slot_finds_its_next_tick_wherever_the_schedule_has_one() {
    const WALK: usize = 3_000;
    let schedules = [
        Schedule::cron("0 0 9 * * MON-FRI"),
        Schedule::cron("0 0,1 * * * *"),
        Schedule::cron("0 0 0 1 * *"),
        Schedule::cron("0 30 2 * * *").in_time_zone("Europe/Berlin"),
        Schedule::cron("0 0 9,17 * * *").in_time_zone("America/New_York"),
        Schedule::every(Duration::from_secs(7)),
    ];
    let from = utc("2026-01-01T00:00:00Z");
    for schedule in schedules {
        let base = schedule.compile().unwrap_or_else(|e| panic!("{e}"));
        let gap_ms = i64::try_from(
            base.shortest_gap(SLOT_ANCHOR)
                .unwrap_or_else(|| panic!("{schedule:?} has a gap"))
                .as_millis(),
        )
        .unwrap_or(1000);
        let mut walk = Vec::with_capacity(WALK);
        let mut at = from;
        // (A cron calendar ends in its last supported year.)
        while walk.len() < WALK
            && let Some(tick) = base.next_after(at)
        {
            walk.push(tick);
            at = tick.at();
        }
        assert!(walk.len() > 100, "{schedule:?}");
        for slots in 2..=8u32 {
            for slot in 0..slots {
                let compiled = base.slot(slots, slot, gap_ms);
                for start in (0..walk.len() / 2).step_by(97) {
                    let after = walk[start].at();
                    let expected = walk[start + 1..]
                        .iter()
                        .find(|t| Compiled::slot_of(**t, gap_ms, slots) == slot)
                        .copied();
                    let found = compiled.next_after(after);
                    match expected {
                        Some(tick) => assert_eq!(
                            found,
                            Some(tick),
                            "{schedule:?}, slot {slot} of {slots}, after {after}"
                        ),
                        // Beyond the walk: a tick found must be in the slot.
                        None => assert!(
                            found.is_none_or(|t| Compiled::slot_of(t, gap_ms, slots) == slot),
                            "{schedule:?}, slot {slot} of {slots}: {found:?}"
                        ),
                    }
                }
            }
        }
    }
}

#[test]
fn a_cron_expression_compiled_again_is_shared_while_held() {
    let mut cache = CronCache::default();
    let daily = Schedule::cron("0 30 9 * * *");
    let cron = |c: Compiled| match c {
        Compiled::Cron(cron) => cron,
        other => panic!("not a cron schedule: {other:?}"),
    };
    let a = cron(daily.compile_with(&mut cache).expect("compiles"));
    let b = cron(daily.compile_with(&mut cache).expect("compiles"));
    assert!(
        Arc::ptr_eq(&a, &b),
        "the same text in the same zone is compiled once"
    );
    let berlin = cron(
        daily
            .clone()
            .in_time_zone("Europe/Berlin")
            .compile_with(&mut cache)
            .expect("compiles"),
    );
    assert!(
        !Arc::ptr_eq(&a, &berlin),
        "another zone is another schedule"
    );
    assert_ne!(a.next_after(SLOT_ANCHOR), berlin.next_after(SLOT_ANCHOR));
    // Once no schedule holds it, it is compiled anew (and its entry swept).
    drop((a, b));
    let again = cron(daily.compile_with(&mut cache).expect("compiles"));
    assert_eq!(Arc::strong_count(&again), 1);
    // A bad expression is still refused, each time.
    let bad = Schedule::cron("61 * * * * *");
    assert!(bad.compile_with(&mut cache).is_err());
    assert!(bad.compile_with(&mut cache).is_err());
    // Entries nobody holds are dropped as the cache grows.
    for minute in 0..2_000 {
        let s = Schedule::cron(format!("0 {} {} * * *", minute % 60, minute / 60 % 24));
        drop(s.compile_with(&mut cache).expect("compiles"));
    }
    assert!(cache.by_text.len() <= 1_440 + 2, "{}", cache.by_text.len());
}
