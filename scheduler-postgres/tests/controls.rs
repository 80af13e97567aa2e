//! The operators' controls on PostgreSQL (`Controls` for `PostgresStore`): a pause is a
//! condition of the batched take (refused, reported as paused, the lease row left
//! alone), on every node or on one; every control recorded with who, when and why; a
//! trigger claimed exactly once among concurrent claimers, under the job's own lease,
//! and again only once its claimant's lease expired unreleased; the control version
//! polled cheaply; dynamic schedules checked before anything is stored, removed as
//! tombstones; leases and runs listed; a table lacking the controls migration refused
//! at open.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use scheduler_core::{
    ControlAction, ControlRequest, Controls, Holder, LeaseName, Outcome, Page, Release,
    ScheduleRow, Scope, Store, TakeRequest, Taken, Tick, TriggerId, TriggerState, Ttl,
};
use scheduler_postgres::{HistoryOptions, PostgresOptions, PostgresStore, RunHistory};
use sea_orm::{ConnectionTrait, DatabaseConnection};
use test_postgres::TestDb;

async fn store(db: &TestDb) -> PostgresStore {
    PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("connect")
}

fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(600)).expect("ttl")
}

fn name(text: &str) -> LeaseName {
    LeaseName::new(text).expect("name")
}

/// A tick `offset` seconds from the store's clock.
async fn tick(store: &PostgresStore, offset: i64) -> Tick {
    Tick::new(store.now().await.expect("now") + TimeDelta::seconds(offset))
}

/// Takes `lease` (job `job`, asked by `node`) for `tick`.
async fn take(store: &PostgresStore, lease: &str, job: &str, node: &str, tick: Tick) -> Taken {
    let request = TakeRequest::new(name(lease), tick).controlled_by(job, node);
    store.take(&[request], ttl()).await.expect("take")
}

/// Takes like [`take`], and releases what it won as completed (the run ended).
async fn run(store: &PostgresStore, lease: &str, job: &str, node: &str, tick: Tick) -> Taken {
    let taken = take(store, lease, job, node, tick).await;
    let keys: Vec<_> = taken.won.iter().map(scheduler_core::Lease::key).collect();
    store
        .release(&keys, Release::Completed)
        .await
        .expect("release");
    taken
}

fn won(taken: &Taken) -> Vec<&str> {
    taken.won.iter().map(|l| l.name.as_str()).collect()
}

fn paused(taken: &Taken) -> Vec<&str> {
    taken.paused.iter().map(LeaseName::as_str).collect()
}

fn controls(store: &PostgresStore) -> &dyn Controls {
    store
        .controls()
        .expect("the PostgreSQL store keeps controls")
}

async fn inspect(db: &TestDb) -> DatabaseConnection {
    test_postgres::inspect(db.url()).await
}

async fn exec(conn: &DatabaseConnection, sql: &str) {
    conn.execute_unprepared(sql).await.expect(sql);
}

/// The lease rows as the store lists them, one of them by name.
async fn lease_row(store: &PostgresStore, lease: &str) -> scheduler_core::LeaseRow {
    controls(store)
        .leases()
        .await
        .expect("leases")
        .into_iter()
        .find(|row| row.name == lease)
        .unwrap_or_else(|| panic!("no lease row {lease}"))
}

