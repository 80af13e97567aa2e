//! Previewing a schedule's next ticks: UTC and wall-clock times, changes of offset
//! marked, across Berlin's spring-forward gap and fall-back repeated hour, for
//! restricted-hour and wildcard-hour cron expressions and for `every`; and
//! `Scheduler::upcoming` on a registered job, from the scheduler's clock.

use std::time::Duration;

use chrono::{DateTime, FixedOffset, NaiveDateTime, Utc};
use scheduler_core::{
    BoxError, DstNote, JobContext, LocalClock, MemoryStore, Schedule, ScheduleError, Scheduler,
    UpcomingTick, WallTime, job, upcoming_ticks,
};

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn wall(s: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn offset(hours: i32) -> FixedOffset {
    FixedOffset::east_opt(hours * 3600).unwrap_or_else(|| panic!("offset {hours}h"))
}

fn berlin(expr: &str, after: &str, n: usize) -> Vec<UpcomingTick> {
    let schedule = Schedule::cron(expr).in_time_zone("Europe/Berlin");
    upcoming_ticks(&schedule, utc(after), n).unwrap_or_else(|e| panic!("{e}"))
}

fn locals(ticks: &[UpcomingTick]) -> Vec<&str> {
    ticks.iter().map(|t| t.local.as_str()).collect()
}

/// The notes, with the index of the tick each is on.
fn notes(ticks: &[UpcomingTick]) -> Vec<(usize, &DstNote)> {
    ticks
        .iter()
        .enumerate()
        .filter_map(|(i, t)| t.dst.as_ref().map(|d| (i, d)))
        .collect()
}

type Fields = (
    DateTime<Utc>,
    NaiveDateTime,
    FixedOffset,
    FixedOffset,
    WallTime,
);

/// A note's fields (`DstNote` is non-exhaustive), in order.
fn fields(note: &DstNote) -> Fields {
    (
        note.transition,
        note.transition_local,
        note.offset_before,
        note.offset_after,
        note.wall_time,
    )
}

/// The spring-forward note of 2026-03-29 in Berlin: 02:00 CET became 03:00 CEST.
fn spring(wall_time: WallTime) -> DstNote {
    let mut note = notes(&berlin("0 0 12 * * *", "2026-03-28T12:00:00Z", 1))[0]
        .1
        .clone();
    note.wall_time = wall_time;
    note
}

#[test]
fn spring_forward_a_restricted_hour_fires_at_the_gap_end_marked_skipped() {
    let ticks = berlin("0 30 2 * * *", "2026-03-27T12:00:00Z", 4);
    assert_eq!(
        locals(&ticks),
        [
            "2026-03-28T02:30:00+01:00",
            "2026-03-29T03:00:00+02:00",
            "2026-03-30T02:30:00+02:00",
            "2026-03-31T02:30:00+02:00",
        ]
    );
    assert_eq!(ticks[1].at, utc("2026-03-29T01:00:00Z"));
    assert!(
        ticks
            .iter()
            .all(|t| t.zone.as_deref() == Some("Europe/Berlin"))
    );
    let notes = notes(&ticks);
    assert_eq!(notes.len(), 1, "{notes:?}");
    let (i, note) = notes[0];
    assert_eq!(i, 1);
    assert_eq!(
        fields(note),
        (
            utc("2026-03-29T01:00:00Z"),
            wall("2026-03-29T02:00:00"),
            offset(1),
            offset(2),
            WallTime::Skipped {
                wall: wall("2026-03-29T02:30:00")
            },
        )
    );
    assert_eq!(note.shift(), chrono::TimeDelta::hours(1));
    assert_eq!(
        note.to_string(),
        "clocks went forward 1h at 2026-03-29T02:00 local; 02:30 skipped, fires at the gap's end"
    );
}

#[test]
fn spring_forward_a_tick_at_the_gap_end_that_was_not_in_the_gap_is_not_skipped() {
    // 03:00 exists on 29 March: the tick is at the transition, but nothing skipped.
    let ticks = berlin("0 0 3 * * *", "2026-03-28T12:00:00Z", 1);
    assert_eq!(locals(&ticks), ["2026-03-29T03:00:00+02:00"]);
    assert_eq!(ticks[0].dst, Some(spring(WallTime::Unaffected)));
    // Both 02:00 (skipped) and 03:00 name the gap's end: one tick, marked skipped.
    let ticks = berlin("0 0 2,3 * * *", "2026-03-28T12:00:00Z", 2);
    assert_eq!(
        locals(&ticks),
        ["2026-03-29T03:00:00+02:00", "2026-03-30T02:00:00+02:00"]
    );
    assert_eq!(
        ticks[0].dst,
        Some(spring(WallTime::Skipped {
            wall: wall("2026-03-29T02:00:00")
        }))
    );
    assert_eq!(ticks[1].dst, None);
}

#[test]
fn spring_forward_wildcard_hours_lose_the_gap_and_the_first_tick_after_is_marked() {
    let ticks = berlin("0 30 * * * *", "2026-03-28T23:45:00Z", 3);
    assert_eq!(
        locals(&ticks),
        [
            "2026-03-29T01:30:00+01:00",
            "2026-03-29T03:30:00+02:00",
            "2026-03-29T04:30:00+02:00",
        ]
    );
    let notes = notes(&ticks);
    assert_eq!(notes, [(1, &spring(WallTime::Unaffected))]);
    assert_eq!(
        notes[0].1.to_string(),
        "clocks went forward 1h at 2026-03-29T02:00 local"
    );
}

#[test]
fn the_first_tick_is_compared_with_the_start_of_the_preview() {
    // From 13:00 CET on the 28th, the next noon is CEST.
    let ticks = berlin("0 0 12 * * *", "2026-03-28T12:00:00Z", 2);
    assert_eq!(
        locals(&ticks),
        ["2026-03-29T12:00:00+02:00", "2026-03-30T12:00:00+02:00"]
    );
    assert_eq!(ticks[0].dst, Some(spring(WallTime::Unaffected)));
    assert_eq!(ticks[1].dst, None);
}

#[test]
fn fall_back_a_restricted_hour_fires_once_and_the_next_day_is_marked() {
    let ticks = berlin("0 30 2 * * *", "2026-10-23T12:00:00Z", 3);
    assert_eq!(
        locals(&ticks),
        [
            "2026-10-24T02:30:00+02:00",
            "2026-10-25T02:30:00+02:00",
            "2026-10-26T02:30:00+01:00",
        ]
    );
    let notes = notes(&ticks);
    assert_eq!(notes.len(), 1, "{notes:?}");
    let (i, note) = notes[0];
    assert_eq!(i, 2);
    assert_eq!(
        fields(note),
        (
            utc("2026-10-25T01:00:00Z"),
            wall("2026-10-25T03:00:00"),
            offset(2),
            offset(1),
            WallTime::Unaffected,
        )
    );
    assert_eq!(note.shift(), chrono::TimeDelta::hours(-1));
    assert_eq!(
        note.to_string(),
        "clocks went back 1h at 2026-10-25T03:00 local"
    );
}

#[test]
fn fall_back_wildcard_hours_fire_twice_and_the_second_pass_is_marked_repeated() {
    let ticks = berlin("0 0/30 * * * *", "2026-10-24T23:15:00Z", 6);
    assert_eq!(
        locals(&ticks),
        [
            "2026-10-25T01:30:00+02:00",
            "2026-10-25T02:00:00+02:00",
            "2026-10-25T02:30:00+02:00",
            "2026-10-25T02:00:00+01:00",
            "2026-10-25T02:30:00+01:00",
            "2026-10-25T03:00:00+01:00",
        ]
    );
    let repeated = (
        utc("2026-10-25T01:00:00Z"),
        wall("2026-10-25T03:00:00"),
        offset(2),
        offset(1),
        WallTime::Repeated,
    );
    let notes = notes(&ticks);
    let found: Vec<(usize, Fields)> = notes.iter().map(|(i, n)| (*i, fields(n))).collect();
    assert_eq!(found, [(3, repeated), (4, repeated)]);
    assert_eq!(
        notes[0].1.to_string(),
        "clocks went back 1h at 2026-10-25T03:00 local; wall time repeated, second occurrence"
    );
}

#[test]
fn every_is_in_utc_with_no_zone_and_no_notes() {
    let every = Schedule::every(Duration::from_secs(15 * 60));
    // Across Berlin's spring-forward instant: nothing to mark for instants.
    let ticks = upcoming_ticks(&every, utc("2026-03-29T00:50:00Z"), 3).unwrap_or_default();
    assert_eq!(
        locals(&ticks),
        [
            "2026-03-29T01:00:00Z",
            "2026-03-29T01:15:00Z",
            "2026-03-29T01:30:00Z",
        ]
    );
    assert!(ticks.iter().all(|t| t.zone.is_none() && t.dst.is_none()));
    assert_eq!(ticks[0].at, utc("2026-03-29T01:00:00Z"));
    // Sub-second periods keep their fraction.
    let fast = Schedule::every(Duration::from_millis(250));
    let ticks = upcoming_ticks(&fast, utc("2026-03-29T00:00:00Z"), 1).unwrap_or_default();
    assert_eq!(locals(&ticks), ["2026-03-29T00:00:00.250Z"]);
}

#[test]
fn cron_in_utc_has_its_zone_and_a_zero_offset() {
    let ticks = upcoming_ticks(
        &Schedule::cron("0 0 9 * * Mon"),
        utc("2026-03-27T00:00:00Z"),
        1,
    )
    .unwrap_or_default();
    assert_eq!(locals(&ticks), ["2026-03-30T09:00:00+00:00"]);
    assert_eq!(ticks[0].zone.as_deref(), Some("UTC"));
}

#[test]
fn counts_run_out_with_the_schedule_and_bad_schedules_are_errors() {
    let two_years = Schedule::cron("0 0 0 1 1 * 2098-2099");
    let ticks = upcoming_ticks(&two_years, utc("2026-01-01T00:00:00Z"), 10).unwrap_or_default();
    assert_eq!(
        locals(&ticks),
        ["2098-01-01T00:00:00+00:00", "2099-01-01T00:00:00+00:00"]
    );
    assert_eq!(
        upcoming_ticks(&two_years, utc("2026-01-01T00:00:00Z"), 0),
        Ok(Vec::new())
    );
    assert!(matches!(
        upcoming_ticks(
            &Schedule::cron("0 0 3 * * *").in_time_zone("Europe/Berln"),
            utc("2026-01-01T00:00:00Z"),
            1
        ),
        Err(ScheduleError::UnknownTimeZone { .. })
    ));
    assert!(matches!(
        upcoming_ticks(&Schedule::cron("0 0 24 * * *"), Utc::now(), 1),
        Err(ScheduleError::InvalidCron { .. })
    ));
}

#[job(cron = "0 30 2 * * *", tz = "Europe/Berlin")]
async fn nightly(_: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[tokio::test]
async fn a_scheduler_previews_its_jobs_from_its_own_clock() {
    let scheduler = Scheduler::builder(MemoryStore::new())
        .node_id("node-a")
        .clock(LocalClock::starting_at(utc("2026-03-28T12:00:00Z")))
        .job(nightly)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let ticks = scheduler
        .upcoming("nightly", 2)
        .unwrap_or_else(|| panic!("no job nightly"));
    assert_eq!(
        locals(&ticks),
        ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]
    );
    assert!(matches!(
        ticks[0].dst.as_ref().map(|d| d.wall_time),
        Some(WallTime::Skipped { .. })
    ));
    assert_eq!(scheduler.upcoming("nightly ", 2), None);
    assert_eq!(scheduler.upcoming("unknown", 2), None);
}
