//! Takes: the due ticks, asked for in as few calls as the time left allows, else in
//! growing chunks whose runs start as each is answered.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use super::tasks::Batch;
use super::{AHEAD_MARGIN, CLOCK_STALE, Engine, MAX_AHEAD, Slot, TAKE_CHUNK, TAKE_MOST};
use crate::error::Error;
use crate::lease::{ControlKey, Held, Lease, LeaseName, TakeRequest, Taken};
use crate::runtime::calls::Gate;

/// A take call's answer, with the local clock read before and after it.
pub(super) type ChunkAnswer = crate::Result<(DateTime<Utc>, Taken, DateTime<Utc>)>;

impl Engine {
    /// The jobs with a tick to take now, with their requests, in job order.
    pub(super) fn collect_due(&mut self) -> Vec<(Slot, TakeRequest)> {
        let now = self.db_now();
        let mut due = Vec::new();
        let mut events = Vec::new();
        // Only an instance that polls the controls catches up a resume.
        let polls = self.ctl.is_some();
        let visit = self.jobs.visits(now);
        let lead = self.jobs.lead();
        for &i in &visit {
            let e = &self.s.entries[i];
            let job = self.jobs.keyed_mut(i);
            if let Some((tick, holder)) = job.due(&e.cadence, now, lead, &mut events) {
                let request = TakeRequest {
                    name: e.lease.clone(),
                    tick,
                    holder,
                    control: Some(ControlKey {
                        job: e.name.clone(),
                        node: self.s.node.clone(),
                        caught_up_on_resume: polls && job.resume_catches_up(tick),
                    }),
                };
                due.push((Slot::Job(i), request));
            }
            self.act(i, &mut events);
        }
        #[cfg(all(debug_assertions, feature = "test-util"))]
        self.jobs
            .check_passed_over(&visit, now, lead, |i| &self.s.entries[i].cadence);
        due
    }

    /// Takes the due ticks, one store call per chunk, pipelined: each chunk is sent
    /// as soon as the one before is answered, before that answer's runs are
    /// started. After a failed chunk no more are sent; the rest wait for the take's
    /// backoff (never sent, they are still simply due).
    ///
    /// A round that will be answered well before its first tick fires (the usual
    /// case: rounds start `ahead` of their ticks) goes in as few calls as
    /// it can ([`TAKE_MOST`] names each); a round with less time left starts with
    /// the chunk that will be answered in that time (at least [`TAKE_CHUNK`], so a
    /// late round's first runs start after one short call) and doubles each next
    /// one.
    pub(super) async fn take_due(&mut self, due: Vec<(Slot, TakeRequest)>) {
        let began = Instant::now();
        let names = due.len();
        let mut size = self.first_chunk(&due);
        let mut due = due.into_iter().peekable();
        let mut chunks = std::iter::from_fn(move || {
            due.peek()?;
            let chunk: (Vec<Slot>, Vec<TakeRequest>) = due.by_ref().take(size).unzip();
            size = size.saturating_mul(2).min(TAKE_MOST);
            Some(chunk)
        });
        let mut in_flight = chunks
            .next()
            .map(|(asked, requests)| (asked, self.send_chunk(requests, &self.leases)));
        let mut answered_all = true;
        while let Some((asked, call)) = in_flight.take() {
            let answer = call
                .await
                .unwrap_or_else(|join| Err(Error::store(format!("the take failed: {join}"))));
            if answer.is_ok() {
                in_flight = chunks
                    .next()
                    .map(|(asked, requests)| (asked, self.send_chunk(requests, &self.leases)));
            }
            answered_all &= self.on_chunk_answer(asked, answer);
        }
        if !answered_all {
            // A failed round (a big statement cut by the server's bound, say) goes
            // in growing chunks again until a big round is answered.
            self.take_cost = None;
            return;
        }
        let elapsed = began.elapsed();
        // What a name costs in a big round (a small round's cost is mostly the
        // round trip): a quarter less each round after a slow one.
        if names > TAKE_CHUNK {
            let per_name = elapsed / u32::try_from(names).unwrap_or(u32::MAX);
            self.take_cost = Some(
                self.take_cost
                    .map_or(per_name, |cost| per_name.max(cost * 3 / 4)),
            );
        }
        // The next round starts twice as long as this one lasted, and a margin,
        // ahead of its ticks (a round slowed down by a busy server or a busy loop
        // still ends before they fire); after a slow round the lead shrinks by a
        // quarter each round.
        let round = elapsed.saturating_mul(2) + AHEAD_MARGIN;
        let round = TimeDelta::from_std(round.min(MAX_AHEAD)).unwrap_or(TimeDelta::zero());
        self.ahead = round.max(self.ahead * 3 / 4);
        self.jobs.taking_ahead(self.ahead);
        if self.sampled.elapsed() >= CLOCK_STALE {
            self.sync_clock().await;
        }
    }