#[tokio::test]
async fn a_paused_job_is_refused_by_the_take_and_its_lease_row_is_untouched() {
    let db = TestDb::new().await;
    let store = store(&db).await;
    let c = controls(&store);
    // The job ran once: its row holds tick 0, released.
    let t0 = tick(&store, 0).await;
    let first = take(&store, "report", "report", "node-a", t0).await;
    assert_eq!(won(&first), ["report"]);
    store
        .release(&[first.won[0].key()], Release::Completed)
        .await
        .expect("release");
    let before = lease_row(&store, "report").await;

    let record = c
        .pause(&ControlRequest::new("report", "alice").why("month-end freeze"))
        .await
        .expect("pause");
    assert_eq!(record.action, ControlAction::Pause);
    assert_eq!(
        (
            record.job.as_str(),
            record.node.as_deref(),
            record.by.as_str(),
            record.why.as_str()
        ),
        ("report", None, "alice", "month-end freeze")
    );

    // Refused in one batch with a job that is not paused, and with a request that
    // names no job (no pause applies to it).
    let t1 = tick(&store, 1).await;
    let requests = [
        TakeRequest::new(name("report"), t1).controlled_by("report", "node-a"),
        TakeRequest::new(name("sweep"), t1).controlled_by("sweep", "node-a"),
        TakeRequest::new(name("unnamed"), t1),
    ];
    let taken = store.take(&requests, ttl()).await.expect("take");
    assert_eq!(paused(&taken), ["report"]);
    let mut winners = won(&taken);
    winners.sort_unstable();
    assert_eq!(winners, ["sweep", "unnamed"]);
    assert!(taken.held.is_empty(), "{:?}", taken.held);
    assert_eq!(
        lease_row(&store, "report").await,
        before,
        "the row was touched"
    );
    // A second pause records the request and changes nothing else.
    let again = c
        .pause(&ControlRequest::new("report", "bob").why("again"))
        .await
        .expect("pause again");
    assert!(again.id > record.id);
    let state = c.poll(None).await.expect("poll").expect("state");
    assert_eq!(state.paused.len(), 1);
    assert_eq!(state.paused[0].by, "alice");
    assert_eq!(state.paused[0].why, "month-end freeze");

    // Resumed: the take goes through, with the next token.
    let resumed = c
        .resume(
            &ControlRequest::new("report", "carol").why("freeze over"),
            true,
        )
        .await
        .expect("resume");
    assert_eq!(resumed.action, ControlAction::Resume);
    let t2 = tick(&store, 2).await;
    let taken = take(&store, "report", "report", "node-a", t2).await;
    assert_eq!(won(&taken), ["report"]);
    assert!(taken.paused.is_empty());
    assert_eq!(taken.won[0].token.get(), before.token + 1);

    // Paused and resumed without catch-up: recorded as such. Resuming a job that is
    // not paused records the request too.
    c.pause(&ControlRequest::new("report", "dave"))
        .await
        .expect("pause");
    let dropped = c
        .resume(
            &ControlRequest::new("report", "dave").why("skip the backlog"),
            false,
        )
        .await
        .expect("resume");
    assert_eq!(dropped.action, ControlAction::ResumeWithoutCatchUp);
    c.resume(&ControlRequest::new("report", "erin"), true)
        .await
        .expect("resume a running job");

    let history = c
        .control_history(Some("report"), Page::default())
        .await
        .expect("history");
    let actions: Vec<(ControlAction, &str, &str)> = history
        .iter()
        .map(|r| (r.action, r.by.as_str(), r.why.as_str()))
        .collect();
    assert_eq!(
        actions,
        [
            (ControlAction::Resume, "erin", ""),
            (
                ControlAction::ResumeWithoutCatchUp,
                "dave",
                "skip the backlog"
            ),
            (ControlAction::Pause, "dave", ""),
            (ControlAction::Resume, "carol", "freeze over"),
            (ControlAction::Pause, "bob", "again"),
            (ControlAction::Pause, "alice", "month-end freeze"),
        ]
    );
    assert!(
        history
            .windows(2)
            .all(|w| w[0].id > w[1].id && w[0].at >= w[1].at)
    );
    // Paged by id, newest first.
    let page = c
        .control_history(
            Some("report"),
            Page {
                before: Some(history[1].id),
                limit: 2,
            },
        )
        .await
        .expect("page");
    assert_eq!(page, history[2..4]);
    assert!(
        c.control_history(Some("sweep"), Page::default())
            .await
            .expect("history")
            .is_empty()
    );
    assert_eq!(
        c.control_history(None, Page::default())
            .await
            .expect("all")
            .len(),
        6
    );
}

