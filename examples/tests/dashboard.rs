#![allow(clippy::expect_used, clippy::unwrap_used)]
//! `dashboards/scheduler.json` queries only metrics the code really exports, under
//! the names the Prometheus exporter gives them, and its PromQL parses.
//!
//! The names come from a real exposition: a scheduler on the in-memory store, with a
//! meter from an `SdkMeterProvider` whose reader is the `opentelemetry-prometheus`
//! exporter, runs jobs that touch every metric (a success, a failure, a lost lease,
//! a store outage); its registry is encoded as text and the `# TYPE` lines give the
//! metric families. Every `scheduler_…` identifier in the dashboard's queries must be
//! one of them (or a histogram's `_bucket`, `_sum`, `_count` series), and every
//! family must be on the dashboard. Every value an `outcome` label is matched against
//! is a word `Outcome` writes. promtool (Debian package `prometheus`, as in
//! `.ci/run`) parses the queries as recording rules.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prometheus::{Encoder as _, Registry, TextEncoder};
use scheduler_core::{
    BoxError, Duplicate, Idempotent, JobContext, LeaseName, MemoryStore, Outcome, Schedule,
    Scheduler, Ttl, metric_names,
};
use serde_json::Value;
use tokio::time::Instant;

struct Probe {
    name: &'static str,
    every: Duration,
    work: Duration,
    fail: bool,
}

#[scheduler_core::async_trait]
impl Idempotent for Probe {
    fn name(&self) -> &str {
        self.name
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(self.every)
    }
    fn duplicate(&self) -> Duplicate {
        Duplicate::Harmless
    }
    async fn run(&self, _: JobContext) -> Result<(), BoxError> {
        tokio::time::sleep(self.work).await;
        if self.fail {
            Err("told to fail".into())
        } else {
            Ok(())
        }
    }
}

/// The metric families (name → type) a scheduler exports through the Prometheus
/// exporter, after exercising every metric.
async fn exported_families() -> (BTreeMap<String, String>, String) {
    let registry = Registry::new();
    let exporter = opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .build()
        .expect("exporter");
    let provider = SdkMeterProvider::builder().with_reader(exporter).build();
    let store = Arc::new(MemoryStore::new());
    // As if the jobs ran before: start-up runs each one's latest tick at once.
    store.set_jobs_known(true);
    let job = |name, every_ms, work_ms, fail| Probe {
        name,
        every: Duration::from_millis(every_ms),
        work: Duration::from_millis(work_ms),
        fail,
    };
    let scheduler = Scheduler::builder(store.clone())
        .node_id("node-a")
        .lease_ttl(Duration::from_secs(4))
        .meter(provider.meter("scheduler"))
        .job(job("ok", 1_000, 10, false))
        .job(job("failing", 1_000, 10, true))
        .job(job("stolen", 60_000, 5_000, false))
        .build()
        .expect("build");
    let t0 = Instant::now();
    let script = {
        let store = store.clone();
        async move {
            tokio::time::sleep_until(t0 + Duration::from_millis(500)).await;
            let ttl = Ttl::new(Duration::from_secs(600)).expect("ttl");
            let stolen = LeaseName::new("stolen").expect("name");
            assert!(store.steal(&stolen, ttl).is_some(), "stolen was not taken");
            tokio::time::sleep_until(t0 + Duration::from_millis(2_200)).await;
            store.set_failing(true);
            tokio::time::sleep_until(t0 + Duration::from_millis(3_700)).await;
            store.set_failing(false);
            tokio::time::sleep_until(t0 + Duration::from_millis(8_000)).await;
        }
    };
    scheduler.run_until(script).await;

    let mut text = Vec::new();
    TextEncoder::new()
        .encode(&registry.gather(), &mut text)
        .expect("encode");
    let text = String::from_utf8(text).expect("utf-8");
    let families = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), kind.to_owned()))
        .collect();
    provider.shutdown().expect("shutdown");
    (families, text)
}

