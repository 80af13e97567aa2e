//! `next`: a schedule's next ticks, in UTC and in its zone, changes of offset
//! (daylight saving time) marked.
//!
//! Jobs and their schedules live in the app's code, so the schedule is given on the
//! command line (`--cron` with `--tz`, or `--every`), checked as `build()` checks it,
//! and previewed with [`scheduler_core::upcoming_ticks`]. No database is read.

use chrono::{DateTime, SecondsFormat, Utc};
use clap::builder::RangedU64ValueParser;
use clap::error::ErrorKind;
use clap::{ArgMatches, Args, FromArgMatches};
use scheduler_core::{DstNote, Schedule, ScheduleError, UpcomingTick, WallTime, upcoming_ticks};
use serde::ser::{Serialize, SerializeStruct, Serializer};

use crate::columns::Columns;
use crate::error::Result;

/// How many ticks `next` shows unless `-n` says otherwise.
const DEFAULT_COUNT: usize = 10;

/// The most ticks `next` shows.
const MAX_COUNT: u64 = 1000;

/// The arguments of `next`: a checked schedule and how many ticks to show.
///
/// The command line gives it (`--cron EXPR [--tz ZONE]` or `--every PERIOD`, and
/// `-n N`); a schedule that does not check is refused while parsing, so clap
/// reports it (exit code 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextArgs {
    schedule: Schedule,
    count: usize,
}

impl NextArgs {
    /// `count` ticks of `schedule`.
    ///
    /// # Errors
    /// [`ScheduleError`] when the schedule does not check ([`Schedule::validate`]).
    pub fn new(schedule: Schedule, count: usize) -> Result<Self, ScheduleError> {
        schedule.validate()?;
        Ok(Self { schedule, count })
    }

    /// The schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// How many ticks to show.
    pub fn count(&self) -> usize {
        self.count
    }
}

/// `next`'s command line as written, before the schedule is put together.
#[derive(Debug, Clone, Args)]
struct Written {
    #[command(flatten)]
    schedule: WrittenSchedule,

    /// The IANA time zone the cron expression is read in (default UTC).
    #[arg(long, value_name = "ZONE", value_parser = zone, conflicts_with = "every")]
    tz: Option<String>,

    /// How many ticks to show.
    #[arg(
        short = 'n',
        long = "count",
        value_name = "N",
        default_value_t = DEFAULT_COUNT,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_COUNT),
    )]
    count: usize,
}

#[derive(Debug, Clone, Args)]
#[group(required = true, multiple = false)]
struct WrittenSchedule {
    /// A cron expression, crontab's way: "min hour day month weekday" (seconds first
    /// and a year last may be added).
    #[arg(long, value_name = "EXPR", value_parser = cron)]
    cron: Option<String>,

    /// A period ("30s", "15m", "1h30m"): ticks at its multiples since the Unix epoch.
    #[arg(long, value_name = "PERIOD", value_parser = every)]
    every: Option<std::time::Duration>,
}

/// A cron expression that checks (read in UTC; `--tz` is checked on its own).
pub(crate) fn cron(expr: &str) -> Result<String, ScheduleError> {
    Schedule::cron(expr).validate()?;
    Ok(expr.to_owned())
}

/// A time zone `Schedule::in_time_zone` accepts.
pub(crate) fn zone(name: &str) -> Result<String, ScheduleError> {
    // Any expression that fires: only the zone is in question.
    Schedule::cron("0 0 0 * * *")
        .in_time_zone(name)
        .validate()?;
    Ok(name.to_owned())
}

/// A period `Schedule::every` accepts.
pub(crate) fn every(period: &str) -> Result<std::time::Duration, ScheduleError> {
    let period = scheduler_core::parse_duration(period)?;
    Schedule::every(period).validate()?;
    Ok(period)
}

impl FromArgMatches for NextArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let written = Written::from_arg_matches(matches)?;
        let schedule = match (written.schedule.cron, written.schedule.every) {
            (Some(expr), None) => {
                Schedule::cron(expr).in_time_zone(written.tz.as_deref().unwrap_or("UTC"))
            }
            (None, Some(period)) => Schedule::every(period),
            // clap's group refuses both and neither before this.
            _ => {
                return Err(clap::Error::raw(
                    ErrorKind::MissingRequiredArgument,
                    "give one of --cron or --every\n",
                ));
            }
        };
        Self::new(schedule, written.count)
            .map_err(|err| clap::Error::raw(ErrorKind::ValueValidation, format!("{err}\n")))
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for NextArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        Written::augment_args(cmd)
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Written::augment_args_for_update(cmd)
    }
}

