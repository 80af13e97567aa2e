#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The examples' command lines: `--help` explains and runs nothing, a bad value or an
//! unknown flag is refused, the environment stands in for a flag (an empty variable
//! counts as unset), logs redirected to a file carry no colour codes, and an error
//! ends the process with one readable line (`main() -> Result<(), Report>`) rather
//! than the error's `Debug` form.

mod support;

use std::process::{Command, Output};

use support::{example, temp_dir};

/// Runs the example `name` with `args` in `dir`, with none of the examples'
/// environment variables set unless `env` sets them.
fn run(name: &str, dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(example(name));
    command.args(args).current_dir(dir);
    for var in [
        "RUN_SECONDS",
        "NODE_ID",
        "DATABASE_URL",
        "SCHEDULER_DB",
        "METRICS_PORT",
        "STOP_AFTER_RUNS",
        "EVENTS",
        "WORKERS",
        "NO_COLOR",
    ] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    command
        .output()
        .unwrap_or_else(|e| panic!("run {name}: {e}"))
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_lists_the_flags_and_runs_nothing() {
    let dir = temp_dir("examples-help");
    for (name, flags) in [
        (
            "quickstart",
            &["--seconds <N>", "--node <NAME>", "--db <PATH>"][..],
        ),
        (
            "metrics",
            &["--port <N>", "--stop-after-runs <N>", "--seconds <N>"],
        ),
        (
            "uptime_monitor",
            &["--database-url <URL>", "--node <NAME>", "--seconds <N>"],
        ),
        ("fenced_payout", &["--database-url <URL>", "--seconds <N>"]),
        (
            "keyed_ingest",
            &["--database-url <URL>", "--events <N>", "--workers <N>"],
        ),
    ] {
        let out = run(name, &dir, &["--help"], &[]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{name} --help: {stdout}{stderr}");
        assert!(stdout.contains(&format!("Usage: {name} ")), "{stdout}");
        for flag in flags {
            assert!(stdout.contains(flag), "{name}: no {flag} in\n{stdout}");
        }
    }
    let seconds = run("quickstart", &dir, &["--help"], &[]);
    assert!(text(&seconds).0.contains("[env: RUN_SECONDS="));
    // Nothing ran: no database file was created.
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(files.is_empty(), "{files:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_value_or_an_unknown_flag_is_refused() {
    let dir = temp_dir("examples-bad-flags");
    let ten = run("quickstart", &dir, &["--seconds", "ten"], &[]);
    let (_, stderr) = text(&ten);
    assert_eq!(ten.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid value 'ten' for '--seconds <N>'"),
        "{stderr}"
    );
    let env = run("quickstart", &dir, &[], &[("RUN_SECONDS", "ten")]);
    assert_eq!(env.status.code(), Some(2), "{}", text(&env).1);
    let unknown = run("quickstart", &dir, &["--secs", "10"], &[]);
    let (_, stderr) = text(&unknown);
    assert_eq!(unknown.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unexpected argument '--secs'"), "{stderr}");
    let no_url = run("uptime_monitor", &dir, &["--seconds", "1"], &[]);
    let (_, stderr) = text(&no_url);
    assert_eq!(no_url.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--database-url <URL>"), "{stderr}");
    let port = run("metrics", &dir, &["--port", "65536"], &[]);
    assert_eq!(port.status.code(), Some(2), "{}", text(&port).1);
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(files.is_empty(), "{files:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_environment_stands_in_for_flags_and_redirected_logs_have_no_colour() {
    let dir = temp_dir("examples-env");
    let out = run(
        "quickstart",
        &dir,
        &[],
        &[
            ("RUN_SECONDS", "1"),
            ("SCHEDULER_DB", "from-env.db"),
            ("NODE_ID", "node-env"),
            ("RUST_LOG", "info"),
        ],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("quickstart: 3 jobs on from-env.db as node node-env"),
        "{stdout}"
    );
    assert!(dir.join("from-env.db").exists());
    assert!(stderr.contains("INFO"), "no log lines: {stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in a file: {stderr:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_empty_environment_variable_counts_as_unset() {
    let dir = temp_dir("examples-empty-env");
    let out = run(
        "quickstart",
        &dir,
        &["--seconds", "1"],
        &[("SCHEDULER_DB", ""), ("NODE_ID", ""), ("RUST_LOG", "warn")],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    // The default file, and the hostname rather than an empty node id.
    assert!(
        stdout.contains("quickstart: 3 jobs on scheduler.db as node "),
        "{stdout}"
    );
    assert!(!stdout.contains("as node ;"), "{stdout}");
    assert!(dir.join("scheduler.db").exists());
    // An empty value on the command line is still refused.
    let flag = run("quickstart", &dir, &["--seconds", ""], &[]);
    assert_eq!(flag.status.code(), Some(2), "{}", text(&flag).1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_error_is_one_line_of_sentences() {
    let dir = temp_dir("examples-error");
    let out = run(
        "uptime_monitor",
        &dir,
        &["--database-url", "mysql://nobody@127.0.0.1/app"],
        &[],
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    // `main() -> Result<(), Report>`: the chain of causes, not the `Debug` form
    // (`Error: InvalidUrl { reason: … }`).
    assert!(last.starts_with("Error: invalid database URL"), "{stderr}");
    assert!(!stderr.contains(" { "), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
