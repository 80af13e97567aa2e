use quote::quote;

use super::*;
use scheduler_spec::{DEFAULT_CATCH_UP_MAX, RetrySpec as Retry};

fn parse(tokens: TokenStream) -> std::result::Result<Args, String> {
    Args::parse(tokens).map_err(|e| e.to_string())
}

#[test]
fn every_form_of_every_key() {
    let args = parse(quote!(
        every = "1h30m",
        scope = "node",
        name = "sweep-all",
        fencing,
        jitter = "5s",
        catch_up = "1m",
        state(PgPool, std::sync::Arc<Config>)
    ));
    let args = args.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(args.schedule, Schedule::Every(Duration::from_secs(5400)));
    assert_eq!(args.scope, Some(Scope::Node));
    assert_eq!(args.name.as_deref(), Some("sweep-all"));
    assert_eq!(args.fencing, Some(true));
    assert_eq!(args.jitter, Some(Duration::from_secs(5)));
    assert_eq!(args.catch_up, Some(Duration::from_secs(60)));
    let state: Vec<String> = args.state.iter().map(|t| quote!(#t).to_string()).collect();
    assert_eq!(state, ["PgPool", "std :: sync :: Arc < Config >"]);

    let args = parse(quote!(
        cron = "0 0 3 * * *",
        tz = "Europe/Berlin",
        fencing = false,
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        args.schedule,
        Schedule::Cron {
            expr: "0 0 3 * * *".into(),
            tz: Some("Europe/Berlin".into())
        }
    );
    assert_eq!(args.fencing, Some(false));
    assert_eq!(args.scope, None);
    assert_eq!(args.catch_up, None);
    assert!(args.policy.is_unset());
}

#[test]
fn every_form_of_every_policy_key() {
    let args = parse(quote!(
        every = "1h",
        catch_up = "all",
        catch_up_window = "10m",
        catch_up_max = 3,
        overlap = "buffer_one",
        retry = 2,
        retry_backoff = "10s",
        timeout = "5m",
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(args.catch_up, Some(Duration::from_secs(600)));
    assert_eq!(
        args.policy,
        Policy {
            catch_up: Some(CatchUp::All { max: 3 }),
            overlap: Some(Overlap::BufferOne),
            retry: Some(Retry {
                attempts: 2,
                backoff: Duration::from_secs(10)
            }),
            timeout: Some(Duration::from_secs(300)),
        }
    );

    let cases = [
        // The window alone, either way it is written.
        (
            quote!(every = "1h", catch_up = "1m"),
            Some(60),
            Policy::default(),
        ),
        (
            quote!(every = "1h", catch_up_window = "1m"),
            Some(60),
            Policy::default(),
        ),
        (
            quote!(every = "1h", catch_up = "skip"),
            None,
            Policy {
                catch_up: Some(CatchUp::Skip),
                ..Policy::default()
            },
        ),
        (
            quote!(every = "1h", catch_up = "latest", catch_up_window = "2h"),
            Some(7200),
            Policy {
                catch_up: Some(CatchUp::Latest),
                ..Policy::default()
            },
        ),
        (
            quote!(every = "1h", catch_up = "all"),
            None,
            Policy {
                catch_up: Some(CatchUp::All {
                    max: DEFAULT_CATCH_UP_MAX,
                }),
                ..Policy::default()
            },
        ),
        (
            quote!(every = "1h", overlap = "skip"),
            None,
            Policy {
                overlap: Some(Overlap::Skip),
                ..Policy::default()
            },
        ),
        (
            quote!(every = "1h", retry = 3),
            None,
            Policy {
                retry: Some(Retry {
                    attempts: 3,
                    backoff: DEFAULT_RETRY_BACKOFF,
                }),
                ..Policy::default()
            },
        ),
        (
            quote!(every = "1h", timeout = "1m30s"),
            None,
            Policy {
                timeout: Some(Duration::from_secs(90)),
                ..Policy::default()
            },
        ),
        // Below the shortest gap of a cron schedule (15 minutes).
        (
            quote!(
                cron = "0 */15 * * * *",
                jitter = "14m",
                retry = 1,
                retry_backoff = "14m59s"
            ),
            None,
            Policy {
                retry: Some(Retry {
                    attempts: 1,
                    backoff: Duration::from_secs(899),
                }),
                ..Policy::default()
            },
        ),
    ];
    for (tokens, window, policy) in cases {
        let written = tokens.to_string();
        let args = parse(tokens).unwrap_or_else(|e| panic!("{written}: {e}"));
        assert_eq!(args.catch_up, window.map(Duration::from_secs), "{written}");
        assert_eq!(args.policy, policy, "{written}");
    }
}

#[test]
fn the_defaults_are_the_documented_ones() {
    assert_eq!(DEFAULT_CATCH_UP_MAX, 10);
    assert_eq!(DEFAULT_RETRY_BACKOFF, Duration::from_secs(1));
}

#[test]
fn mistakes_are_named() {
    let cases = [
        (
            quote!(evry = "30s"),
            "unknown key `evry`; did you mean `every`? valid keys: every, cron, tz, scope, name, fencing, jitter, catch_up, catch_up_window, catch_up_max, overlap, max_concurrent, retry, retry_backoff, timeout, state",
        ),
        (
            quote!(every = "30s", schedule = "x"),
            "unknown key `schedule`; valid keys: every, cron, tz, scope, name, fencing, jitter, catch_up, catch_up_window, catch_up_max, overlap, max_concurrent, retry, retry_backoff, timeout, state",
        ),
        (
            quote!(every = "30s", every = "1m"),
            "`every` is given twice; give each key once",
        ),
        (quote!(every = "30s", cron = "0 * * * * *"), ONE_SCHEDULE),
        (quote!(cron = "0 * * * * *", every = "30s"), ONE_SCHEDULE),
        (
            quote!(scope = "node"),
            "missing schedule; add `every = \"30s\"` or `cron = \"0 */15 * * * *\"` (sec min hour day month weekday)",
        ),
        (
            quote!(every = 30),
            "`every` takes a string, like `every = \"30s\"`",
        ),
        (
            quote!(every),
            "`every` takes a string, like `every = \"30s\"`",
        ),
        (
            quote!(every = "30x"),
            "invalid duration \"30x\": unknown unit; use ms, s, m, h or d",
        ),
        (
            quote!(every = "0s"),
            "the period of `every` must be at least 1ms, not \"0s\"",
        ),
        (
            quote!(every = "1s", fencing = "yes"),
            "`fencing` stands alone or takes `true` or `false`: `fencing` or `fencing = false`",
        ),
        (
            quote!(every = "1s", state = "PgPool"),
            "`state` lists the types the job reads with `ctx.state::<T>()`, like `state(PgPool, Config)`",
        ),
        (
            quote!(every = "1s", state()),
            "`state` lists the types the job reads with `ctx.state::<T>()`, like `state(PgPool, Config)`",
        ),
        (
            quote!(every = "1s", name = ""),
            "invalid job name \"\": a name must not be empty",
        ),
        (
            quote!(cron = "0 0 0 1 1 * 2020", tz = "Europe/Berlin"),
            "cron expression \"0 0 0 1 1 * 2020\" never fires; check that its day, month and weekday fields can meet and that its years are not all past",
        ),
        (
            quote!(cron = "0 0 24 * * *"),
            "invalid cron expression \"0 0 24 * * *\": the hour 24 is out of range; hours go from 0 to 23",
        ),
        (
            quote!(cron = "0 * * * * *", tz = "utc"),
            "unknown time zone \"utc\"; did you mean \"UTC\"?",
        ),
        (
            quote!(every = "1m", timout = "5m"),
            "unknown key `timout`; did you mean `timeout`? valid keys: every, cron, tz, scope, name, fencing, jitter, catch_up, catch_up_window, catch_up_max, overlap, max_concurrent, retry, retry_backoff, timeout, state",
        ),
        // Policies.
        (
            quote!(every = "1m", catch_up = "lastest"),
            r#"unknown catch-up policy "lastest"; did you mean "latest"? use "skip", "latest" or "all", or a duration for the window, like "1m""#,
        ),
        (
            quote!(every = "1m", catch_up = "never"),
            r#"unknown catch-up policy "never"; use "skip", "latest" or "all", or a duration for the window, like "1m""#,
        ),
        (
            quote!(every = "1m", catch_up = "5"),
            r#"invalid duration "5": a number needs a unit; use ms, s, m, h or d"#,
        ),
        (
            quote!(every = "1m", catch_up = all),
            r#"`catch_up` takes a string, like `catch_up = "latest"`"#,
        ),
        (
            quote!(every = "1m", catch_up = "1m", catch_up_window = "10m"),
            r#"`catch_up` is a duration here, which already sets the catch-up window; write a policy in `catch_up` ("skip", "latest" or "all") to give the window with `catch_up_window`, or remove `catch_up_window`"#,
        ),
        (
            quote!(every = "1m", catch_up_window = "10m", catch_up = "1m"),
            r#"`catch_up` is a duration here, which already sets the catch-up window; write a policy in `catch_up` ("skip", "latest" or "all") to give the window with `catch_up_window`, or remove `catch_up_window`"#,
        ),
        (
            quote!(every = "1m", catch_up_window = "soon"),
            r#"invalid duration "soon": expected a number; write it like "30s", "15m", "1h30m" or "500ms""#,
        ),
        (
            quote!(every = "1m", catch_up = "latest", catch_up_max = 3),
            r#"`catch_up_max` bounds how many missed ticks `catch_up = "all"` runs, and applies to nothing else; add `catch_up = "all"` or remove `catch_up_max`"#,
        ),
        (
            quote!(every = "1m", catch_up_max = 3),
            r#"`catch_up_max` bounds how many missed ticks `catch_up = "all"` runs, and applies to nothing else; add `catch_up = "all"` or remove `catch_up_max`"#,
        ),
        (
            quote!(every = "1m", catch_up = "all", catch_up_max = "3"),
            r#"`catch_up_max` takes how many missed ticks `catch_up = "all"` runs at most, like `catch_up_max = 3`"#,
        ),
        (
            quote!(every = "1m", catch_up = "all", catch_up_max = -1),
            r#"`catch_up_max` takes how many missed ticks `catch_up = "all"` runs at most, like `catch_up_max = 3`"#,
        ),
        (
            quote!(every = "1m", catch_up = "all", catch_up_max = 4294967296),
            "`catch_up_max` is at most 4294967295, not 4294967296",
        ),
        (
            quote!(every = "1m", overlap = "buffer-one"),
            r#"unknown overlap policy "buffer-one"; did you mean "buffer_one"? use "skip" (a tick due during a run is skipped), "buffer_one" (the latest tick due during a run waits for it to end), "cancel_running" (the newest tick cancels the run) or "concurrent" (with `max_concurrent = N`: up to N runs at once)"#,
        ),
        (
            quote!(every = "1m", overlap = "queue"),
            r#"unknown overlap policy "queue"; use "skip" (a tick due during a run is skipped), "buffer_one" (the latest tick due during a run waits for it to end), "cancel_running" (the newest tick cancels the run) or "concurrent" (with `max_concurrent = N`: up to N runs at once)"#,
        ),
        (
            quote!(every = "1m", overlap = "concurrent"),
            r#"`overlap = "concurrent"` needs how many runs at once: add `max_concurrent = 2`"#,
        ),
        (
            quote!(every = "1m", overlap = "concurrent", max_concurrent = 0),
            "`max_concurrent` of 0 runs nothing; give at least 1",
        ),
        (
            quote!(every = "1m", overlap = "skip", max_concurrent = 2),
            r#"`max_concurrent` bounds the runs of `overlap = "concurrent"`, and applies to nothing else; add `overlap = "concurrent"` or remove `max_concurrent`"#,
        ),
        (
            quote!(every = "1m", retry),
            "`retry` takes how many times a failed run is retried (attempts after the first), like `retry = 3`",
        ),
        (
            quote!(every = "1m", retry = 2.5),
            "`retry` takes how many times a failed run is retried (attempts after the first), like `retry = 3`",
        ),
        (
            quote!(every = "1m", retry = 3, retry = 2),
            "`retry` is given twice; give each key once",
        ),
        (
            quote!(every = "1m", retry_backoff = "10s"),
            "`retry_backoff` is the wait before retrying a failed run, and there are no retries; add `retry = 3` (retries after the first attempt) or remove `retry_backoff`",
        ),
        (
            quote!(every = "1m", retry = 3, retry_backoff = "1.5s"),
            r#"invalid duration "1.5s": fractions are not supported; combine units instead, like "1s500ms""#,
        ),
        (
            quote!(every = "1m", timeout = 300),
            r#"`timeout` takes a string, like `timeout = "5m"`"#,
        ),
        // The timing rules, as `build()` words them.
        (
            quote!(every = "1s", jitter = "1h"),
            "jitter 3600s is not shorter than the period 1s: each tick would start in a later tick's slot; keep the jitter well below the period",
        ),
        (
            quote!(every = "1m", jitter = "1m"),
            "jitter 60s is not shorter than the period 60s: each tick would start in a later tick's slot; keep the jitter well below the period",
        ),
        (
            quote!(cron = "0 */15 * * * *", jitter = "15m"),
            "jitter 900s is not shorter than the period 900s: each tick would start in a later tick's slot; keep the jitter well below the period",
        ),
        (
            quote!(every = "1m", catch_up = "0s"),
            "a catch-up window of zero lets no tick start; give a positive duration or leave it out (one period)",
        ),
        (
            quote!(every = "1m", catch_up = "skip", catch_up_window = "0ms"),
            "a catch-up window of zero lets no tick start; give a positive duration or leave it out (one period)",
        ),
        (
            quote!(every = "1m", timeout = "0s"),
            "a run timeout of zero cancels every run at once; give a positive duration or leave it out (no limit)",
        ),
        (
            quote!(every = "1m", retry = 0),
            "`retry` of 0 attempts retries nothing; give at least 1 or leave it out",
        ),
        (
            quote!(every = "1m", retry = 3, retry_backoff = "0s"),
            "a retry backoff of zero retries a failed run at once, over and over; give a positive duration",
        ),
        (
            quote!(every = "1m", retry = 3, retry_backoff = "2m"),
            "retry backoff 120s is not shorter than the period 60s: no retry could start before the next tick; shorten the backoff",
        ),
        (
            quote!(every = "500ms", retry = 3),
            "retry backoff 1s is not shorter than the period 500ms: no retry could start before the next tick; shorten the backoff (`retry_backoff` is 1s when not given)",
        ),
        (
            quote!(every = "1m", catch_up = "all", catch_up_max = 0),
            "catching up on all missed ticks with `max` 0 catches up on none; give a `max` of at least 1, or choose skip",
        ),
    ];
    for (tokens, want) in cases {
        let written = tokens.to_string();
        assert_eq!(parse(tokens).err().as_deref(), Some(want), "{written}");
    }
}
