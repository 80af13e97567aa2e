//! The reference model: what happened in a simulated run (on the store's clock), and
//! the checks of the promise against it.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

mod extras;

/// A tick of a job as the promise counts it: the job, its node for a node-scoped
/// job, and the tick's instant (a trigger's run: the instant it was requested).
pub(crate) type Key = (String, DateTime<Utc>);

/// One attempt of a run, as the job saw it.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    pub(crate) lease: String,
    pub(crate) token: i64,
    pub(crate) started: DateTime<Utc>,
    pub(crate) ended: Option<DateTime<Utc>>,
}

/// A commit of a tick: the instance, the instant, whether under a tick's own
/// lease, and the lease.
pub(crate) type Commit = (usize, DateTime<Utc>, bool, String);

/// A span of an operator's pause.
#[derive(Debug, Clone)]
pub(crate) struct PauseSpan {
    pub(crate) job: String,
    pub(crate) node: Option<String>,
    pub(crate) from: DateTime<Utc>,
    pub(crate) to: Option<DateTime<Utc>>,
    pub(crate) catch_up: bool,
}

/// An instance's span of life: the instance, its node, from, and until (open while
/// it is up).
pub(crate) type Up = (usize, String, DateTime<Utc>, Option<DateTime<Utc>>);

/// What a job of the simulation is, as the checks need it.
#[derive(Debug, Clone)]
pub(crate) struct JobModel {
    pub(crate) name: String,
    pub(crate) node_scoped: bool,
    pub(crate) every: Duration,
    /// A dynamic schedule's version: from its put to its next change or removal
    /// (`None`: a job registered in code, always there).
    pub(crate) active: Option<(DateTime<Utc>, Option<DateTime<Utc>>)>,
}

/// An operator's backfill: the tick's key job (`job` or `job:node`), its range, and
/// when it was asked for.
#[derive(Debug, Clone)]
pub(crate) struct Backfill {
    pub(crate) job: String,
    pub(crate) from: DateTime<Utc>,
    pub(crate) to: DateTime<Utc>,
    pub(crate) asked: DateTime<Utc>,
}

/// The record of one simulated run, and the violations found in it.
#[derive(Debug, Default)]
pub(crate) struct World {
    pub(crate) ttl: Duration,
    pub(crate) trace: Vec<String>,
    pub(crate) violations: Vec<String>,
    /// Attempts by tick.
    pub(crate) attempts: BTreeMap<Key, Vec<Attempt>>,
    /// Committed runs (the work done under a lease still held): by tick, the
    /// instance, the instant, and whether under a tick's own lease (`job\@tick`: a
    /// backfill's or a resume's catch-up).
    pub(crate) commits: BTreeMap<Key, Vec<Commit>>,
    /// Dynamic schedules put (changed), by name and instant.
    pub(crate) puts: Vec<(String, DateTime<Utc>)>,
    /// Operators' backfills, as asked for.
    pub(crate) backfills: Vec<Backfill>,
    /// Dynamic schedules removed: the name, when, and when put again.
    pub(crate) removals: Vec<(String, DateTime<Utc>, Option<DateTime<Utc>>)>,
    /// How long after a control an instance surely heard of it (its poll, and a
    /// margin), if it polls at all.
    pub(crate) hears_within: Option<Duration>,
    /// When each lease holder was granted (store clock).
    pub(crate) grants: HashMap<(String, String), DateTime<Utc>>,
    /// The last token granted per lease.
    pub(crate) tokens: HashMap<String, (i64, String)>,
    /// Spans during which an instance was faulty (stalled, failing, slow, losing
    /// answers, dead); `to` open while it lasts.
    pub(crate) faults: Vec<(usize, DateTime<Utc>, Option<DateTime<Utc>>)>,
    /// Instants at which anything happened that can delay a tick for a while (a
    /// fault began or ended, an instance started or stopped, an operator acted).
    pub(crate) events: Vec<DateTime<Utc>>,
    pub(crate) pauses: Vec<PauseSpan>,
    /// Which instances were up, as spans.
    pub(crate) up: Vec<Up>,
    /// The instants of trigger requests, by job.
    pub(crate) triggers: Vec<(String, DateTime<Utc>)>,
    /// Takes sent, per instance: (instant, names asked).
    pub(crate) takes: Vec<(usize, DateTime<Utc>, usize)>,
    pub(crate) jobs: Vec<JobModel>,
    /// The ticks (incarnation of an instance, lease, tick) whose take was refused
    /// as paused at or after their instant.
    pub(crate) refused_paused: std::collections::HashSet<(usize, String, DateTime<Utc>)>,
    /// Triggered runs' claims: by lease and holder, the trigger's instant.
    pub(crate) claims: HashMap<(String, String), DateTime<Utc>>,
    /// Print the trace as it is written (`SIM_LIVE`).
    pub(crate) live: bool,
    /// The trace line of the first violation.
    pub(crate) first_violation: Option<usize>,
}

