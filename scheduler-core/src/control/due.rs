//! When a dynamic schedule is next worth looking at: each row's `next_tick`, a
//! **lower bound** of its ticks still undecided (no tick of the row before it is
//! still to be decided). It decides only when an instance reads the row, never
//! whether a tick runs: that stays one conditional write of the tick's lease. A
//! bound too early costs a read and a refused take; one too late would miss a
//! tick, so every write of it is made to never be late:
//!
//! - a put writes [`TickBounds::bound`]: the row's first tick after the writer's
//!   clock less [`TickBounds::MARGIN`];
//! - an instance that has decided a row's ticks up to an instant moves the bound
//!   there ([`Controls::advance_schedules`](super::Controls::advance_schedules)),
//!   only forward and only while the row is at the version it read (a put made
//!   meanwhile wins);
//! - rows stored before the bound existed read as the epoch: due.
//!
//! An instance reads the rows due by an instant
//! ([`Controls::due_schedules`](super::Controls::due_schedules)) in pages ordered
//! by `(next_tick, name)`.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::ScheduleRow;

/// A dynamic schedule read by
/// [`Controls::due_schedules`](super::Controls::due_schedules): the row and its
/// bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueSchedule {
    /// The row, as [`Controls::schedule`](super::Controls::schedule) reads it.
    pub row: ScheduleRow,
    /// No tick of the row before this instant is still undecided.
    pub next_tick: DateTime<Utc>,
}

impl DueSchedule {
    /// Where the page that ends with this row ends: the next page starts after it.
    pub fn cursor(&self) -> DueCursor {
        DueCursor {
            next_tick: self.next_tick,
            name: self.row.name.clone(),
        }
    }
}

/// A position in the order of
/// [`Controls::due_schedules`](super::Controls::due_schedules): `(next_tick, name)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DueCursor {
    /// The bound of the last row read.
    pub next_tick: DateTime<Utc>,
    /// The name of the last row read.
    pub name: String,
}

/// One move of a row's bound
/// ([`Controls::advance_schedules`](super::Controls::advance_schedules)): the row
/// `name`, read at `version`, has no tick before `next_tick` left undecided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advance {
    /// The row's name.
    pub name: String,
    /// The row's version when it was read: a row changed since is left alone.
    pub version: i64,
    /// The new bound.
    pub next_tick: DateTime<Utc>,
}

/// The bounds a put writes: each row's first tick after `now` less
/// [`MARGIN`](Self::MARGIN), computed once per schedule and zone (a batch of rows
/// per customer shares a few schedules).
#[derive(Debug)]
pub struct TickBounds {
    from: DateTime<Utc>,
    cache: HashMap<(String, Option<String>), DateTime<Utc>>,
}

impl TickBounds {
    /// How far behind the writer's clock the bound starts: a writer whose clock runs
    /// ahead of the instances' by less than this still writes a bound no later than
    /// any tick they would run.
    pub const MARGIN: Duration = Duration::from_secs(60);

    /// The bounds of rows put at `now` (the writer's clock).
    pub fn new(now: DateTime<Utc>) -> Self {
        let margin = TimeDelta::from_std(Self::MARGIN).unwrap_or(TimeDelta::zero());
        Self {
            from: now - margin,
            cache: HashMap::new(),
        }
    }

    /// The bound `row` is stored with: its first tick after the writer's clock less
    /// the margin. A row whose schedule does not compile or never fires again gets
    /// that instant itself (never later than a tick).
    pub fn bound(&mut self, row: &ScheduleRow) -> DateTime<Utc> {
        let key = (row.schedule.clone(), row.zone.clone());
        if let Some(at) = self.cache.get(&key) {
            return *at;
        }
        let at = row
            .to_schedule()
            .ok()
            .and_then(|schedule| schedule.compile().ok())
            .and_then(|compiled| compiled.next_after(self.from))
            .map_or(self.from, |tick| tick.at());
        self.cache.insert(key, at);
        at
    }
}

/// What a store without bounds answers
/// ([`Controls::due_schedules`](super::Controls::due_schedules)'s default): every
/// row of `rows` enabled, not removed and of one of `handlers`, with the epoch as
/// its bound (always due), by name, the `limit` after `after`.
pub fn every_row_due(
    mut rows: Vec<ScheduleRow>,
    handlers: &[String],
    after: Option<&DueCursor>,
    limit: u32,
) -> Vec<DueSchedule> {
    rows.retain(|row| row.enabled && !row.removed && handlers.contains(&row.handler));
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    rows.into_iter()
        .map(|row| DueSchedule {
            row,
            next_tick: DateTime::UNIX_EPOCH,
        })
        .filter(|due| after.is_none_or(|after| due.cursor() > *after))
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn a_bound_is_the_first_tick_after_the_clock_less_the_margin() {
        let mut bounds = TickBounds::new(at("2026-12-05T10:00:30Z"));
        let minute = ScheduleRow::new("a", "h", "every 1m");
        assert_eq!(bounds.bound(&minute), at("2026-12-05T10:00:00Z"));
        let daily = ScheduleRow::new("b", "h", "0 30 9 * * *");
        assert_eq!(bounds.bound(&daily), at("2026-12-06T09:30:00Z"));
        let mut zoned = ScheduleRow::new("c", "h", "0 0 11 * * *");
        zoned.zone = Some("Europe/Paris".to_owned());
        assert_eq!(bounds.bound(&zoned), at("2026-12-05T10:00:00Z"));
    }

    #[test]
    fn a_row_that_does_not_compile_is_bound_by_the_clock() {
        let mut bounds = TickBounds::new(at("2026-12-05T10:00:30Z"));
        let bad = ScheduleRow::new("a", "h", "not cron");
        assert_eq!(bounds.bound(&bad), at("2026-12-05T09:59:30Z"));
    }

    #[test]
    fn without_bounds_every_row_of_the_handlers_is_due_by_name() {
        let mut off = ScheduleRow::new("off", "h", "every 1m");
        off.enabled = false;
        let rows = vec![
            ScheduleRow::new("c", "h", "every 1m"),
            ScheduleRow::new("a", "h", "every 1m"),
            ScheduleRow::new("b", "other", "every 1m"),
            off,
        ];
        let names = |due: Vec<DueSchedule>| -> Vec<String> {
            due.into_iter().map(|d| d.row.name).collect()
        };
        let handlers = ["h".to_owned()];
        assert_eq!(
            names(every_row_due(rows.clone(), &handlers, None, 10)),
            ["a", "c"]
        );
        let first = every_row_due(rows.clone(), &handlers, None, 1);
        assert_eq!(first.len(), 1);
        let rest = every_row_due(rows, &handlers, Some(&first[0].cursor()), 10);
        assert_eq!(names(rest), ["c"]);
    }
}
