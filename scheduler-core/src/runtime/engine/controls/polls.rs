//! A control poll, read off the loop: the loop starts it and goes on taking,
//! renewing and running ticks, and applies its answer at the turn after it arrives.
//! A first poll reads every dynamic schedule (seconds at a few million rows) and
//! must hold up neither the jobs in code nor the renewals meanwhile.
//!
//! Through a gate of its own, so that the heartbeat and the triggers' claims (the
//! controls' gate) are not kept waiting behind it. A poll that does not answer within
//! the bound gets twice the bound the next time, up to [`MAX_GROWTH`] times, and the
//! bound is back once one answers: a first poll that reads more rows than fit in the
//! bound still ends in the schedules running, after a few tries, each logged.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::warn;

use super::window::WindowRows;
use crate::control::ControlState;
use crate::runtime::calls::Gate;
use crate::runtime::engine::Engine;

/// The most a poll's bound grows to, as a multiple of the gate's.
const MAX_GROWTH: u32 = 64;

/// A poll's answer (with the rows read as due, when rows are loaded so), and
/// whether it failed for taking longer than its bound.
pub(in crate::runtime::engine) struct Polled {
    answer: crate::Result<(Option<ControlState>, Option<WindowRows>)>,
    slow: bool,
}

/// The poll under way: the version it reads from and the store's count of
/// announced changes when it began.
struct InFlight {
    since: Option<i64>,
    changes: Option<u64>,
}

/// The control loop's polls.
pub(in crate::runtime::engine) struct Polls {
    gate: Gate,
    /// How long the next poll is waited for.
    limit: Duration,
    in_flight: Option<InFlight>,
    /// Its answer, as the loop heard it, to be applied at the next turn.
    answered: Option<Polled>,
    tx: mpsc::Sender<Polled>,
    rx: mpsc::Receiver<Polled>,
}

impl Polls {
    pub(in crate::runtime::engine) fn new(gate: Gate) -> Self {
        let (tx, rx) = mpsc::channel(1);
        Self {
            limit: gate.limit(),
            gate,
            in_flight: None,
            answered: None,
            tx,
            rx,
        }
    }

    /// Whether a poll was started and its answer not applied yet: no other is sent.
    pub(in crate::runtime::engine) fn busy(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Whether an answer waits to be applied.
    pub(in crate::runtime::engine) fn answered(&self) -> bool {
        self.answered.is_some()
    }

    /// The answer of the poll under way, when it comes (never, if none is).
    pub(in crate::runtime::engine) async fn next_answer(&mut self) {
        if self.in_flight.is_none() || self.answered.is_some() {
            return std::future::pending().await;
        }
        match self.rx.recv().await {
            Some(polled) => self.answered = Some(polled),
            // The loop holds a sender: never.
            None => std::future::pending().await,
        }
    }

    /// The answer, if it came (heard by the loop's wait or not).
    fn take_answer(&mut self) -> Option<(Polled, InFlight)> {
        if self.answered.is_none() {
            self.answered = self.rx.try_recv().ok();
        }
        let polled = self.answered.take()?;
        Some((polled, self.in_flight.take()?))
    }
}

impl Engine {
    /// Starts a poll of the controls from the last version read.
    pub(in crate::runtime::engine) fn start_poll(&mut self) {
        let window = self.window_read();
        let Some(ctl) = &mut self.ctl else {
            return;
        };
        // Announced from here on: seen by this poll, or moving the count again.
        let changes = ctl.watch.as_mut().map(|w| w.borrow_and_update().changes);
        let since = ctl.version;
        let polls = &mut ctl.polls;
        polls.in_flight = Some(InFlight { since, changes });
        let (store, gate, limit, tx) = (
            self.s.store.clone(),
            polls.gate.clone(),
            polls.limit,
            polls.tx.clone(),
        );
        tokio::spawn(async move {
            let started = Instant::now();
            let call = async move {
                let Some(c) = store.controls() else {
                    return Ok((None, None));
                };
                match window {
                    None => Ok((c.poll(since).await?, None)),
                    Some(window) => {
                        let mut state = c.poll_without_schedules(since).await?;
                        if let (Some(since), Some(state)) = (since, state.as_mut()) {
                            state.schedules = window.changed(c, since, state.version).await?;
                        }
                        Ok((state, Some(window.read(c).await?)))
                    }
                }
            };
            let answer = gate.run_within("poll controls", limit, call).await;
            let slow = answer.is_err() && started.elapsed() >= limit;
            // The loop may be gone (shut down): the answer with it.
            let _ = tx.send(Polled { answer, slow }).await;
        });
    }

    /// Applies the poll's answer, if it came: `None` if none did, else whether the
    /// poll succeeded.
    pub(in crate::runtime::engine) fn finish_poll(&mut self) -> Option<bool> {
        let ctl = self.ctl.as_mut()?;
        let (polled, InFlight { since, changes }) = ctl.polls.take_answer()?;
        let polls = &mut ctl.polls;
        let base = polls.gate.limit();
        if polled.slow {
            polls.limit = polls
                .limit
                .saturating_mul(2)
                .min(base.saturating_mul(MAX_GROWTH));
            warn!(next_bound = ?polls.limit,
                "the control poll did not answer in time; the next is waited for longer (a first poll reads every dynamic schedule)");
        } else if polled.answer.is_ok() {
            polls.limit = base;
        }
        ctl.failed = polled.answer.is_err();
        if polled.answer.is_ok() {
            ctl.seen = changes;
        }
        let (answer, rows) = match polled.answer {
            Ok((state, rows)) => (Ok(state), rows),
            Err(err) => (Err(err), None),
        };
        let ok = self.on_polled(answer, since);
        if ok && let Some(rows) = rows {
            self.apply_window(rows);
        }
        Some(ok)
    }
}
