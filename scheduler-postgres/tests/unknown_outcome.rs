//! An outcome word this version does not know (a newer version wrote it during a
//! rolling upgrade) reads back as `Outcome::Unknown` from every read that holds one:
//! the run history's page, a trigger's status, and the status command's last run.
//! The rest of each row is read; the words this version writes read back as
//! written.

#![allow(clippy::expect_used)]

use std::time::Duration;

use chrono::TimeDelta;
use scheduler_core::{
    ControlRequest, LeaseName, Outcome, Page, Release, RunRecord, RunRecorder, Store, TakeRequest,
    Tick, TriggerState, Ttl,
};
use scheduler_postgres::diagnostics::lease_status;
use scheduler_postgres::{HistoryOptions, PostgresOptions, PostgresStore, RunHistory};
use sea_orm::ConnectionTrait;
use test_postgres::TestDb;

#[tokio::test]
async fn a_newer_versions_outcome_reads_as_unknown() {
    let db = TestDb::new().await;
    let store = PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("connect");
    let controls = store.controls().expect("controls");
    let history = RunHistory::new(&store, HistoryOptions::default())
        .await
        .expect("history");
    let now = store.now().await.expect("clock");
    let ttl = Ttl::new(Duration::from_secs(60)).expect("ttl");
    for (job, outcome) in [("known", Outcome::TimedOut), ("newer", Outcome::Failed)] {
        let taken = store
            .take(
                &[TakeRequest::new(
                    LeaseName::new(job).expect("name"),
                    Tick::new(now),
                )],
                ttl,
            )
            .await
            .expect("take");
        let lease = taken.won.first().expect("won");
        store
            .release(&[lease.key()], Release::Completed)
            .await
            .expect("release");
        let run = RunRecord {
            job: job.to_owned(),
            tick: lease.tick,
            node: "node-a".to_owned(),
            holder: lease.holder.clone(),
            token: lease.token,
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
    test_postgres::inspect(db.url())
        .await
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
        (runs[0].error.as_deref(), runs[0].attempt),
        (Some("boom"), 2),
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

    let status = lease_status(&store, store.table())
        .await
        .expect("status")
        .expect("the lease table");
    let last: Vec<_> = status
        .leases
        .iter()
        .map(|l| {
            let run = l.last_run.as_ref().expect("a last run");
            (l.lease.as_str(), run.outcome, run.error.as_deref())
        })
        .collect();
    assert_eq!(
        last,
        [
            ("known", Outcome::TimedOut, Some("boom")),
            ("newer", Outcome::Unknown, Some("boom"))
        ]
    );
}
