//! A lease store in process memory, for unit tests of the runtime.

mod controls;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};

use crate::clock::LocalClock;
use crate::error::{Error, Result, StoreFailure};
use crate::lease::{
    FencingToken, Held, Holder, Lease, LeaseKey, LeaseName, Release, Renewed, TakeRequest, Taken,
    Tick, Ttl, ensure_unique,
};
use crate::store::Store;

/// A [`Store`] kept in memory, with the same lease rules as the SQL stores.
///
/// Its clock is a [`LocalClock`], so it follows tokio's paused time in tests. With the
/// `test-util` feature it can be told to fail (to play a database outage), to stall
/// its clock reads, and to hand a lease to somebody else (to play a takeover); it
/// counts its calls. Only one process sees it: it is for
/// tests, not for production.
#[derive(Debug, Default)]
pub struct MemoryStore {
    rows: Mutex<BTreeMap<LeaseName, Row>>,
    clock: LocalClock,
    failing: AtomicBool,
    failing_takes: AtomicBool,
    failing_releases: AtomicBool,
    calls: AtomicU64,
    /// Milliseconds a clock read waits before reading (a pool wait, a stalled server).
    clock_delay_ms: AtomicU64,
    /// Milliseconds a take waits before it is applied (a statement held up by an
    /// outage or a lock): it is applied, and answered, at the end of the wait.
    take_delay_ms: AtomicU64,
    /// Milliseconds a renewal or a release waits before it is applied (a slow store).
    renew_delay_ms: AtomicU64,
    release_delay_ms: AtomicU64,
    /// [`Store::create_missing`] creates nothing: every job counts as known.
    jobs_known: AtomicBool,
    /// Pauses, triggers, dynamic schedules and their record.
    tables: Mutex<controls::Tables>,
}

/// One lease row, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The current or last holder.
    pub holder: Holder,
    /// The tick of the current or last acquisition.
    pub tick: Tick,
    /// The token of the current or last acquisition.
    pub token: FencingToken,
    /// When the lease expires (or expired).
    pub expires_at: DateTime<Utc>,
    /// Whether the tick was released as completed.
    pub completed: bool,
    /// A newer tick asked the holder to stop ([`Store::request_cancel`]).
    pub cancel_tick: Option<Tick>,
}

impl Row {
    /// The row [`Store::create_missing`] creates at `now`: free, its tick `now`
    /// completed, held by nobody (the empty holder no take generates).
    fn created(now: DateTime<Utc>) -> Self {
        Self {
            holder: Holder::from_stored(String::new()),
            tick: Tick::new(now),
            token: FencingToken::new(1),
            expires_at: now,
            completed: true,
            cancel_tick: None,
        }
    }

    /// Whether the row is free for `tick`, its own tick `completed` (its `completed`,
    /// or the completion a trigger's claim keeps while it holds the row).
    fn free_for(&self, tick: Tick, now: DateTime<Utc>, completed: bool) -> bool {
        self.expires_at <= now && (self.tick < tick || (self.tick == tick && !completed))
    }
}

impl MemoryStore {
    /// An empty store on the system clock (which follows tokio's clock).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the shortest `every` period a dynamic schedule put to this store may have
    /// (default [`DEFAULT_MIN_SCHEDULE_PERIOD`](crate::control::DEFAULT_MIN_SCHEDULE_PERIOD),
    /// 1 s): what [`Controls::put_schedule`](crate::Controls::put_schedule) refuses
    /// below it, as the SQL stores' `min_schedule_period` option does.
    pub fn set_min_schedule_period(&self, period: Duration) {
        self.tables().min_schedule_period = period;
    }

    /// An empty store whose clock is `clock`.
    pub fn with_clock(clock: LocalClock) -> Self {
        Self {
            clock,
            ..Self::default()
        }
    }

    #[cfg(feature = "test-util")]
    /// Makes every call fail (`true`) or succeed again (`false`), as a database
    /// outage would.
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    #[cfg(feature = "test-util")]
    /// Makes every take fail (`true`) or succeed again (`false`) while renewals,
    /// releases and clock reads still work: a statement that fails for one operation
    /// only (a bad request, a lock on the table that takes wait on).
    pub fn set_failing_takes(&self, failing: bool) {
        self.failing_takes.store(failing, Ordering::SeqCst);
    }

    #[cfg(feature = "test-util")]
    /// Makes [`Store::create_missing`] create nothing (`true`), as on a store where
    /// every job ran before: start-up then catches up the ticks before it as the
    /// catch-up window says, which a test of what start-up does may want.
    pub fn set_jobs_known(&self, known: bool) {
        self.jobs_known.store(known, Ordering::SeqCst);
    }

