//! The rules of [`Controls`], written once against a [`Store`] whose
//! [`controls()`](Store::controls) is `Some`, and run by every such store's suite
//! (SQLite, PostgreSQL).
//!
//! Each function takes handles on **one** backing database, each playing an
//! instance of its own, and uses job names of its own. Give each function a store
//! (a database, or a lease table) that nothing else changes while it runs: the poll
//! tests assert that an unchanged store answers `None`. [`all`] runs them in turn on
//! one store.

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{
    ControlAction, ControlRequest, ControlState, Controls, Error, Holder, Lease, LeaseName,
    LeaseRow, Outcome, Page, Pause, Release, ScheduleRow, Scope, Store, TakeRequest, Taken, Tick,
    TriggerId, TriggerState,
};
use tokio::task::JoinSet;

use crate::{SharedStore, name, tick, ttl, wait_until};

fn controls(store: &SharedStore) -> &dyn Controls {
    store
        .controls()
        .expect("the store keeps controls: Store::controls() returned None")
}

fn request(job: &str, by: &str) -> ControlRequest {
    ControlRequest::new(job, by)
}

/// The lease row `lease` as the store keeps it.
async fn lease_row(store: &SharedStore, lease: &LeaseName) -> Option<LeaseRow> {
    controls(store)
        .leases()
        .await
        .expect("leases")
        .into_iter()
        .find(|row| row.name == lease.as_str())
}

/// The store's version now.
async fn version(store: &SharedStore) -> i64 {
    controls(store)
        .poll(None)
        .await
        .expect("poll")
        .expect("poll(None) always answers")
        .version
}

/// Asserts that `at` lies within `[before, after]` on the store's clock.
fn within(at: DateTime<Utc>, before: DateTime<Utc>, after: DateTime<Utc>, what: &str) {
    // Stores keep microseconds (as ticks do); a clock read may carry nanoseconds.
    let before = scheduler_core::Tick::new(before).at();
    assert!(
        before <= at && at <= after,
        "{what}: {at} is not within [{before}, {after}]"
    );
}

/// A pause refuses the job's takes on every node: the request is reported in
/// `Taken::paused`, neither won nor held, and its row is left as it was; other jobs
/// of the same batch are taken as usual, and so is a take without a control key.
pub async fn pause_refuses_the_take(a: &SharedStore, b: &SharedStore) {
    let job = "ctl-paused";
    let (lease, other) = (name(job), name("ctl-unpaused"));
    let t1 = tick(a, 0).await;
    let first = a
        .take(
            &[TakeRequest::new(lease.clone(), t1).controlled_by(job, "n1")],
            ttl(60_000),
        )
        .await
        .expect("take")
        .won;
    assert_eq!(first.len(), 1, "not paused yet");
    a.release(&[first[0].key()], Release::Completed)
        .await
        .expect("release");
    let before = lease_row(a, &lease).await.expect("the first tick's row");

    let record = controls(a)
        .pause(&request(job, "alice").why("deploy"))
        .await
        .expect("pause");
    assert_eq!(
        (
            record.action,
            record.job.as_str(),
            record.node.as_deref(),
            record.by.as_str(),
            record.why.as_str()
        ),
        (ControlAction::Pause, job, None, "alice", "deploy")
    );

    let t2 = Tick::new(t1.at() + TimeDelta::seconds(1));
    for store in [a, b] {
        let taken = store
            .take(
                &[
                    TakeRequest::new(lease.clone(), t2).controlled_by(job, "n2"),
                    TakeRequest::new(other.clone(), t2).controlled_by("ctl-unpaused", "n2"),
                ],
                ttl(60_000),
            )
            .await
            .expect("take");
        assert_eq!(taken.paused, vec![lease.clone()], "{taken:?}");
        assert!(
            taken.won.iter().all(|l| l.name != lease),
            "a paused job's lease was won: {taken:?}"
        );
        assert!(
            taken.held.iter().all(|h| h.name != lease),
            "a paused request is reported paused, not held: {taken:?}"
        );
    }
    assert_eq!(
        lease_row(a, &lease).await.as_ref(),
        Some(&before),
        "a paused take wrote to the lease row"
    );
    // The other job of the batch was taken by the first of the two.
    assert!(lease_row(a, &other).await.is_some());

    // A take that names no job (a backfill, a store used directly) meets no pause.
    let unnamed = b
        .take(&[TakeRequest::new(lease.clone(), t2)], ttl(60_000))
        .await
        .expect("take");
    assert_eq!(unnamed.won.len(), 1, "{unnamed:?}");
    assert!(unnamed.paused.is_empty());
}

/// A pause of one node refuses that node's takes of the job and no other node's;
/// resuming that node lets them through.
pub async fn node_pause_refuses_only_that_node(a: &SharedStore, b: &SharedStore) {
    let job = "ctl-node-paused";
    let on = |node: &str| LeaseName::for_job(job, Scope::Node, node).expect("lease name");
    let (n1, n2) = (on("n1"), on("n2"));
    let record = controls(a)
        .pause(&request(job, "ops").node("n1").why("disk full"))
        .await
        .expect("pause");
    assert_eq!(record.node.as_deref(), Some("n1"));
    let t = tick(a, 0).await;
    let taken = b
        .take(
            &[
                TakeRequest::new(n1.clone(), t).controlled_by(job, "n1"),
                TakeRequest::new(n2.clone(), t).controlled_by(job, "n2"),
            ],
            ttl(60_000),
        )
        .await
        .expect("take");
    assert_eq!(taken.paused, vec![n1.clone()], "{taken:?}");
    assert_eq!(
        taken.won.iter().map(|l| &l.name).collect::<Vec<_>>(),
        vec![&n2]
    );
    let state = controls(b).poll(None).await.expect("poll").expect("state");
    let pause = state
        .paused
        .iter()
        .find(|p| p.job == job)
        .expect("the pause is in force");
    assert_eq!(
        (pause.node.as_deref(), pause.by.as_str(), pause.why.as_str()),
        (Some("n1"), "ops", "disk full")
    );

    controls(b)
        .resume(&request(job, "ops").node("n1"), true)
        .await
        .expect("resume");
    let taken = a
        .take(
            &[TakeRequest::new(n1.clone(), t).controlled_by(job, "n1")],
            ttl(60_000),
        )
        .await
        .expect("take");
    assert!(taken.paused.is_empty(), "{taken:?}");
    assert_eq!(taken.won.len(), 1, "resumed: {taken:?}");
}

/// A tick well inside a pause begun just before, some milliseconds before the
/// resume to come: the store's times may carry more than the microseconds a tick
/// keeps.
async fn within_pause(store: &SharedStore) -> Tick {
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let at = Tick::new(store.now().await.expect("clock"));
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    at
}

