//! `next`: a schedule's next ticks in UTC and in its zone, with Berlin's
//! spring-forward gap and fall-back hour marked, through the library (fixed start
//! instants, whole outputs) and the built binary (from now: a year of daily ticks
//! holds both changes); a bad expression, zone or period, or both or neither of
//! `--cron` and `--every`, exits with code 2 and clap's message. No database.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::{Command, Output};
use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::Parser;
use scheduler_cli::{Cli, NextArgs, next};
use scheduler_core::{Schedule, ScheduleError};
use serde_json::{Value, json};

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn berlin(expr: &str, count: usize) -> NextArgs {
    NextArgs::new(Schedule::cron(expr).in_time_zone("Europe/Berlin"), count).unwrap()
}

/// Runs the binary with `args` and no database in the environment.
fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_scheduler-cli"))
        .args(args)
        .env_remove("DATABASE_URL")
        .output()
        .expect("run scheduler-cli")
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

#[test]
fn spring_forward_is_marked_in_text_and_json() {
    let next = next(&berlin("0 30 2 * * *", 3), utc("2026-03-27T12:00:00Z"));
    assert_eq!(
        next.human(),
        "\
UTC                   LOCAL (Europe/Berlin)      DST
2026-03-28T01:30:00Z  2026-03-28T02:30:00+01:00
2026-03-29T01:00:00Z  2026-03-29T03:00:00+02:00  clocks went forward 1h at 2026-03-29T02:00 local; 02:30 skipped, fires at the gap's end
2026-03-30T00:30:00Z  2026-03-30T02:30:00+02:00
"
    );
    let json: Value = serde_json::from_str(&next.json().unwrap()).unwrap();
    assert_eq!(
        json,
        json!({
            "schedule": "cron \"0 30 2 * * *\" in Europe/Berlin",
            "zone": "Europe/Berlin",
            "after": "2026-03-27T12:00:00Z",
            "ticks": [
                {"at": "2026-03-28T01:30:00Z", "local": "2026-03-28T02:30:00+01:00", "dst": null},
                {
                    "at": "2026-03-29T01:00:00Z",
                    "local": "2026-03-29T03:00:00+02:00",
                    "dst": {
                        "transition": "2026-03-29T01:00:00Z",
                        "transition_local": "2026-03-29T02:00:00",
                        "offset_before": "+01:00",
                        "offset_after": "+02:00",
                        "shift_seconds": 3600,
                        "wall_time": "skipped",
                        "skipped": "2026-03-29T02:30:00",
                        "note": "clocks went forward 1h at 2026-03-29T02:00 local; 02:30 skipped, fires at the gap's end"
                    }
                },
                {"at": "2026-03-30T00:30:00Z", "local": "2026-03-30T02:30:00+02:00", "dst": null}
            ]
        })
    );
}

#[test]
fn fall_back_marks_the_repeated_wall_times_of_wildcard_hours() {
    let next = next(&berlin("0 0/30 * * * *", 5), utc("2026-10-24T23:45:00Z"));
    assert_eq!(
        next.human(),
        "\
UTC                   LOCAL (Europe/Berlin)      DST
2026-10-25T00:00:00Z  2026-10-25T02:00:00+02:00
2026-10-25T00:30:00Z  2026-10-25T02:30:00+02:00
2026-10-25T01:00:00Z  2026-10-25T02:00:00+01:00  clocks went back 1h at 2026-10-25T03:00 local; wall time repeated, second occurrence
2026-10-25T01:30:00Z  2026-10-25T02:30:00+01:00  clocks went back 1h at 2026-10-25T03:00 local; wall time repeated, second occurrence
2026-10-25T02:00:00Z  2026-10-25T03:00:00+01:00
"
    );
    let json: Value = serde_json::from_str(&next.json().unwrap()).unwrap();
    let dst = &json["ticks"][2]["dst"];
    assert_eq!(dst["wall_time"], "repeated");
    assert_eq!(dst["shift_seconds"], -3600);
    assert_eq!(dst["skipped"], Value::Null);
}

#[test]
fn every_is_shown_in_utc() {
    let args = NextArgs::new(Schedule::every(Duration::from_secs(15 * 60)), 2).unwrap();
    let next = next(&args, utc("2026-03-29T00:50:00Z"));
    assert_eq!(
        next.human(),
        "\
UTC                   LOCAL (UTC)           DST
2026-03-29T01:00:00Z  2026-03-29T01:00:00Z
2026-03-29T01:15:00Z  2026-03-29T01:15:00Z
"
    );
    let json: Value = serde_json::from_str(&next.json().unwrap()).unwrap();
    assert_eq!(json["schedule"], "every 900s");
    assert_eq!(json["zone"], Value::Null);
    assert_eq!(json["ticks"][1]["dst"], Value::Null);
}