#[tokio::test]
async fn a_pause_on_one_node_refuses_only_that_nodes_takes() {
    let db = TestDb::new().await;
    let store = store(&db).await;
    let c = controls(&store);
    let lease_on = |node: &str| {
        LeaseName::for_job("uptime", Scope::Node, node)
            .expect("name")
            .as_str()
            .to_owned()
    };
    let (on_a, on_b) = (lease_on("a"), lease_on("b"));
    c.pause(&ControlRequest::new("uptime", "alice").node("a"))
        .await
        .expect("pause on a");
    let t = tick(&store, 0).await;
    assert_eq!(
        paused(&run(&store, &on_a, "uptime", "a", t).await),
        [on_a.as_str()]
    );
    assert_eq!(
        won(&run(&store, &on_b, "uptime", "b", t).await),
        [on_b.as_str()]
    );

    // Everywhere: both nodes refused.
    c.pause(&ControlRequest::new("uptime", "alice"))
        .await
        .expect("pause everywhere");
    let t = tick(&store, 1).await;
    assert_eq!(
        paused(&run(&store, &on_b, "uptime", "b", t).await),
        [on_b.as_str()]
    );
    let state = c.poll(None).await.expect("poll").expect("state");
    let mut nodes: Vec<Option<&str>> = state.paused.iter().map(|p| p.node.as_deref()).collect();
    nodes.sort_unstable();
    assert_eq!(nodes, [None, Some("a")]);

    // Resuming one node leaves the pause for every node in force.
    c.resume(&ControlRequest::new("uptime", "alice").node("b"), true)
        .await
        .expect("resume on b");
    let t = tick(&store, 2).await;
    assert_eq!(
        paused(&run(&store, &on_b, "uptime", "b", t).await),
        [on_b.as_str()]
    );
    // Resuming without a node ends every pause of the job, each node's included.
    let record = c
        .resume(&ControlRequest::new("uptime", "alice"), true)
        .await
        .expect("resume everywhere");
    assert_eq!(record.node, None);
    assert_eq!(
        won(&run(&store, &on_b, "uptime", "b", t).await),
        [on_b.as_str()]
    );
    assert_eq!(
        won(&run(&store, &on_a, "uptime", "a", t).await),
        [on_a.as_str()]
    );
    let state = c.poll(None).await.expect("poll").expect("state");
    assert!(state.paused.is_empty(), "{:?}", state.paused);
    let mut resumed: Vec<Option<&str>> = state.resumed.iter().map(|r| r.node.as_deref()).collect();
    resumed.sort_unstable();
    assert_eq!(resumed, [None, Some("a")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_trigger_is_claimed_exactly_once_and_runs_under_the_jobs_lease() {
    const CLAIMERS: usize = 8;
    let db = TestDb::new().await;
    // Four instances, two claimers each.
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(Arc::new(store(&db).await));
    }
    let c = controls(&stores[0]);
    let trigger = c
        .trigger(&ControlRequest::new("payout", "alice").why("customer asked"))
        .await
        .expect("trigger");
    assert_eq!(trigger.state, TriggerState::Pending);
    assert_eq!(
        c.trigger_status(trigger.id).await.expect("status"),
        Some(trigger.clone())
    );
    // The job ran a scheduled tick before: its row is released.
    let t0 = tick(&stores[0], -60).await;
    let ran = take(&stores[0], "payout", "payout", "a", t0).await;
    stores[0]
        .release(&[ran.won[0].key()], Release::Completed)
        .await
        .expect("release");
    let token_before = ran.won[0].token.get();

    let barrier = Arc::new(tokio::sync::Barrier::new(CLAIMERS));
    let mut tasks = Vec::new();
    for i in 0..CLAIMERS {
        let store = stores[i % stores.len()].clone();
        let barrier = barrier.clone();
        let id = trigger.id;
        tasks.push(tokio::spawn(async move {
            let holder = Holder::generate();
            barrier.wait().await;
            let lease = controls(&store)
                .claim_trigger(id, &name("payout"), &holder, ttl())
                .await
                .expect("claim");
            (holder, lease)
        }));
    }
    let mut claims = Vec::new();
    for task in tasks {
        let (holder, lease) = task.await.expect("task");
        if let Some(lease) = lease {
            claims.push((holder, lease));
        }
    }
    assert_eq!(claims.len(), 1, "{claims:?}");
    let (holder, lease) = claims.pop().expect("one claim");
    assert_eq!(lease.holder, holder);
    assert_eq!(lease.token.get(), token_before + 1);
    // The lease keeps its tick: a triggered run's tick is the trigger's instant, and
    // never a scheduled tick's.
    assert_eq!(lease.tick, t0);
    let Some(TriggerState::Running {
        holder: running, ..
    }) = c
        .trigger_status(trigger.id)
        .await
        .expect("status")
        .map(|t| t.state)
    else {
        panic!("not running");
    };
    assert_eq!(running, holder);
    // While it runs, nobody claims it again, and the job's scheduled take waits.
    assert!(
        c.claim_trigger(trigger.id, &name("payout"), &Holder::generate(), ttl())
            .await
            .expect("claim")
            .is_none()
    );
    let t1 = tick(&stores[0], 0).await;
    assert!(won(&take(&stores[0], "payout", "payout", "a", t1).await).is_empty());

    // Only its holder ends it.
    assert!(
        !c.finish_trigger(
            trigger.id,
            Some(&Holder::generate()),
            Outcome::Succeeded,
            None
        )
        .await
        .expect("finish")
    );
    assert!(
        !c.finish_trigger(trigger.id, None, Outcome::Succeeded, None)
            .await
            .expect("finish")
    );
    // Its finish gives the lease back: the scheduled tick that waited is free.
    assert!(
        c.finish_trigger(trigger.id, Some(&holder), Outcome::Succeeded, None)
            .await
            .expect("finish")
    );
    let Some(TriggerState::Done { outcome, error, .. }) = c
        .trigger_status(trigger.id)
        .await
        .expect("status")
        .map(|t| t.state)
    else {
        panic!("not done");
    };
    assert_eq!((outcome, error), (Outcome::Succeeded, None));
    // Done is done.
    assert!(
        c.claim_trigger(trigger.id, &name("payout"), &Holder::generate(), ttl())
            .await
            .expect("claim")
            .is_none()
    );
    // The scheduled tick that waited takes the lease with the next token.
    let next = take(&stores[0], "payout", "payout", "a", t1).await;
    assert_eq!(won(&next), ["payout"]);
    assert_eq!(next.won[0].token.get(), lease.token.get() + 1);

    let history = c
        .control_history(Some("payout"), Page::default())
        .await
        .expect("history");
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].action, ControlAction::Trigger);
    assert_eq!(history[0].detail, trigger.id.to_string());
}

