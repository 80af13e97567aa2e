//! The lease invariants of the design brief, written once against the
//! [`Store`] trait and run by every store's test suite (memory, PostgreSQL, SQLite).
//!
//! Each function takes the stores to exercise: several handles on **one** backing
//! database, each playing an instance of its own (for SQL stores, each with its own
//! pool). Every function asserts; a store that breaks an invariant fails it.
//!
//! [`controls`] holds the rules of the operators' controls (pause, resume, trigger,
//! dynamic schedules, their record and poll), for stores whose
//! [`Store::controls`] is `Some`; [`limits`] the limits every store keeps on what a
//! control writes; [`batch`] the rules of a batch put of dynamic schedules.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{LeaseName, LocalClock, Release, Store, TakeRequest, Tick, Ttl};
use tokio::task::JoinSet;

pub mod batch;
pub mod controls;
pub mod due;
pub mod instances;
pub mod limits;
pub mod listing;

/// A store shared between tasks.
pub type SharedStore = Arc<dyn Store>;

fn name(s: &str) -> LeaseName {
    LeaseName::new(s).expect("valid test name")
}

fn ttl(ms: u64) -> Ttl {
    Ttl::new(Duration::from_millis(ms)).expect("valid test ttl")
}

/// A tick on a whole second of the store's clock, `offset_s` seconds from now.
async fn tick(store: &SharedStore, offset_s: i64) -> Tick {
    let now = store.now().await.expect("store clock");
    let secs = now.timestamp() + offset_s;
    Tick::new(DateTime::from_timestamp(secs, 0).expect("in range"))
}

/// Waits until the store's clock has passed `at`.
async fn wait_until(store: &SharedStore, at: DateTime<Utc>) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let now = store.now().await.expect("store clock");
        if now > at {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "store clock never passed {at}"
        );
        let left = (at - now).to_std().unwrap_or_default();
        tokio::time::sleep(left.min(Duration::from_millis(50)) + Duration::from_millis(1)).await;
    }
}

/// 32 tasks race for one name and tick, `rounds` times: exactly one wins each round.
pub async fn one_holder_under_contention(stores: &[SharedStore], rounds: usize) {
    assert!(!stores.is_empty());
    let lease = name("contended");
    for round in 0..rounds {
        let t = tick(&stores[0], round as i64).await;
        let mut tasks = JoinSet::new();
        for i in 0..32 {
            let store = stores[i % stores.len()].clone();
            let lease = lease.clone();
            tasks.spawn(async move {
                store
                    .take(&[TakeRequest::new(lease, t)], ttl(60_000))
                    .await
                    .expect("take")
                    .won
            });
        }
        let winners: Vec<_> = tasks.join_all().await.into_iter().flatten().collect();
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        // Release so the next round's (later) tick is free.
        let won = &winners[0];
        let released = stores[0]
            .release(&[won.key()], Release::Completed)
            .await
            .expect("release");
        assert_eq!(released, vec![lease.clone()]);
    }
}

