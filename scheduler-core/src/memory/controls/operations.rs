//! [`ControlTables`] for [`MemoryStore`] (so it is [`Controls`](crate::Controls),
//! with every store's rules): the operations on the control tables.

use std::ops::Bound;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{ControlRow, TriggerRow, looks_like_json, node_key, none_if_empty};
use crate::control::listing::{self, ListQuery, Listing, RunQuery};
use crate::control::{
    Advance, ControlAction, ControlRecord, ControlRequest, ControlSignal, ControlState,
    ControlTables, HandlerCheck, HandlersCheck, Heartbeat, InstanceRow, LeaseRow, Page, Pause,
    Resume, RunRow, ScheduleRow, Trigger, TriggerId, TriggerState,
};
use crate::control::{DueCursor, DueSchedule, TickBounds};
use crate::error::{Error, Result};
use crate::lease::{FencingToken, Holder, Lease, LeaseName, Tick, Ttl};
use crate::memory::{MemoryStore, Row, delta, lease};
use crate::outcome::Outcome;

#[async_trait]
impl ControlTables for MemoryStore {
    async fn write_pause(&self, req: &ControlRequest) -> Result<ControlRecord> {
        let now = self.call()?;
        let mut t = self.tables();
        let key = (req.job.clone(), node_key(req.node.as_ref()));
        let version = t.version + 1;
        let row = t.controls.entry(key).or_insert_with(|| ControlRow {
            paused: false,
            since: now,
            by: String::new(),
            why: String::new(),
            resumed_at: None,
            catch_up: false,
            version,
        });
        if !row.paused {
            *row = ControlRow {
                paused: true,
                since: now,
                by: req.by.clone(),
                why: req.why.clone(),
                resumed_at: None,
                catch_up: false,
                version,
            };
        }
        Ok(t.record(now, req, ControlAction::Pause, String::new()))
    }

    async fn write_resume(&self, req: &ControlRequest, catch_up: bool) -> Result<ControlRecord> {
        let now = self.call()?;
        let mut t = self.tables();
        let version = t.version + 1;
        // Without a node, every pause of the job ends; with one, that node's only.
        let node = node_key(req.node.as_ref());
        for ((job, n), row) in t.controls.iter_mut() {
            if *job == req.job && (req.node.is_none() || *n == node) && row.paused {
                row.paused = false;
                row.resumed_at = Some(now);
                row.catch_up = catch_up;
                row.version = version;
            }
        }
        let action = if catch_up {
            ControlAction::Resume
        } else {
            ControlAction::ResumeWithoutCatchUp
        };
        Ok(t.record(now, req, action, String::new()))
    }

    async fn write_trigger(&self, req: &ControlRequest) -> Result<Trigger> {
        let now = self.call()?;
        let mut t = self.tables();
        // Under the tables' lock: no pause lands between this read and the insert.
        let action = crate::control::trigger_action(req, &t.paused_now())?;
        let trigger = Trigger {
            id: TriggerId(i64::try_from(t.triggers.len()).unwrap_or(i64::MAX) + 1),
            job: req.job.clone(),
            node: req.node.clone(),
            // Microseconds, as a tick (and a SQL store) keeps time.
            requested_at: Tick::new(now).at(),
            by: req.by.clone(),
            why: req.why.clone(),
            state: TriggerState::Pending,
        };
        t.triggers.push(TriggerRow {
            trigger: trigger.clone(),
            lease: None,
            prev_completed: false,
        });
        t.record(now, req, action, trigger.id.to_string());
        Ok(trigger)
    }

    fn min_schedule_period(&self) -> std::time::Duration {
        self.tables().min_schedule_period
    }

    async fn read_trigger(&self, id: TriggerId) -> Result<Option<Trigger>> {
        self.call()?;
        let t = self.tables();
        Ok(t.triggers
            .iter()
            .find(|r| r.trigger.id == id)
            .map(|r| r.trigger.clone()))
    }