impl World {
    pub(crate) fn note(&mut self, at: DateTime<Utc>, what: impl AsRef<str>) {
        let line = format!("{} {}", at.format("%M:%S%.3f"), what.as_ref());
        if self.live {
            eprintln!("{line}");
        }
        self.trace.push(line);
    }

    fn violation(&mut self, at: DateTime<Utc>, what: String) {
        self.note(at, format!("VIOLATION {what}"));
        self.first_violation.get_or_insert(self.trace.len());
        self.violations.push(what);
    }

    /// An instance was granted `lease` as `holder` with `token` at `at`.
    pub(crate) fn granted(
        &mut self,
        inst: usize,
        lease: &str,
        holder: &str,
        token: i64,
        tick: DateTime<Utc>,
        at: DateTime<Utc>,
    ) {
        self.note(
            at,
            format!("i{inst} granted {lease} tick {} token {token}", short(tick)),
        );
        // A take retried as the same holder is answered with the acquisition it
        // already made: the same token.
        let last = self
            .tokens
            .insert(lease.to_owned(), (token, holder.to_owned()));
        if let Some((last, by)) = last
            && (last > token || (last == token && by != holder))
        {
            self.violation(
                at,
                format!("token of {lease} went from {last} to {token}: tokens must grow"),
            );
        }
        self.grants
            .insert((lease.to_owned(), holder.to_owned()), at);
    }

    /// Whether `job` was paused for `node` at `at`.
    fn paused_at(&self, job: &str, node: &str, at: DateTime<Utc>) -> Option<&PauseSpan> {
        self.pauses.iter().find(|p| {
            p.job == job
                && p.node.as_deref().is_none_or(|n| n == node)
                && p.from <= at
                && p.to.is_none_or(|to| at < to)
        })
    }