    /// How many names of `due` the round's first call asks for: as many as will be
    /// answered before the first tick fires, with half as long again to spare
    /// (estimated from the cost per name of the last big rounds; unknown before the
    /// first), within [`TAKE_CHUNK`] … [`TAKE_MOST`].
    fn first_chunk(&self, due: &[(Slot, TakeRequest)]) -> usize {
        if due.len() <= TAKE_CHUNK {
            return TAKE_CHUNK;
        }
        let (Some(cost), Some(first)) =
            (self.take_cost, due.iter().map(|(_, r)| r.tick.at()).min())
        else {
            return TAKE_CHUNK;
        };
        let left = (first - self.db_now()).to_std().unwrap_or(Duration::ZERO);
        let per_name = (cost * 3 / 2).as_nanos().max(1);
        let fits = usize::try_from(left.as_nanos() / per_name).unwrap_or(usize::MAX);
        fits.clamp(TAKE_CHUNK, TAKE_MOST)
    }

    /// Sends one take call for `requests` on a task of its own (through the gate:
    /// still one lease call in flight), timed on the local clock for a clock sample.
    pub(super) fn send_chunk(
        &self,
        requests: Vec<TakeRequest>,
        gate: &Gate,
    ) -> JoinHandle<ChunkAnswer> {
        let span = tracing::debug_span!("take", ticks = requests.len(), node = %self.s.node);
        let (store, ttl, local) = (
            self.s.store.clone(),
            self.s.settings.ttl,
            self.s.settings.clock,
        );
        let gate = gate.clone();
        let call = async move {
            let before = local.now();
            let taken = store.take(&requests, ttl).await?;
            Ok((before, taken, local.now()))
        }
        .instrument(span);
        tokio::spawn(async move { gate.run("take", call).await })
    }

    /// The answer to one take call for the jobs and backfills `asked`: start the
    /// runs won, feed the refusals back. Returns whether it was answered.
    fn on_chunk_answer(&mut self, asked: Vec<Slot>, answer: ChunkAnswer) -> bool {
        let (before, taken, after) = match answer {
            Ok(answer) => answer,
            Err(err) => {
                let now = self.db_now();
                for slot in asked {
                    match slot {
                        Slot::Job(i) => self.jobs[i].on_unanswered(),
                        Slot::Backfill(u, t) => self.on_backfill_answer((u, t), None, now),
                    }
                }
                let delay = self.take.failed(self.s.settings.retry_cap);
                self.store_failed("taking due leases", &err, delay);
                return false;
            }
        };
        self.take.ok();
        self.store_ok();
        if let Some(db) = taken.now {
            self.note_sample(before, after, db);
        }
        // Renewals start a renewal period after the first lease is won.
        if !taken.won.is_empty() && !self.holds_any() {
            self.next_renew = Instant::now() + self.s.settings.renew_every;
        }
        // Decided on the store's clock when the answer came.
        let answered = self.db_now();
        // A pause is decided on the store's own clock, as it answered (the local
        // estimate may be a little behind it).
        let paused_at = taken.now.unwrap_or(answered);
        let mut taken = TakenByName::from(taken);
        let mut events = Vec::new();
        let mut batch = Batch::new();
        for slot in asked {
            let i = match slot {
                Slot::Job(i) => i,
                Slot::Backfill(u, t) => {
                    self.on_backfill_answer((u, t), Some(&mut taken), answered);
                    continue;
                }
            };
            let e = &self.s.entries[i];
            match taken.won.remove(&e.lease) {
                Some(lease) => {
                    self.renew_soon_if_short(&lease, answered);
                    self.start(i, lease, answered, &mut batch);
                }
                None if taken.paused.contains(&e.lease) => {
                    self.jobs[i].on_paused(paused_at, &mut events);
                    self.act(i, &mut events);
                }
                None => {
                    self.jobs[i].on_refused(
                        e.cadence.policy.overlap,
                        taken.held.get(&e.lease),
                        answered,
                        self.polling,
                        &mut events,
                    );
                    self.act(i, &mut events);
                }
            }
        }
        self.tasks.spawn_batch(batch);
        true
    }
}

impl Engine {
    /// A take retried after its answer was lost wins the lease as it stands, with
    /// what is left of its life: renewed at the next turn if that is less than two
    /// renewal periods (a fresh lease has four), else its release could come after
    /// it expired and another instance take the tick again.
    pub(super) fn renew_soon_if_short(&mut self, lease: &Lease, now: DateTime<Utc>) {
        let left = (lease.expires_at - now).to_std().unwrap_or_default();
        if left < self.s.settings.renew_every.saturating_mul(2) {
            self.next_renew = Instant::now();
        }
    }
}

/// A take's answer, by lease name.
pub(super) struct TakenByName {
    pub(super) won: HashMap<LeaseName, Lease>,
    pub(super) held: HashMap<LeaseName, Held>,
    pub(super) paused: HashSet<LeaseName>,
}

impl From<Taken> for TakenByName {
    fn from(taken: Taken) -> Self {
        Self {
            won: taken.won.into_iter().map(|l| (l.name.clone(), l)).collect(),
            held: taken
                .held
                .into_iter()
                .map(|h| (h.name.clone(), h))
                .collect(),
            paused: taken.paused.into_iter().collect(),
        }
    }
}
