//! A scenario: a cluster of instances, the faults injected into it, and the final
//! check of the record.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::Scope;
use tokio::time::Instant;

use crate::app::JOBS;
use crate::check::{self, Expectations, Findings, Series, Window};
use crate::error::{Error, Result};
use crate::instance::{Instance, InstanceSpec, Signal};
use crate::record::{Inspector, Run};
use crate::report::Report;
use crate::{MID_RUN, SLACK};

/// How long the driver waits for a condition (an instance ready, a run under way, a
/// takeover) before giving up: generous, it only bounds a broken scenario.
const PATIENCE: Duration = Duration::from_secs(30);

/// How often the driver polls the record while waiting.
const POLL: Duration = Duration::from_millis(20);

/// Where a scenario runs and how its instances are configured.
#[derive(Debug, Clone)]
pub struct ScenarioConfig {
    /// The scenario's name, in the report and as its log directory.
    pub name: String,
    /// The `chaos-app` binary.
    pub bin: PathBuf,
    /// The URL the instances connect to by default.
    pub url: String,
    /// The URL the driver reads the record from: the server itself.
    pub direct_url: String,
    /// Where the instances record runs and heartbeats, and the driver reads them and
    /// the clock, when not in the lease database (`direct_url` then only serves the
    /// fenced writes): a failover of the lease database may lose what it
    /// acknowledged last, the record of what ran must not.
    pub record_url: Option<String>,
    /// Where the instances' logs go (emptied first).
    pub log_dir: PathBuf,
    /// A file each report row is appended to, if any.
    pub report: Option<PathBuf>,
    /// The lease ttl.
    pub ttl: Duration,
    /// Every job's period.
    pub period: Duration,
    /// The instances' graceful shutdown grace.
    pub grace: Duration,
}

impl ScenarioConfig {
    /// Prints `line` and appends it to the [`report`](Self::report) file, if set.
    ///
    /// # Errors
    /// The report file cannot be opened or written.
    pub fn report_line(&self, line: &str) -> std::io::Result<()> {
        use std::io::Write;
        println!("{line}");
        if let Some(path) = &self.report {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?;
            writeln!(file, "{line}")?;
        }
        Ok(())
    }

    /// Scenario `name` with instances of `bin` on `url`, the driver on `direct_url`,
    /// logs under `log_root/NAME`; ttl 2 s, period 1 s, grace 5 s.
    pub fn new(name: &str, bin: &str, url: &str, direct_url: &str, log_root: &str) -> Self {
        Self {
            name: name.to_owned(),
            bin: PathBuf::from(bin),
            url: url.to_owned(),
            direct_url: direct_url.to_owned(),
            record_url: None,
            log_dir: PathBuf::from(log_root).join(name),
            report: None,
            ttl: Duration::from_secs(2),
            period: Duration::from_secs(1),
            grace: Duration::from_secs(5),
        }
    }

    /// The spec of an instance `name` of this scenario, on `node-a`, its clock right.
    pub fn spec(&self, name: &str) -> InstanceSpec {
        InstanceSpec {
            record_url: self.record_url.clone(),
            ttl: self.ttl,
            period: self.period,
            grace: self.grace,
            ..InstanceSpec::new(name, &self.url)
        }
    }

    /// The longest gap allowed around a crash-like fault: ttl + one period + [`SLACK`].
    pub fn crash_gap(&self) -> TimeDelta {
        delta(self.ttl + self.period + SLACK)
    }

    /// The longest gap allowed with only graceful changes: one period + [`SLACK`].
    pub fn graceful_gap(&self) -> TimeDelta {
        delta(self.period + SLACK)
    }
}

/// A running scenario. Build it with [`start`](Self::start), inject faults, then
/// [`finish`](Self::finish) it, which shuts every instance down gracefully and checks
/// the record.
///
/// Dropped early (a failed test), it kills every instance it started.
#[derive(Debug)]
pub struct Scenario {
    config: ScenarioConfig,
    db: Inspector,
    instances: Vec<Instance>,
    ready: BTreeMap<String, DateTime<Utc>>,
    paused: BTreeSet<String>,
    began: DateTime<Utc>,
    windows: Vec<Window>,
    ended: BTreeMap<String, DateTime<Utc>>,
    gap_bound: TimeDelta,
    detect: Option<TimeDelta>,
    takeover: Option<TimeDelta>,
    violations: Vec<String>,
    events: Vec<(DateTime<Utc>, String)>,
    lossy: bool,
    wall: Instant,
}

