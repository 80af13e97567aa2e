//! The rules of the instances' heartbeats ([`Controls::heartbeat`],
//! [`Controls::stopped`], [`Controls::instances`]) and of the registrations' expiry
//! ([`Controls::handlers`], [`Controls::jobs`]), written once against a [`Store`]
//! whose [`controls()`](Store::controls) is `Some`.
//!
//! Each function takes handles on one backing database and uses node and job names
//! of its own; [`all`] runs them in turn on one store. Expiry is driven with short
//! heartbeat intervals and awaited with a generous timeout: nothing asserts how fast
//! a store is.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{Controls, Error, Heartbeat, InstanceRow, ScheduleRow, Store};

use crate::SharedStore;

fn controls(store: &SharedStore) -> &dyn Controls {
    store
        .controls()
        .expect("the store keeps controls: Store::controls() returned None")
}

/// A whole second of the store's clock, `offset_s` seconds from now (a time every
/// store keeps exactly).
async fn second(store: &SharedStore, offset_s: i64) -> DateTime<Utc> {
    let now = store.now().await.expect("store clock");
    DateTime::from_timestamp(now.timestamp() + offset_s, 0).expect("in range")
}

fn beat(node: &str, started_at: DateTime<Utc>, every: Duration) -> Heartbeat {
    Heartbeat {
        node: node.to_owned(),
        version: "1.2.3-test".to_owned(),
        started_at,
        every,
    }
}

async fn instance(store: &SharedStore, node: &str) -> Option<InstanceRow> {
    controls(store)
        .instances()
        .await
        .expect("instances")
        .into_iter()
        .find(|row| row.node == node)
}

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// Waits (60 s at most) until `done` says so of the store.
async fn eventually<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A beat adds the node's row, on the store's clock, with the node's registrations;
/// another replaces it (one row per node), and every handle reads it.
pub async fn a_heartbeat_lists_the_instance(a: &SharedStore, b: &SharedStore) {
    let (ca, cb) = (controls(a), controls(b));
    let node = "inst-listed";
    ca.register_handlers(node, &strings(&["inst-h2", "inst-h1"]))
        .await
        .expect("register handlers");
    ca.register_jobs(node, &strings(&["inst-j1"]))
        .await
        .expect("register jobs");
    let started = second(a, -60).await;
    let before = a.now().await.expect("clock");
    ca.heartbeat(&beat(node, started, Duration::from_secs(60)))
        .await
        .expect("beat");
    let after = a.now().await.expect("clock");
    let row = instance(b, node).await.expect("the instance's row");
    assert_eq!(row.version, "1.2.3-test");
    assert_eq!(row.started_at, started);
    // Stores keep microseconds (SQLite's clock milliseconds).
    let floor = before - TimeDelta::milliseconds(1);
    assert!(
        floor <= row.seen_at && row.seen_at <= after,
        "seen at {} is not within [{before}, {after}]",
        row.seen_at
    );
    assert_eq!(
        row.expires_at - row.seen_at,
        TimeDelta::seconds(180),
        "three intervals"
    );
    assert!(!row.stopped);
    assert!(row.is_live(b.now().await.expect("clock")));
    assert_eq!(row.handlers, ["inst-h1", "inst-h2"], "sorted");
    assert_eq!(row.jobs, ["inst-j1"]);

    // Another beat (a restart: a new start time) replaces the row.
    let restarted = second(a, 0).await;
    cb.heartbeat(&Heartbeat {
        version: "1.2.4-test".to_owned(),
        ..beat(node, restarted, Duration::from_secs(30))
    })
    .await
    .expect("beat again");
    let rows: Vec<InstanceRow> = ca
        .instances()
        .await
        .expect("instances")
        .into_iter()
        .filter(|r| r.node == node)
        .collect();
    assert_eq!(rows.len(), 1, "one row per node: {rows:?}");
    let again = &rows[0];
    assert_eq!(again.version, "1.2.4-test");
    assert_eq!(again.started_at, restarted);
    assert!(again.seen_at >= row.seen_at);
    assert_eq!(again.expires_at - again.seen_at, TimeDelta::seconds(90));

    // Instances read by node; a bad node name is refused before the store is asked.
    let nodes: Vec<String> = ca
        .instances()
        .await
        .expect("instances")
        .into_iter()
        .map(|r| r.node)
        .collect();
    let mut sorted = nodes.clone();
    sorted.sort();
    assert_eq!(nodes, sorted, "by node");
    assert!(matches!(
        ca.heartbeat(&beat("bad\u{0}node", started, Duration::from_secs(1)))
            .await,
        Err(Error::InvalidName { .. })
    ));
    assert!(matches!(
        ca.stopped("bad\u{0}node").await,
        Err(Error::InvalidName { .. })
    ));
}

