//! The memory store's bounds of dynamic schedules ([`crate::control::due`]): kept
//! beside the rows, by name, written by a put and moved by an advance.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};

use super::Tables;
use crate::control::{Advance, DueCursor, DueSchedule, ScheduleRow, TickBounds};

impl Tables {
    /// Stores `row`'s bound as a put at `now` writes it.
    pub(super) fn bound_put(&mut self, row: &ScheduleRow, bounds: &mut TickBounds) {
        self.bounds.insert(row.name.clone(), bounds.bound(row));
    }

    /// The rows due by `until`, as [`crate::Controls::due_schedules`] reads them.
    pub(super) fn due(
        &self,
        handlers: &[String],
        until: DateTime<Utc>,
        after: Option<&DueCursor>,
        limit: u32,
    ) -> Vec<DueSchedule> {
        let mut due: Vec<DueSchedule> = self
            .schedules
            .values()
            .filter(|row| row.enabled && !row.removed && handlers.contains(&row.handler))
            .map(|row| DueSchedule {
                row: row.clone(),
                next_tick: self
                    .bounds
                    .get(&row.name)
                    .copied()
                    .unwrap_or(DateTime::UNIX_EPOCH),
            })
            .filter(|due| due.next_tick <= until)
            .filter(|due| after.is_none_or(|after| due.cursor() > *after))
            .collect();
        due.sort_by_key(DueSchedule::cursor);
        due.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        due
    }

    /// The rows among `names` changed after `since`, no later than `upto`, by name
    /// ([`crate::Controls::changed_schedules`]).
    pub(super) fn changed_among(
        &self,
        since: i64,
        upto: i64,
        names: &[String],
    ) -> Vec<ScheduleRow> {
        let mut rows: Vec<ScheduleRow> = names
            .iter()
            .filter_map(|name| self.schedules.get(name))
            .filter(|s| s.version > since && s.version <= upto)
            .cloned()
            .collect();
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        rows.dedup_by(|a, b| a.name == b.name);
        rows
    }

    /// Moves the bounds `advances` allow ([`crate::Controls::advance_schedules`]);
    /// how many rows moved (a row advanced twice in one call counts once).
    pub(super) fn advance(&mut self, advances: &[Advance]) -> u64 {
        let mut moved = BTreeSet::new();
        for advance in advances {
            let current = self.schedules.get(&advance.name).map(|row| row.version);
            if current != Some(advance.version) {
                continue;
            }
            let bound = self
                .bounds
                .entry(advance.name.clone())
                .or_insert(DateTime::UNIX_EPOCH);
            if *bound < advance.next_tick {
                *bound = advance.next_tick;
                moved.insert(advance.name.as_str());
            }
        }
        u64::try_from(moved.len()).unwrap_or(u64::MAX)
    }
}
