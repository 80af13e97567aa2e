//! The checks run on the record after a scenario; the definitions are in the crate
//! documentation.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, TimeDelta, Utc};

use crate::record::{Record, Run};

/// A span of the database clock in which a fault may cost ticks: `[from, to]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// What happened.
    pub fault: String,
    /// Its start: the fault, less [`SLACK`](crate::SLACK).
    pub from: DateTime<Utc>,
    /// Its end: recovery, plus the ttl and a period.
    pub to: DateTime<Utc>,
}

impl Window {
    /// Whether `at` falls in it.
    pub fn contains(&self, at: DateTime<Utc>) -> bool {
        self.from <= at && at <= self.to
    }
}

/// The ticks one series must run once each: a cluster job (all instances together),
/// or a node job on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    /// The job.
    pub job: String,
    /// The node, for a node job.
    pub node: Option<String>,
    /// Ticks after this instant are expected…
    pub from: DateTime<Utc>,
    /// …up to and including this one.
    pub to: DateTime<Utc>,
}

impl Series {
    fn matches(&self, run: &Run) -> bool {
        run.job == self.job && self.node.as_ref().is_none_or(|node| *node == run.node)
    }

    fn name(&self) -> String {
        match &self.node {
            Some(node) => format!("{}:{node}", self.job),
            None => self.job.clone(),
        }
    }
}

/// What a scenario expects of the record.
#[derive(Debug, Clone)]
pub struct Expectations {
    /// Every job's period (ticks are aligned to the epoch).
    pub period: TimeDelta,
    /// The series to check.
    pub series: Vec<Series>,
    /// The fault windows.
    pub windows: Vec<Window>,
    /// The longest allowed gap between the starts of consecutive runs of a series.
    pub gap_bound: TimeDelta,
    /// When each instance that was killed or stopped ended: a run of it without a
    /// recorded end counts as running until then.
    pub ended: BTreeMap<String, DateTime<Utc>>,
    /// When the record was taken: a run of a live instance without a recorded end
    /// counts as running until then.
    pub end: DateTime<Utc>,
    /// Instances that must show they recovered, each with the instant after which
    /// they must have made progress (the end of the last fault window).
    pub recover: Vec<(String, DateTime<Utc>)>,
    /// Whether the lease database may lose writes it acknowledged during a fault (a
    /// failover to an asynchronous replica): then a tick of a window run twice
    /// concurrently, a run recorded as paid whose write is gone while the run
    /// overlapped a window, and a write committed under a smaller token than a run
    /// of a window had, are counted and noted instead of violations. The record
    /// must then be kept apart from the lease database.
    pub lossy: bool,
}

/// The numbers a check found, and every violation of the invariants.
#[derive(Debug, Clone, Default)]
pub struct Findings {
    /// Ticks expected in the checked range (one run each).
    pub expected: usize,
    /// Runs recorded for those ticks.
    pub recorded: usize,
    /// Surplus runs of those ticks (a tick run twice counts one).
    pub duplicates: usize,
    /// How many of the duplicates fall in a fault window.
    pub duplicates_in_window: usize,
    /// Ticks that did not run.
    pub misses: usize,
    /// How many of the misses fall in a fault window.
    pub misses_in_window: usize,
    /// The longest time between the starts of consecutive runs of one series.
    pub longest_gap: TimeDelta,
    /// The series and the tick after which it happened.
    pub longest_gap_at: String,
    /// Every violation found, described.
    pub violations: Vec<String>,
    /// Runs that started before their tick (less [`EARLY`]) in a fault window.
    pub early_in_window: usize,
    /// What is allowed but worth knowing: each tick run twice, or started early, in
    /// a fault window.
    pub notes: Vec<String>,
    /// Every tick run more than once: the series, the tick, and its runs.
    pub duplicated: Vec<(String, DateTime<Utc>, Vec<Run>)>,
    /// Ticks of a window run twice at the same time, allowed when the lease database
    /// may lose writes ([`Expectations::lossy`]).
    pub concurrent_in_window: usize,
    /// Runs recorded as paid whose fenced write the lease database no longer has,
    /// allowed in a window when it may lose writes ([`Expectations::lossy`]).
    pub lost_writes: usize,
    /// Fenced writes committed under a token smaller than one a run of their job
    /// started with before them, in a window: the lease database lost the take of
    /// the larger token and handed the smaller ones out again. Allowed when it may
    /// lose writes ([`Expectations::lossy`]); a resource that checks tokens itself
    /// would refuse the new holder's writes until its tokens caught up.
    pub tokens_backwards: usize,
}