/// What [`Scenario::finish`] found.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The numbers, as printed.
    pub report: Report,
    /// Every violation, described (empty: the scenario passed).
    pub violations: Vec<String>,
    /// Where the longest gap was.
    pub longest_gap_at: String,
    /// What the driver did, when (database clock).
    pub events: Vec<String>,
    /// What the checks allowed but noted (ticks run twice, or started early, in a
    /// fault window).
    pub notes: Vec<String>,
    /// Where the instances' logs are.
    pub logs: PathBuf,
    /// Everything the checks found.
    pub findings: Findings,
}

impl Verdict {
    /// Whether no check failed.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.report)?;
        for event in &self.events {
            write!(f, "\n  {event}")?;
        }
        if !self.longest_gap_at.is_empty() {
            write!(f, "\n  longest gap: {}", self.longest_gap_at)?;
        }
        for note in &self.notes {
            write!(f, "\n  note: {note}")?;
        }
        for violation in &self.violations {
            write!(f, "\n  VIOLATION {violation}")?;
        }
        write!(f, "\n  logs: {}", self.logs.display())
    }
}

impl Scenario {
    /// Creates the app's tables, starts an instance per spec and waits until every
    /// one is ready (has written a heartbeat). The checked range starts then.
    ///
    /// # Errors
    /// When the database cannot be reached, an instance cannot be spawned, or it is
    /// not ready within 30 s.
    pub async fn start(config: ScenarioConfig, specs: Vec<InstanceSpec>) -> Result<Scenario> {
        let _ = std::fs::remove_dir_all(&config.log_dir);
        let db = match &config.record_url {
            Some(record) => Inspector::apart(record, &config.direct_url).await?,
            None => Inspector::connect(&config.direct_url).await?,
        };
        db.prepare().await?;
        let began = db.now().await?;
        let mut scenario = Scenario {
            gap_bound: config.graceful_gap(),
            config,
            db,
            instances: Vec::new(),
            ready: BTreeMap::new(),
            paused: BTreeSet::new(),
            began,
            windows: Vec::new(),
            ended: BTreeMap::new(),
            detect: None,
            takeover: None,
            violations: Vec::new(),
            events: Vec::new(),
            lossy: false,
            wall: Instant::now(),
        };
        for spec in &specs {
            let instance = Instance::spawn(&scenario.config.bin, spec, &scenario.config.log_dir)?;
            scenario.instances.push(instance);
        }
        for spec in &specs {
            scenario.wait_ready(&spec.name).await?;
        }
        scenario.began = scenario.db.now().await?;
        Ok(scenario)
    }

    /// The configuration.
    pub fn config(&self) -> &ScenarioConfig {
        &self.config
    }

    /// The driver's view of the record.
    pub fn db(&self) -> &Inspector {
        &self.db
    }

    /// When every initial instance was ready: the checked range starts there.
    pub fn began(&self) -> DateTime<Utc> {
        self.began
    }

    /// The database's clock.
    ///
    /// # Errors
    /// [`Error::Database`] if the server does not answer within 30 s.
    pub async fn now(&self) -> Result<DateTime<Utc>> {
        self.db.now().await
    }

    /// Lets the cluster run for `duration`.
    pub async fn hold(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }

    /// Starts one more instance and waits until it is ready.
    ///
    /// # Errors
    /// When it cannot be spawned or is not ready within 30 s.
    pub async fn spawn(&mut self, spec: InstanceSpec) -> Result<DateTime<Utc>> {
        let instance = Instance::spawn(&self.config.bin, &spec, &self.config.log_dir)?;
        self.instances.push(instance);
        self.wait_ready(&spec.name).await
    }