    async fn write_claim(
        &self,
        id: TriggerId,
        lease_name: &LeaseName,
        holder: &Holder,
        ttl: Ttl,
    ) -> Result<Option<Lease>> {
        let now = self.call()?;
        let mut rows = self.lock();
        let mut t = self.tables();
        let Some(trigger) = t.triggers.iter_mut().find(|r| r.trigger.id == id) else {
            return Ok(None);
        };
        // Pending, or running under this very lease while its claimant no longer
        // holds it (expired unreleased, or taken since by another holder).
        let claimable = match &trigger.trigger.state {
            TriggerState::Pending => true,
            TriggerState::Running { holder: was, .. } => {
                trigger.lease.as_ref() == Some(lease_name)
                    && rows.get(lease_name).is_none_or(|row| {
                        row.holder != *was || (row.expires_at <= now && !row.completed)
                    })
            }
            _ => false,
        };
        if !claimable {
            return Ok(None);
        }
        let (row, prev_completed) = match rows.get(lease_name) {
            Some(row) if row.expires_at > now => return Ok(None),
            Some(row) => {
                // The row's completion before this claim; while the row is still the
                // vanished claimant's acquisition, the completion from before its claim.
                let prev = match &trigger.trigger.state {
                    TriggerState::Running { holder: was, .. } if row.holder == *was => {
                        trigger.prev_completed
                    }
                    _ => row.completed,
                };
                let requested = Tick::new(trigger.trigger.requested_at);
                let row = Row {
                    holder: holder.clone(),
                    // The scheduled tick is the row's, untouched.
                    tick: row.tick,
                    token: FencingToken::new(row.token.get() + 1),
                    expires_at: now + delta(ttl),
                    completed: false,
                    // A request to stop from a tick no later than the trigger's instant
                    // (the trigger's own, to the run before it) is not this run's.
                    cancel_tick: row.cancel_tick.filter(|t| *t > requested),
                };
                (row, prev)
            }
            None => {
                let row = Row {
                    holder: holder.clone(),
                    // Earlier than any real tick.
                    tick: Tick::new(DateTime::UNIX_EPOCH),
                    token: FencingToken::new(1),
                    expires_at: now + delta(ttl),
                    completed: false,
                    cancel_tick: None,
                };
                (row, false)
            }
        };
        let granted = lease(lease_name, &row);
        rows.insert(lease_name.clone(), row);
        trigger.trigger.state = TriggerState::Running {
            holder: holder.clone(),
            started_at: now,
        };
        trigger.lease = Some(lease_name.clone());
        trigger.prev_completed = prev_completed;
        t.bump();
        Ok(Some(granted))
    }

    async fn write_finish(
        &self,
        id: TriggerId,
        holder: Option<&Holder>,
        outcome: Outcome,
        error: Option<&str>,
    ) -> Result<bool> {
        let now = self.call()?;
        let mut rows = self.lock();
        let mut t = self.tables();
        let Some(trigger) = t.triggers.iter_mut().find(|r| r.trigger.id == id) else {
            return Ok(false);
        };
        let mine = match (&trigger.trigger.state, holder) {
            (TriggerState::Pending, None) => true,
            (TriggerState::Running { holder: was, .. }, Some(h)) => was == h,
            _ => false,
        };
        if !mine {
            return Ok(false);
        }
        trigger.trigger.state = TriggerState::Done {
            outcome,
            error: error.map(str::to_owned),
            finished_at: now,
        };
        // The claimant's lease, if it still holds it, given back as the claim found it.
        if let (Some(h), Some(name)) = (holder, &trigger.lease)
            && let Some(row) = rows.get_mut(name)
            && row.holder == *h
        {
            row.completed = trigger.prev_completed;
            row.expires_at = row.expires_at.min(now);
        }
        t.bump();
        Ok(true)
    }

    async fn read_control_history(
        &self,
        job: Option<&str>,
        page: Page,
    ) -> Result<Vec<ControlRecord>> {
        self.call()?;
        let t = self.tables();
        Ok(t.audit
            .iter()
            .rev()
            .filter(|r| job.is_none_or(|j| r.job == j))
            .filter(|r| page.before.is_none_or(|b| r.id < b))
            .take(usize::try_from(page.limit).unwrap_or(usize::MAX))
            .cloned()
            .collect())
    }

    async fn read_version(&self) -> Result<i64> {
        self.call()?;
        let mut t = self.tables();
        t.polls += 1;
        Ok(t.version)
    }