/// How many violations of one kind are spelled out.
const SHOWN: usize = 8;

/// How long before its tick a run may start: the runtime schedules ticks on its
/// measured offset to the database's clock, whose error is half a round trip.
pub const EARLY: TimeDelta = TimeDelta::milliseconds(250);

/// Checks `record` against `expect`: once per tick outside the fault windows, no
/// concurrent runs of one tick, no duplicated fenced write, the gap bound, and the
/// recovery of every instance listed.
pub fn check(record: &Record, expect: &Expectations) -> Findings {
    let mut findings = Findings::default();
    let mut violations = Violations::default();
    for series in &expect.series {
        check_series(record, expect, series, &mut findings, &mut violations);
    }
    check_overlaps(record, expect, &mut findings, &mut violations);
    check_early(record, expect, &mut findings, &mut violations);
    check_payouts(record, expect, &mut findings, &mut violations);
    check_recovery(record, expect, &mut violations);
    findings.violations = violations.into_list();
    findings
}

/// Every violation found, grouped by kind, each kind listed up to [`SHOWN`] times.
#[derive(Debug, Default)]
struct Violations(BTreeMap<&'static str, Vec<String>>);

impl Violations {
    fn add(&mut self, kind: &'static str, detail: String) {
        self.0.entry(kind).or_default().push(detail);
    }

    fn into_list(self) -> Vec<String> {
        let mut list = Vec::new();
        for (kind, details) in self.0 {
            let more = details.len().saturating_sub(SHOWN);
            for detail in details.into_iter().take(SHOWN) {
                list.push(format!("{kind}: {detail}"));
            }
            if more > 0 {
                list.push(format!("{kind}: … and {more} more"));
            }
        }
        list
    }
}

fn check_series(
    record: &Record,
    expect: &Expectations,
    series: &Series,
    findings: &mut Findings,
    violations: &mut Violations,
) {
    let in_window = |at| expect.windows.iter().any(|w: &Window| w.contains(at));
    let mut by_tick: BTreeMap<DateTime<Utc>, Vec<&Run>> = BTreeMap::new();
    for run in record.runs.iter().filter(|r| series.matches(r)) {
        if series.from < run.tick && run.tick <= series.to {
            by_tick.entry(run.tick).or_default().push(run);
        }
    }
    for tick in ticks(expect.period, series.from, series.to) {
        findings.expected += 1;
        let runs = by_tick.get(&tick).map_or(&[][..], Vec::as_slice);
        findings.recorded += runs.len();
        if runs.len() > 1 {
            let runs = runs.iter().map(|r| (*r).clone()).collect();
            findings.duplicated.push((series.name(), tick, runs));
        }
        match runs.len() {
            0 if in_window(tick) => {
                findings.misses += 1;
                findings.misses_in_window += 1;
            }
            0 => {
                findings.misses += 1;
                violations.add(
                    "missed outside a fault window",
                    format!("{} never ran tick {}", series.name(), time(tick)),
                );
            }
            1 => {}
            n if in_window(tick) => {
                findings.duplicates += n - 1;
                findings.duplicates_in_window += n - 1;
                findings.notes.push(format!(
                    "{} ran tick {} {n} times in a fault window: {}",
                    series.name(),
                    time(tick),
                    describe(runs)
                ));
            }
            n => {
                findings.duplicates += n - 1;
                violations.add(
                    "ran twice outside a fault window",
                    format!(
                        "{} ran tick {} {n} times: {}",
                        series.name(),
                        time(tick),
                        describe(runs)
                    ),
                );
            }
        }
    }
    // Runs off the tick grid (none expected: every job ticks every period).
    let off_grid = by_tick
        .keys()
        .filter(|tick| tick.timestamp_millis() % expect.period.num_milliseconds().max(1) != 0)
        .count();
    if off_grid > 0 {
        violations.add(
            "ran a tick that is not on the schedule",
            format!("{}: {off_grid} ticks", series.name()),
        );
    }
    let mut starts: Vec<(DateTime<Utc>, DateTime<Utc>)> = by_tick
        .values()
        .flatten()
        .map(|run| (run.started, run.tick))
        .collect();
    starts.sort();
    for pair in starts.windows(2) {
        let gap = pair[1].0 - pair[0].0;
        if gap > findings.longest_gap {
            findings.longest_gap = gap;
            findings.longest_gap_at = format!("{} after tick {}", series.name(), time(pair[0].1));
        }
        if gap > expect.gap_bound {
            violations.add(
                "gap between runs longer than the bound",
                format!(
                    "{} ran nothing for {} ms after tick {} (bound {} ms)",
                    series.name(),
                    gap.num_milliseconds(),
                    time(pair[0].1),
                    expect.gap_bound.num_milliseconds()
                ),
            );
        }
    }
}

/// No two runs of one tick of one series overlap in time, anywhere in the record
/// (in a window of a lossy lease database: counted and noted).
fn check_overlaps(
    record: &Record,
    expect: &Expectations,
    findings: &mut Findings,
    violations: &mut Violations,
) {
    for series in &expect.series {
        let mut by_tick: BTreeMap<DateTime<Utc>, Vec<&Run>> = BTreeMap::new();
        for run in record.runs.iter().filter(|r| series.matches(r)) {
            by_tick.entry(run.tick).or_default().push(run);
        }
        for (tick, runs) in by_tick.iter().filter(|(_, runs)| runs.len() > 1) {
            for (i, a) in runs.iter().enumerate() {
                for b in &runs[i + 1..] {
                    let (a_end, b_end) = (run_end(a, expect), run_end(b, expect));
                    if a.started < b_end && b.started < a_end {
                        let in_window = expect.windows.iter().any(|w| w.contains(*tick));
                        if expect.lossy && in_window {
                            findings.concurrent_in_window += 1;
                            findings.notes.push(format!(
                                "{} ran tick {} twice concurrently in a fault window: {}",
                                series.name(),
                                time(*tick),
                                describe(&[a, b])
                            ));
                            continue;
                        }
                        violations.add(
                            "ran one tick twice concurrently",
                            format!(
                                "{} tick {}: {}",
                                series.name(),
                                time(*tick),
                                describe(&[a, b])
                            ),
                        );
                    }
                }
            }
        }
    }
}

/// No run started before its tick (less [`EARLY`]) outside the fault windows: the
/// database's clock decides when a tick is due. Inside a window, early starts are
/// counted and noted.
fn check_early(
    record: &Record,
    expect: &Expectations,
    findings: &mut Findings,
    violations: &mut Violations,
) {
    for run in record
        .runs
        .iter()
        .filter(|r| expect.series.iter().any(|s| s.matches(r)))
    {
        if run.started >= run.tick - EARLY {
            continue;
        }
        let what = format!(
            "{} tick {} started {} ms early: {}",
            run.job,
            time(run.tick),
            (run.tick - run.started).num_milliseconds(),
            describe(&[run])
        );
        if expect.windows.iter().any(|w| w.contains(run.started)) {
            findings.early_in_window += 1;
            findings.notes.push(format!("in a fault window, {what}"));
        } else {
            violations.add("ran a tick before it was due", what);
        }
    }
}

/// When a run ended: its recorded end, else when its instance ended, else the end
/// of the record.
fn run_end(run: &Run, expect: &Expectations) -> DateTime<Utc> {
    run.finished
        .or_else(|| expect.ended.get(&run.instance).copied())
        .unwrap_or(expect.end)
}

/// No tick's fenced write committed twice, none committed after a run with a newer
/// token of its job had started, every committed write belongs to a run that
/// recorded it as paid, and no run whose write was refused has one; every run
/// recorded as paid has its write (in a window of a lossy lease database: a missing
/// one is counted and noted).
fn check_payouts(
    record: &Record,
    expect: &Expectations,
    findings: &mut Findings,
    violations: &mut Violations,
) {
    let mut by_tick: HashMap<(&str, DateTime<Utc>), Vec<i64>> = HashMap::new();
    for payout in &record.payouts {
        by_tick
            .entry((&payout.job, payout.tick))
            .or_default()
            .push(payout.token);
    }
    let mut duplicated: Vec<_> = by_tick.iter().filter(|(_, t)| t.len() > 1).collect();
    duplicated.sort();
    for ((job, tick), tokens) in duplicated {
        violations.add(
            "fenced write duplicated",
            format!(
                "{job} tick {} paid {} times, tokens {tokens:?}",
                time(*tick),
                tokens.len()
            ),
        );
    }
    // A newer token's run starts after its take, which waits for the row lock of any
    // fenced transaction still checking the old token: so it starts after every
    // write that old token committed.
    for payout in &record.payouts {
        let newer = record
            .runs
            .iter()
            .find(|r| r.job == payout.job && r.token > payout.token && r.started < payout.written);
        if let Some(newer) = newer {
            let in_window = |at| expect.windows.iter().any(|w: &Window| w.contains(at));
            if expect.lossy && in_window(newer.started) {
                // The newer token's take was lost with the old primary: the new
                // one handed out smaller tokens again.
                findings.tokens_backwards += 1;
                findings.notes.push(format!(
                    "tokens went backwards in a fault window: {} tick {} token {} written {} \
                     after {}",
                    payout.job,
                    time(payout.tick),
                    payout.token,
                    time(payout.written),
                    describe(&[newer])
                ));
                continue;
            }
            violations.add(
                "fenced write committed after a takeover",
                format!(
                    "{} tick {} token {} written {} after {}",
                    payout.job,
                    time(payout.tick),
                    payout.token,
                    time(payout.written),
                    describe(&[newer])
                ),
            );
        }
    }
    // By instance too: a failover that lost a take can hand its token out again.
    let runs: HashMap<(&str, DateTime<Utc>, i64, &str), &Run> = record
        .runs
        .iter()
        .map(|r| ((r.job.as_str(), r.tick, r.token, r.instance.as_str()), r))
        .collect();
    for payout in &record.payouts {
        let key = (
            payout.job.as_str(),
            payout.tick,
            payout.token,
            payout.instance.as_str(),
        );
        match runs.get(&key) {
            Some(run) if run.refused() => violations.add(
                "refused fenced write committed",
                format!(
                    "{} tick {} token {}",
                    payout.job,
                    time(payout.tick),
                    payout.token
                ),
            ),
            Some(_) => {}
            None => violations.add(
                "fenced write without a run",
                format!(
                    "{} tick {} token {}",
                    payout.job,
                    time(payout.tick),
                    payout.token
                ),
            ),
        }
    }
    let paid: std::collections::HashSet<(&str, DateTime<Utc>, i64, &str)> = record
        .payouts
        .iter()
        .map(|p| (p.job.as_str(), p.tick, p.token, p.instance.as_str()))
        .collect();
    for run in record.runs.iter().filter(|r| r.paid()) {
        let key = (run.job.as_str(), run.tick, run.token, run.instance.as_str());
        if !paid.contains(&key) {
            let end = run_end(run, expect);
            let overlaps = expect
                .windows
                .iter()
                .any(|w| run.started <= w.to && w.from <= end);
            if expect.lossy && overlaps {
                findings.lost_writes += 1;
                findings.notes.push(format!(
                    "a write acknowledged in a fault window is gone: {}",
                    describe(&[run])
                ));
                continue;
            }
            violations.add(
                "run recorded as paid without a committed write",
                describe(&[run]),
            );
        }
    }
}

/// Each listed instance's loop got answers from the store after its instant: two of
/// its heartbeats after it show the count of answered ticks growing, and one of them
/// found the instance healthy.
fn check_recovery(record: &Record, expect: &Expectations, violations: &mut Violations) {
    for (instance, after) in &expect.recover {
        let beats: Vec<_> = record
            .heartbeats
            .iter()
            .filter(|h| h.instance == *instance && h.at > *after)
            .collect();
        let progressed = match (beats.first(), beats.last()) {
            (Some(first), Some(last)) => last.answered > first.answered,
            _ => false,
        };
        if !progressed {
            violations.add(
                "did not recover",
                format!(
                    "{instance}: {} heartbeats after {}, answered ticks {:?}",
                    beats.len(),
                    time(*after),
                    beats.iter().map(|h| h.answered).collect::<Vec<_>>()
                ),
            );
        } else if !beats.iter().any(|h| h.healthy) {
            violations.add(
                "did not recover",
                format!("{instance}: no healthy heartbeat after {}", time(*after)),
            );
        }
    }
}

/// The ticks of a schedule every `period` (aligned to the epoch) in `(from, to]`.
pub fn ticks(period: TimeDelta, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let ms = period.num_milliseconds().max(1);
    let first = from.timestamp_millis().div_euclid(ms) + 1;
    let last = to.timestamp_millis().div_euclid(ms);
    (first..=last)
        .filter_map(|k| DateTime::from_timestamp_millis(k.checked_mul(ms)?))
        .collect()
}

/// `HH:MM:SS.mmm`, for messages.
pub fn time(at: DateTime<Utc>) -> String {
    at.format("%H:%M:%S%.3f").to_string()
}

fn describe(runs: &[&Run]) -> String {
    runs.iter()
        .map(|r| {
            format!(
                "[{} token {} {}..{} {}]",
                r.instance,
                r.token,
                time(r.started),
                r.finished.map_or_else(|| "?".to_owned(), time),
                r.outcome.as_deref().unwrap_or("unfinished")
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Heartbeat, Payout};

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_700_000_000_000 + ms).unwrap()
    }

    fn run(id: i64, tick: i64, instance: &str, started: i64, finished: Option<i64>) -> Run {
        Run {
            id,
            job: "alerts".to_owned(),
            tick: at(tick),
            node: "node-a".to_owned(),
            instance: instance.to_owned(),
            token: id,
            started: at(started),
            finished: finished.map(at),
            outcome: finished.map(|_| "ok".to_owned()),
        }
    }

    fn expect(windows: Vec<Window>) -> Expectations {
        Expectations {
            period: TimeDelta::seconds(1),
            series: vec![Series {
                job: "alerts".to_owned(),
                node: None,
                from: at(0),
                to: at(5000),
            }],
            windows,
            gap_bound: TimeDelta::milliseconds(1500),
            ended: BTreeMap::new(),
            end: at(6000),
            recover: vec![],
            lossy: false,
        }
    }

    fn every_tick() -> Vec<Run> {
        (1..=5)
            .map(|k| run(k, k * 1000, "a", k * 1000 + 5, Some(k * 1000 + 60)))
            .collect()
    }

    #[test]
    fn a_clean_record_passes() {
        let record = Record {
            runs: every_tick(),
            ..Record::default()
        };
        let findings = check(&record, &expect(vec![]));
        assert_eq!(findings.violations, Vec::<String>::new());
        assert_eq!((findings.expected, findings.recorded), (5, 5));
        assert_eq!(findings.longest_gap, TimeDelta::seconds(1));
    }

    #[test]
    fn a_miss_counts_only_outside_a_window() {
        let mut runs = every_tick();
        runs.remove(2); // tick 3000
        let record = Record {
            runs,
            ..Record::default()
        };
        let outside = check(&record, &expect(vec![]));
        assert_eq!(outside.misses, 1);
        assert!(
            outside.violations[0].starts_with("gap"),
            "{:?}",
            outside.violations
        );
        assert!(
            outside.violations[1].starts_with("missed"),
            "{:?}",
            outside.violations
        );
        let window = Window {
            fault: "test".to_owned(),
            from: at(2500),
            to: at(3500),
        };
        let inside = check(&record, &expect(vec![window]));
        assert_eq!(inside.misses_in_window, 1);
        assert!(inside.violations.iter().all(|v| v.starts_with("gap")));
    }

    #[test]
    fn a_tick_run_twice_concurrently_is_caught_even_in_a_window() {
        let mut runs = every_tick();
        // A killed instance's unfinished run, and the takeover while it still "ran".
        runs.push(run(10, 2000, "b", 2030, None));
        let window = Window {
            fault: "test".to_owned(),
            from: at(1500),
            to: at(4000),
        };
        let mut expectations = expect(vec![window]);
        expectations.ended.insert("b".to_owned(), at(2150));
        let findings = check(
            &Record {
                runs: runs.clone(),
                ..Record::default()
            },
            &expectations,
        );
        assert_eq!(findings.duplicates_in_window, 1);
        assert!(
            findings
                .violations
                .iter()
                .any(|v| v.starts_with("ran one tick twice concurrently")),
            "{:?}",
            findings.violations
        );
        // Once the killed run is known to have ended before the other started: fine.
        expectations.ended.insert("b".to_owned(), at(2000));
        runs.last_mut().unwrap().started = at(1990);
        let findings = check(
            &Record {
                runs,
                ..Record::default()
            },
            &expectations,
        );
        assert_eq!(findings.violations, Vec::<String>::new());
    }

    #[test]
    fn a_run_before_its_tick_is_caught_outside_a_window() {
        let mut runs = every_tick();
        runs[3].started = at(4000 - 300);
        let record = Record {
            runs,
            ..Record::default()
        };
        let findings = check(&record, &expect(vec![]));
        assert_eq!(findings.violations.len(), 1, "{:?}", findings.violations);
        assert!(findings.violations[0].starts_with("ran a tick before it was due"));
        let window = Window {
            fault: "test".to_owned(),
            from: at(3500),
            to: at(4500),
        };
        let findings = check(&record, &expect(vec![window]));
        assert_eq!(findings.violations, Vec::<String>::new());
        assert_eq!(findings.early_in_window, 1);
    }

    #[test]
    fn duplicated_and_refused_payouts_are_caught() {
        let mut runs = every_tick();
        runs[0].outcome = Some("ok+paid".to_owned());
        runs[1].outcome = Some("cancelled+refused".to_owned());
        runs[2].outcome = Some("ok+paid".to_owned());
        let payout = |tick: i64, token: i64| Payout {
            job: "alerts".to_owned(),
            tick: at(tick),
            token,
            instance: "a".to_owned(),
            written: at(tick + 50),
        };
        let record = Record {
            runs,
            payouts: vec![
                payout(1000, 1),
                payout(1000, 7),
                payout(2000, 2),
                // Written after the run with token 4 had started.
                Payout {
                    written: at(4100),
                    ..payout(3000, 3)
                },
            ],
            ..Record::default()
        };
        let findings = check(&record, &expect(vec![]));
        let kinds: Vec<_> = findings
            .violations
            .iter()
            .map(|v| v.split(':').next().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "fenced write committed after a takeover",
                "fenced write duplicated",
                "fenced write without a run",
                "refused fenced write committed"
            ]
        );
    }

    #[test]
    fn recovery_needs_progress_after_the_window() {
        let beat = |ms: i64, answered: i64| Heartbeat {
            instance: "a".to_owned(),
            at: at(ms),
            answered,
            healthy: true,
        };
        let mut expectations = expect(vec![]);
        expectations.recover = vec![("a".to_owned(), at(3000))];
        let stuck = Record {
            runs: every_tick(),
            heartbeats: vec![beat(2000, 4), beat(3500, 5), beat(4000, 5)],
            ..Record::default()
        };
        assert_eq!(check(&stuck, &expectations).violations.len(), 1);
        let recovered = Record {
            runs: every_tick(),
            heartbeats: vec![beat(2000, 4), beat(3500, 5), beat(4000, 6)],
            ..Record::default()
        };
        assert_eq!(
            check(&recovered, &expectations).violations,
            Vec::<String>::new()
        );
    }

    #[test]
    fn ticks_are_aligned_to_the_epoch() {
        let t = ticks(TimeDelta::seconds(1), at(-1), at(2000));
        assert_eq!(t, vec![at(0), at(1000), at(2000)]);
        assert!(ticks(TimeDelta::seconds(1), at(0), at(999)).is_empty());
    }
}
