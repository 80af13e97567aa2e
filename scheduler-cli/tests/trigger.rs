//! `trigger` and `trigger-status` through the built binary, on PostgreSQL and on a
//! SQLite file: the trigger's id is printed and the store has it pending; `--wait`
//! follows it while an instance (here the test, through the library) claims and
//! finishes it, and the exit code says how its run ended.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::time::Duration;

use scheduler_cli::{EXIT_MISSING, EXIT_NOT_DONE, EXIT_RUN_FAILED, EXIT_SKIPPED};
use scheduler_core::{Holder, LeaseName, Outcome, TriggerId, TriggerState, Ttl};
use support::stores::{Db, eventually, json, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_on_postgres() {
    trigger_prints_its_id_and_waits_for_the_run(Db::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_on_sqlite() {
    trigger_prints_its_id_and_waits_for_the_run(Db::sqlite().await).await;
}

/// Claims the first pending trigger of `job` as an instance would and ends it with
/// `outcome`, which gives the job's lease back; `skipped` ends it unclaimed, as an
/// instance whose overlap policy refused it does.
async fn claim_and_finish(db: &Db, job: &str, outcome: Outcome, error: Option<&str>) -> TriggerId {
    let controls = db.controls();
    let pending = || async {
        let state = controls.poll(None).await.unwrap().unwrap_or_default();
        state
            .triggers
            .into_iter()
            .find(|t| t.job == job && t.state == TriggerState::Pending)
            .map(|t| t.id)
    };
    eventually("a trigger pending", || async { pending().await.is_some() }).await;
    let id = pending().await.unwrap();
    if outcome == Outcome::Skipped {
        assert!(
            controls
                .finish_trigger(id, None, outcome, error)
                .await
                .unwrap()
        );
        return id;
    }
    let holder = Holder::generate();
    let ttl = Ttl::new(Duration::from_secs(60)).unwrap();
    let lease = controls
        .claim_trigger(id, &LeaseName::new(job).unwrap(), &holder, ttl)
        .await
        .unwrap()
        .expect("the lease is free: the trigger is claimed");
    assert_eq!(lease.holder, holder);
    assert!(matches!(
        controls.trigger_status(id).await.unwrap().unwrap().state,
        TriggerState::Running { .. }
    ));
    assert!(
        controls
            .finish_trigger(id, Some(&holder), outcome, error)
            .await
            .unwrap()
    );
    // The run over, the finish gave its lease back (expired now; a triggered run's
    // lease is never released with `Store::release`).
    let row = controls
        .leases()
        .await
        .unwrap()
        .into_iter()
        .find(|row| row.name == job)
        .expect("the job's lease row");
    assert_eq!(row.holder.as_deref(), Some(holder.as_str()));
    assert!(row.expires_at <= db.store.now().await.unwrap(), "{row:?}");
    id
}

async fn trigger_prints_its_id_and_waits_for_the_run(db: Db) {
    let kind = db.kind;
    // An instance registered `sweep`, but none polls here: triggers stay pending.
    db.runs("node-a", &["sweep"]).await;

    // Asked for: its id printed, pending in the store (nobody runs the job).
    let out = db
        .cli(&["trigger", "sweep", "--by", "ops:bob", "--why", "rerun"])
        .await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    let stdout = text(&out.stdout).to_owned();
    let id: i64 = stdout
        .strip_prefix("trigger ")
        .and_then(|rest| rest.split_once(' '))
        .and_then(|(id, _)| id.parse().ok())
        .unwrap_or_else(|| panic!("{kind}: no id in {stdout:?}"));
    assert!(
        stdout.starts_with(&format!(
            "trigger {id} of sweep: pending (asked by ops:bob at "
        )) && stdout.ends_with(&format!(
            "\nfollow it with: scheduler-cli trigger-status {id} --wait\n"
        )),
        "{kind}: {stdout}"
    );
    let trigger = db
        .controls()
        .trigger_status(TriggerId(id))
        .await
        .unwrap()
        .expect("the store has it");
    assert_eq!(trigger.state, TriggerState::Pending, "{kind}");
    assert_eq!(
        (trigger.by.as_str(), trigger.why.as_str()),
        ("ops:bob", "rerun")
    );

    // Its status, pending: exit 0 without --wait, 8 when still pending at --timeout.
    let status = json(&db.cli(&["trigger-status", &id.to_string(), "--json"]).await);
    assert_eq!(status["id"], id, "{kind}");
    assert_eq!(status["state"], "pending", "{kind}");
    let out = db
        .cli(&[
            "trigger-status",
            &id.to_string(),
            "--wait",
            "--timeout",
            "300ms",
        ])
        .await;
    assert_eq!(out.status.code(), Some(i32::from(EXIT_NOT_DONE)), "{kind}");
    assert!(
        text(&out.stdout).starts_with(&format!(
            "trigger {id} of sweep: still pending after 300ms: no instance running sweep has \
             claimed it"
        )),
        "{kind}: {}",
        text(&out.stdout)
    );

    // Claimed and succeeded while the CLI waits: exit 0.
    let id_text = id.to_string();
    let wait = ["trigger-status", &id_text, "--wait", "--json"];
    let (out, claimed) = tokio::join!(
        db.cli(&wait),
        claim_and_finish(&db, "sweep", Outcome::Succeeded, None),
    );
    assert_eq!(claimed, TriggerId(id));
    let done = json(&out);
    assert_eq!(done["state"], "done", "{kind}");
    assert_eq!(done["outcome"], "succeeded", "{kind}");

    // trigger --wait, the run failing: exit 6, with the error.
    let (out, _) = tokio::join!(
        db.cli(&["trigger", "sweep", "--wait", "--timeout", "60s"]),
        claim_and_finish(
            &db,
            "sweep",
            Outcome::Failed,
            Some("boom: the disk is full")
        ),
    );
    assert_eq!(
        out.status.code(),
        Some(i32::from(EXIT_RUN_FAILED)),
        "{kind}: {} {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(" of sweep: failed at ") && stdout.ends_with(": boom: the disk is full\n"),
        "{kind}: {stdout}"
    );

    // Skipped by the overlap policy: exit 7.
    let (out, _) = tokio::join!(
        db.cli(&["trigger", "sweep", "--wait"]),
        claim_and_finish(&db, "sweep", Outcome::Skipped, None),
    );
    assert_eq!(out.status.code(), Some(i32::from(EXIT_SKIPPED)), "{kind}");
    assert!(
        text(&out.stdout)
            .contains(": skipped (its overlap policy refused it: a run was under way) at "),
        "{kind}: {}",
        text(&out.stdout)
    );

    // The history has every trigger, newest first.
    let history = json(&db.cli(&["history", "sweep", "--json"]).await);
    let controls = history["controls"].as_array().unwrap();
    assert_eq!(controls.len(), 3, "{kind}: {history}");
    assert!(controls.iter().all(|c| c["action"] == "trigger"), "{kind}");
    assert_eq!(controls[2]["by"], "ops:bob", "{kind}");

    // No such trigger: exit 4, one line on stderr.
    let out = db.cli(&["trigger-status", "987654321"]).await;
    assert_eq!(out.status.code(), Some(i32::from(EXIT_MISSING)), "{kind}");
    assert_eq!(
        text(&out.stderr),
        "error: no trigger 987654321: `history` lists the triggers asked for (their id is the \
         detail)\n",
        "{kind}"
    );
    assert!(out.stdout.is_empty());

    // --timeout without --wait, a bad period: clap refuses them.
    for args in [
        &["trigger", "sweep", "--timeout", "5s"][..],
        &["trigger", "sweep", "--wait", "--timeout", "soon"],
        &["trigger-status", "x"],
    ] {
        assert_eq!(
            db.cli(args).await.status.code(),
            Some(2),
            "{kind}: {args:?}"
        );
    }
}
