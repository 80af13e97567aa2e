//! `build()` rejects bad configuration with typed errors: a duplicate job, a ttl
//! too short for its renewal, a bad cron expression, an empty name.
//!
//! On the in-memory store, on paused tokio time.

mod support;

use std::time::Duration;

use scheduler_core::{BoxError, Error, Idempotent, JobContext, Schedule};
use support::{Log, Probe, builder, store};

#[test]
fn build_rejects_bad_configuration_with_typed_errors() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("rt");
    let _guard = rt.enter();
    let (store, log) = (store(), Log::default());
    let err = builder(&store)
        .job(Probe::new("a", &store, &log))
        .job(Probe::new("a", &store, &log))
        .build()
        .err();
    assert!(
        matches!(err, Some(Error::DuplicateJob { ref name }) if name == "a"),
        "{err:?}"
    );

    let err = builder(&store)
        .lease_ttl(Duration::from_secs(10))
        .renew_every(Duration::from_secs(6))
        .build()
        .err();
    assert!(matches!(err, Some(Error::TtlTooShort { .. })), "{err:?}");
    let err = builder(&store).lease_ttl(Duration::ZERO).build().err();
    assert!(matches!(err, Some(Error::InvalidTtl { .. })), "{err:?}");

    struct BadCron;
    #[scheduler_core::async_trait]
    impl Idempotent for BadCron {
        fn name(&self) -> &str {
            "bad-cron"
        }
        fn schedule(&self) -> Schedule {
            Schedule::cron("61 * * * * *")
        }
        async fn run(&self, _: JobContext) -> Result<(), BoxError> {
            Ok(())
        }
    }
    let err = builder(&store).job(BadCron).build().err();
    assert!(
        matches!(err, Some(Error::InvalidSchedule { ref job, .. }) if job == "bad-cron"),
        "{err:?}"
    );
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        msg.starts_with("job \"bad-cron\" has an invalid schedule: invalid cron expression"),
        "{msg}"
    );

    let mut empty = Probe::new("", &store, &log);
    empty.name = "";
    assert!(matches!(
        builder(&store).job(empty).build().err(),
        Some(Error::InvalidName { .. })
    ));
}

/// Timing that cannot work is refused before anything runs: `jitter = "1h"` on a
/// 1 s job used to build and run once in 3.5 s.
#[test]
fn timing_that_cannot_work_is_refused_by_build() {
    use scheduler_core::{CatchUp, Policy};

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("rt");
    let _guard = rt.enter();
    let (store, log) = (store(), Log::default());
    let mut jittery = Probe::new("jittery", &store, &log);
    jittery.jitter = Duration::from_secs(3600);
    let err = builder(&store)
        .job(jittery)
        .build()
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some(
            "job \"jittery\" has invalid timing: jitter 3600s is not shorter than the period 1s: \
             each tick would start in a later tick's slot; keep the jitter well below the period"
        )
    );

    let mut closed = Probe::new("closed", &store, &log);
    closed.catch_up = Some(Duration::ZERO);
    let err = builder(&store).job(closed).build().err();
    assert!(
        matches!(&err, Some(Error::InvalidTiming { job, .. }) if job == "closed"),
        "{err:?}"
    );

    let cases = [
        Policy::default().timeout(Duration::ZERO),
        Policy::default().retry(0, Duration::from_millis(100)),
        Policy::default().retry(2, Duration::from_secs(1)),
        Policy::default().catch_up(CatchUp::All { max: 0 }),
        // Would keep (and walk to find) up to four billion ticks at start-up.
        Policy::default().catch_up(CatchUp::All { max: u32::MAX }),
        Policy::default().catch_up(CatchUp::All {
            max: scheduler_spec::MAX_CATCH_UP + 1,
        }),
        Policy::default().overlap(scheduler_core::Overlap::Concurrent { max: 0 }),
    ];
    for policy in cases {
        let err = builder(&store)
            .job_with_policy(Probe::new("p", &store, &log), policy)
            .build()
            .err();
        assert!(
            matches!(&err, Some(Error::InvalidTiming { .. })),
            "{policy:?}: {err:?}"
        );
    }
    builder(&store)
        .job_with_policy(
            Probe::new("most", &store, &log),
            Policy::default().catch_up(CatchUp::All {
                max: scheduler_spec::MAX_CATCH_UP,
            }),
        )
        .build()
        .expect("the largest catch-up builds");
    let fine = Policy::default()
        .catch_up(CatchUp::All { max: 3 })
        .retry(2, Duration::from_millis(200))
        .timeout(Duration::from_secs(5));
    builder(&store)
        .job_with_policy(Probe::new("fine", &store, &log), fine)
        .build()
        .expect("sensible timing builds");
}