/// A node stopped keeps its row, marked stopped and no longer live, and its
/// registrations stop counting at once: its handler is no longer one a schedule may
/// name, its jobs no longer known. A beat (the node started again) clears the mark.
/// Stopping a node without a row changes nothing.
pub async fn a_stopped_instance_no_longer_counts(a: &SharedStore, b: &SharedStore) {
    let (ca, cb) = (controls(a), controls(b));
    let node = "inst-stopping";
    ca.register_handlers(node, &strings(&["inst-stop-handler"]))
        .await
        .expect("register handlers");
    ca.register_jobs(node, &strings(&["inst-stop-job"]))
        .await
        .expect("register jobs");
    let started = second(a, 0).await;
    ca.heartbeat(&beat(node, started, Duration::from_secs(60)))
        .await
        .expect("beat");
    let handler = |names: Vec<String>| names.iter().any(|h| h == "inst-stop-handler");
    let job = |names: Vec<String>| names.iter().any(|h| h == "inst-stop-job");
    assert!(handler(cb.handlers().await.expect("handlers")));
    assert!(job(cb.jobs().await.expect("jobs")));
    assert!(job(cb.known_jobs().await.expect("known jobs")));

    ca.stopped(node).await.expect("stopped");
    let row = instance(b, node).await.expect("the row is kept");
    assert!(row.stopped);
    assert!(!row.is_live(b.now().await.expect("clock")));
    assert_eq!(
        row.handlers,
        ["inst-stop-handler"],
        "its registrations kept"
    );
    assert!(!handler(cb.handlers().await.expect("handlers")));
    assert!(!job(cb.jobs().await.expect("jobs")));
    assert!(!job(cb.known_jobs().await.expect("known jobs")));
    let refused = cb
        .put_schedule(
            &ScheduleRow::new("inst-stop-dynamic", "inst-stop-handler", "every 1h"),
            "ops",
            "",
        )
        .await;
    assert!(
        matches!(refused, Err(Error::UnknownHandler { .. })),
        "{refused:?}"
    );

    cb.heartbeat(&beat(node, second(b, 0).await, Duration::from_secs(60)))
        .await
        .expect("beat after a restart");
    assert!(!instance(a, node).await.expect("row").stopped);
    assert!(handler(ca.handlers().await.expect("handlers")));
    assert!(job(ca.jobs().await.expect("jobs")));

    ca.stopped("inst-never-beat")
        .await
        .expect("no row: nothing");
    assert_eq!(instance(a, "inst-never-beat").await, None);
}