/// What `next` shows. Serialized as the `--json` output; field names are stable.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Next {
    /// The schedule, as `cron "0 30 2 * * *" in Europe/Berlin` or `every 900s`.
    pub schedule: String,
    /// The schedule's zone; `None` for `every` (and when there is no tick).
    pub zone: Option<String>,
    /// The ticks are the first strictly after this instant.
    pub after: DateTime<Utc>,
    /// The ticks, in order.
    pub ticks: Vec<UpcomingTick>,
}

/// The first [`NextArgs::count`] ticks of the schedule strictly after `after`
/// ([`upcoming_ticks`]); fewer when the schedule has no more.
pub fn next(args: &NextArgs, after: DateTime<Utc>) -> Next {
    // `args` was checked when made, so only `NeverFires` can come back: a schedule
    // whose last tick passed since, which has no ticks to show.
    let ticks = upcoming_ticks(&args.schedule, after, args.count).unwrap_or_default();
    Next {
        schedule: args.schedule.to_string(),
        zone: ticks.first().and_then(|tick| tick.zone.clone()),
        after,
        ticks,
    }
}

fn utc(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

impl Next {
    /// The human output: one aligned row per tick (UTC, local time, the DST note).
    pub fn human(&self) -> String {
        if self.ticks.is_empty() {
            return format!(
                "no ticks of {} after {}: it has none left\n",
                self.schedule,
                utc(self.after)
            );
        }
        let local = format!("LOCAL ({})", self.zone.as_deref().unwrap_or("UTC"));
        let mut t = Columns::new(&["UTC", &local, "DST"]);
        for tick in &self.ticks {
            t.push(vec![
                utc(tick.at),
                tick.local.clone(),
                tick.dst
                    .as_ref()
                    .map(DstNote::to_string)
                    .unwrap_or_default(),
            ]);
        }
        t.render()
    }

    /// The `--json` output.
    ///
    /// # Errors
    /// [`Error::Json`](crate::Error::Json) if it cannot be written.
    pub fn json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }
}

impl Serialize for Next {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Next", 4)?;
        s.serialize_field("schedule", &self.schedule)?;
        s.serialize_field("zone", &self.zone)?;
        s.serialize_field("after", &self.after)?;
        s.serialize_field("ticks", &self.ticks.iter().map(Tick).collect::<Vec<_>>())?;
        s.end()
    }
}

/// An [`UpcomingTick`] with the CLI's field names.
struct Tick<'a>(&'a UpcomingTick);

impl Serialize for Tick<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut s = serializer.serialize_struct("Tick", 3)?;
        s.serialize_field("at", &t.at)?;
        s.serialize_field("local", &t.local)?;
        s.serialize_field("dst", &t.dst.as_ref().map(Dst))?;
        s.end()
    }
}

/// A [`DstNote`] with the CLI's field names.
struct Dst<'a>(&'a DstNote);

impl Serialize for Dst<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        const WALL: &str = "%Y-%m-%dT%H:%M:%S";
        let d = self.0;
        let (wall_time, skipped) = match d.wall_time {
            WallTime::Skipped { wall } => ("skipped", Some(wall.format(WALL).to_string())),
            WallTime::Repeated => ("repeated", None),
            _ => ("unaffected", None),
        };
        let mut s = serializer.serialize_struct("Dst", 8)?;
        s.serialize_field("transition", &d.transition)?;
        s.serialize_field(
            "transition_local",
            &d.transition_local.format(WALL).to_string(),
        )?;
        s.serialize_field("offset_before", &d.offset_before.to_string())?;
        s.serialize_field("offset_after", &d.offset_after.to_string())?;
        s.serialize_field("shift_seconds", &d.shift().num_seconds())?;
        s.serialize_field("wall_time", wall_time)?;
        s.serialize_field("skipped", &skipped)?;
        s.serialize_field("note", &d.to_string())?;
        s.end()
    }
}