#[test]
fn a_schedule_that_runs_out_shows_what_is_left() {
    let args = NextArgs::new(Schedule::cron("0 0 0 1 1 * 2098-2099"), 10).unwrap();
    let next = next(&args, utc("2026-01-01T00:00:00Z"));
    assert_eq!(next.ticks.len(), 2);
    let none = scheduler_cli::next(&args, utc("2099-06-01T00:00:00Z"));
    assert_eq!(
        none.human(),
        "no ticks of cron \"0 0 0 1 1 * 2098-2099\" in UTC after 2099-06-01T00:00:00Z: it has none left\n"
    );
}

#[test]
fn the_command_line_gives_a_checked_schedule() {
    let cli = Cli::try_parse_from([
        "scheduler-cli",
        "next",
        "--cron",
        "0 30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "-n",
        "3",
    ])
    .unwrap();
    let scheduler_cli::Command::Next(args) = &cli.command else {
        panic!("not next: {:?}", cli.command);
    };
    assert_eq!(
        *args.schedule(),
        Schedule::cron("0 30 2 * * *").in_time_zone("Europe/Berlin")
    );
    assert_eq!(args.count(), 3);
    let cli = Cli::try_parse_from(["scheduler-cli", "next", "--every", "15m"]).unwrap();
    let scheduler_cli::Command::Next(args) = &cli.command else {
        panic!("not next: {:?}", cli.command);
    };
    assert_eq!(*args.schedule(), Schedule::every(Duration::from_secs(900)));
    assert_eq!(args.count(), 10);
    // The library refuses what the command line refuses.
    assert!(matches!(
        NextArgs::new(
            Schedule::cron("0 30 2 * * *").in_time_zone("Mars/Olympus"),
            3
        ),
        Err(ScheduleError::UnknownTimeZone { .. })
    ));
}

#[tokio::test]
async fn run_answers_next_without_a_database() {
    let cli = Cli::try_parse_from(["scheduler-cli", "next", "--every", "1h", "-n", "2"]).unwrap();
    assert_eq!(cli.database_url, None);
    let output = scheduler_cli::run(&cli).await.unwrap();
    assert_eq!(output.exit_code, 0);
    assert_eq!(output.text.lines().count(), 3, "{}", output.text);
    assert!(output.text.starts_with("UTC "), "{}", output.text);
}

#[test]
fn the_binary_marks_a_years_changes() {
    // A year and more of a nightly job holds a spring-forward and a fall-back.
    let out = cli(&[
        "next",
        "--cron",
        "0 30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "-n",
        "400",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let ticks = json["ticks"].as_array().unwrap();
    assert_eq!(ticks.len(), 400);
    let notes: Vec<&Value> = ticks
        .iter()
        .map(|t| &t["dst"])
        .filter(|d| !d.is_null())
        .collect();
    assert!(
        notes
            .iter()
            .any(|d| d["wall_time"] == "skipped" && d["shift_seconds"] == 3600),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|d| d["wall_time"] == "unaffected" && d["shift_seconds"] == -3600),
        "{notes:?}"
    );
    // One note per change, on the first tick after it.
    assert!(notes.len() <= 4, "{notes:?}");

    let out = cli(&["next", "--every", "15m", "-n", "2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("UTC "), "{stdout}");
    assert_eq!(stdout.lines().count(), 3, "{stdout}");
}

#[test]
fn the_binary_refuses_bad_schedules_with_exit_code_two() {
    let cases: [(&[&str], &str); 7] = [
        (
            &["next", "--cron", "0 0 24 * * *"],
            "error: invalid value '0 0 24 * * *' for '--cron <EXPR>': invalid cron expression \"0 0 24 * * *\": the hour 24 is out of range; hours go from 0 to 23",
        ),
        (
            &["next", "--cron", "0 30 2 * * *", "--tz", "Europe/Berln"],
            "error: invalid value 'Europe/Berln' for '--tz <ZONE>': unknown time zone \"Europe/Berln\"",
        ),
        (&["next", "--cron", "0 0 0 30 2 *"], "never fires"),
        (
            &["next", "--every", "15"],
            "error: invalid value '15' for '--every <PERIOD>': invalid duration \"15\"",
        ),
        (
            &["next", "--every", "15m", "--cron", "0 * * * * *"],
            "error: the argument '--every <PERIOD>' cannot be used with '--cron <EXPR>'",
        ),
        (
            &["next"],
            "error: the following required arguments were not provided:\n  <--cron <EXPR>|--every <PERIOD>>",
        ),
        (
            &["next", "--every", "15m", "--tz", "Europe/Berlin"],
            "cannot be used with",
        ),
    ];
    for (args, message) in cases {
        let out = cli(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(
            text(&out.stderr).contains(message),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}