fn dashboard() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dashboards/scheduler.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every PromQL query of the dashboard: panel targets' `expr`, and the queries of
/// its template variables.
fn queries(dashboard: &Value) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    match (k.as_str(), v) {
                        ("expr", Value::String(s)) => out.push(s.clone()),
                        _ => walk(v, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    for var in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if var["type"] == "query" {
            let query = var["query"]["query"]
                .as_str()
                .or_else(|| var["query"].as_str())
                .expect("a variable's query");
            out.push(query.to_owned());
        }
    }
    out
}

/// The `scheduler_…` metric names a query uses.
fn metric_names_in(query: &str) -> Vec<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = Vec::new();
    for (i, _) in query.match_indices("scheduler_") {
        if query[..i].chars().next_back().is_some_and(ident) {
            continue;
        }
        let name: String = query[i..].chars().take_while(|c| ident(*c)).collect();
        names.push(name);
    }
    names
}

/// The metric families `dashboard` reads, and the names it uses that are not
/// exported (each with the query it is in).
fn resolve(
    dashboard: &Value,
    families: &BTreeMap<String, String>,
) -> (BTreeSet<String>, Vec<String>) {
    let mut used = BTreeSet::new();
    let mut unknown = Vec::new();
    for query in queries(dashboard) {
        for name in metric_names_in(&query) {
            let family = if families.contains_key(&name) {
                Some(name.clone())
            } else {
                ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
                    let base = name.strip_suffix(suffix)?;
                    let kind = families.get(base)?;
                    (kind == "histogram" || (kind == "summary" && *suffix != "_bucket"))
                        .then(|| base.to_owned())
                })
            };
            match family {
                Some(family) => {
                    used.insert(family);
                }
                None => unknown.push(format!("`{name}` in `{query}`")),
            }
        }
    }
    (used, unknown)
}

/// The words a query matches the `outcome` label against (`outcome="x"`,
/// `outcome=~"x|y"`, and their negations), each with the query, that are not an
/// [`Outcome`]'s word as the code writes it.
fn unknown_outcomes(dashboard: &Value) -> Vec<String> {
    let mut unknown = Vec::new();
    for query in queries(dashboard) {
        for (i, _) in query.match_indices("outcome") {
            let rest = query[i + "outcome".len()..].trim_start();
            let Some(rest) = ["=~", "!~", "!=", "="]
                .iter()
                .find_map(|op| rest.strip_prefix(op))
            else {
                continue;
            };
            let Some(value) = rest
                .trim_start()
                .strip_prefix('"')
                .and_then(|v| v.split('"').next())
            else {
                continue;
            };
            for word in value.split('|') {
                let written = word.parse::<Outcome>().is_ok_and(|o| o.as_str() == word);
                if !written {
                    unknown.push(format!("`{word}` in `{query}`"));
                }
            }
        }
    }
    unknown
}

