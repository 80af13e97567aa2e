#![allow(clippy::unwrap_used)]

use std::time::Duration;

use super::*;

#[test]
fn the_text_reads_every_policy_key() {
    let spec = PolicySpec::parse(
        r#"catch_up = "all", catch_up_max = 3, overlap = concurrent, max_concurrent = 2, retry = 2, retry_backoff = "5s", timeout = 1m"#,
    )
    .unwrap();
    assert_eq!(
        spec,
        PolicySpec {
            catch_up: Some(CatchUpSpec::All { max: 3 }),
            overlap: Some(OverlapSpec::Concurrent { max: 2 }),
            retry: Some(RetrySpec {
                attempts: 2,
                backoff: Duration::from_secs(5)
            }),
            timeout: Some(Duration::from_secs(60)),
        }
    );
    assert!(PolicySpec::parse("").unwrap().is_unset());
    assert_eq!(
        PolicySpec::parse("catch_up = all").unwrap().catch_up,
        Some(CatchUpSpec::All { max: 10 })
    );
    assert_eq!(
        PolicySpec::parse("retry = 1").unwrap().retry,
        Some(RetrySpec {
            attempts: 1,
            backoff: DEFAULT_RETRY_BACKOFF
        })
    );
}

#[test]
fn each_mistake_is_named() {
    let cases = [
        (
            "retry",
            PolicyError::NotKeyValue {
                pair: "retry".into(),
            },
        ),
        (
            "colour = blue",
            PolicyError::UnknownKey {
                key: "colour".into(),
                guess: None,
            },
        ),
        (
            "overlapp = skip",
            PolicyError::UnknownKey {
                key: "overlapp".into(),
                guess: Some("overlap"),
            },
        ),
        (
            "retry = two",
            PolicyError::NotWholeNumber {
                key: "retry",
                value: "two".into(),
            },
        ),
        (
            "overlap = sometimes",
            PolicyError::UnknownOverlap {
                written: "sometimes".into(),
                guess: None,
            },
        ),
        (
            "catch_up = lates",
            PolicyError::UnknownCatchUp {
                written: "lates".into(),
                guess: Some("latest"),
            },
        ),
        ("catch_up_max = 2", PolicyError::CatchUpMaxWithoutAll),
        ("retry_backoff = 1s", PolicyError::BackoffWithoutRetry),
        ("overlap = concurrent", PolicyError::ConcurrentWithoutMax),
        (
            "max_concurrent = 2",
            PolicyError::MaxConcurrentWithoutConcurrent,
        ),
        (
            "overlap = concurrent, max_concurrent = 0",
            PolicyError::ZeroMaxConcurrent,
        ),
        (
            "timeout = 0s",
            PolicyError::Timing(TimingError::ZeroTimeout),
        ),
        ("retry = 0", PolicyError::Timing(TimingError::ZeroRetries)),
        (
            "catch_up = all, catch_up_max = 0",
            PolicyError::Timing(TimingError::ZeroCatchUpMax),
        ),
    ];
    for (text, want) in cases {
        assert_eq!(PolicySpec::parse(text), Err(want), "{text}");
    }
    assert!(matches!(
        PolicySpec::parse("timeout = soon"),
        Err(PolicyError::NotDuration { key: "timeout", .. })
    ));
}

#[test]
fn the_messages_say_what_to_write() {
    let text = |t: &str| PolicySpec::parse(t).unwrap_err().to_string();
    assert_eq!(
        text("overlap = sometimes"),
        "overlap = \"sometimes\": skip, buffer_one, cancel_running or concurrent"
    );
    assert_eq!(
        text("overlap = skipp"),
        "overlap = \"skipp\": did you mean \"skip\"? skip, buffer_one, cancel_running or concurrent"
    );
    assert_eq!(
        text("retrys = 2"),
        "unknown key \"retrys\"; did you mean \"retry\"? valid keys: catch_up, catch_up_max, \
         overlap, max_concurrent, retry, retry_backoff, timeout"
    );
}
