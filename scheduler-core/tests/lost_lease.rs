//! A lease lost while its job runs cancels a job that needs fencing, and only warns
//! about a harmless one.
//!
//! On the in-memory store, on paused tokio time.

mod support;

use std::time::Duration;

use scheduler_core::{Duplicate, LeaseName, Outcome, Store, Ttl};
use support::{Log, Probe, builder, runs, store};

#[tokio::test(start_paused = true)]
async fn a_lost_lease_cancels_a_fencing_job_and_only_warns_a_harmless_one() {
    let (store, log) = (store(), Log::default());
    let mut fenced = Probe::new("fenced", &store, &log);
    fenced.duplicate = Duplicate::NeedsFencing;
    fenced.every = Duration::from_secs(60);
    fenced.work = Duration::from_secs(30);
    let mut harmless = Probe::new("harmless", &store, &log);
    harmless.every = Duration::from_secs(60);
    harmless.work = Duration::from_secs(30);
    let scheduler = builder(&store)
        .job(fenced)
        .job(harmless)
        .build()
        .expect("build");
    assert_eq!(scheduler.declarations().len(), 1);
    assert_eq!(scheduler.declarations()[0].job, "fenced");
    let stats = scheduler.stats();
    let thief = {
        let store = store.clone();
        async move {
            // Wait for both to be running, then steal both leases.
            let names = [
                LeaseName::new("fenced").expect("n"),
                LeaseName::new("harmless").expect("n"),
            ];
            loop {
                let now = store.now().await.unwrap_or_default();
                if names
                    .iter()
                    .all(|n| store.row(n).is_some_and(|r| r.expires_at > now))
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let ttl = Ttl::new(Duration::from_secs(600)).expect("ttl");
            for n in &names {
                store.steal(n, ttl);
            }
            tokio::time::sleep(Duration::from_secs(40)).await;
        }
    };
    scheduler.run_until(thief).await;
    let fenced = runs(&log, "fenced");
    assert_eq!(fenced.len(), 1);
    assert!(
        fenced[0].cancelled,
        "the fencing job was cancelled at the next renewal"
    );
    let harmless = runs(&log, "harmless");
    assert_eq!(harmless.len(), 1);
    assert!(!harmless[0].cancelled, "the harmless job finished");
    assert_eq!(stats.count("fenced", Outcome::LeaseLost), 1);
    assert_eq!(stats.count("harmless", Outcome::LeaseLost), 1);
    assert_eq!(stats.count("harmless", Outcome::Ran), 1);
}