/// An unrenewed lease is taken over once it expires; a renewed one is not.
pub async fn expired_lease_is_taken_over(a: &SharedStore, b: &SharedStore) {
    let short = ttl(600);
    let t = tick(a, 0).await;
    let won = a
        .take(
            &[
                TakeRequest::new(name("renewed"), t),
                TakeRequest::new(name("abandoned"), t),
            ],
            short,
        )
        .await
        .expect("take")
        .won;
    assert_eq!(won.len(), 2);
    let find = |n: &str| won.iter().find(|l| l.name.as_str() == n).expect("won");
    let (renewed, abandoned) = (find("renewed"), find("abandoned"));

    // While valid, nobody else gets either.
    let lost = b
        .take(
            &[
                TakeRequest::new(name("renewed"), t),
                TakeRequest::new(name("abandoned"), t),
            ],
            short,
        )
        .await
        .expect("take")
        .won;
    assert!(lost.is_empty(), "{lost:?}");

    // Keep renewing one of them until the other has expired.
    let deadline = abandoned.expires_at;
    loop {
        let r = a.renew(&[renewed.key()], short).await.expect("renew");
        assert_eq!(r.len(), 1, "the holder's renewal must succeed");
        if a.now().await.expect("clock") > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let taken = b
        .take(
            &[
                TakeRequest::new(name("renewed"), t),
                TakeRequest::new(name("abandoned"), t),
            ],
            short,
        )
        .await
        .expect("take")
        .won;
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!(taken[0].name, name("abandoned"));
    assert!(taken[0].token > abandoned.token);
}

/// A former holder's late renewal or release cannot touch a lease taken since.
pub async fn former_holder_cannot_touch_new_lease(a: &SharedStore, b: &SharedStore) {
    let t = tick(a, 0).await;
    let old = a
        .take(&[TakeRequest::new(name("late"), t)], ttl(300))
        .await
        .expect("take")
        .won
        .pop()
        .expect("free lease");
    wait_until(a, old.expires_at).await;
    let new = b
        .take(&[TakeRequest::new(name("late"), t)], ttl(60_000))
        .await
        .expect("take")
        .won
        .pop()
        .expect("expired lease is taken over");
    assert!(
        a.renew(&[old.key()], ttl(60_000))
            .await
            .expect("renew")
            .is_empty()
    );
    assert!(
        a.release(&[old.key()], Release::Completed)
            .await
            .expect("release")
            .is_empty()
    );
    assert!(
        a.release(&[old.key()], Release::Interrupted)
            .await
            .expect("release")
            .is_empty()
    );
    // The new holder still holds it, unchanged.
    let later_tick = tick(a, 10).await;
    assert!(
        a.take(&[TakeRequest::new(name("late"), later_tick)], ttl(1000))
            .await
            .expect("take")
            .won
            .is_empty()
    );
    let renewed = b.renew(&[new.key()], ttl(60_000)).await.expect("renew");
    assert_eq!(renewed.len(), 1);
}

/// Fencing tokens strictly increase across acquisitions, takeovers included.
pub async fn fencing_tokens_increase(a: &SharedStore, b: &SharedStore) {
    let lease = name("fenced");
    let mut tokens = Vec::new();
    let t0 = tick(a, 0).await;
    // Acquire, complete, next tick.
    for (i, store) in [a, b, a].into_iter().enumerate() {
        let won = store
            .take(
                &[TakeRequest::new(
                    lease.clone(),
                    Tick::new(t0.at() + TimeDelta::seconds(i as i64)),
                )],
                ttl(60_000),
            )
            .await
            .expect("take")
            .won
            .pop()
            .expect("free");
        tokens.push(won.token);
        store
            .release(&[won.key()], Release::Completed)
            .await
            .expect("release");
    }
    // Interrupted, retried on the same tick by another instance.
    let t = Tick::new(t0.at() + TimeDelta::seconds(3));
    let first = a
        .take(&[TakeRequest::new(lease.clone(), t)], ttl(60_000))
        .await
        .expect("take")
        .won
        .pop()
        .expect("free");
    a.release(&[first.key()], Release::Interrupted)
        .await
        .expect("release");
    let retry = b
        .take(&[TakeRequest::new(lease.clone(), t)], ttl(300))
        .await
        .expect("take")
        .won
        .pop()
        .expect("free");
    tokens.extend([first.token, retry.token]);
    // Takeover after expiry.
    wait_until(a, retry.expires_at).await;
    let takeover = a
        .take(&[TakeRequest::new(lease.clone(), t)], ttl(60_000))
        .await
        .expect("take")
        .won
        .pop()
        .expect("expired");
    tokens.push(takeover.token);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not strictly increasing: {tokens:?}"
    );
}

/// A tick released as completed cannot be taken again; an expired, unreleased one
/// can; the next tick can.
pub async fn released_tick_is_done(a: &SharedStore, b: &SharedStore) {
    let lease = name("ticks");
    let t1 = tick(a, 0).await;
    let t2 = Tick::new(t1.at() + TimeDelta::seconds(1));
    let run = a
        .take(&[TakeRequest::new(lease.clone(), t1)], ttl(60_000))
        .await
        .expect("take")
        .won
        .pop()
        .expect("free");
    assert_eq!(
        a.release(&[run.key()], Release::Completed)
            .await
            .expect("release"),
        vec![lease.clone()]
    );
    // A lost take reports what stood in the way: here, the completed tick.
    let lost = b
        .take(&[TakeRequest::new(lease.clone(), t1)], ttl(60_000))
        .await
        .expect("take");
    assert!(lost.won.is_empty());
    assert_eq!(lost.held.len(), 1);
    assert_eq!((lost.held[0].tick, lost.held[0].completed), (t1, true));
    assert!(
        b.take(&[TakeRequest::new(lease.clone(), t1)], ttl(60_000))
            .await
            .expect("take")
            .won
            .is_empty(),
        "a completed tick was taken again"
    );
    // An earlier tick than the last one taken is never handed out.
    let t0 = Tick::new(t1.at() - TimeDelta::seconds(1));
    assert!(
        b.take(&[TakeRequest::new(lease.clone(), t0)], ttl(60_000))
            .await
            .expect("take")
            .won
            .is_empty()
    );

    let crashed = b
        .take(&[TakeRequest::new(lease.clone(), t2)], ttl(300))
        .await
        .expect("take")
        .won
        .pop()
        .expect("next tick is free");
    wait_until(a, crashed.expires_at).await;
    let retried = a
        .take(&[TakeRequest::new(lease.clone(), t2)], ttl(60_000))
        .await
        .expect("take")
        .won
        .pop()
        .expect("an expired, unreleased tick can be retried");
    assert_eq!(retried.tick, t2);
    a.release(&[retried.key()], Release::Completed)
        .await
        .expect("release");
    let t3 = Tick::new(t2.at() + TimeDelta::seconds(1));
    assert_eq!(
        b.take(&[TakeRequest::new(lease, t3)], ttl(60_000))
            .await
            .expect("take")
            .won
            .len(),
        1
    );
}