    /// One poll, one call: after [`read_version`](Self::read_version) found the
    /// version moved, the state is read without another.
    async fn read_state(&self, since: Option<i64>) -> Result<ControlState> {
        if since.is_none() {
            self.call()?;
        }
        let mut t = self.tables();
        if since.is_none() {
            t.polls += 1;
        }
        let after = since.unwrap_or(i64::MIN);
        Ok(ControlState {
            version: t.version,
            paused: t.paused_now(),
            resumed: t
                .controls
                .iter()
                .filter(|(_, c)| !c.paused && c.version > after)
                .filter_map(|((job, node), c)| {
                    Some(Resume {
                        job: job.clone(),
                        node: none_if_empty(node),
                        paused_since: c.since,
                        resumed_at: c.resumed_at?,
                        catch_up: c.catch_up,
                        version: c.version,
                    })
                })
                .collect(),
            triggers: t.open_triggers(),
            schedules: t
                .schedules
                .values()
                .filter(|s| s.version > after)
                // Asked about no version: the live schedules only.
                .filter(|s| since.is_some() || !s.removed)
                .cloned()
                .collect(),
        })
    }

    async fn read_changed_schedules(
        &self,
        since: i64,
        upto: i64,
        names: &[String],
    ) -> Result<Vec<ScheduleRow>> {
        self.call()?;
        Ok(self.tables().changed_among(since, upto, names))
    }

    async fn read_paused(&self) -> Result<Vec<Pause>> {
        self.call()?;
        let t = self.tables();
        Ok(t.paused_now())
    }

    async fn read_open_triggers(&self) -> Result<Vec<Trigger>> {
        self.call()?;
        let t = self.tables();
        Ok(t.open_triggers())
    }

    async fn check_args(&self, row: &ScheduleRow) -> Result<()> {
        if !looks_like_json(&row.args) {
            return Err(Error::InvalidControl {
                reason: format!(
                    "schedule {:?}: its arguments are not JSON: {:?}",
                    row.name, row.args
                ),
            });
        }
        Ok(())
    }

    async fn write_schedule(
        &self,
        row: &ScheduleRow,
        by: &str,
        why: &str,
        handler: &HandlerCheck<'_>,
    ) -> Result<ControlRecord> {
        let now = self.call()?;
        let mut t = self.tables();
        handler.check(&t.live_handlers(now))?;
        let req = ControlRequest::new(&row.name, by).why(why);
        let record = t.record(now, &req, ControlAction::SchedulePut, row.schedule.clone());
        let stored = ScheduleRow {
            version: t.version,
            updated_at: Some(now),
            removed: false,
            ..row.clone()
        };
        t.bound_put(row, &mut TickBounds::new(now));
        t.schedules.insert(row.name.clone(), stored);
        Ok(record)
    }

    async fn write_schedules(
        &self,
        rows: &[ScheduleRow],
        by: &str,
        why: &str,
        handlers: &HandlersCheck<'_>,
    ) -> Result<ControlRecord> {
        let now = self.call()?;
        let mut t = self.tables();
        let known: Vec<String> = t.handlers.keys().map(|(h, _)| h.clone()).collect();
        handlers.check(&known)?;
        let first = rows
            .first()
            .map(|row| row.name.as_str())
            .unwrap_or_default();
        let req = ControlRequest::new(first, by).why(why);
        let detail = crate::control::batch_detail(rows);
        let record = t.record(now, &req, ControlAction::SchedulePut, detail);
        let version = t.version;
        let mut bounds = TickBounds::new(now);
        for row in rows {
            t.bound_put(row, &mut bounds);
            let stored = ScheduleRow {
                version,
                updated_at: Some(now),
                removed: false,
                ..row.clone()
            };
            t.schedules.insert(row.name.clone(), stored);
        }
        Ok(record)
    }

    async fn write_removal(
        &self,
        name: &str,
        by: &str,
        why: &str,
    ) -> Result<Option<ControlRecord>> {
        let now = self.call()?;
        let mut t = self.tables();
        if t.schedules.get(name).is_none_or(|s| s.removed) {
            return Ok(None);
        }
        let req = ControlRequest::new(name, by).why(why);
        let record = t.record(now, &req, ControlAction::ScheduleRemove, String::new());
        let version = t.version;
        if let Some(s) = t.schedules.get_mut(name) {
            s.removed = true;
            s.enabled = false;
            s.version = version;
            s.updated_at = Some(now);
        }
        Ok(Some(record))
    }