    /// The store's clock, read without going through [`Store::now`].
    pub fn clock(&self) -> LocalClock {
        self.clock
    }

    #[cfg(feature = "test-util")]
    /// Makes every release fail (`true`) or succeed again (`false`) while takes,
    /// renewals and clock reads still work.
    pub fn set_failing_releases(&self, failing: bool) {
        self.failing_releases.store(failing, Ordering::SeqCst);
    }

    #[cfg(feature = "test-util")]
    /// Makes every clock read ([`Store::now`]) wait `delay` before it reads the clock,
    /// as a read stuck behind a pool wait or a stalled server would: the value comes
    /// from the end of the call.
    pub fn set_clock_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.clock_delay_ms.store(ms, Ordering::SeqCst);
    }

    #[cfg(feature = "test-util")]
    /// Makes every take wait `delay` before it is applied and answered, as a
    /// statement held up by an outage or a lock would.
    pub fn set_take_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.take_delay_ms.store(ms, Ordering::SeqCst);
    }

    #[cfg(feature = "test-util")]
    /// Makes every call (take, renewal, release, clock read) wait `delay` before it
    /// is applied and answered, as on a loaded database.
    pub fn set_latency(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        for each in [
            &self.take_delay_ms,
            &self.renew_delay_ms,
            &self.release_delay_ms,
            &self.clock_delay_ms,
        ] {
            each.store(ms, Ordering::SeqCst);
        }
    }

    /// How many calls (take, renew, release, now) the store has answered or failed.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// How many control polls ([`Controls::poll`](crate::Controls::poll)) the store
    /// has answered.
    pub fn control_polls(&self) -> u64 {
        self.tables().polls
    }

    #[cfg(feature = "test-util")]
    /// Makes the store announce its control changes ([`Controls::watch`]), as
    /// PostgreSQL's `LISTEN` does, to schedulers started from now on; `live: false`
    /// plays a listener that is down (changes go unannounced, the runtime polls on
    /// its timer), `true` again one that listens anew (which counts as a change).
    ///
    /// [`Controls::watch`]: crate::Controls::watch
    pub fn announce_controls(&self, live: bool) {
        let mut t = self.tables();
        match &t.announce {
            Some(tx) => {
                tx.send_modify(|s| {
                    if live && !s.live {
                        s.changes += 1;
                    }
                    s.live = live;
                });
            }
            None => {
                let changes = u64::from(live);
                t.announce = Some(tokio::sync::watch::Sender::new(
                    crate::control::ControlSignal { live, changes },
                ));
            }
        }
    }

    /// A copy of the row of `name`, if any.
    pub fn row(&self, name: &LeaseName) -> Option<Row> {
        self.lock().get(name).cloned()
    }

    #[cfg(feature = "test-util")]
    /// Hands `name` to a new holder, as another instance taking it over would: new
    /// holder, next token, `ttl` from now. Returns the new lease, or `None` if the
    /// name has no row.
    pub fn steal(&self, name: &LeaseName, ttl: Ttl) -> Option<Lease> {
        let now = self.clock.now();
        let mut rows = self.lock();
        let row = rows.get_mut(name)?;
        row.holder = Holder::generate();
        row.token = FencingToken::new(row.token.get() + 1);
        row.expires_at = now + delta(ttl);
        row.completed = false;
        Some(lease(name, row))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<LeaseName, Row>> {
        // A panic while holding the lock cannot leave a row half-written (every
        // update is a plain field assignment), so a poisoned lock is still usable.
        self.rows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn tables(&self) -> std::sync::MutexGuard<'_, controls::Tables> {
        self.tables
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn call(&self) -> Result<DateTime<Utc>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(Error::store_as(
                StoreFailure::Unreachable,
                "memory store told to fail",
            ));
        }
        Ok(self.clock.now())
    }
}

fn delta(ttl: Ttl) -> TimeDelta {
    TimeDelta::from_std(ttl.get()).unwrap_or(TimeDelta::MAX)
}

fn lease(name: &LeaseName, row: &Row) -> Lease {
    Lease {
        name: name.clone(),
        holder: row.holder.clone(),
        tick: row.tick,
        token: row.token,
        expires_at: row.expires_at,
    }
}