#[tokio::test]
async fn a_trigger_waits_for_the_running_tick_and_is_claimed_again_after_its_claimant_died() {
    let db = TestDb::new().await;
    let store = store(&db).await;
    let c = controls(&store);
    let conn = inspect(&db).await;
    // A scheduled tick runs, an hour ahead of the trigger: the lease is held.
    let ahead = tick(&store, 3600).await;
    let running = take(&store, "export", "export", "a", ahead).await;
    assert_eq!(won(&running), ["export"]);
    let trigger = c
        .trigger(&ControlRequest::new("export", "alice"))
        .await
        .expect("trigger");
    assert!(
        c.claim_trigger(trigger.id, &name("export"), &Holder::generate(), ttl())
            .await
            .expect("claim")
            .is_none(),
        "claimed while the job's lease was held"
    );
    assert_eq!(
        c.trigger_status(trigger.id)
            .await
            .expect("status")
            .map(|t| t.state),
        Some(TriggerState::Pending)
    );
    store
        .release(&[running.won[0].key()], Release::Completed)
        .await
        .expect("release");

    // Free: claimed, and the lease keeps its tick.
    let first = Holder::generate();
    let claimed = c
        .claim_trigger(trigger.id, &name("export"), &first, ttl())
        .await
        .expect("claim")
        .expect("claimed once the tick released");
    assert_eq!(claimed.tick, ahead);
    assert_eq!(claimed.token.get(), running.won[0].token.get() + 1);
    // Under another lease name, never: the claim is this lease's.
    assert!(
        c.claim_trigger(trigger.id, &name("export-2"), &Holder::generate(), ttl())
            .await
            .expect("claim")
            .is_none()
    );

    // The claimant dies: its lease expires unreleased. Claimed again, once.
    exec(
        &conn,
        "UPDATE scheduler_leases SET expires_at = now() - interval '1 second' \
         WHERE name = 'export'",
    )
    .await;
    let second = Holder::generate();
    let again = c
        .claim_trigger(trigger.id, &name("export"), &second, ttl())
        .await
        .expect("claim")
        .expect("claimed again after the claimant's lease expired");
    assert_eq!(again.token.get(), claimed.token.get() + 1);
    assert!(
        c.claim_trigger(trigger.id, &name("export"), &Holder::generate(), ttl())
            .await
            .expect("claim")
            .is_none()
    );
    // The dead claimant cannot end it; the new one can.
    assert!(
        !c.finish_trigger(trigger.id, Some(&first), Outcome::Succeeded, None)
            .await
            .expect("finish")
    );
    assert!(
        c.finish_trigger(
            trigger.id,
            Some(&second),
            Outcome::Failed,
            Some("disk full")
        )
        .await
        .expect("finish")
    );
    let Some(TriggerState::Done { outcome, error, .. }) = c
        .trigger_status(trigger.id)
        .await
        .expect("status")
        .map(|t| t.state)
    else {
        panic!("not done");
    };
    assert_eq!(
        (outcome.as_str(), error.as_deref()),
        ("failed", Some("disk full"))
    );

    // A pending trigger refused before any claim is ended without a holder.
    let refused = c
        .trigger(&ControlRequest::new("export", "bob"))
        .await
        .expect("trigger");
    assert!(
        c.finish_trigger(refused.id, None, Outcome::Skipped, None)
            .await
            .expect("finish")
    );
    assert!(
        c.trigger_status(TriggerId(refused.id.0 + 1000))
            .await
            .expect("status")
            .is_none()
    );
}

