//! An outcome word this version does not know (a newer version wrote it during a
//! rolling upgrade) reads back as `Outcome::Unknown`: the run history and the
//! trigger are still read, with everything else on their rows, and the words this
//! version writes read back as written.

#![allow(clippy::expect_used)]

mod support;

use chrono::TimeDelta;
use scheduler_core::{
    ControlRequest, FencingToken, Holder, Outcome, Page, RunRecord, RunRecorder, Store, Tick,
    TriggerState,
};
use scheduler_sqlite::{HistoryOptions, RunHistory, SqliteOptions, SqliteStore};
use sea_orm::ConnectionTrait;
use support::TempDir;

#[tokio::test]
async fn a_newer_versions_outcome_reads_as_unknown() {
    let dir = TempDir::new("unknown-outcome");
    let store = SqliteStore::open(dir.join("leases.db"), SqliteOptions::default())
        .await
        .expect("open");
    let controls = store.controls().expect("controls");
    let history = RunHistory::new(&store, HistoryOptions::default())
        .await
        .expect("history");
    let now = store.now().await.expect("clock");
    for (job, outcome) in [("known", Outcome::TimedOut), ("newer", Outcome::Failed)] {
        let run = RunRecord {
            job: job.to_owned(),
            tick: Tick::new(now),
            node: "node-a".to_owned(),
            holder: Holder::generate(),
            token: FencingToken::new(3),
            started: now,
            finished: now + TimeDelta::milliseconds(40),
            outcome,
            error: Some("boom".to_owned()),
            lease_lost: false,
            attempt: 2,
        };
        history.record(&run).await.expect("record");
    }
    let trigger = controls
        .trigger(&ControlRequest::new("newer", "alice"))
        .await
        .expect("trigger");
    assert!(
        controls
            .finish_trigger(trigger.id, None, Outcome::Skipped, Some("busy"))
            .await
            .expect("finish")
    );
    store
        .connection()
        .execute_unprepared(
            "UPDATE scheduler_leases_runs SET outcome = 'quarantined' WHERE job = 'newer'; \
             UPDATE scheduler_leases_triggers SET outcome = 'quarantined'",
        )
        .await
        .expect("a newer version's words");

    let runs = controls.runs(None, Page::default()).await.expect("runs");
    let outcomes: Vec<_> = runs.iter().map(|r| (r.job.as_str(), r.outcome)).collect();
    assert_eq!(
        outcomes,
        [("newer", Outcome::Unknown), ("known", Outcome::TimedOut)]
    );
    assert_eq!(
        (runs[0].error.as_deref(), runs[0].attempt, runs[0].token),
        (Some("boom"), 2, 3),
        "the rest of the row is read"
    );
    let state = controls
        .trigger_status(trigger.id)
        .await
        .expect("status")
        .expect("the trigger")
        .state;
    assert!(
        matches!(
            &state,
            TriggerState::Done { outcome: Outcome::Unknown, error: Some(e), .. } if e == "busy"
        ),
        "{state:?}"
    );
}