/// Sleeps the milliseconds `delay` holds (a delay a test set), if any.
async fn wait_ms(delay: &AtomicU64) {
    let ms = delay.load(Ordering::SeqCst);
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn take(&self, requests: &[TakeRequest], ttl: Ttl) -> Result<Taken> {
        ensure_unique(requests.iter().map(|r| &r.name))?;
        wait_ms(&self.take_delay_ms).await;
        let now = self.call()?;
        if self.failing_takes.load(Ordering::SeqCst) {
            return Err(Error::store("memory store told to fail takes"));
        }
        let expires_at = now + delta(ttl);
        let mut rows = self.lock();
        let tables = self.tables();
        let mut taken = Taken {
            now: Some(now),
            ..Taken::default()
        };
        for req in requests {
            if tables.paused(req) {
                taken.paused.push(req.name.clone());
                continue;
            }
            let completed =
                |row: &Row| row.completed || tables.keeps_completion(&req.name, &row.holder);
            let fresh = Row {
                holder: req.holder.clone(),
                tick: req.tick,
                token: FencingToken::new(1),
                expires_at,
                completed: false,
                cancel_tick: None,
            };
            match rows.get_mut(&req.name) {
                None => {
                    taken.won.push(lease(&req.name, &fresh));
                    rows.insert(req.name.clone(), fresh);
                }
                // This holder's own acquisition of this tick (an earlier take whose
                // answer was lost): won, as it stands.
                Some(row)
                    if row.holder == req.holder
                        && row.tick == req.tick
                        && !row.completed
                        && row.expires_at > now =>
                {
                    taken.won.push(lease(&req.name, row));
                }
                Some(row) if row.free_for(req.tick, now, completed(row)) => {
                    *row = Row {
                        token: FencingToken::new(row.token.get() + 1),
                        // A cancel request outlives the takeover, as a column would.
                        cancel_tick: row.cancel_tick,
                        ..fresh
                    };
                    taken.won.push(lease(&req.name, row));
                }
                Some(row) => taken.held.push(Held {
                    name: req.name.clone(),
                    tick: row.tick,
                    expires_at: row.expires_at,
                    completed: completed(row),
                }),
            }
        }
        Ok(taken)
    }

    async fn renew(&self, leases: &[LeaseKey], ttl: Ttl) -> Result<Vec<Renewed>> {
        ensure_unique(leases.iter().map(|k| &k.name))?;
        wait_ms(&self.renew_delay_ms).await;
        let now = self.call()?;
        let mut rows = self.lock();
        let mut renewed = Vec::new();
        for key in leases {
            if let Some(row) = rows.get_mut(&key.name)
                && row.holder == key.holder
                && !row.completed
            {
                row.expires_at = now + delta(ttl);
                renewed.push(Renewed {
                    name: key.name.clone(),
                    expires_at: row.expires_at,
                    cancel_requested: row.cancel_tick.is_some_and(|t| t > row.tick),
                });
            }
        }
        Ok(renewed)
    }

    async fn release(&self, leases: &[LeaseKey], how: Release) -> Result<Vec<LeaseName>> {
        ensure_unique(leases.iter().map(|k| &k.name))?;
        wait_ms(&self.release_delay_ms).await;
        let now = self.call()?;
        if self.failing_releases.load(Ordering::SeqCst) {
            return Err(Error::store("memory store told to fail releases"));
        }
        let mut rows = self.lock();
        let mut released = Vec::new();
        for key in leases {
            if let Some(row) = rows.get_mut(&key.name)
                && row.holder == key.holder
                && !row.completed
            {
                row.expires_at = row.expires_at.min(now);
                row.completed = how == Release::Completed;
                released.push(key.name.clone());
            }
        }
        Ok(released)
    }

    async fn now(&self) -> Result<DateTime<Utc>> {
        wait_ms(&self.clock_delay_ms).await;
        self.call()
    }

    async fn create_missing(&self, names: &[LeaseName]) -> Result<Vec<LeaseName>> {
        ensure_unique(names.iter())?;
        let now = self.call()?;
        let mut rows = self.lock();
        let mut created = Vec::new();
        if self.jobs_known.load(Ordering::SeqCst) {
            return Ok(created);
        }
        for name in names {
            if !rows.contains_key(name) {
                rows.insert(name.clone(), Row::created(now));
                created.push(name.clone());
            }
        }
        Ok(created)
    }

    async fn request_cancel(&self, name: &LeaseName, newer: Tick) -> Result<bool> {
        let now = self.call()?;
        let mut rows = self.lock();
        let tables = self.tables();
        match rows.get_mut(name) {
            // A triggered run is asked to stop only by a tick later than its
            // trigger's instant (the row's tick is the scheduled one before it).
            Some(row)
                if row.tick < newer
                    && !row.completed
                    && row.expires_at > now
                    && row.cancel_tick.is_none_or(|t| t < newer)
                    && tables
                        .triggered_at(name, &row.holder)
                        .is_none_or(|at| at < newer.at()) =>
            {
                row.cancel_tick = Some(newer);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn controls(&self) -> Option<&dyn crate::Controls> {
        Some(self)
    }
}
