//! The dynamic schedules spread over the live instances. Each cluster-scoped
//! schedule has one instance that asks for its ticks at their instant (its owner:
//! the schedule's name hashed over the node ids, sorted, of the live instances
//! that registered its handler); the others ask [`SPREAD_DEFER`] later (at most
//! half the tick's window). When the owner took and ran the tick, their take is
//! refused as any loser's is; when the owner is gone or late, one of them takes it
//! then. So every instance runs about its share, and a killed one's share is late
//! by the deferral until its row expires.
//!
//! The live instances are read at each heartbeat (the rows the beats keep,
//! [`InstanceRow::is_live`]); before the first read, or with one live instance,
//! nothing is deferred; instances that share a node id count as one and share its
//! part. Exactly once rests on the take alone, whoever asks first; jobs registered
//! in code are not spread.

use std::collections::HashMap;
use std::time::Duration;

use chrono::TimeDelta;
use tracing::info;

use crate::control::InstanceRow;
use crate::lease::Scope;
use crate::runtime::engine::Engine;

/// How long after its instant an instance asks for a tick another instance owns.
pub(in crate::runtime::engine) const SPREAD_DEFER: Duration = Duration::from_millis(500);

/// This instance's place among the live instances that registered each handler
/// (a schedule runs only where its handler is: owned by an instance without it,
/// its ticks would be asked for late everywhere).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(in crate::runtime::engine) struct Share {
    /// By handler: this instance's rank among those nodes, and their count.
    by_handler: HashMap<String, (usize, usize)>,
}

impl Share {
    /// `node`'s place, for each of its `handlers`, among the instances of `rows`
    /// live at `now` that registered that handler (itself counted live whatever
    /// its row says).
    pub(in crate::runtime::engine) fn of<'a>(
        node: &str,
        handlers: impl Iterator<Item = &'a str>,
        rows: &[InstanceRow],
        now: chrono::DateTime<chrono::Utc>,
    ) -> Self {
        let by_handler = handlers
            .map(|handler| {
                let mut nodes: Vec<&str> = rows
                    .iter()
                    .filter(|r| r.is_live(now) && r.handlers.iter().any(|h| h == handler))
                    .map(|r| r.node.as_str())
                    .collect();
                nodes.push(node);
                nodes.sort_unstable();
                nodes.dedup();
                let rank = nodes.iter().position(|n| *n == node).unwrap_or(0);
                (handler.to_owned(), (rank, nodes.len()))
            })
            .collect();
        Self { by_handler }
    }

    /// Whether another live instance owns the schedule `name` run by `handler`.
    pub(in crate::runtime::engine) fn defers(&self, name: &str, handler: &str) -> bool {
        self.by_handler
            .get(handler)
            .is_some_and(|&(rank, count)| count > 1 && owner(name, count) != rank)
    }
}

/// The rank of the instance that owns schedule `name` among `count`: the same on
/// every instance and every version (FNV-1a of the name, not a seeded hash).
fn owner(name: &str, count: usize) -> usize {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    usize::try_from(hash % u64::try_from(count.max(1)).unwrap_or(1)).unwrap_or(0)
}

impl Engine {
    /// The instances read at a heartbeat: when this instance's share changed, each
    /// dynamic schedule's ticks are deferred, or no longer, as it now says.
    pub(in crate::runtime::engine) fn on_instances(&mut self, rows: &[InstanceRow]) {
        let handlers = self.s.handlers.keys().map(String::as_str);
        let share = Share::of(&self.s.node, handlers, rows, self.db_now());
        let Some(ctl) = &mut self.ctl else {
            return;
        };
        if ctl.share == share {
            return;
        }
        info!(by_handler = ?share.by_handler,
            "the dynamic schedules are spread over the live instances anew (rank, instances)");
        ctl.share = share;
        for (i, handler) in ctl.dynamic_entries() {
            self.spread(i, &handler);
        }
    }

    /// Defers entry `i`'s ticks (a dynamic schedule run by `handler`), or not, as
    /// this instance's share says.
    pub(in crate::runtime::engine) fn spread(&mut self, i: usize, handler: &str) {
        let Some(ctl) = &self.ctl else {
            return;
        };
        let e = &self.s.entries[i];
        let defer = if e.scope == Scope::Cluster && ctl.share.defers(&e.name, handler) {
            TimeDelta::from_std(SPREAD_DEFER).unwrap_or(TimeDelta::zero())
        } else {
            TimeDelta::zero()
        };
        if self.jobs[i].defer() != defer {
            self.jobs[i].set_defer(defer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(node: &str, live: bool) -> InstanceRow {
        let now = chrono::DateTime::UNIX_EPOCH;
        InstanceRow {
            node: node.to_owned(),
            version: "1".to_owned(),
            started_at: now,
            seen_at: now,
            expires_at: now + TimeDelta::seconds(if live { 30 } else { -1 }),
            stopped: false,
            handlers: vec!["work".to_owned()],
            jobs: Vec::new(),
        }
    }

    #[test]
    fn every_schedule_has_one_owner_among_the_live_instances_that_run_it() {
        let now = chrono::DateTime::UNIX_EPOCH;
        let mut rows = vec![
            row("b", true),
            row("a", true),
            row("c", true),
            row("gone", false),
        ];
        // An instance without the handler owns none of its schedules.
        let mut other = row("aa", true);
        other.handlers = vec!["other".to_owned()];
        rows.push(other);
        let work = || ["work"].into_iter();
        let shares: Vec<Share> = ["a", "b", "c"]
            .iter()
            .map(|n| Share::of(n, work(), &rows, now))
            .collect();
        assert_eq!(shares[0].by_handler["work"], (0, 3), "{:?}", shares[0]);
        assert_eq!(
            shares[2].by_handler["work"],
            (2, 3),
            "the gone one is not counted"
        );
        let mut owned = [0usize; 3];
        for k in 0..3_000 {
            let name = format!("customer-{k}");
            let owners: Vec<usize> = (0..3)
                .filter(|&r| !shares[r].defers(&name, "work"))
                .collect();
            assert_eq!(owners.len(), 1, "{name}: {owners:?}");
            owned[owners[0]] += 1;
        }
        assert!(
            owned.iter().all(|&n| (800..1_200).contains(&n)),
            "{owned:?}"
        );
        // Alone (or before the first read), nothing is deferred; nor a handler this
        // instance does not know.
        let alone = Share::of("a", work(), &[], now);
        assert!((0..100).all(|k| !alone.defers(&format!("customer-{k}"), "work")));
        assert!(!shares[1].defers("customer-1", "unknown"));
        // The same owner on every version: a fixed hash, not a seeded one.
        assert_eq!(owner("customer-1", 3), owner("customer-1", 3));
        assert_eq!(owner("", 1), 0);
    }
}
