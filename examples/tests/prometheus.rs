#![allow(clippy::expect_used, clippy::unwrap_used)]
//! Runs the `metrics` example on a free port until it has stopped scheduling after a
//! few runs (it keeps serving), scrapes `/metrics` over HTTP, and checks that the
//! exposition says exactly what the example printed, and that `promtool check
//! metrics` accepts it without a complaint.
//!
//! promtool comes with Debian's `prometheus` package (`.ci/run` installs it); this
//! test fails when it is missing.

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use scheduler_core::Outcome;
use support::{example, temp_dir};

/// Kills the example when the test ends, passed or not.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The next line the example prints, or a panic after `within`.
fn next_line(lines: &mpsc::Receiver<String>, within: Duration, stderr: &PathBuf) -> String {
    lines.recv_timeout(within).unwrap_or_else(|e| {
        let log = std::fs::read_to_string(stderr).unwrap_or_default();
        panic!("the example printed nothing more ({e}); its stderr:\n{log}")
    })
}

/// One sample of the text exposition: name, labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn parse_exposition(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, rest) = match line.find('{') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => {
                let (name, value) = line.split_once(' ').expect("name value");
                samples.push(Sample {
                    name: name.to_owned(),
                    labels: BTreeMap::new(),
                    value: value.trim().parse().expect("value"),
                });
                continue;
            }
        };
        // label="value",… } value — values are quoted, with \\, \" and \n escapes.
        let mut labels = BTreeMap::new();
        let mut chars = rest.chars().peekable();
        loop {
            match chars.peek() {
                Some('}') => {
                    chars.next();
                    break;
                }
                Some(',') => {
                    chars.next();
                    continue;
                }
                Some(_) => {}
                None => panic!("unterminated labels: {line}"),
            }
            let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
            assert_eq!(chars.next(), Some('"'), "{line}");
            let mut value = String::new();
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => match chars.next() {
                        Some('n') => value.push('\n'),
                        Some(c) => value.push(c),
                        None => panic!("{line}"),
                    },
                    c => value.push(c),
                }
            }
            labels.insert(key, value);
        }
        let value: String = chars.collect();
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value: value.trim().parse().expect("value"),
        });
    }
    samples
}

/// The samples named `name` whose labels include all of `with`.
fn select<'a>(samples: &'a [Sample], name: &str, with: &[(&str, &str)]) -> Vec<&'a Sample> {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            with.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect()
}

/// The value of the one sample `name{with}`, or 0 if there is none (OpenTelemetry
/// exports a series only once something was recorded in it).
fn value(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> f64 {
    let found = select(samples, name, with);
    assert!(found.len() <= 1, "{name}{with:?}: {found:?}");
    found.first().map_or(0.0, |s| s.value)
}

/// The head and body of the answer to `method path`.
fn request(addr: &str, method: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the example");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read response");
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    (head.to_owned(), body.to_owned())
}

fn scrape(addr: &str) -> (String, String) {
    let (head, body) = request(addr, "GET", "/metrics");
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    (head, body)
}