#[test]
fn the_dashboard_matches_outcomes_by_the_words_the_code_writes() {
    let dashboard = dashboard();
    let unknown = unknown_outcomes(&dashboard);
    assert!(unknown.is_empty(), "{}", unknown.join("\n"));
    // `ran` is what the counters said before `Outcome` was one type: caught.
    for bogus in [
        r#"sum(rate(scheduler_tick_outcomes_total{outcome="ran"}[5m]))"#,
        r#"sum(rate(scheduler_tick_outcomes_total{outcome=~"failed|ran"}[5m]))"#,
    ] {
        let mut dashboard = dashboard.clone();
        dashboard["panels"][1]["targets"][0]["expr"] = Value::String(bogus.to_owned());
        let unknown = unknown_outcomes(&dashboard);
        assert_eq!(unknown.len(), 1, "{bogus}: {unknown:?}");
        assert!(unknown[0].starts_with("`ran`"), "{unknown:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_dashboard_queries_only_exported_metrics_and_shows_them_all() {
    let (families, text) = exported_families().await;
    // The scenario exercised every metric the code defines.
    for otel in [
        metric_names::TICK_OUTCOMES,
        metric_names::RUN_DURATION,
        metric_names::RUN_LATENESS,
        metric_names::LAST_SUCCESS,
        metric_names::LEASES_HELD,
        metric_names::RENEWALS,
        metric_names::STORE_DURATION,
        metric_names::STORE_ERRORS,
        metric_names::CLOCK_OFFSET,
    ] {
        let prefix = otel.replace('.', "_");
        assert!(
            families.keys().any(|f| f.starts_with(&prefix)),
            "{otel} was not exported:\n{text}"
        );
    }

    let dashboard = dashboard();
    assert!(queries(&dashboard).len() >= 10);
    let (used, unknown) = resolve(&dashboard, &families);
    assert!(
        unknown.is_empty(),
        "the dashboard uses names the code does not export:\n{}\nexported: {:?}",
        unknown.join("\n"),
        families.keys().collect::<Vec<_>>()
    );
    let unshown: Vec<_> = families
        .keys()
        .filter(|f| f.starts_with("scheduler_") && !used.contains(*f))
        .collect();
    assert!(unshown.is_empty(), "no panel shows {unshown:?}");
}

#[tokio::test(start_paused = true)]
async fn a_name_the_code_does_not_export_is_caught() {
    let (families, _) = exported_families().await;
    for bogus in [
        "sum(rate(scheduler_runs_total[5m]))",
        // The OpenTelemetry name spelled with underscores lacks the unit suffix.
        "histogram_quantile(0.99, rate(scheduler_run_duration_bucket[5m]))",
        // A gauge has no histogram series.
        "scheduler_leases_held_bucket",
    ] {
        let mut dashboard = dashboard();
        dashboard["panels"][1]["targets"][0]["expr"] = Value::String(bogus.to_owned());
        let (_, unknown) = resolve(&dashboard, &families);
        assert_eq!(unknown.len(), 1, "{bogus}: {unknown:?}");
        assert!(unknown[0].contains(bogus), "{unknown:?}");
    }
}

#[test]
fn the_dashboard_is_wired_to_its_variables_and_its_promql_parses() {
    let dashboard = dashboard();
    assert!(dashboard["schemaVersion"].as_u64().expect("schemaVersion") >= 36);
    let vars: BTreeMap<&str, &str> = dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v["type"].as_str().unwrap()))
        .collect();
    assert_eq!(vars.get("DS_PROMETHEUS"), Some(&"datasource"), "{vars:?}");
    assert_eq!(vars.get("job"), Some(&"query"), "{vars:?}");
    // Every panel and query reads the selected Prometheus.
    fn datasources<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    if k == "datasource" {
                        out.push(v);
                    } else {
                        datasources(v, out);
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| datasources(v, out)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    datasources(&dashboard["panels"], &mut found);
    assert!(!found.is_empty());
    for ds in found {
        assert_eq!(ds["uid"], "${DS_PROMETHEUS}", "{ds}");
        assert_eq!(ds["type"], "prometheus", "{ds}");
    }
    // Queries that select a job's series filter on the `job` variable.
    for query in queries(&dashboard) {
        if query.contains("job") && !query.starts_with("label_values") {
            assert!(query.contains("$job"), "{query}");
        }
    }

    // promtool parses every query (Grafana's variables filled in) as a recording rule.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, query) in queries(&dashboard).iter().enumerate() {
        if query.starts_with("label_values(") {
            continue; // Grafana's own function, not PromQL.
        }
        let promql = query
            .replace("$__rate_interval", "5m")
            .replace("$__interval", "5m")
            .replace("$__range", "1h")
            .replace("$job", ".+")
            .replace("$instance", ".+");
        assert!(!promql.contains('$'), "unknown variable in {query}");
        let quoted = serde_json::to_string(&promql).expect("quote");
        rules.push_str(&format!(
            "      - record: dashboard:query_{i}\n        expr: {quoted}\n"
        ));
    }
    let dir = std::env::temp_dir().join(format!("dashboard-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("rules.yml");
    std::fs::File::create(&file)
        .and_then(|mut f| f.write_all(rules.as_bytes()))
        .expect("write rules");
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "promtool could not be started ({e}): install it (`apt-get install prometheus`, \
                 as .ci/run does)"
            )
        });
    assert!(
        out.status.success(),
        "promtool check rules: {}\n{}{}\n{rules}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
