//! A database with known leases and runs, for the `status` tests.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used, unreachable_pub)]

pub mod stores;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{
    FencingToken, Holder, LeaseName, Outcome, Release, RunRecord, RunRecorder, Store, TakeRequest,
    Tick, Ttl,
};
use scheduler_postgres::{HistoryOptions, PostgresOptions, PostgresStore, RunHistory};

/// What [`known_leases`] wrote.
pub struct Known {
    pub store: PostgresStore,
    pub tick: DateTime<Utc>,
    /// Holder and token of `sweep`, held for 60 s.
    pub sweep_holder: String,
    pub sweep_token: i64,
}

/// Leases: `sweep` and `uptime:node-a` held for 60 s, `alerts` released as completed,
/// `reports` interrupted (expired at once). With `history`, runs: `sweep` succeeded
/// two hours ago and failed ten seconds ago; `uptime` succeeded on node-a five
/// seconds ago and on node-b one second ago; none for `alerts` or `reports`.
pub async fn known_leases(url: &str, history: bool) -> Known {
    let store = PostgresStore::connect(url, PostgresOptions::default())
        .await
        .expect("store");
    let now = store.now().await.expect("now");
    let tick = Tick::new(DateTime::from_timestamp(now.timestamp(), 0).unwrap());
    let requests: Vec<TakeRequest> = ["sweep", "alerts", "uptime:node-a", "reports"]
        .into_iter()
        .map(|n| TakeRequest::new(LeaseName::new(n).unwrap(), tick))
        .collect();
    let ttl = Ttl::new(Duration::from_secs(60)).unwrap();
    let taken = store.take(&requests, ttl).await.expect("take");
    assert_eq!(taken.won.len(), 4);
    let lease = |name: &str| taken.won.iter().find(|l| l.name.as_str() == name).unwrap();
    store
        .release(&[lease("alerts").key()], Release::Completed)
        .await
        .expect("release");
    store
        .release(&[lease("reports").key()], Release::Interrupted)
        .await
        .expect("release");
    if history {
        let history = RunHistory::new(&store, HistoryOptions::default())
            .await
            .expect("history");
        let run = |job: &str, node: &str, ago: i64, outcome, error: Option<&str>| RunRecord {
            job: job.to_owned(),
            tick: Tick::new(now - TimeDelta::seconds(ago)),
            node: node.to_owned(),
            holder: Holder::generate(),
            token: FencingToken::new(1),
            started: now - TimeDelta::seconds(ago),
            finished: now - TimeDelta::seconds(ago) + TimeDelta::milliseconds(250),
            outcome,
            error: error.map(str::to_owned),
            lease_lost: false,
            attempt: 1,
        };
        for record in [
            run("sweep", "node-a", 7200, Outcome::Succeeded, None),
            run(
                "sweep",
                "node-b",
                10,
                Outcome::Failed,
                Some("boom: the disk is full\nat line 2"),
            ),
            run("uptime", "node-a", 5, Outcome::Succeeded, None),
            run("uptime", "node-b", 1, Outcome::Succeeded, None),
        ] {
            history.record(&record).await.expect("record");
        }
    }
    let sweep = lease("sweep");
    Known {
        tick: tick.at(),
        sweep_holder: sweep.holder.as_str().to_owned(),
        sweep_token: sweep.token.get(),
        store,
    }
}