/// The state `poll` returns after a change since `version`, which becomes the
/// state's version; polling again then sees nothing new.
async fn changed(c: &dyn Controls, version: &mut i64, what: &str) -> scheduler_core::ControlState {
    let state = c
        .poll(Some(*version))
        .await
        .expect("poll")
        .unwrap_or_else(|| panic!("{what}: no change seen"));
    assert!(state.version > *version, "{what}");
    *version = state.version;
    assert!(
        c.poll(Some(*version)).await.expect("poll").is_none(),
        "{what}"
    );
    state
}

#[tokio::test]
async fn poll_is_none_until_something_changes_and_sees_every_kind_of_change() {
    let db = TestDb::new().await;
    let store = store(&db).await;
    let c = controls(&store);
    let start = c.poll(None).await.expect("poll").expect("everything");
    assert!(start.paused.is_empty() && start.triggers.is_empty() && start.schedules.is_empty());
    let mut version = start.version;
    assert!(c.poll(Some(version)).await.expect("poll").is_none());
    // Takes, leases and handlers are not controls.
    take(&store, "job", "job", "a", tick(&store, 0).await).await;
    c.register_handlers("a", &["report".to_owned()])
        .await
        .expect("register");
    assert!(c.poll(Some(version)).await.expect("poll").is_none());

    c.pause(&ControlRequest::new("job", "alice"))
        .await
        .expect("pause");
    let state = changed(c, &mut version, "pause").await;
    assert_eq!(state.paused.len(), 1);
    assert!(state.resumed.is_empty());

    let since = version;
    c.resume(&ControlRequest::new("job", "alice"), false)
        .await
        .expect("resume");
    let state = changed(c, &mut version, "resume").await;
    assert!(state.paused.is_empty());
    assert_eq!(state.resumed.len(), 1);
    let resume = &state.resumed[0];
    assert!(!resume.catch_up);
    assert!(resume.version > since);
    assert!(resume.paused_since <= resume.resumed_at);
    // Resumes after a later version are not repeated.
    c.pause(&ControlRequest::new("other", "alice"))
        .await
        .expect("pause");
    let state = changed(c, &mut version, "another pause").await;
    assert!(state.resumed.is_empty(), "{:?}", state.resumed);

    let trigger = c
        .trigger(&ControlRequest::new("job", "alice"))
        .await
        .expect("trigger");
    let state = changed(c, &mut version, "trigger").await;
    assert_eq!(state.triggers.len(), 1);
    assert_eq!(state.triggers[0].id, trigger.id);
    let holder = Holder::generate();
    let lease = c
        .claim_trigger(trigger.id, &name("job:trigger"), &holder, ttl())
        .await
        .expect("claim")
        .expect("claimed");
    let state = changed(c, &mut version, "claim").await;
    assert!(matches!(
        state.triggers[0].state,
        TriggerState::Running { .. }
    ));
    c.finish_trigger(trigger.id, Some(&lease.holder), Outcome::Succeeded, None)
        .await
        .expect("finish");
    let state = changed(c, &mut version, "finish").await;
    assert!(state.triggers.is_empty());

    let row = ScheduleRow::new("nightly", "report", "0 0 2 * * *");
    c.put_schedule(&row, "alice", "new report")
        .await
        .expect("put");
    let state = changed(c, &mut version, "put").await;
    assert_eq!(state.schedules.len(), 1);
    assert_eq!(state.schedules[0].version, version);
    assert!(!state.schedules[0].removed);
    c.remove_schedule("nightly", "alice", "not needed")
        .await
        .expect("remove")
        .expect("removed");
    let state = changed(c, &mut version, "remove").await;
    assert_eq!(state.schedules.len(), 1);
    assert!(state.schedules[0].removed, "the tombstone");
    // Everything for an instance that knows nothing yet: no tombstones.
    let all = c.poll(None).await.expect("poll").expect("everything");
    assert_eq!(all.version, version);
    assert!(all.schedules.is_empty(), "{:?}", all.schedules);
    assert_eq!(all.paused.len(), 1);
    assert!(c.schedules().await.expect("schedules").is_empty());
}