/// Takes, renewals and releases behave the same whatever the caller's clock says:
/// every time comes from the store. `skewed` stores belong to nodes whose clocks are
/// off by `skew`; they compute their ticks from their own clocks, as a runtime
/// would, and the store still measures expiry on its clock alone.
pub async fn node_clock_does_not_matter(
    honest: &SharedStore,
    skewed: &SharedStore,
    skew: TimeDelta,
) {
    let node_clock = LocalClock::skewed(skew);
    let at = node_clock.now();
    let t = Tick::new(DateTime::from_timestamp(at.timestamp(), 0).expect("in range"));
    let lease = name("skewed");
    let before = honest.now().await.expect("clock");
    let won = skewed
        .take(&[TakeRequest::new(lease.clone(), t)], ttl(1_000))
        .await
        .expect("take")
        .won
        .pop()
        .expect("free");
    let after = honest.now().await.expect("clock");
    // The expiry is on the store's clock: one ttl after the take, whatever the skew.
    assert!(
        won.expires_at >= before + TimeDelta::milliseconds(1_000),
        "{won:?} {before}"
    );
    assert!(
        won.expires_at <= after + TimeDelta::milliseconds(1_000),
        "{won:?} {after}"
    );
    // Held until it expires on the store's clock, not the node's.
    assert!(
        honest
            .take(&[TakeRequest::new(lease.clone(), t)], ttl(1_000))
            .await
            .expect("take")
            .won
            .is_empty()
    );
    let renewed = skewed
        .renew(&[won.key()], ttl(400))
        .await
        .expect("renew")
        .pop()
        .expect("held");
    assert!(
        renewed.expires_at < won.expires_at,
        "renewal is measured from the store's now"
    );
    wait_until(honest, renewed.expires_at).await;
    let taken = honest
        .take(&[TakeRequest::new(lease, t)], ttl(1_000))
        .await
        .expect("take")
        .won;
    assert_eq!(taken.len(), 1);
}

/// A batch returns exactly the free names: held ones are left out, free and new ones
/// are taken, each with its own tick.
pub async fn batch_returns_exactly_the_free(a: &SharedStore, b: &SharedStore, size: usize) {
    let t = tick(a, 0).await;
    let names: Vec<LeaseName> = (0..size).map(|i| name(&format!("batch-{i:05}"))).collect();
    // `a` holds every third name.
    let held: Vec<TakeRequest> = names
        .iter()
        .step_by(3)
        .map(|n| TakeRequest::new(n.clone(), t))
        .collect();
    assert_eq!(
        a.take(&held, ttl(60_000)).await.expect("take").won.len(),
        held.len()
    );
    let all: Vec<TakeRequest> = names
        .iter()
        .map(|n| TakeRequest::new(n.clone(), t))
        .collect();
    let taken = b.take(&all, ttl(60_000)).await.expect("take");
    let won = taken.won;
    // The held ones are reported with their state.
    assert_eq!(taken.held.len(), held.len());
    assert!(
        taken
            .held
            .iter()
            .all(|h| h.tick == t && !h.completed && h.name.as_str().starts_with("batch-"))
    );
    let mut won_names: Vec<_> = won.iter().map(|l| l.name.clone()).collect();
    won_names.sort();
    let expected: Vec<_> = names
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 0)
        .map(|(_, n)| n.clone())
        .collect();
    assert_eq!(won_names, expected);
    // The winners' holders are the ones asked for.
    for lease in &won {
        let req = all
            .iter()
            .find(|r| r.name == lease.name)
            .expect("asked for");
        assert_eq!(lease.holder, req.holder);
        assert_eq!(lease.tick, t);
    }
}