/// A take that leaves its tick to a resume's catch-up
/// ([`ControlKey::caught_up_on_resume`](scheduler_core::ControlKey)) is refused, as
/// paused, for a tick within the job's last pause when that pause ended with a
/// catch-up (`since ≤ tick ≤ resumed_at`): everywhere, or on the node the pause
/// named. The same tick is taken by a request that does not leave it to the
/// catch-up, a tick after the resume is taken, and so is a tick within a pause
/// resumed without a catch-up or paused on another node.
pub async fn a_pause_caught_up_is_left_to_its_catch_up(a: &SharedStore, b: &SharedStore) {
    let c = controls(a);
    let take = |lease: &str, job: &str, node: &str, t: Tick, caught_up: bool| {
        let mut request = TakeRequest::new(name(lease), t).controlled_by(job, node);
        if caught_up {
            request = request.caught_up_on_resume();
        }
        async move { b.take(&[request], ttl(60_000)).await.expect("take") }
    };
    let won = |taken: &Taken| taken.paused.is_empty() && taken.won.len() == 1;

    // Paused everywhere, resumed with a catch-up.
    let job = "ctl-caught-up";
    c.pause(&request(job, "alice")).await.expect("pause");
    let inside = within_pause(a).await;
    let resumed = c.resume(&request(job, "bob"), true).await.expect("resume");
    let after = Tick::new(resumed.at + TimeDelta::seconds(1));
    for node in ["n1", "n2"] {
        let taken = take("ctl-caught-up-a", job, node, inside, true).await;
        assert_eq!(taken.paused, vec![name("ctl-caught-up-a")], "{taken:?}");
        assert!(taken.won.is_empty() && taken.held.is_empty(), "{taken:?}");
    }
    assert_eq!(
        lease_row(b, &name("ctl-caught-up-a")).await,
        None,
        "a take refused as paused wrote a lease row"
    );
    let taken = take("ctl-caught-up-a", job, "n1", inside, false).await;
    assert!(won(&taken), "not left to the catch-up: {taken:?}");
    let taken = take("ctl-caught-up-b", job, "n1", after, true).await;
    assert!(won(&taken), "a tick after the resume: {taken:?}");

    // Paused on n1 only, resumed there with a catch-up: n2's tick is its own.
    let job = "ctl-caught-up-node";
    c.pause(&request(job, "alice").node("n1"))
        .await
        .expect("pause n1");
    let inside = within_pause(a).await;
    c.resume(&request(job, "bob").node("n1"), true)
        .await
        .expect("resume n1");
    let taken = take("ctl-caught-up-node-n1", job, "n1", inside, true).await;
    assert_eq!(
        taken.paused,
        vec![name("ctl-caught-up-node-n1")],
        "{taken:?}"
    );
    let taken = take("ctl-caught-up-node-n2", job, "n2", inside, true).await;
    assert!(won(&taken), "another node's tick: {taken:?}");

    // Resumed without a catch-up: nothing runs the tick but its take.
    let job = "ctl-not-caught-up";
    c.pause(&request(job, "alice")).await.expect("pause");
    let inside = within_pause(a).await;
    c.resume(&request(job, "bob"), false).await.expect("resume");
    let taken = take("ctl-not-caught-up", job, "n1", inside, true).await;
    assert!(won(&taken), "resumed without a catch-up: {taken:?}");
}

/// Resuming ends a pause: a node's resume leaves the pause of every node in force;
/// a resume without a node ends every pause of the job. Resumes are reported once
/// by `poll` with whether to catch up; resuming a job that is not paused records
/// the request and changes nothing.
pub async fn resume_ends_the_pause(a: &SharedStore, b: &SharedStore) {
    let job = "ctl-resumed";
    let lease = name(job);
    let c = controls(a);
    let paused = c.pause(&request(job, "alice")).await.expect("pause");
    c.pause(&request(job, "alice").node("n1"))
        .await
        .expect("pause n1");
    let t = tick(a, 0).await;
    let take = || {
        let request = TakeRequest::new(lease.clone(), t).controlled_by(job, "n1");
        async move { b.take(&[request], ttl(60_000)).await.expect("take") }
    };
    assert_eq!(take().await.paused, vec![lease.clone()]);
    c.resume(&request(job, "bob").node("n1"), true)
        .await
        .expect("resume n1");
    assert_eq!(
        take().await.paused,
        vec![lease.clone()],
        "still paused on every node"
    );

    let since = version(a).await;
    let before = a.now().await.expect("clock");
    let record = c
        .resume(&request(job, "bob").why("fixed"), false)
        .await
        .expect("resume");
    let after = a.now().await.expect("clock");
    assert_eq!(record.action, ControlAction::ResumeWithoutCatchUp);
    let taken = take().await;
    assert!(taken.paused.is_empty(), "{taken:?}");
    assert_eq!(taken.won.len(), 1, "{taken:?}");

    let state = controls(b)
        .poll(Some(since))
        .await
        .expect("poll")
        .expect("a resume is a change");
    assert!(state.paused.iter().all(|p| p.job != job), "{state:?}");
    let resumed: Vec<_> = state.resumed.iter().filter(|r| r.job == job).collect();
    assert_eq!(resumed.len(), 1, "{state:?}");
    let resume = resumed[0];
    assert_eq!((resume.node.as_deref(), resume.catch_up), (None, false));
    assert_eq!(resume.paused_since, paused.at);
    within(resume.resumed_at, before, after, "resumed_at");
    assert!(resume.version > since && resume.version <= state.version);
    // Reported once: not again after that version.
    if let Some(later) = controls(b).poll(Some(state.version)).await.expect("poll") {
        assert!(later.resumed.iter().all(|r| r.job != job), "{later:?}");
    }

    // Not paused: recorded, nothing else.
    let idle = c
        .resume(&request(job, "carol").why("just in case"), true)
        .await
        .expect("resume of a running job");
    assert_eq!(
        (idle.action, idle.by.as_str()),
        (ControlAction::Resume, "carol")
    );
}