#[test]
fn the_metrics_example_exports_what_ran_and_promtool_accepts_it() {
    let bin = example("metrics");
    let dir = temp_dir("metrics-example");
    let stderr = dir.join("stderr.log");
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("time")
        .as_secs_f64();

    let mut child = Running(
        Command::new(&bin)
            .args(["--port", "0", "--stop-after-runs", "12", "--seconds", "120"])
            .arg("--db")
            .arg(dir.join("metrics.db"))
            .current_dir(&dir)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("run {}: {e}", bin.display())),
    );
    let stdout = child.0.stdout.take().expect("stdout");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    let first = next_line(&lines, Duration::from_secs(60), &stderr);
    let addr = first
        .strip_prefix("serving metrics on http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_owned();

    // What ran, as printed, until the scheduler has stopped (runs still under way at
    // the stop finish first, and print too).
    let mut printed: BTreeMap<(String, String), u64> = BTreeMap::new();
    loop {
        let line = next_line(&lines, Duration::from_secs(60), &stderr);
        if line.starts_with("stopped scheduling after ") {
            break;
        }
        let mut words = line.split_whitespace();
        if let (Some(printed_as @ ("ran" | "failed")), Some(job)) = (words.next(), words.next()) {
            // The example prints `ran`; the tick outcome of a run that returned `Ok`
            // is `succeeded`.
            let outcome = match printed_as {
                "ran" => Outcome::Succeeded,
                _ => Outcome::Failed,
            };
            *printed
                .entry((job.to_owned(), outcome.as_str().to_owned()))
                .or_default() += 1;
        }
    }
    let total: u64 = printed.values().sum();
    assert!(total >= 12, "{printed:?}");
    for job in ["heartbeat", "flaky", "slow-report"] {
        assert!(
            printed.contains_key(&(job.to_owned(), "succeeded".to_owned())),
            "{job} never ran: {printed:?}"
        );
    }

    let (head, body) = scrape(&addr);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    // HEAD answers like GET, without the body (Prometheus and load balancers probe so).
    let (probe, nothing) = request(&addr, "HEAD", "/metrics");
    assert!(probe.starts_with("HTTP/1.1 200 "), "{probe}");
    assert!(
        probe
            .to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{probe}"
    );
    assert_eq!(nothing, "");
    let (missing, hint) = request(&addr, "GET", "/");
    assert!(missing.starts_with("HTTP/1.1 404 "), "{missing}");
    assert_eq!(hint, "try /metrics\n");
    let samples = parse_exposition(&body);

    // Every tick that ran or failed, and nothing else, per job.
    let mut exported: BTreeMap<(String, String), u64> = BTreeMap::new();
    for s in select(&samples, "scheduler_tick_outcomes_total", &[]) {
        let outcome = &s.labels["outcome"];
        if outcome == "succeeded" || outcome == "failed" {
            exported.insert(
                (s.labels["job_name"].clone(), outcome.clone()),
                s.value as u64,
            );
        }
    }
    assert_eq!(exported, printed, "tick outcomes vs printed runs\n{body}");

    for job in ["heartbeat", "flaky", "slow-report"] {
        let ran = printed
            .get(&(job.to_owned(), "succeeded".to_owned()))
            .copied()
            .unwrap_or(0) as f64;
        let failed = printed
            .get(&(job.to_owned(), "failed".to_owned()))
            .copied()
            .unwrap_or(0) as f64;
        // One run duration per run, by how it ended; one lateness per start.
        let duration = "scheduler_run_duration_seconds_count";
        let succeeded = [("job_name", job), ("outcome", "succeeded")];
        assert_eq!(value(&samples, duration, &succeeded), ran, "{job}");
        let failures = [("job_name", job), ("outcome", "failed")];
        assert_eq!(value(&samples, duration, &failures), failed, "{job}");
        let lateness = "scheduler_run_lateness_seconds_count";
        assert_eq!(
            value(&samples, lateness, &[("job_name", job)]),
            ran + failed
        );
        // Histograms are whole: the +Inf bucket holds every observation.
        let inf = [("job_name", job), ("outcome", "succeeded"), ("le", "+Inf")];
        let buckets = "scheduler_run_duration_seconds_bucket";
        assert_eq!(value(&samples, buckets, &inf), ran, "{job}");
        // The last success is recent.
        let last = value(
            &samples,
            "scheduler_run_last_success_seconds",
            &[("job_name", job)],
        );
        assert!(
            last >= started - 5.0 && last <= started + 120.0,
            "{job}: last success {last}, test started {started}"
        );
    }
    // The slow job takes 1.5 s every second: the tick that comes while it runs is skipped.
    let skipped = [("job_name", "slow-report"), ("outcome", "skipped_overlap")];
    assert!(value(&samples, "scheduler_tick_outcomes_total", &skipped) >= 1.0);
    // Every run has ended: no lease is held.
    assert_eq!(value(&samples, "scheduler_leases_held", &[]), 0.0);
    for op in ["take", "release", "now"] {
        let with = [("operation", op), ("result", "ok")];
        assert!(value(&samples, "scheduler_store_duration_seconds_count", &with) >= 1.0);
    }
    assert_eq!(value(&samples, "scheduler_store_errors_total", &[]), 0.0);
    assert_eq!(
        select(&samples, "scheduler_clock_offset_seconds", &[]).len(),
        1
    );

    // A second scrape, later, says the same: nothing runs any more.
    std::thread::sleep(Duration::from_millis(1500));
    let (_, again) = scrape(&addr);
    let again = parse_exposition(&again);
    assert_eq!(
        select(&again, "scheduler_tick_outcomes_total", &[]).len(),
        select(&samples, "scheduler_tick_outcomes_total", &[]).len()
    );
    for s in select(&samples, "scheduler_tick_outcomes_total", &[]) {
        let with: Vec<(&str, &str)> = s
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(value(&again, &s.name, &with), s.value, "{:?}", s.labels);
    }

    // promtool parses and lints the exposition. Its lint problems (a counter without
    // `_total`, a missing HELP, a non-base unit…) make it exit 3, so exit 0 already
    // means clean; the output is required to be empty too, so that a future promtool
    // printing warnings with exit 0 fails here rather than passing unnoticed.
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "promtool could not be started ({e}): install it (`apt-get install prometheus`, \
                 as .ci/run does)"
            )
        });
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("write to promtool");
    let checked = promtool.wait_with_output().expect("promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(
        checked.status.success() && said.trim().is_empty(),
        "promtool check metrics: {}\n{said}\n{body}",
        checked.status
    );

    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
}