/// Names that are legal but awkward (quotes, unicode, 200 bytes) round-trip unchanged.
pub async fn awkward_names_round_trip(a: &SharedStore) {
    let t = tick(a, 0).await;
    let names = [
        "it's a \"quoted\" name; DROP TABLE leases; --",
        "ünïcødé ✓ 日本語 🚀",
        &"x".repeat(LeaseName::MAX_LEN),
        "back\\slash and $1 and %s",
    ];
    let reqs: Vec<_> = names.iter().map(|n| TakeRequest::new(name(n), t)).collect();
    let mut won: Vec<_> = a
        .take(&reqs, ttl(60_000))
        .await
        .expect("take")
        .won
        .into_iter()
        .map(|l| l.name)
        .collect();
    won.sort();
    let mut expected: Vec<_> = names.iter().map(|n| name(n)).collect();
    expected.sort();
    assert_eq!(won, expected);
}

/// A take retried as the same holder for the same tick (its first answer never
/// arrived, though the store applied it) is reported as won, with the same lease;
/// another holder still loses, and once released the holder wins nothing more.
pub async fn retried_take_of_the_same_holder_wins(a: &SharedStore, b: &SharedStore) {
    let lease = name("retried");
    let t = tick(a, 0).await;
    let request = TakeRequest::new(lease.clone(), t);
    let first = a
        .take(std::slice::from_ref(&request), ttl(60_000))
        .await
        .expect("take")
        .won
        .pop()
        .expect("free");
    let again = a
        .take(std::slice::from_ref(&request), ttl(60_000))
        .await
        .expect("take");
    assert_eq!(
        again.won.len(),
        1,
        "the retry of the same holder lost: {again:?}"
    );
    assert_eq!(
        (&again.won[0].holder, again.won[0].tick, again.won[0].token),
        (&first.holder, first.tick, first.token),
        "the retry is the same acquisition"
    );
    // The same holder asking for another tick did not take that one: held, not won.
    let mut earlier = TakeRequest::new(
        lease.clone(),
        Tick::new(t.at() - chrono::TimeDelta::seconds(1)),
    );
    earlier.holder = request.holder.clone();
    let another_tick = a
        .take(std::slice::from_ref(&earlier), ttl(60_000))
        .await
        .expect("take");
    assert!(
        another_tick.won.is_empty(),
        "reported won for a tick it does not hold: {another_tick:?}"
    );
    assert_eq!(
        another_tick
            .held
            .iter()
            .map(|h| (h.name.clone(), h.tick))
            .collect::<Vec<_>>(),
        [(lease.clone(), t)],
        "{another_tick:?}"
    );
    let other = b
        .take(&[TakeRequest::new(lease.clone(), t)], ttl(60_000))
        .await
        .expect("take");
    assert!(other.won.is_empty(), "another holder took a held lease");
    a.release(&[first.key()], Release::Completed)
        .await
        .expect("release");
    assert!(
        a.take(std::slice::from_ref(&request), ttl(60_000))
            .await
            .expect("take")
            .won
            .is_empty(),
        "a completed tick was handed out again to its holder"
    );
}

/// A newer tick asks the holder of an older one to stop: the mark is set only on a
/// row held (unexpired, unreleased) for an older tick, once per newer tick, and the
/// holder's renewal reports it; other leases' renewals do not.
pub async fn cancel_requests_reach_the_holder(a: &SharedStore, b: &SharedStore) {
    let (lease, other) = (name("cancel-me"), name("cancel-bystander"));
    let t = tick(a, 0).await;
    let later = Tick::new(t.at() + TimeDelta::seconds(1));
    let won = a
        .take(
            &[
                TakeRequest::new(lease.clone(), t),
                TakeRequest::new(other.clone(), t),
            ],
            ttl(60_000),
        )
        .await
        .expect("take")
        .won;
    assert_eq!(won.len(), 2);
    let (held, bystander) = if won[0].name == lease {
        (won[0].clone(), won[1].clone())
    } else {
        (won[1].clone(), won[0].clone())
    };
    // Not for the same tick or an older one.
    assert!(
        !b.request_cancel(&lease, t).await.expect("ask"),
        "same tick"
    );
    let renewed = a.renew(&[held.key()], ttl(60_000)).await.expect("renew");
    assert!(!renewed[0].cancel_requested, "nobody asked yet");
    assert!(
        b.request_cancel(&lease, later).await.expect("ask"),
        "a newer tick asks"
    );
    assert!(
        !b.request_cancel(&lease, later).await.expect("ask"),
        "asked once per tick"
    );
    let renewed = a
        .renew(&[held.key(), bystander.key()], ttl(60_000))
        .await
        .expect("renew");
    for r in &renewed {
        assert_eq!(r.cancel_requested, r.name == lease, "{r:?}");
    }
    // Once released, nothing is left to ask.
    a.release(&[held.key()], Release::Completed)
        .await
        .expect("release");
    let newest = Tick::new(t.at() + TimeDelta::seconds(2));
    assert!(
        !b.request_cancel(&lease, newest).await.expect("ask"),
        "released"
    );
    // The newer tick takes the lease as usual, and its own renewals are clean.
    let next = b
        .take(&[TakeRequest::new(lease.clone(), later)], ttl(60_000))
        .await
        .expect("take")
        .won;
    assert_eq!(next.len(), 1, "the newer tick takes the released lease");
    let renewed = b.renew(&[next[0].key()], ttl(60_000)).await.expect("renew");
    assert!(
        !renewed[0].cancel_requested,
        "the request was for this tick"
    );
}