#[tokio::test]
async fn a_bad_schedule_is_refused_with_a_clear_error_and_nothing_is_stored() {
    let db = TestDb::new().await;
    let store = store(&db).await;
    let c = controls(&store);
    let version = c.poll(None).await.expect("poll").expect("state").version;
    let put = async |row: &ScheduleRow| c.put_schedule(row, "alice", "").await;

    let row = ScheduleRow::new("nightly", "report", "0 0 2 * * *");
    let err = put(&row).await.expect_err("no handler registered");
    assert_eq!(
        err.to_string(),
        "no instance registered a handler named \"report\" (registered: none); \
         register it with SchedulerBuilder::handler"
    );
    c.register_handlers("a", &["sweep".to_owned(), "report".to_owned()])
        .await
        .expect("register");
    c.register_handlers("b", &["report".to_owned(), "report".to_owned()])
        .await
        .expect("register again, twice over");
    assert_eq!(c.handlers().await.expect("handlers"), ["report", "sweep"]);
    let err = put(&ScheduleRow::new("nightly", "mail", "0 0 2 * * *"))
        .await
        .expect_err("unknown handler");
    assert!(
        matches!(&err, scheduler_core::Error::UnknownHandler { known, .. } if known == "report, sweep"),
        "{err}"
    );

    let err = put(&ScheduleRow::new("nightly", "report", "not cron"))
        .await
        .expect_err("bad cron");
    assert!(
        matches!(err, scheduler_core::Error::InvalidSchedule { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("nightly"), "{err}");
    let mut zoned = row.clone();
    zoned.zone = Some("Mars/Olympus_Mons".to_owned());
    let err = put(&zoned).await.expect_err("bad zone");
    assert!(err.to_string().contains("Mars/Olympus_Mons"), "{err}");
    let mut args = row.clone();
    args.args = "{not json".to_owned();
    let err = put(&args).await.expect_err("bad JSON");
    assert!(
        matches!(err, scheduler_core::Error::InvalidControl { .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("schedule \"nightly\": its arguments are not JSON ("),
        "{err}"
    );
    let mut policy = row.clone();
    policy.policy = "overlap = sometimes".to_owned();
    let err = put(&policy).await.expect_err("bad policy");
    assert_eq!(
        err.to_string(),
        "schedule \"nightly\": policy: overlap = \"sometimes\": skip, buffer_one, \
         cancel_running or concurrent"
    );
    // Nothing stored, nothing recorded, no version bumped.
    assert!(c.schedules().await.expect("schedules").is_empty());
    assert!(
        c.control_history(None, Page::default())
            .await
            .expect("history")
            .is_empty()
    );
    assert!(c.poll(Some(version)).await.expect("poll").is_none());

    // A good row is stored as given, and replaced.
    let mut good = ScheduleRow::new("nightly", "report", "0 0 2 * * *");
    good.zone = Some("Europe/Berlin".to_owned());
    good.scope = Scope::Node;
    good.policy = "overlap = \"skip\", retry = 2".to_owned();
    good.args = r#"{"to": ["ops@example.com"]}"#.to_owned();
    let record = put(&good).await.expect("put");
    assert_eq!(record.action, ControlAction::SchedulePut);
    assert_eq!(record.detail, "0 0 2 * * *");
    let stored = c.schedules().await.expect("schedules");
    assert_eq!(stored.len(), 1);
    let first = &stored[0];
    assert_eq!(
        (
            first.name.as_str(),
            first.handler.as_str(),
            first.schedule.as_str(),
            first.zone.as_deref(),
            first.scope,
            first.policy.as_str(),
            first.args.as_str(),
            first.enabled,
            first.removed,
        ),
        (
            "nightly",
            "report",
            "0 0 2 * * *",
            Some("Europe/Berlin"),
            Scope::Node,
            good.policy.as_str(),
            good.args.as_str(),
            true,
            false
        )
    );
    assert!(first.updated_at.is_some());
    let mut changed = good.clone();
    changed.schedule = "every 30s".to_owned();
    // An `every` schedule takes no zone (refused: its ticks are instants).
    changed.zone = None;
    changed.enabled = false;
    put(&changed).await.expect("replace");
    let stored = c.schedules().await.expect("schedules");
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].schedule, "every 30s");
    assert!(!stored[0].enabled);
    assert!(stored[0].version > first.version);

    let removed = c
        .remove_schedule("nightly", "bob", "retired")
        .await
        .expect("remove")
        .expect("there was one");
    assert_eq!(
        (removed.action, removed.by.as_str(), removed.why.as_str()),
        (ControlAction::ScheduleRemove, "bob", "retired")
    );
    assert!(c.schedules().await.expect("schedules").is_empty());
    assert!(
        c.remove_schedule("nightly", "bob", "")
            .await
            .expect("remove")
            .is_none()
    );
    // Put back after removal: alive again.
    put(&good).await.expect("put back");
    assert_eq!(c.schedules().await.expect("schedules").len(), 1);
}

#[tokio::test]
async fn text_the_database_cannot_hold_is_refused() {
    let db = TestDb::new().await;
    let store = store(&db).await;
    let c = controls(&store);
    let err = c
        .pause(&ControlRequest::new("job", "alice").why("a\0b"))
        .await
        .expect_err("NUL");
    assert!(err.to_string().contains("NUL"), "{err}");
    let err = c
        .pause(&ControlRequest::new("", "alice"))
        .await
        .expect_err("no job");
    assert!(
        matches!(err, scheduler_core::Error::InvalidName { .. }),
        "{err}"
    );
    c.register_handlers("a", &["report".to_owned()])
        .await
        .expect("register");
    let mut row = ScheduleRow::new("nightly", "report", "every 1m");
    row.args = "{\"a\": \"\0\"}".to_owned();
    let err = c.put_schedule(&row, "alice", "").await.expect_err("NUL");
    assert!(err.to_string().contains("NUL"), "{err}");
    assert!(
        c.control_history(None, Page::default())
            .await
            .expect("history")
            .is_empty()
    );
}

#[tokio::test]
async fn leases_and_runs_are_listed() {
    let db = TestDb::new().await;
    let store = store(&db).await;
    let c = controls(&store);
    let t = tick(&store, 0).await;
    let a = take(&store, "a", "a", "n", t).await;
    take(&store, "b", "b", "n", t).await;
    store
        .release(&[a.won[0].key()], Release::Completed)
        .await
        .expect("release");
    let leases = c.leases().await.expect("leases");
    let names: Vec<&str> = leases.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert!(leases[0].released_at.is_some());
    assert!(leases[1].released_at.is_none());
    assert_eq!(leases[1].tick, t.at());
    assert!(leases[1].holder.is_some());

    // No run history: no runs.
    assert!(
        c.runs(None, Page::default())
            .await
            .expect("runs")
            .is_empty()
    );
    RunHistory::new(&store, HistoryOptions::default())
        .await
        .expect("history");
    let conn = inspect(&db).await;
    exec(
        &conn,
        "INSERT INTO scheduler_leases_runs \
           (job, tick, node, holder, token, started, finished, outcome, error, lease_lost, attempt) \
         SELECT CASE WHEN n % 2 = 0 THEN 'even' ELSE 'odd' END, now(), 'n', 'h', n, now(), now(), \
                CASE WHEN n = 5 THEN 'failed' ELSE 'succeeded' END, \
                CASE WHEN n = 5 THEN 'boom' END, false, 1 + n / 5 \
         FROM generate_series(1, 6) AS n",
    )
    .await;
    let all = c.runs(None, Page::default()).await.expect("runs");
    assert_eq!(
        all.iter().map(|r| r.token).collect::<Vec<_>>(),
        [6, 5, 4, 3, 2, 1]
    );
    let odd = c
        .runs(
            Some("odd"),
            Page {
                before: None,
                limit: 2,
            },
        )
        .await
        .expect("runs");
    assert_eq!(odd.iter().map(|r| r.token).collect::<Vec<_>>(), [5, 3]);
    assert_eq!(
        (
            odd[0].outcome.as_str(),
            odd[0].error.as_deref(),
            odd[0].attempt
        ),
        ("failed", Some("boom"), 2)
    );
    let older = c
        .runs(
            Some("odd"),
            Page {
                before: Some(odd[1].id),
                limit: 2,
            },
        )
        .await
        .expect("runs");
    assert_eq!(older.iter().map(|r| r.token).collect::<Vec<_>>(), [1]);
}

/// A store opened without migrations on a lease table that lacks the controls
/// migration is refused at open, naming it: every take reads the pauses.
#[tokio::test]
async fn a_store_without_migrations_refuses_a_table_missing_the_controls() {
    let db = TestDb::new().await;
    drop(store(&db).await);
    let conn = inspect(&db).await;
    exec(
        &conn,
        "DROP TABLE scheduler_leases_controls, scheduler_leases_audit, \
           scheduler_leases_triggers, scheduler_leases_schedules, scheduler_leases_handlers, \
           scheduler_leases_version; \
         DELETE FROM scheduler_leases_migrations WHERE version = 'm20261202_000003_controls'",
    )
    .await;
    let options = PostgresOptions::default().migrate(false);
    let err = PostgresStore::connect(db.url(), options.clone())
        .await
        .expect_err("refused");
    let msg = err.to_string();
    assert!(
        msg.starts_with("migration m20261202_000003_controls failed: "),
        "{msg}"
    );
    assert!(msg.contains("scheduler_leases_controls"), "{msg}");
    assert!(msg.contains("migrate(false)"), "{msg}");
    // Migrating brings it up to date.
    let migrated = store(&db).await;
    assert!(
        controls(&migrated)
            .poll(None)
            .await
            .expect("poll")
            .is_some()
    );
    PostgresStore::connect(db.url(), options)
        .await
        .expect("up to date");
}