    /// An attempt of `key` began.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn began(
        &mut self,
        key: &Key,
        (inst, incarnation): (usize, usize),
        node: &str,
        lease: &str,
        holder: &str,
        token: i64,
        attempt: u32,
        now: DateTime<Utc>,
    ) {
        let (job, tick) = key;
        self.note(
            now,
            format!(
                "i{inst} begins {job} tick {} attempt {attempt} token {token}",
                short(*tick)
            ),
        );
        if now < *tick {
            self.violation(
                now,
                format!("{job} tick {} began before its instant", short(*tick)),
            );
        }
        let granted = self
            .grants
            .get(&(lease.to_owned(), holder.to_owned()))
            .copied();
        // An operator's backfill runs regardless of pauses.
        let trigger = self.is_trigger(key)
            || granted.is_some_and(|g| lease.contains('@') && self.backfilled(job, *tick, g));
        let job_name = job.split(':').next().unwrap_or(job).to_owned();
        self.check_removed(&job_name, inst, attempt, now);
        if let Some(g) = granted
            && !trigger
            && let Some(p) = self.paused_at(&job_name, node, g)
        {
            let from = p.from;
            self.violation(
                now,
                format!(
                    "{job} tick {} was granted at {} while paused since {}",
                    short(*tick),
                    short(g),
                    short(from)
                ),
            );
        }
        // A resume without catch-up drops the ticks paused over: an instance whose
        // take of a tick was refused as paused at or after its instant never runs
        // it. (A pause is a condition of the take: a tick whose take first reaches
        // the store after the resume runs, on another instance or on a new start
        // of this one.)
        if let Some(g) = granted
            && !trigger
            && self
                .refused_paused
                .contains(&(incarnation, lease.to_owned(), *tick))
        {
            let dropped = self.pauses.iter().find(|p| {
                p.job == job_name
                    && !p.catch_up
                    && p.node.as_deref().is_none_or(|n| n == node)
                    && p.from <= *tick
                    && p.to.is_some_and(|to| *tick < to && to <= g)
            });
            if let Some(p) = dropped {
                let (from, to) = (p.from, p.to);
                self.violation(
                    now,
                    format!(
                        "{job} tick {} ran after a resume without catch-up (paused {} to {:?})",
                        short(*tick),
                        short(from),
                        to.map(short)
                    ),
                );
            }
        }
        self.attempts.entry(key.clone()).or_default().push(Attempt {
            lease: lease.to_owned(),
            token,
            started: now,
            ended: None,
        });
    }

    pub(crate) fn ended(&mut self, key: &Key, token: i64, lease: &str, now: DateTime<Utc>) {
        if let Some(a) = self.attempts.get_mut(key).and_then(|v| {
            v.iter_mut()
                .rev()
                .find(|a| a.token == token && a.lease == lease && a.ended.is_none())
        }) {
            a.ended = Some(now);
        }
    }

    fn is_trigger(&self, key: &Key) -> bool {
        let job = key.0.split(':').next().unwrap_or(&key.0);
        self.triggers.iter().any(|(j, at)| j == job && *at == key.1)
    }

    /// A run committed its work under a lease it still held.
    pub(crate) fn committed(&mut self, key: &Key, lease: &str, inst: usize, now: DateTime<Utc>) {
        let (job, tick) = key;
        self.note(now, format!("i{inst} commits {job} tick {}", short(*tick)));
        let own = lease.contains('@');
        let earlier = self.commits.entry(key.clone()).or_default();
        earlier.push((inst, now, own, lease.to_owned()));
        let earlier: Vec<_> = earlier[..earlier.len() - 1].to_vec();
        for (first, at, first_own, first_lease) in earlier {
            // A backfill runs a tick the live schedule ran once more.
            if own != first_own && self.backfilled(job, *tick, now) {
                continue;
            }
            // The documented limit: a change of a dynamic schedule's lease slots, or
            // of its catch-up to or from `all`, moves its ticks (or its caught-up
            // ones) to other leases; an instance that has not read the change yet
            // runs them under the old ones.
            // (A catch-up's lease against a live one only between two instances:
            // one instance reads the change and the resume in one version.)
            if first_lease != lease
                && (first != inst || (!own && !first_own))
                && self.relaid(job, *tick, inst, now)
            {
                continue;
            }
            // The documented window: the first holder could not hand the tick back
            // completed (it was cut off from the store, or died) before its lease
            // expired, and another instance took the tick over.
            let until = at + delta(self.ttl) + TimeDelta::seconds(1);
            if !self.faulty_within(first, at, until) {
                let what = if self.is_trigger(key) {
                    "trigger"
                } else {
                    "tick"
                };
                self.violation(
                    now,
                    format!(
                        "{job} {what} {} committed twice: by i{first} at {} and i{inst} at {} \
                         (i{first} was not cut off in between)",
                        short(*tick),
                        short(at),
                        short(now)
                    ),
                );
            }
        }
    }

    fn faulty_within(&self, inst: usize, from: DateTime<Utc>, to: DateTime<Utc>) -> bool {
        self.faults
            .iter()
            .any(|&(i, a, b)| i == inst && a <= to && b.is_none_or(|b| b >= from))
    }

    /// The liveness check, at the end of a run that lasted until `end`: every tick of
    /// a job that fell in a quiet stretch (no fault, no start or stop, no operator's
    /// act, nothing paused, an instance up to run it, no run of the job under way)
    /// ran.
    pub(crate) fn check_liveness(&mut self, begin: DateTime<Utc>, end: DateTime<Utc>) -> u64 {
        let ttl = delta(self.ttl);
        let mut checked = 0;
        let mut missing = Vec::new();
        for job in &self.jobs {
            let every = delta(job.every);
            let nodes: Vec<String> = if job.node_scoped {
                let mut nodes: Vec<String> = self.up.iter().map(|u| u.1.clone()).collect();
                nodes.sort();
                nodes.dedup();
                nodes
            } else {
                vec![String::new()]
            };
            let step = every.num_milliseconds().max(1);
            if job.active.is_some() && self.hears_within.is_none() {
                continue;
            }
            let first = begin.timestamp_millis().div_euclid(step) * step + step;
            let mut t = first;
            while let Some(tick) = DateTime::<Utc>::from_timestamp_millis(t) {
                if tick + every + TimeDelta::seconds(1) >= end {
                    break;
                }
                t += step;
                if job
                    .active
                    .is_some_and(|(a, b)| tick < a || b.is_some_and(|b| tick + every >= b))
                {
                    continue;
                }
                let from = tick - ttl - TimeDelta::seconds(2);
                let to = tick + every + TimeDelta::seconds(1);
                if self.events.iter().any(|&e| from <= e && e <= to)
                    || self
                        .faults
                        .iter()
                        .any(|&(_, a, b)| a <= to && b.is_none_or(|b| b >= from))
                    || self.pauses.iter().any(|p| {
                        p.job == job.name && p.from <= to && p.to.is_none_or(|b| b >= from)
                    })
                {
                    continue;
                }
                for node in &nodes {
                    let key_job = if job.node_scoped {
                        format!("{}:{node}", job.name)
                    } else {
                        job.name.clone()
                    };
                    let alive = self.up.iter().any(|(_, n, a, b)| {
                        (!job.node_scoped || n == node) && *a <= from && b.is_none_or(|b| b >= to)
                    });
                    let busy = self.attempts.iter().any(|((j, _), v)| {
                        *j == key_job
                            && v.iter()
                                .any(|a| a.started < tick && a.ended.is_none_or(|e| e >= tick))
                    });
                    if !alive || busy {
                        continue;
                    }
                    checked += 1;
                    if !self.attempts.contains_key(&(key_job.clone(), tick)) {
                        missing.push((key_job, tick));
                    }
                }
            }
        }
        for (job, tick) in missing {
            self.violation(
                tick,
                format!(
                    "{job} tick {} never ran, though the cluster was healthy around it",
                    short(tick)
                ),
            );
        }
        checked
    }

    /// The trace: the `lines` lines up to the first violation, or its last ones.
    pub(crate) fn tail(&self, lines: usize) -> String {
        let mut out = String::new();
        let end = self.first_violation.unwrap_or(self.trace.len());
        let skip = end.saturating_sub(lines);
        for line in &self.trace[skip..end] {
            let _ = writeln!(out, "  {line}");
        }
        out
    }
}

/// The shared record, locked (a panicking job cannot leave it half-written).
pub(crate) fn lock(world: &std::sync::Mutex<World>) -> std::sync::MutexGuard<'_, World> {
    world.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

/// An instant as the trace shows it: minutes, seconds and milliseconds.
pub(crate) fn short(at: DateTime<Utc>) -> String {
    at.format("%M:%S%.3f").to_string()
}