/// A node that stops beating expires after three intervals (on the store's clock):
/// its row stays, not stopped but no longer live, and its registrations stop
/// counting; its next beat brings them back.
pub async fn registrations_expire_with_their_instance(a: &SharedStore, b: &SharedStore) {
    let (ca, cb) = (controls(a), controls(b));
    let node = "inst-expiring";
    ca.register_handlers(node, &strings(&["inst-expiring-handler"]))
        .await
        .expect("register handlers");
    ca.register_jobs(node, &strings(&["inst-expiring-job"]))
        .await
        .expect("register jobs");
    let counted = || async {
        let handlers = cb.handlers().await.expect("handlers");
        let jobs = cb.jobs().await.expect("jobs");
        (
            handlers.iter().any(|h| h == "inst-expiring-handler"),
            jobs.iter().any(|j| j == "inst-expiring-job"),
        )
    };
    ca.heartbeat(&beat(node, second(a, 0).await, Duration::from_secs(60)))
        .await
        .expect("beat");
    assert_eq!(
        counted().await,
        (true, true),
        "a live node's registrations count"
    );
    // The next beat promises the next within 100 ms, and none comes.
    ca.heartbeat(&beat(node, second(a, 0).await, Duration::from_millis(100)))
        .await
        .expect("beat");
    eventually("the node's registrations expire", || async {
        counted().await == (false, false)
    })
    .await;
    let row = instance(b, node).await.expect("the row is kept");
    assert!(!row.stopped);
    assert!(!row.is_live(b.now().await.expect("clock")));
    assert!(
        b.now().await.expect("clock") >= row.expires_at,
        "expired on the store's clock"
    );

    ca.heartbeat(&beat(node, second(a, 0).await, Duration::from_secs(60)))
        .await
        .expect("beat again");
    assert_eq!(counted().await, (true, true), "back with the next beat");
}

/// A node that never beat (an instance of a version before heartbeats, during a
/// rolling upgrade) has its registrations counted as before, and is not listed as
/// an instance.
pub async fn registrations_of_a_node_that_never_beat_count(a: &SharedStore, b: &SharedStore) {
    let (ca, cb) = (controls(a), controls(b));
    let node = "inst-older";
    ca.register_handlers(node, &strings(&["inst-older-handler"]))
        .await
        .expect("register handlers");
    ca.register_jobs(node, &strings(&["inst-older-job"]))
        .await
        .expect("register jobs");
    // Another node beats (and stops): the older one is not judged by it.
    cb.heartbeat(&beat(
        "inst-newer",
        second(b, 0).await,
        Duration::from_secs(60),
    ))
    .await
    .expect("beat");
    cb.stopped("inst-newer").await.expect("stopped");
    assert!(
        cb.handlers()
            .await
            .expect("handlers")
            .iter()
            .any(|h| h == "inst-older-handler")
    );
    assert!(
        cb.jobs()
            .await
            .expect("jobs")
            .iter()
            .any(|j| j == "inst-older-job")
    );
    cb.put_schedule(
        &ScheduleRow::new("inst-older-dynamic", "inst-older-handler", "every 1h"),
        "ops",
        "",
    )
    .await
    .expect("its handler is known");
    assert_eq!(instance(a, node).await, None, "not listed");
}

/// Heartbeats change no control version: an unchanged store still polls `None`.
pub async fn heartbeats_change_no_control(a: &SharedStore) {
    let ca = controls(a);
    let seen = ca
        .poll(None)
        .await
        .expect("poll")
        .expect("poll(None) always answers")
        .version;
    ca.heartbeat(&beat(
        "inst-quiet",
        second(a, 0).await,
        Duration::from_secs(60),
    ))
    .await
    .expect("beat");
    ca.stopped("inst-quiet").await.expect("stopped");
    ca.instances().await.expect("instances");
    assert_eq!(ca.poll(Some(seen)).await.expect("poll"), None);
}

/// Every rule above, in turn, on one store (and its other handles).
pub async fn all(stores: &[SharedStore]) {
    let (a, b) = (&stores[0], &stores[1 % stores.len()]);
    a_heartbeat_lists_the_instance(a, b).await;
    a_stopped_instance_no_longer_counts(a, b).await;
    registrations_expire_with_their_instance(a, b).await;
    registrations_of_a_node_that_never_beat_count(a, b).await;
    heartbeats_change_no_control(a).await;
}