/// Every control is recorded: who, when (the store's clock), why, on which node, with
/// the trigger's id as its detail; newest first, by job or for every job, in pages.
pub async fn history_records_who_when_why(a: &SharedStore) {
    let job = "ctl-history";
    let c = controls(a);
    let before = a.now().await.expect("clock");
    let pause = c
        .pause(&request(job, "alice").why("too noisy"))
        .await
        .expect("pause");
    let again = c
        .pause(&request(job, "bob").why("still noisy"))
        .await
        .expect("pausing a paused job");
    let trigger = c
        .trigger(
            &request(job, "carol")
                .node("n1")
                .why("one more")
                .while_paused(true),
        )
        .await
        .expect("trigger");
    let resume = c
        .resume(&request(job, "dave").why("quiet now"), true)
        .await
        .expect("resume");
    c.pause(&request("ctl-history-other", "erin"))
        .await
        .expect("another job");
    let after = a.now().await.expect("clock");

    let records = c
        .control_history(Some(job), Page::default())
        .await
        .expect("history");
    let seen: Vec<_> = records
        .iter()
        .map(|r| {
            (
                r.action,
                r.by.as_str(),
                r.why.as_str(),
                r.node.as_deref(),
                r.job.as_str(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (ControlAction::Resume, "dave", "quiet now", None, job),
            (
                ControlAction::TriggerWhilePaused,
                "carol",
                "one more",
                Some("n1"),
                job,
            ),
            (ControlAction::Pause, "bob", "still noisy", None, job),
            (ControlAction::Pause, "alice", "too noisy", None, job),
        ],
        "newest first"
    );
    assert!(records.windows(2).all(|w| w[0].id > w[1].id));
    assert!(records.windows(2).all(|w| w[0].at >= w[1].at));
    for record in &records {
        within(record.at, before, after, "at");
    }
    assert_eq!(records[1].detail, trigger.id.to_string());
    assert_eq!(records[3], pause);
    assert_eq!(records[2], again);
    assert_eq!(records[0], resume);
    // A repeated pause keeps the pause as it was.
    let state = c.poll(None).await.expect("poll").expect("state");
    assert!(state.paused.iter().all(|p| p.job != job), "resumed");

    let page = c
        .control_history(
            Some(job),
            Page {
                before: Some(records[0].id),
                limit: 2,
            },
        )
        .await
        .expect("page");
    assert_eq!(page, records[1..3].to_vec());
    let everything = c
        .control_history(None, Page::default())
        .await
        .expect("history");
    assert_eq!(everything[0].job, "ctl-history-other");
    assert!(records.iter().all(|r| everything.contains(r)));
}

/// Of 8 instances claiming one trigger at once, exactly one gets it: it takes the
/// job's lease (absent until then: created with the first token and a tick earlier
/// than any real one), and the trigger runs under its holder.
pub async fn trigger_is_claimed_exactly_once(stores: &[SharedStore]) {
    assert!(!stores.is_empty());
    let job = "ctl-trigger-once";
    let lease = name(job);
    let before = stores[0].now().await.expect("clock");
    let trigger = controls(&stores[0])
        .trigger(&request(job, "alice").why("now please"))
        .await
        .expect("trigger");
    let after = stores[0].now().await.expect("clock");
    assert_eq!(trigger.state, TriggerState::Pending);
    assert_eq!(
        (
            trigger.job.as_str(),
            trigger.node.as_deref(),
            trigger.by.as_str(),
            trigger.why.as_str()
        ),
        (job, None, "alice", "now please")
    );
    within(trigger.requested_at, before, after, "requested_at");

    let mut claims = JoinSet::new();
    for i in 0..8 {
        let store = stores[i % stores.len()].clone();
        let lease = lease.clone();
        claims.spawn(async move {
            let holder = Holder::generate();
            controls(&store)
                .claim_trigger(trigger.id, &lease, &holder, ttl(60_000))
                .await
                .expect("claim")
        });
    }
    let won: Vec<_> = claims.join_all().await.into_iter().flatten().collect();
    assert_eq!(won.len(), 1, "{won:?}");
    let claimed = &won[0];
    assert_eq!(claimed.name, lease);
    assert_eq!(
        (claimed.tick, claimed.token.get()),
        (before_any_tick(), 1),
        "not the trigger's instant: the lease's tick is never a trigger's"
    );
    let status = controls(&stores[0])
        .trigger_status(trigger.id)
        .await
        .expect("status")
        .expect("the trigger");
    match status.state {
        TriggerState::Running { holder, .. } => assert_eq!(holder, claimed.holder),
        other => panic!("not running: {other:?}"),
    }
    let row = lease_row(&stores[0], &lease).await.expect("the lease row");
    assert_eq!(
        (row.holder.as_deref(), row.token),
        (Some(claimed.holder.as_str()), claimed.token.get())
    );
}

/// A trigger waits while the job's lease is held (the job runs): the claim is
/// refused and changes nothing. Once the lease is released the claim takes it with a
/// new token, its tick left as it was.
pub async fn claim_waits_for_a_held_lease(a: &SharedStore, b: &SharedStore) {
    let job = "ctl-trigger-held";
    let lease = name(job);
    let later = tick(a, 5).await;
    let held = a
        .take(&[TakeRequest::new(lease.clone(), later)], ttl(60_000))
        .await
        .expect("take")
        .won
        .pop()
        .expect("free");
    let trigger = controls(b)
        .trigger(&request(job, "alice"))
        .await
        .expect("trigger");
    let holder = Holder::generate();
    assert_eq!(
        controls(b)
            .claim_trigger(trigger.id, &lease, &holder, ttl(60_000))
            .await
            .expect("claim"),
        None,
        "claimed while the job's lease is held"
    );
    let status = controls(b)
        .trigger_status(trigger.id)
        .await
        .expect("status")
        .expect("the trigger");
    assert_eq!(status.state, TriggerState::Pending);
    let row = lease_row(a, &lease).await.expect("row");
    assert_eq!(row.holder.as_deref(), Some(held.holder.as_str()));

    a.release(&[held.key()], Release::Completed)
        .await
        .expect("release");
    let claimed = controls(b)
        .claim_trigger(trigger.id, &lease, &holder, ttl(60_000))
        .await
        .expect("claim")
        .expect("the lease is free");
    assert!(claimed.token > held.token);
    assert_eq!(claimed.tick, later, "the later tick taken stays");
    assert_eq!(claimed.holder, holder);
}

/// A claimant that vanished (its lease expired unreleased, or since taken by another
/// holder) leaves the trigger to another instance, which claims it with a new token;
/// before that, nobody else can — nor after the claimant released its lease as
/// completed, its finish being on its way.
pub async fn claim_is_taken_over_after_the_claimant_vanished(a: &SharedStore, b: &SharedStore) {
    let job = "ctl-trigger-reclaim";
    let lease = name(job);
    let trigger = controls(a)
        .trigger(&request(job, "alice"))
        .await
        .expect("trigger");
    let holders: Vec<Holder> = (0..4).map(|_| Holder::generate()).collect();
    let claim = |store: &SharedStore, holder: usize, ms: u64| {
        let (store, holder, lease) = (store.clone(), holders[holder].clone(), lease.clone());
        async move {
            controls(&store)
                .claim_trigger(trigger.id, &lease, &holder, ttl(ms))
                .await
                .expect("claim")
        }
    };
    let running_under = |holder: usize| {
        let (store, holder) = (a.clone(), holders[holder].clone());
        async move {
            match controls(&store)
                .trigger_status(trigger.id)
                .await
                .expect("status")
                .expect("the trigger")
                .state
            {
                TriggerState::Running { holder: h, .. } => assert_eq!(h, holder),
                other => panic!("not running: {other:?}"),
            }
        }
    };

    let first = claim(a, 0, 400).await.expect("pending");
    assert_eq!(
        claim(b, 1, 60_000).await,
        None,
        "claimed twice while the claimant's lease was valid"
    );
    // Expired unreleased: the claimant vanished mid-run.
    wait_until(a, first.expires_at).await;
    let second = claim(b, 1, 400)
        .await
        .expect("the claimant's lease expired");
    assert!(second.token > first.token);
    running_under(1).await;
    assert!(
        !controls(a)
            .finish_trigger(trigger.id, Some(&holders[0]), Outcome::Succeeded, None)
            .await
            .expect("finish"),
        "the first claimant can no longer end it"
    );

    // Taken since by another holder: a tick of the job ran after the claimant's
    // lease expired.
    wait_until(a, second.expires_at).await;
    let later = tick(a, 0).await;
    let tick_run = a
        .take(&[TakeRequest::new(lease.clone(), later)], ttl(60_000))
        .await
        .expect("take")
        .won
        .pop()
        .expect("the expired lease is free for a later tick");
    assert_eq!(claim(b, 2, 60_000).await, None, "the lease is held");
    a.release(&[tick_run.key()], Release::Completed)
        .await
        .expect("release");
    let third = claim(b, 2, 60_000)
        .await
        .expect("the claimant's lease passed to another holder");
    assert!(third.token > tick_run.token);
    assert_eq!(third.tick, later, "the later tick taken stays");
    running_under(2).await;

    // Released as completed by its claimant: not claimed again before its finish.
    b.release(&[third.key()], Release::Completed)
        .await
        .expect("release");
    assert_eq!(claim(a, 3, 60_000).await, None, "claimed before its finish");
    assert!(
        controls(b)
            .finish_trigger(trigger.id, Some(&holders[2]), Outcome::Succeeded, None)
            .await
            .expect("finish")
    );
    assert_eq!(claim(a, 3, 60_000).await, None, "done");
}

/// A trigger ends once: pending ones without a holder (refused before a claim),
/// running ones by their claimant only; `trigger_status` reports each state, and
/// `poll` lists only the triggers not done.
pub async fn finish_and_status(a: &SharedStore, b: &SharedStore) {
    let job = "ctl-trigger-finish";
    let lease = name(job);
    let c = controls(a);
    let skipped = c.trigger(&request(job, "alice")).await.expect("trigger");
    let before = a.now().await.expect("clock");
    assert!(
        c.finish_trigger(skipped.id, None, Outcome::Skipped, None)
            .await
            .expect("finish")
    );
    let after = a.now().await.expect("clock");
    match c
        .trigger_status(skipped.id)
        .await
        .expect("status")
        .expect("the trigger")
        .state
    {
        TriggerState::Done {
            outcome,
            error,
            finished_at,
        } => {
            assert_eq!((outcome, error), (Outcome::Skipped, None));
            within(finished_at, before, after, "finished_at");
        }
        other => panic!("not done: {other:?}"),
    }
    assert!(
        !c.finish_trigger(skipped.id, None, Outcome::Succeeded, None)
            .await
            .expect("finish"),
        "ended twice"
    );

    let failing = c.trigger(&request(job, "alice")).await.expect("trigger");
    let holder = Holder::generate();
    let claimed = controls(b)
        .claim_trigger(failing.id, &lease, &holder, ttl(60_000))
        .await
        .expect("claim")
        .expect("free");
    assert_eq!(claimed.holder, holder);
    let status = c
        .trigger_status(failing.id)
        .await
        .expect("status")
        .expect("the trigger");
    assert!(
        matches!(&status.state, TriggerState::Running { holder: h, .. } if *h == holder),
        "{status:?}"
    );
    let open = c.poll(None).await.expect("poll").expect("state").triggers;
    assert!(open.iter().any(|t| t.id == failing.id));
    assert!(open.iter().all(|t| t.id != skipped.id), "done is not open");
    for stranger in [None, Some(Holder::generate())] {
        assert!(
            !c.finish_trigger(failing.id, stranger.as_ref(), Outcome::Succeeded, None)
                .await
                .expect("finish"),
            "ended by {stranger:?}, not its claimant"
        );
    }
    assert!(
        controls(b)
            .finish_trigger(failing.id, Some(&holder), Outcome::Failed, Some("boom"))
            .await
            .expect("finish")
    );
    match c
        .trigger_status(failing.id)
        .await
        .expect("status")
        .expect("the trigger")
        .state
    {
        TriggerState::Done { outcome, error, .. } => {
            assert_eq!((outcome, error.as_deref()), (Outcome::Failed, Some("boom")));
        }
        other => panic!("not done: {other:?}"),
    }
    let open = c.poll(None).await.expect("poll").expect("state").triggers;
    assert!(open.iter().all(|t| t.id != failing.id), "{open:?}");
    assert_eq!(
        c.trigger_status(TriggerId(i64::MAX)).await.expect("status"),
        None
    );
}

/// Every outcome a trigger ends with reads back as written (the store keeps its
/// word, [`Outcome::as_str`]); none is [`Outcome::Unknown`].
pub async fn every_outcome_reads_back(a: &SharedStore) {
    let c = controls(a);
    for &outcome in Outcome::ALL {
        if outcome == Outcome::Unknown {
            continue;
        }
        let trigger = c
            .trigger(&request("ctl-trigger-outcomes", "alice"))
            .await
            .expect("trigger");
        assert!(
            c.finish_trigger(trigger.id, None, outcome, None)
                .await
                .expect("finish")
        );
        let state = c
            .trigger_status(trigger.id)
            .await
            .expect("status")
            .expect("the trigger")
            .state;
        assert!(
            matches!(state, TriggerState::Done { outcome: o, .. } if o == outcome),
            "{outcome}: {state:?}"
        );
    }
}

/// The tick a lease row gets when a trigger's claim creates it: earlier than any
/// real tick.
fn before_any_tick() -> Tick {
    Tick::new(DateTime::UNIX_EPOCH)
}

/// Takes `lease` for `tick` alone, as a new holder.
async fn take_tick(store: &SharedStore, lease: &LeaseName, tick: Tick) -> Taken {
    store
        .take(&[TakeRequest::new(lease.clone(), tick)], ttl(60_000))
        .await
        .expect("take")
}

/// Claims trigger `id` under `lease` as `holder`, the lease lasting `ms`.
async fn claim(
    store: &SharedStore,
    id: TriggerId,
    lease: &LeaseName,
    holder: &Holder,
    ms: u64,
) -> Option<Lease> {
    controls(store)
        .claim_trigger(id, lease, holder, ttl(ms))
        .await
        .expect("claim")
}

/// A triggered run never takes a scheduled tick's place. Claimed while tick `t1` is
/// due but not yet taken (its take late: jitter, a retry), it leaves the lease's
/// tick as it was, and once finished `t1` is taken with the next token; claimed
/// after `t1` was handed back unfinished, it leaves `t1` to be retried.
pub async fn a_trigger_leaves_a_due_tick_takeable(a: &SharedStore, b: &SharedStore) {
    let job = "ctl-trigger-due";
    let lease = name(job);
    // The tick before `t1` ran; `t1` is due, not yet taken.
    let t1 = tick(a, -1).await;
    let t0 = Tick::new(t1.at() - TimeDelta::seconds(1));
    let ran = take_tick(a, &lease, t0).await.won.pop().expect("free");
    a.release(&[ran.key()], Release::Completed)
        .await
        .expect("release");
    // The trigger is asked for after `t1`.
    let trigger = controls(b)
        .trigger(&request(job, "alice"))
        .await
        .expect("trigger");
    assert!(trigger.requested_at > t1.at());
    let holder = Holder::generate();
    let claimed = claim(b, trigger.id, &lease, &holder, 60_000)
        .await
        .expect("the lease is free");
    assert_eq!(claimed.tick, t0, "the lease's tick is left as it was");
    assert_eq!(claimed.token.get(), ran.token.get() + 1);
    let row = lease_row(a, &lease).await.expect("the lease row");
    assert_eq!((row.tick, row.released_at), (t0.at(), None));
    // While the triggered run holds the lease, `t1` waits.
    let waiting = take_tick(a, &lease, t1).await;
    assert!(waiting.won.is_empty(), "{waiting:?}");
    assert!(
        controls(b)
            .finish_trigger(trigger.id, Some(&holder), Outcome::Succeeded, None)
            .await
            .expect("finish")
    );
    // Given back: `t0` completed as it was, and free now.
    let row = lease_row(a, &lease).await.expect("the lease row");
    assert_eq!(row.tick, t0.at());
    assert!(
        row.released_at.is_some(),
        "t0 is no longer completed: {row:?}"
    );
    assert!(row.expires_at <= a.now().await.expect("clock"), "{row:?}");
    let due = take_tick(a, &lease, t1)
        .await
        .won
        .pop()
        .expect("the due tick is taken once the triggered run is finished");
    assert_eq!(due.token.get(), claimed.token.get() + 1);

    // `t1`'s run is handed back unfinished: a trigger run meanwhile leaves `t1` to
    // be retried.
    a.release(&[due.key()], Release::Interrupted)
        .await
        .expect("release");
    let trigger = controls(b)
        .trigger(&request(job, "bob"))
        .await
        .expect("trigger");
    let holder = Holder::generate();
    let claimed = claim(b, trigger.id, &lease, &holder, 60_000)
        .await
        .expect("the lease is free");
    assert_eq!(claimed.tick, t1);
    assert_eq!(claimed.token.get(), due.token.get() + 1);
    assert!(
        controls(a)
            .finish_trigger(trigger.id, Some(&holder), Outcome::Failed, Some("boom"))
            .await
            .expect("finish")
    );
    let row = lease_row(a, &lease).await.expect("the lease row");
    assert_eq!((row.tick, row.released_at), (t1.at(), None), "{row:?}");
    let retried = take_tick(b, &lease, t1)
        .await
        .won
        .pop()
        .expect("an unfinished tick stays retryable");
    assert_eq!(retried.token.get(), claimed.token.get() + 1);
}

/// A trigger claimed after tick `t` completed leaves `t` completed, however the
/// triggered run ends (here `cancelled`): a take of `t` is refused as completed, and
/// the next tick is taken with the next token. So it does after a second claimant
/// took the trigger over from one that vanished mid-run.
pub async fn a_trigger_leaves_a_completed_tick_completed(a: &SharedStore, b: &SharedStore) {
    let job = "ctl-trigger-after";
    let lease = name(job);
    let t = tick(a, 0).await;
    let ran = take_tick(a, &lease, t).await.won.pop().expect("free");
    a.release(&[ran.key()], Release::Completed)
        .await
        .expect("release");
    let trigger = controls(b)
        .trigger(&request(job, "alice"))
        .await
        .expect("trigger");
    let holder = Holder::generate();
    let claimed = claim(b, trigger.id, &lease, &holder, 60_000)
        .await
        .expect("the lease is free");
    assert_eq!(claimed.tick, t, "the lease's tick is left as it was");
    assert_eq!(claimed.token.get(), ran.token.get() + 1);
    assert!(
        controls(b)
            .finish_trigger(
                trigger.id,
                Some(&holder),
                Outcome::Cancelled,
                Some("stopped by the operator")
            )
            .await
            .expect("finish")
    );
    let refused_as_completed = |taken: &Taken, at: Tick| {
        assert!(
            taken.won.is_empty(),
            "a completed tick ran again: {taken:?}"
        );
        let held = taken
            .held
            .iter()
            .find(|h| h.name == lease)
            .unwrap_or_else(|| panic!("not reported held: {taken:?}"));
        assert_eq!((held.tick, held.completed), (at, true), "{taken:?}");
    };
    refused_as_completed(&take_tick(a, &lease, t).await, t);
    let next = Tick::new(t.at() + TimeDelta::seconds(1));
    let ran = take_tick(a, &lease, next)
        .await
        .won
        .pop()
        .expect("the next tick is free");
    assert_eq!(ran.token.get(), claimed.token.get() + 1);
    a.release(&[ran.key()], Release::Completed)
        .await
        .expect("release");

    // The claimant vanishes mid-run (its lease expires unreleased); another instance
    // claims the trigger again and finishes it: `next` stays completed.
    let trigger = controls(b)
        .trigger(&request(job, "bob"))
        .await
        .expect("trigger");
    let (first, second) = (Holder::generate(), Holder::generate());
    let vanished = claim(a, trigger.id, &lease, &first, 300)
        .await
        .expect("the lease is free");
    refused_as_completed(&take_tick(b, &lease, next).await, next);
    wait_until(a, vanished.expires_at).await;
    // Meanwhile the row reads "tick `next`, expired, not released": the completion is
    // the trigger's to put back, and `next` is still done.
    refused_as_completed(&take_tick(b, &lease, next).await, next);
    let again = claim(b, trigger.id, &lease, &second, 60_000)
        .await
        .expect("the claimant's lease expired");
    assert_eq!(again.tick, next);
    assert_eq!(again.token.get(), vanished.token.get() + 1);
    assert!(
        controls(b)
            .finish_trigger(trigger.id, Some(&second), Outcome::Succeeded, None)
            .await
            .expect("finish")
    );
    refused_as_completed(&take_tick(b, &lease, next).await, next);
}

/// A trigger claimed on a lease never used creates its row with a tick earlier than
/// any real one and the first token; once finished, the job's first tick is taken
/// with the next token.
pub async fn a_trigger_on_a_new_lease_leaves_the_first_tick_takeable(
    a: &SharedStore,
    b: &SharedStore,
) {
    let job = "ctl-trigger-new";
    let lease = name(job);
    let trigger = controls(a)
        .trigger(&request(job, "alice"))
        .await
        .expect("trigger");
    let holder = Holder::generate();
    let claimed = claim(b, trigger.id, &lease, &holder, 60_000)
        .await
        .expect("no row: free");
    assert_eq!(
        (claimed.tick, claimed.token.get(), &claimed.holder),
        (before_any_tick(), 1, &holder)
    );
    assert!(
        controls(b)
            .finish_trigger(trigger.id, Some(&holder), Outcome::Succeeded, None)
            .await
            .expect("finish")
    );
    let row = lease_row(a, &lease).await.expect("the lease row");
    assert_eq!(
        (row.tick, row.released_at, row.holder.as_deref()),
        (before_any_tick().at(), None, Some(holder.as_str()))
    );
    assert!(row.expires_at <= a.now().await.expect("clock"), "{row:?}");
    let first = take_tick(a, &lease, tick(a, 0).await)
        .await
        .won
        .pop()
        .expect("the first real tick is free");
    assert_eq!(first.token.get(), 2);
}

/// The finish gives the lease back only to its claimant, and only while it still
/// holds it: a stranger's finish, or one without a holder, ends nothing and leaves
/// the lease held; a pending trigger is ended without a holder only; a claimant
/// whose lease passed to another holder ends its trigger and leaves that holder's
/// lease alone.
pub async fn finish_gives_the_lease_back_to_its_holder_only(a: &SharedStore, b: &SharedStore) {
    let job = "ctl-trigger-give-back";
    let lease = name(job);
    let c = controls(a);
    let trigger = c.trigger(&request(job, "alice")).await.expect("trigger");
    assert!(
        !c.finish_trigger(
            trigger.id,
            Some(&Holder::generate()),
            Outcome::Skipped,
            None
        )
        .await
        .expect("finish"),
        "a pending trigger was ended by a holder"
    );
    assert_eq!(
        c.trigger_status(trigger.id)
            .await
            .expect("status")
            .map(|t| t.state),
        Some(TriggerState::Pending)
    );
    let holder = Holder::generate();
    let claimed = claim(b, trigger.id, &lease, &holder, 2_000)
        .await
        .expect("free");
    let held = lease_row(a, &lease).await.expect("the lease row");
    for stranger in [None, Some(Holder::generate())] {
        assert!(
            !c.finish_trigger(trigger.id, stranger.as_ref(), Outcome::Succeeded, None)
                .await
                .expect("finish"),
            "ended by {stranger:?}, not its claimant"
        );
        assert_eq!(
            lease_row(a, &lease).await.as_ref(),
            Some(&held),
            "{stranger:?}'s finish changed the lease"
        );
    }
    assert!(
        take_tick(a, &lease, tick(a, 0).await).await.won.is_empty(),
        "the triggered run's lease was given back by a stranger"
    );

    // The claimant's lease expires and passes to a tick's run; its finish ends the
    // trigger and leaves the tick's lease held.
    wait_until(a, claimed.expires_at).await;
    let t = tick(a, 1).await;
    let running = take_tick(a, &lease, t)
        .await
        .won
        .pop()
        .expect("the expired lease is free");
    assert!(
        controls(b)
            .finish_trigger(trigger.id, Some(&holder), Outcome::TimedOut, None)
            .await
            .expect("finish"),
        "the trigger still runs under its claimant"
    );
    let row = lease_row(a, &lease).await.expect("the lease row");
    assert_eq!(
        (
            row.holder.as_deref(),
            row.tick,
            row.token,
            row.expires_at,
            row.released_at
        ),
        (
            Some(running.holder.as_str()),
            t.at(),
            running.token.get(),
            running.expires_at,
            None
        ),
        "the finish touched another holder's lease"
    );
    let renewed = a.renew(&[running.key()], ttl(60_000)).await.expect("renew");
    assert_eq!(
        renewed.len(),
        1,
        "the tick's run lost its lease: {renewed:?}"
    );
}

/// A request to stop from a tick no later than the trigger's instant was meant for
/// the run before the trigger (under `cancel running`, the trigger asks it itself):
/// the triggered run's renewals do not report it. A later tick's request, asked of
/// the triggered run, does.
pub async fn a_trigger_is_not_stopped_by_a_request_meant_for_the_run_before(
    a: &SharedStore,
    b: &SharedStore,
) {
    let job = "ctl-trigger-cancel";
    let lease = name(job);
    let t = tick(a, 0).await;
    let running = take_tick(a, &lease, t).await.won.pop().expect("free");
    let trigger = controls(b)
        .trigger(&request(job, "alice"))
        .await
        .expect("trigger");
    let instant = Tick::new(trigger.requested_at);
    assert!(instant > t);
    // The trigger asks the running tick to stop; it stops, handing its tick back.
    assert!(
        b.request_cancel(&lease, instant)
            .await
            .expect("request cancel")
    );
    let renewed = a.renew(&[running.key()], ttl(60_000)).await.expect("renew");
    assert!(renewed[0].cancel_requested, "{renewed:?}");
    a.release(&[running.key()], Release::Interrupted)
        .await
        .expect("release");
    let holder = Holder::generate();
    let claimed = claim(b, trigger.id, &lease, &holder, 60_000)
        .await
        .expect("free");
    let renewed = b.renew(&[claimed.key()], ttl(60_000)).await.expect("renew");
    assert_eq!(renewed.len(), 1, "{renewed:?}");
    assert!(
        !renewed[0].cancel_requested,
        "the triggered run was asked to stop by its own request: {renewed:?}"
    );
    // Asked of the triggered run itself, a tick no later than its instant (the
    // trigger's own request sent late, or a scheduled tick older than the trigger:
    // the row's tick is still the scheduled one before it) does not stop it.
    assert!(
        !a.request_cancel(&lease, instant)
            .await
            .expect("request cancel"),
        "a tick no later than the trigger's instant marked the triggered run"
    );
    let renewed = b.renew(&[claimed.key()], ttl(60_000)).await.expect("renew");
    assert!(!renewed[0].cancel_requested, "{renewed:?}");
    // A later tick asks it to stop.
    a_later_tick_stops_it(a, b, &claimed, instant, trigger.id, &holder).await;
    // `t`, handed back unfinished, is still to be retried.
    let retried = take_tick(a, &lease, t)
        .await
        .won
        .pop()
        .expect("an interrupted tick stays retryable");
    assert_eq!(retried.token.get(), claimed.token.get() + 1);
}

/// A triggered run is asked to stop (`Overlap::CancelRunning`) only by a tick later
/// than its trigger's instant. The lease row keeps the scheduled tick it held before
/// the claim, so a scheduled tick between that one and the trigger's instant (one
/// taken late, by an instance behind) is newer than the row, yet older than the run.
pub async fn a_trigger_is_not_stopped_by_an_older_tick(a: &SharedStore, b: &SharedStore) {
    let job = "ctl-trigger-older-tick";
    let lease = name(job);
    let t = tick(a, -1).await;
    let done = take_tick(a, &lease, t).await.won.pop().expect("free");
    a.release(&[done.key()], Release::Completed)
        .await
        .expect("release");
    let trigger = controls(b)
        .trigger(&request(job, "alice"))
        .await
        .expect("trigger");
    let instant = Tick::new(trigger.requested_at);
    let holder = Holder::generate();
    let claimed = claim(b, trigger.id, &lease, &holder, 60_000)
        .await
        .expect("free");
    // Due before the trigger was asked for: it does not cut the triggered run.
    let between = Tick::new(instant.at() - TimeDelta::milliseconds(500));
    assert!(between > t, "{between:?} after {t:?}");
    for older in [between, instant] {
        assert!(
            !a.request_cancel(&lease, older)
                .await
                .expect("request cancel"),
            "the tick {older:?}, no later than the trigger, asked its run to stop"
        );
    }
    let renewed = b.renew(&[claimed.key()], ttl(60_000)).await.expect("renew");
    assert_eq!(renewed.len(), 1, "{renewed:?}");
    assert!(!renewed[0].cancel_requested, "{renewed:?}");
    // A later tick does.
    a_later_tick_stops_it(a, b, &claimed, instant, trigger.id, &holder).await;
}

/// A tick a second after `instant` asks the triggered run holding `claimed` (trigger
/// `id`, as `holder`) to stop; the run sees it at its renewal and finishes cancelled.
async fn a_later_tick_stops_it(
    a: &SharedStore,
    b: &SharedStore,
    claimed: &Lease,
    instant: Tick,
    id: TriggerId,
    holder: &Holder,
) {
    let later = Tick::new(instant.at() + TimeDelta::seconds(1));
    assert!(
        a.request_cancel(&claimed.name, later)
            .await
            .expect("request cancel")
    );
    let renewed = b.renew(&[claimed.key()], ttl(60_000)).await.expect("renew");
    assert!(renewed[0].cancel_requested, "{renewed:?}");
    assert!(
        controls(b)
            .finish_trigger(id, Some(holder), Outcome::CancelledByNewer, None)
            .await
            .expect("finish")
    );
}

/// The change `watcher` sees since version `seen`, which becomes the new version;
/// asserts that there is one, and none after it.
async fn changed(watcher: &dyn Controls, seen: &mut i64) -> ControlState {
    let state = watcher
        .poll(Some(*seen))
        .await
        .expect("poll")
        .expect("a change was made");
    assert!(state.version > *seen, "{state:?} after {seen}");
    *seen = state.version;
    assert_eq!(watcher.poll(Some(*seen)).await.expect("poll"), None);
    state
}

/// `poll` answers `None` while nothing changed, and the change after each control:
/// the pauses in force, the resumes since, the open triggers, the schedules changed
/// since (a removed one as a tombstone, which `schedules()` and a full poll leave
/// out).
pub async fn poll_sees_each_change(a: &SharedStore, b: &SharedStore) {
    let job = "ctl-polled";
    let (c, watcher) = (controls(a), controls(b));
    let mut seen = version(b).await;
    assert_eq!(
        watcher.poll(Some(seen)).await.expect("poll"),
        None,
        "unchanged"
    );

    c.pause(&request(job, "alice")).await.expect("pause");
    let state = changed(watcher, &mut seen).await;
    assert!(
        state
            .paused
            .iter()
            .any(|p| p.job == job && p.node.is_none())
    );

    c.resume(&request(job, "alice"), true)
        .await
        .expect("resume");
    let state = changed(watcher, &mut seen).await;
    assert!(state.paused.iter().all(|p| p.job != job));
    assert!(state.resumed.iter().any(|r| r.job == job && r.catch_up));

    let trigger = c.trigger(&request(job, "alice")).await.expect("trigger");
    let state = changed(watcher, &mut seen).await;
    assert!(state.triggers.iter().any(|t| t.id == trigger.id));

    c.register_handlers("n1", &["ctl-poll-handler".to_owned()])
        .await
        .expect("register");
    let mut row = ScheduleRow::new("ctl-dynamic", "ctl-poll-handler", "every 30s");
    row.args = r#"{"region": "eu"}"#.to_owned();
    let put = c
        .put_schedule(&row, "alice", "new report")
        .await
        .expect("put");
    assert_eq!(
        (put.action, put.job.as_str()),
        (ControlAction::SchedulePut, "ctl-dynamic")
    );
    assert!(put.detail.contains("every 30s"), "{put:?}");
    let state = changed(watcher, &mut seen).await;
    let stored = state
        .schedules
        .iter()
        .find(|s| s.name == "ctl-dynamic")
        .expect("the new schedule");
    assert_eq!(
        (
            stored.handler.as_str(),
            stored.schedule.as_str(),
            stored.enabled,
            stored.removed
        ),
        ("ctl-poll-handler", "every 30s", true, false)
    );
    assert_eq!(stored.version, state.version);
    assert!(stored.updated_at.is_some());
    let listed = c.schedules().await.expect("schedules");
    assert!(listed.iter().any(|s| s.name == "ctl-dynamic"));

    let removed = c
        .remove_schedule("ctl-dynamic", "bob", "obsolete")
        .await
        .expect("remove")
        .expect("there was one");
    assert_eq!(removed.action, ControlAction::ScheduleRemove);
    let state = changed(watcher, &mut seen).await;
    let tombstone = state
        .schedules
        .iter()
        .find(|s| s.name == "ctl-dynamic")
        .expect("the removed schedule, as a tombstone");
    assert!(tombstone.removed);
    let listed = c.schedules().await.expect("schedules");
    assert!(listed.iter().all(|s| s.name != "ctl-dynamic"), "{listed:?}");
    let full = c.poll(None).await.expect("poll").expect("state");
    assert!(full.schedules.iter().all(|s| s.name != "ctl-dynamic"));

    // Removing what is not there is no change.
    assert_eq!(
        c.remove_schedule("ctl-dynamic", "bob", "again")
            .await
            .expect("remove"),
        None
    );
    assert_eq!(watcher.poll(Some(seen)).await.expect("poll"), None);
}

/// A dynamic schedule that cannot run is refused before anything is stored: an
/// unknown handler, a bad cron expression, duration or zone, arguments that are
/// not JSON, a bad policy, a bad name. Nothing is stored, recorded or bumped.
pub async fn bad_schedules_store_nothing(a: &SharedStore) {
    let c = controls(a);
    let handler = "ctl-known-handler";
    c.register_handlers("n1", &[handler.to_owned()])
        .await
        .expect("register");
    let since = version(a).await;
    let good = || ScheduleRow::new("ctl-bad", handler, "0 0 9 * * Mon-Fri");

    let unknown = ScheduleRow::new("ctl-bad", "ctl-nobody-runs-this", "every 1m");
    match c.put_schedule(&unknown, "alice", "").await {
        Err(Error::UnknownHandler {
            handler: asked,
            known,
        }) => {
            assert_eq!(asked, "ctl-nobody-runs-this");
            assert!(known.contains(handler), "{known}");
        }
        other => panic!("an unknown handler was accepted: {other:?}"),
    }
    let mut cases: Vec<(&str, ScheduleRow)> = Vec::new();
    cases.push(("cron", ScheduleRow::new("ctl-bad", handler, "not cron")));
    cases.push((
        "duration",
        ScheduleRow::new("ctl-bad", handler, "every soon"),
    ));
    let mut zoned = good();
    zoned.zone = Some("Mars/Olympus_Mons".to_owned());
    cases.push(("zone", zoned));
    let mut json = good();
    json.args = "{not json".to_owned();
    cases.push(("json", json));
    let mut policy = good();
    policy.policy = "overlap = sometimes".to_owned();
    cases.push(("policy", policy));
    cases.push(("name", ScheduleRow::new("", handler, "every 1m")));
    for (what, row) in &cases {
        let err = c
            .put_schedule(row, "alice", "")
            .await
            .expect_err(&format!("a bad {what} was accepted"));
        let expected = match *what {
            "cron" | "duration" | "zone" => matches!(err, Error::InvalidSchedule { .. }),
            "json" | "policy" => matches!(err, Error::InvalidControl { .. }),
            _ => matches!(err, Error::InvalidName { .. }),
        };
        assert!(expected, "bad {what}: {err:?}");
    }
    assert_eq!(
        c.poll(Some(since)).await.expect("poll"),
        None,
        "a refused schedule changed the store"
    );
    assert!(
        c.schedules()
            .await
            .expect("schedules")
            .iter()
            .all(|s| s.name != "ctl-bad")
    );
    assert!(
        c.control_history(Some("ctl-bad"), Page::default())
            .await
            .expect("history")
            .is_empty()
    );

    // The good one goes through; its handler is listed.
    assert!(
        c.handlers()
            .await
            .expect("handlers")
            .contains(&handler.to_owned())
    );
    c.put_schedule(&good(), "alice", "").await.expect("put");
    assert!(
        c.schedules()
            .await
            .expect("schedules")
            .iter()
            .any(|s| s.name == "ctl-bad")
    );
}

/// The reads a dashboard makes, each without reading every schedule: `paused()`
/// lists the pauses in force (a resumed one gone), `open_triggers()` the triggers not
/// done, `schedule(name)` one live schedule (not a removed one), and
/// `schedules_page(after, limit)` the live schedules by name in pages that, walked
/// to the end, give `schedules()`. Each agrees with what a full poll says, and none
/// of them changes the store.
pub async fn reads_for_dashboards(a: &SharedStore, b: &SharedStore) {
    let (c, reader) = (controls(a), controls(b));
    let handler = "ctl-dash-handler";
    c.register_handlers("n1", &[handler.to_owned()])
        .await
        .expect("register");
    // Put out of order; `d` disabled, `b` removed.
    for name in ["ctl-dash-c", "ctl-dash-a", "ctl-dash-d", "ctl-dash-b"] {
        let mut row = ScheduleRow::new(name, handler, "every 30s");
        row.enabled = name != "ctl-dash-d";
        c.put_schedule(&row, "alice", "").await.expect("put");
    }
    c.remove_schedule("ctl-dash-b", "bob", "")
        .await
        .expect("remove")
        .expect("there was one");

    // One schedule.
    let full = reader.schedules().await.expect("schedules");
    let a_row = reader
        .schedule("ctl-dash-a")
        .await
        .expect("schedule")
        .expect("a live schedule");
    assert_eq!(Some(&a_row), full.iter().find(|r| r.name == "ctl-dash-a"));
    assert_eq!(
        (a_row.handler.as_str(), a_row.enabled, a_row.removed),
        (handler, true, false)
    );
    let d_row = reader
        .schedule("ctl-dash-d")
        .await
        .expect("schedule")
        .expect("a disabled schedule is still a schedule");
    assert!(!d_row.enabled);
    for gone in ["ctl-dash-b", "ctl-dash-none"] {
        assert_eq!(
            reader.schedule(gone).await.expect("schedule"),
            None,
            "{gone}: removed or never put"
        );
    }

    // Pages, by name: the removed one left out, each page at most `limit` long.
    let names = |rows: &[ScheduleRow]| rows.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
    let page = async |after: Option<&str>, limit: u32| {
        let rows = reader.schedules_page(after, limit).await.expect("page");
        assert!(rows.len() <= limit as usize, "{limit}: {rows:?}");
        rows
    };
    assert_eq!(
        names(&page(Some("ctl-dash-"), 2).await),
        ["ctl-dash-a", "ctl-dash-c"]
    );
    let next = page(Some("ctl-dash-c"), 2).await;
    assert_eq!(next.first(), Some(&d_row), "{next:?}");
    assert_eq!(
        names(&page(Some("ctl-dash-a"), 1).await),
        ["ctl-dash-c"],
        "the removed schedule between them takes no place"
    );
    assert!(page(None, 0).await.is_empty());
    // Walked from the first page to the end, the pages are `schedules()`.
    let mut walked = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let rows = page(after.as_deref(), 2).await;
        let Some(last) = rows.last() else { break };
        after = Some(last.name.clone());
        walked.extend(rows);
    }
    assert_eq!(names(&walked), names(&full));
    assert!(walked.iter().all(|r| !r.removed));

    // Pauses: listed while in force, as a full poll lists them.
    c.pause(&request("ctl-dash-a", "alice").why("deploy"))
        .await
        .expect("pause");
    c.pause(&request("ctl-dash-c", "alice").node("n2"))
        .await
        .expect("pause n2");
    let paused = reader.paused().await.expect("paused");
    let full = reader.poll(None).await.expect("poll").expect("state");
    assert_eq!(paused, full.paused);
    let mine = |paused: &[Pause]| {
        paused
            .iter()
            .filter(|p| p.job.starts_with("ctl-dash-"))
            .map(|p| format!("{} on {:?} by {} for {:?}", p.job, p.node, p.by, p.why))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        mine(&paused),
        [
            r#"ctl-dash-a on None by alice for "deploy""#,
            r#"ctl-dash-c on Some("n2") by alice for """#,
        ]
    );
    c.resume(&request("ctl-dash-a", "bob"), true)
        .await
        .expect("resume");
    assert_eq!(
        mine(&reader.paused().await.expect("paused")),
        [r#"ctl-dash-c on Some("n2") by alice for """#],
        "a resumed pause is gone"
    );
    c.resume(&request("ctl-dash-c", "bob").node("n2"), false)
        .await
        .expect("resume n2");
    assert!(mine(&reader.paused().await.expect("paused")).is_empty());

    // Open triggers: listed until done, as a full poll lists them.
    let trigger = c
        .trigger(&request("ctl-dash-a", "alice"))
        .await
        .expect("trigger");
    let open = reader.open_triggers().await.expect("open triggers");
    assert!(open.iter().any(|t| t.id == trigger.id), "{open:?}");
    let full = reader.poll(None).await.expect("poll").expect("state");
    assert_eq!(open, full.triggers);
    assert!(
        c.finish_trigger(trigger.id, None, Outcome::Skipped, None)
            .await
            .expect("finish")
    );
    let open = reader.open_triggers().await.expect("open triggers");
    assert!(open.iter().all(|t| t.id != trigger.id), "{open:?}");

    // A removed schedule put again is listed again.
    c.put_schedule(
        &ScheduleRow::new("ctl-dash-b", handler, "every 1m"),
        "alice",
        "",
    )
    .await
    .expect("put again");
    let again = reader
        .schedule("ctl-dash-b")
        .await
        .expect("schedule")
        .expect("put again");
    assert_eq!(again.schedule, "every 1m");
    assert_eq!(names(&page(Some("ctl-dash-a"), 1).await), ["ctl-dash-b"]);

    // Reading changes nothing.
    let seen = version(b).await;
    reader.paused().await.expect("paused");
    reader.open_triggers().await.expect("open triggers");
    reader.schedule("ctl-dash-a").await.expect("schedule");
    reader.schedules_page(None, 10).await.expect("page");
    assert_eq!(reader.poll(Some(seen)).await.expect("poll"), None);
}

/// The jobs each instance runs are registered (per node, any number of times, each
/// name once in the reading, changing no control version), and the jobs the store
/// knows of are those, the dynamic schedules not removed and the jobs of the leases
/// (a node lease's job without its node, a slot's without its number).
pub async fn jobs_are_known_by_registration_schedule_and_lease(a: &SharedStore, b: &SharedStore) {
    let (ca, cb) = (controls(a), controls(b));
    let seen = version(a).await;
    ca.register_jobs("n1", &["ctl-known-b".to_owned(), "ctl-known-a".to_owned()])
        .await
        .expect("register");
    cb.register_jobs("n2", &["ctl-known-a".to_owned(), "ctl-known-a".to_owned()])
        .await
        .expect("register again, elsewhere");
    ca.register_jobs("n1", &["ctl-known-b".to_owned(), "ctl-known-a".to_owned()])
        .await
        .expect("register again");
    assert_eq!(
        ca.poll(Some(seen)).await.expect("poll"),
        None,
        "no control changed"
    );
    let jobs = cb.jobs().await.expect("jobs");
    let ours: Vec<&str> = jobs
        .iter()
        .map(String::as_str)
        .filter(|j| j.starts_with("ctl-known-"))
        .collect();
    assert_eq!(ours, ["ctl-known-a", "ctl-known-b"], "sorted, each once");
    assert!(matches!(
        ca.register_jobs("n1", &["bad\u{0}name".to_owned()]).await,
        Err(Error::InvalidName { .. })
    ));

    ca.register_handlers("n1", &["ctl-known-handler".to_owned()])
        .await
        .expect("register handlers");
    for row in ["ctl-known-dynamic", "ctl-known-removed"] {
        ca.put_schedule(
            &ScheduleRow::new(row, "ctl-known-handler", "every 1h"),
            "ops",
            "",
        )
        .await
        .expect("put");
    }
    ca.remove_schedule("ctl-known-removed", "ops", "")
        .await
        .expect("remove");
    let t = tick(a, 0).await;
    let leases = [
        "ctl-known-ran",
        "ctl-known-node:n1",
        "ctl-known-slot\\#1",
        "ctl-known\\:colon",
    ];
    let requests: Vec<TakeRequest> = leases
        .iter()
        .map(|lease| TakeRequest::new(name(lease), t))
        .collect();
    assert_eq!(
        a.take(&requests, ttl(60_000))
            .await
            .expect("take")
            .won
            .len(),
        leases.len()
    );
    let known = cb.known_jobs().await.expect("known jobs");
    let ours: Vec<&str> = known
        .iter()
        .map(String::as_str)
        .filter(|j| j.starts_with("ctl-known"))
        .collect();
    assert_eq!(
        ours,
        [
            "ctl-known-a",
            "ctl-known-b",
            "ctl-known-dynamic",
            "ctl-known-node",
            "ctl-known-ran",
            "ctl-known-slot",
            "ctl-known:colon",
        ],
        "sorted, each once; not the removed schedule"
    );
}

/// Every rule above, in turn, on one store (and its other handles).
pub async fn all(stores: &[SharedStore]) {
    let (a, b) = (&stores[0], &stores[1 % stores.len()]);
    pause_refuses_the_take(a, b).await;
    node_pause_refuses_only_that_node(a, b).await;
    resume_ends_the_pause(a, b).await;
    a_pause_caught_up_is_left_to_its_catch_up(a, b).await;
    history_records_who_when_why(a).await;
    trigger_is_claimed_exactly_once(stores).await;
    claim_waits_for_a_held_lease(a, b).await;
    claim_is_taken_over_after_the_claimant_vanished(a, b).await;
    finish_and_status(a, b).await;
    every_outcome_reads_back(a).await;
    a_trigger_leaves_a_due_tick_takeable(a, b).await;
    a_trigger_leaves_a_completed_tick_completed(a, b).await;
    a_trigger_on_a_new_lease_leaves_the_first_tick_takeable(a, b).await;
    finish_gives_the_lease_back_to_its_holder_only(a, b).await;
    a_trigger_is_not_stopped_by_a_request_meant_for_the_run_before(a, b).await;
    a_trigger_is_not_stopped_by_an_older_tick(a, b).await;
    poll_sees_each_change(a, b).await;
    bad_schedules_store_nothing(a).await;
    reads_for_dashboards(a, b).await;
    jobs_are_known_by_registration_schedule_and_lease(a, b).await;
}