    async fn wait_ready(&mut self, name: &str) -> Result<DateTime<Utc>> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if !self.instance(name)?.is_running() {
                return Err(self.not_running(name));
            }
            if self.db.has_beaten(name).await? {
                let at = self.db.now().await?;
                self.ready.insert(name.to_owned(), at);
                return Ok(at);
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("instance {name} to be ready"),
                    waited: PATIENCE,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The live instance `name` (the latest of that name).
    ///
    /// # Errors
    /// [`Error::NotRunning`] if no instance has that name.
    pub fn instance(&mut self, name: &str) -> Result<&mut Instance> {
        match self.instances.iter().rposition(|i| i.name() == name) {
            Some(index) => Ok(&mut self.instances[index]),
            None => Err(Error::NotRunning {
                name: name.to_owned(),
                log: "(never started)".to_owned(),
            }),
        }
    }

    fn not_running(&self, name: &str) -> Error {
        Error::NotRunning {
            name: name.to_owned(),
            log: self
                .config
                .log_dir
                .join(format!("{name}.log"))
                .display()
                .to_string(),
        }
    }

    /// Waits for a run of `job` under way that started within [`MID_RUN`] of its tick
    /// and within [`MID_RUN`] of now, on an instance that runs (not paused, not
    /// ended): a holder mid-run, hit close to its tick.
    ///
    /// # Errors
    /// [`Error::Timeout`] if none is seen within 30 s.
    pub async fn mid_run(&mut self, job: &str) -> Result<Run> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            for run in self.db.running(job, MID_RUN).await? {
                let prompt = run.started - run.tick <= delta(MID_RUN);
                let live = prompt
                    && !self.paused.contains(&run.instance)
                    && !self.ended.contains_key(&run.instance)
                    && self.instance(&run.instance).is_ok_and(|i| i.is_running());
                if live {
                    let what = format!(
                        "{} mid-run: {} tick {} token {}, started {}",
                        run.instance,
                        run.job,
                        check::time(run.tick),
                        run.token,
                        check::time(run.started)
                    );
                    self.event(run.started, what);
                    return Ok(run);
                }
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("a run of {job} under way"),
                    waited: PATIENCE,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// A crash: `SIGKILL` to `name`. Returns the database time just before the signal.
    ///
    /// # Errors
    /// When the instance is not running or the signal fails.
    pub async fn kill(&mut self, name: &str) -> Result<DateTime<Utc>> {
        let at = self.db.now().await?;
        self.instance(name)?.kill().await?;
        let gone = self.db.now().await?;
        self.ended.insert(name.to_owned(), gone);
        self.paused.remove(name);
        self.event(at, format!("SIGKILL {name}"));
        Ok(at)
    }

    /// A pause: `SIGSTOP` to `name`. Returns the database time just before the signal.
    ///
    /// # Errors
    /// When the instance is not running or the signal fails.
    pub async fn pause(&mut self, name: &str) -> Result<DateTime<Utc>> {
        let at = self.db.now().await?;
        self.instance(name)?.signal(Signal::Stop).await?;
        self.paused.insert(name.to_owned());
        self.event(at, format!("SIGSTOP {name}"));
        Ok(at)
    }

    /// The end of a pause: `SIGCONT` to `name`. Returns the database time just before
    /// the signal.
    ///
    /// # Errors
    /// When the instance is not running or the signal fails.
    pub async fn resume(&mut self, name: &str) -> Result<DateTime<Utc>> {
        let at = self.db.now().await?;
        self.instance(name)?.signal(Signal::Cont).await?;
        self.paused.remove(name);
        self.event(at, format!("SIGCONT {name}"));
        Ok(at)
    }

    /// A graceful shutdown of `name` (`SIGTERM`), waiting until it has exited; a
    /// failed exit is a violation. Returns the database time just before the signal.
    ///
    /// # Errors
    /// When the instance is not running, the signal fails, or it does not exit.
    pub async fn terminate(&mut self, name: &str) -> Result<DateTime<Utc>> {
        let at = self.db.now().await?;
        let status = self.instance(name)?.terminate().await?;
        if !status.success() {
            self.violation(format!("{name} did not shut down cleanly: {status}"));
        }
        let gone = self.db.now().await?;
        self.ended.insert(name.to_owned(), gone);
        self.event(at, format!("SIGTERM {name}, exited {}", check::time(gone)));
        Ok(at)
    }

    /// Declares the window of `fault`, injected at `at` and over at `recovered`: from
    /// `at` less [`SLACK`] to `recovered` plus the ttl and one period.
    pub fn window(&mut self, fault: &str, at: DateTime<Utc>, recovered: DateTime<Utc>) -> Window {
        let window = Window {
            fault: fault.to_owned(),
            from: at - delta(SLACK),
            to: recovered + delta(self.config.ttl + self.config.period),
        };
        self.windows.push(window.clone());
        let what = format!("fault window {fault} until {}", check::time(window.to));
        self.event(window.from, what);
        window
    }

    /// Waits until the record holds the end of every window declared so far, plus
    /// `after`: the time the cluster gets to show it recovered.
    ///
    /// # Errors
    /// [`Error::Database`] if the clock cannot be read.
    pub async fn hold_past_windows(&self, after: Duration) -> Result<()> {
        let end = self.windows.iter().map(|w| w.to).max();
        if let Some(end) = end {
            let now = self.db.now().await?;
            if let Ok(wait) = (end - now).to_std() {
                tokio::time::sleep(wait).await;
            }
        }
        self.hold(after).await;
        Ok(())
    }

    /// The lease database moved to `direct_url` (a failover): the fenced writes are
    /// read there from now on. Only with a record apart
    /// ([`ScenarioConfig::record_url`]).
    ///
    /// # Errors
    /// [`Error::Database`] if it cannot be reached within 30 s.
    pub async fn lease_database_moved(&mut self, direct_url: &str) -> Result<()> {
        self.config.direct_url = direct_url.to_owned();
        self.db.lease_database_moved(direct_url).await
    }

    /// Declares that the lease database may lose writes it acknowledged in a fault
    /// window (a failover to an asynchronous replica): a tick run twice concurrently
    /// there, and a run recorded as paid whose write is gone, are counted and noted
    /// rather than violations (see [`Expectations::lossy`]).
    pub fn lossy(&mut self) {
        self.lossy = true;
    }

    /// Sets the longest gap allowed between consecutive runs (default: graceful).
    pub fn set_gap_bound(&mut self, bound: TimeDelta) {
        self.gap_bound = bound;
    }

    /// Waits up to `limit` for the first run of `job` that started after `at` on an
    /// instance other than `holder`, and records the time from `at` to its start as
    /// the takeover time. If there is none by then, records a violation saying which
    /// database sessions wait for a lock, and on whom: a holder stopped in the middle
    /// of a transaction keeps its row locks.
    ///
    /// # Errors
    /// [`Error::Database`] if the record cannot be read.
    pub async fn takeover(
        &mut self,
        job: &str,
        at: DateTime<Utc>,
        holder: &str,
        limit: Duration,
    ) -> Result<Option<Run>> {
        let deadline = Instant::now() + limit;
        loop {
            let runs = self.db.runs_since(job, at).await?;
            if let Some(run) = runs.into_iter().find(|r| r.instance != holder) {
                self.takeover = Some(run.started - at);
                let what = format!(
                    "takeover: {} ran {} tick {} token {}",
                    run.instance,
                    run.job,
                    check::time(run.tick),
                    run.token
                );
                self.event(run.started, what);
                return Ok(Some(run));
            }
            if Instant::now() > deadline {
                let blocked = self.db.blocked().await?;
                let why = if blocked.is_empty() {
                    "no session waits for a lock".to_owned()
                } else {
                    blocked.join("; ")
                };
                self.violation(format!(
                    "no takeover of {job} within {limit:?} of the fault at {}: {why}",
                    check::time(at)
                ));
                return Ok(None);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until run `id` has recorded its end, and records the time from `from` to
    /// that end as the time to detect the lost lease.
    ///
    /// # Errors
    /// [`Error::Timeout`] if it has not within 30 s.
    pub async fn detect(&mut self, id: i64, from: DateTime<Utc>) -> Result<Run> {
        let run = self.ended(id).await?;
        if let Some(finished) = run.finished {
            self.detect = Some(finished - from);
            let what = format!(
                "{} recorded the end of its run: {}",
                run.instance,
                run.outcome.as_deref().unwrap_or("?")
            );
            self.event(finished, what);
        }
        Ok(run)
    }

    /// Waits until run `id` has recorded its end.
    ///
    /// # Errors
    /// [`Error::Timeout`] if it has not within 30 s.
    pub async fn ended(&self, id: i64) -> Result<Run> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let run = self.db.run(id).await?;
            if run.finished.is_some() {
                return Ok(run);
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("run {id} to record its end"),
                    waited: PATIENCE,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Notes what happened at `at` in the scenario's timeline (printed with the
    /// verdict).
    pub fn event(&mut self, at: DateTime<Utc>, what: impl std::fmt::Display) {
        self.events
            .push((at, format!("{} {what}", check::time(at))));
    }

    /// Records a violation found by the scenario itself.
    pub fn violation(&mut self, violation: String) {
        self.violations.push(violation);
    }

    /// Checks `condition`, recording `violation` if it does not hold.
    pub fn expect(&mut self, condition: bool, violation: impl FnOnce() -> String) {
        if !condition {
            self.violations.push(violation());
        }
    }

    /// Shuts every running instance down gracefully, reads the record and checks it
    /// (see the crate documentation), prints the report row and any violation, and
    /// appends the row to the report file.
    ///
    /// # Errors
    /// When the record cannot be read or an instance does not exit.
    pub async fn finish(mut self) -> Result<Verdict> {
        let stopping = self.db.now().await?;
        let to = stopping - delta(SLACK);
        let last_window = self.windows.iter().map(|w| w.to).max();
        let mut recover = Vec::new();
        for instance in &mut self.instances {
            if instance.is_running() && !self.ended.contains_key(instance.name()) {
                let ready = self
                    .ready
                    .get(instance.name())
                    .copied()
                    .unwrap_or(self.began);
                let after = last_window.map_or(ready, |w| w.max(ready));
                recover.push((instance.name().to_owned(), after));
                instance.signal(Signal::Term).await?;
            }
        }
        for (name, _) in &recover {
            let instance = self.instance(name)?;
            let limit = instance.spec().grace + Duration::from_secs(10);
            let status = instance.wait(limit).await?;
            if !status.success() {
                self.violations
                    .push(format!("{name} did not shut down cleanly: {status}"));
            }
        }
        let end = self.db.now().await?;
        let record = self.db.record().await?;

        let mut nodes: BTreeMap<String, DateTime<Utc>> = BTreeMap::new();
        for instance in &self.instances {
            let ready = self
                .ready
                .get(instance.name())
                .copied()
                .unwrap_or(self.began);
            let first = nodes.entry(instance.spec().node.clone()).or_insert(ready);
            *first = (*first).min(ready);
        }
        let mut series = Vec::new();
        for job in JOBS {
            match job.scope {
                Scope::Cluster => series.push(Series {
                    job: job.name.to_owned(),
                    node: None,
                    from: self.began,
                    to,
                }),
                // A node that had no instance before runs its latest tick as a
                // catch-up the moment its first instance starts; that late run may
                // still be going when the next tick is due, which is then skipped as
                // an overlap (documented). So a node's series starts one period
                // after its first instance was ready.
                Scope::Node => series.extend(nodes.iter().map(|(node, ready)| Series {
                    job: job.name.to_owned(),
                    node: Some(node.clone()),
                    from: self.began.max(*ready + delta(self.config.period)),
                    to,
                })),
            }
        }
        let expectations = Expectations {
            period: delta(self.config.period),
            series,
            windows: self.windows.clone(),
            gap_bound: self.gap_bound,
            ended: self.ended.clone(),
            end,
            recover,
            lossy: self.lossy,
        };
        let findings: Findings = check::check(&record, &expectations);
        let mut violations = findings.violations.clone();
        violations.append(&mut self.violations);
        for instance in &self.instances {
            if instance.log_text().contains("panicked") {
                violations.push(format!(
                    "panicked: {} (see {})",
                    instance.name(),
                    instance.log().display()
                ));
            }
        }
        let mut report = Report::new(
            &self.config.name,
            &findings,
            self.gap_bound,
            self.wall.elapsed(),
        );
        report.detect = self.detect;
        report.takeover = self.takeover;
        report.violations = violations.len();
        let verdict = Verdict {
            report,
            violations,
            longest_gap_at: findings.longest_gap_at.clone(),
            notes: findings.notes.clone(),
            events: {
                self.events.sort_by_key(|(at, _)| *at);
                self.events.drain(..).map(|(_, event)| event).collect()
            },
            logs: self.config.log_dir.clone(),
            findings,
        };
        println!("{verdict}");
        if let Some(path) = &self.config.report {
            verdict.report.append_to(path)?;
        }
        Ok(verdict)
    }
}

fn delta(duration: Duration) -> TimeDelta {
    TimeDelta::from_std(duration).unwrap_or(TimeDelta::MAX)
}