/// [`Store::create_missing`] creates a row only for a name that has none, once
/// across racing instances; the row refuses every tick up to its creation and
/// hands out the ticks after it.
pub async fn missing_rows_are_created_once(a: &SharedStore, b: &SharedStore) {
    let (old, new) = (name("created-old"), name("created-new"));
    // A name with a row already: a tick of it ran.
    let ran = a
        .take(
            &[TakeRequest::new(old.clone(), tick(a, -10).await)],
            ttl(60_000),
        )
        .await
        .expect("take")
        .won
        .pop()
        .expect("free");
    a.release(&[ran.key()], Release::Completed)
        .await
        .expect("release");
    let before = tick(a, -1).await;
    let created = a
        .create_missing(&[old.clone(), new.clone()])
        .await
        .expect("create");
    assert_eq!(created, vec![new.clone()], "only the name without a row");
    assert!(
        b.create_missing(std::slice::from_ref(&new))
            .await
            .expect("create")
            .is_empty(),
        "created twice"
    );
    // The old name's row is as it was: its next tick is free.
    let next = Tick::new(ran.tick.at() + TimeDelta::seconds(1));
    assert_eq!(
        b.take(&[TakeRequest::new(old, next)], ttl(60_000))
            .await
            .expect("take")
            .won
            .len(),
        1
    );
    // A tick from before the new row is refused, as completed.
    let lost = b
        .take(&[TakeRequest::new(new.clone(), before)], ttl(60_000))
        .await
        .expect("take");
    assert!(
        lost.won.is_empty(),
        "a tick from before the row ran: {lost:?}"
    );
    assert!(lost.held.iter().all(|h| h.completed), "{lost:?}");
    // A tick after it is free, and its token is one a fencing check accepts.
    let after = tick(a, 2).await;
    let won = b
        .take(&[TakeRequest::new(new, after)], ttl(60_000))
        .await
        .expect("take")
        .won;
    assert_eq!(won.len(), 1, "a tick after the row was refused");
    assert!(won[0].token.get() > 0);
    // Racing instances: each fresh name is created by exactly one.
    let names: Vec<LeaseName> = (0..20)
        .map(|i| name(&format!("created-race-{i}")))
        .collect();
    let (x, y) = tokio::join!(a.create_missing(&names), b.create_missing(&names));
    let (mut x, y) = (x.expect("create"), y.expect("create"));
    x.extend(y);
    x.sort();
    let mut want = names.clone();
    want.sort();
    assert_eq!(x, want, "each name created once");
    assert!(
        a.create_missing(&[name("created-dup"), name("created-dup")])
            .await
            .is_err(),
        "a name twice in one batch"
    );
}

/// Every invariant above, in turn, on fresh names each time.
pub async fn all(stores: &[SharedStore]) {
    let (a, b) = (&stores[0], &stores[1 % stores.len()]);
    one_holder_under_contention(stores, 20).await;
    expired_lease_is_taken_over(a, b).await;
    former_holder_cannot_touch_new_lease(a, b).await;
    fencing_tokens_increase(a, b).await;
    released_tick_is_done(a, b).await;
    retried_take_of_the_same_holder_wins(a, b).await;
    cancel_requests_reach_the_holder(a, b).await;
    missing_rows_are_created_once(a, b).await;
    batch_returns_exactly_the_free(a, b, 100).await;
    awkward_names_round_trip(a).await;
}