    async fn read_schedules(&self) -> Result<Vec<ScheduleRow>> {
        self.call()?;
        let t = self.tables();
        Ok(t.schedules
            .values()
            .filter(|s| !s.removed)
            .cloned()
            .collect())
    }

    async fn read_due_schedules(
        &self,
        handlers: &[String],
        until: DateTime<Utc>,
        after: Option<&DueCursor>,
        limit: u32,
    ) -> Result<Vec<DueSchedule>> {
        self.call()?;
        Ok(self.tables().due(handlers, until, after, limit))
    }

    async fn write_advances(&self, advances: &[Advance]) -> Result<u64> {
        self.call()?;
        Ok(self.tables().advance(advances))
    }

    async fn read_schedule(&self, name: &str) -> Result<Option<ScheduleRow>> {
        self.call()?;
        let t = self.tables();
        Ok(t.schedules.get(name).filter(|s| !s.removed).cloned())
    }

    async fn read_schedules_page(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<ScheduleRow>> {
        self.call()?;
        let t = self.tables();
        let from = match after {
            Some(after) => Bound::Excluded(after),
            None => Bound::Unbounded,
        };
        Ok(t.schedules
            .range::<str, _>((from, Bound::Unbounded))
            .map(|(_, s)| s)
            .filter(|s| !s.removed)
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .cloned()
            .collect())
    }

    async fn write_handlers(&self, node: &str, names: &[String]) -> Result<()> {
        let now = self.call()?;
        let mut t = self.tables();
        for name in names {
            t.handlers.insert((name.clone(), node.to_owned()), now);
        }
        Ok(())
    }

    async fn read_handlers(&self) -> Result<Vec<String>> {
        let now = self.call()?;
        Ok(self.tables().live_handlers(now))
    }

    async fn write_jobs(&self, node: &str, names: &[String]) -> Result<()> {
        let now = self.call()?;
        let mut t = self.tables();
        for name in names {
            t.jobs.insert((name.clone(), node.to_owned()), now);
        }
        Ok(())
    }

    async fn read_jobs(&self) -> Result<Vec<String>> {
        let now = self.call()?;
        Ok(self.tables().live_jobs(now))
    }

    async fn write_heartbeat(&self, beat: &Heartbeat) -> Result<()> {
        let now = self.call()?;
        self.tables().beat(beat, now);
        Ok(())
    }

    async fn write_stopped(&self, node: &str) -> Result<()> {
        self.call()?;
        self.tables().stop(node);
        Ok(())
    }

    async fn read_instances(&self) -> Result<Vec<InstanceRow>> {
        self.call()?;
        Ok(self.tables().instances())
    }

    async fn read_leases(&self) -> Result<Vec<LeaseRow>> {
        self.call()?;
        let rows = self.lock();
        Ok(rows
            .iter()
            .map(|(name, row)| LeaseRow {
                name: name.to_string(),
                holder: Some(row.holder.to_string()).filter(|h| !h.is_empty()),
                tick: row.tick.at(),
                token: row.token.get(),
                expires_at: row.expires_at,
                released_at: row.completed.then_some(row.expires_at),
            })
            .collect())
    }

    async fn read_runs(&self, _job: Option<&str>, _page: Page) -> Result<Vec<RunRow>> {
        // The memory store keeps no run history.
        self.call()?;
        Ok(Vec::new())
    }

    /// Every lease read, judged held or not by the store's clock.
    async fn read_leases_listing(&self, query: &ListQuery) -> Result<Listing<LeaseRow>> {
        let now = self.call()?;
        let rows = self.read_leases().await?;
        Ok(listing::leases_of(rows, query, now))
    }

    async fn read_runs_where(&self, _query: &RunQuery) -> Result<Vec<RunRow>> {
        // The memory store keeps no run history.
        self.call()?;
        Ok(Vec::new())
    }

    async fn read_failing_jobs(&self) -> Result<Vec<String>> {
        self.call()?;
        Ok(Vec::new())
    }

    fn watch_controls(&self) -> Option<tokio::sync::watch::Receiver<ControlSignal>> {
        self.tables().announce.as_ref().map(|tx| tx.subscribe())
    }
}
