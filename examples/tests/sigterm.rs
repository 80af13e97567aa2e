#![allow(clippy::expect_used, clippy::unwrap_used)]
//! A scheduler in a child process, stopped by signals as Docker, systemd, Kubernetes
//! or a user at a terminal stop it: SIGTERM mid-run lets the run finish, releases its
//! lease (another instance takes the job's next tick at once, not after the ttl) and
//! exits 0; a second signal during the grace period cancels the running job at once.
//!
//! `harness = false`: this binary is both the test and, with `SIGTERM_CHILD` set, the
//! child it signals (on a SQLite file in a temporary directory).

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use scheduler_core::{
    BoxError, JobContext, LeaseName, Scheduler, Scope, Store as _, TakeRequest, Tick, Ttl, job,
    shutdown_signal,
};
use scheduler_sqlite::{SqliteOptions, SqliteStore};

/// Every two seconds; runs for `JOB_SECONDS`, or until its cancellation fires.
#[job(every = "2s")]
async fn long(ctx: JobContext) -> Result<(), BoxError> {
    let seconds: u64 = std::env::var("JOB_SECONDS")?.parse()?;
    println!("started tick {}", ctx.tick());
    tokio::select! {
        () = tokio::time::sleep(Duration::from_secs(seconds)) => println!("finished tick {}", ctx.tick()),
        () = ctx.cancellation().cancelled() => println!("cancelled tick {}", ctx.tick()),
    }
    Ok(())
}

/// The child: one job on the SQLite file `db`, a lease ttl of a minute (so an
/// expiry cannot pass for a release), until a signal.
async fn child(db: &str) -> Result<(), BoxError> {
    let grace: u64 = std::env::var("GRACE_SECONDS")?.parse()?;
    let store = SqliteStore::open(db, SqliteOptions::default()).await?;
    let scheduler = Scheduler::builder(store)
        .node_id("n")
        .lease_ttl(Duration::from_secs(60))
        .shutdown_grace(Duration::from_secs(grace))
        .job(long)
        .build()?;
    scheduler.run_until(shutdown_signal()).await;
    println!("stopped");
    Ok(())
}

/// A running child and the lines it prints, from both of its pipes.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Running {
    fn start(db: &Path, grace: u64, job: u64) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env("SIGTERM_CHILD", db)
            .env("GRACE_SECONDS", grace.to_string())
            .env("JOB_SECONDS", job.to_string())
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the child");
        let (send, lines) = mpsc::channel();
        let out: Box<dyn std::io::Read + Send> = Box::new(child.stdout.take().unwrap());
        let err: Box<dyn std::io::Read + Send> = Box::new(child.stderr.take().unwrap());
        for pipe in [out, err] {
            let send = send.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let _ = send.send(line);
                }
            });
        }
        Running {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (at most 20 s) for a line holding `text`.
    fn wait_for(&mut self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.seen.iter().any(|l| l.contains(text)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!("no line with {text:?} in:\n{}", self.seen.join("\n")),
            }
        }
    }

    fn signal(&self, name: &str) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-s", name, &pid]).status();
        assert!(sent.unwrap().success(), "kill -s {name} {pid}");
    }

    /// Waits (at most `limit`) for the child to exit; the lines it printed.
    fn exit_within(mut self, limit: Duration) -> (ExitStatus, String) {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                self.seen.extend(self.lines.try_iter());
                panic!(
                    "the child did not exit within {limit:?}:\n{}",
                    self.seen.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        // The pipes close with the process: the readers' last lines.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(line);
        }
        (status, self.seen.join("\n"))
    }
}

/// Whether another instance can take the job's lease now, for a tick after the last.
async fn lease_is_free(db: &Path) -> bool {
    let store = SqliteStore::open(db, SqliteOptions::default())
        .await
        .unwrap();
    let name = LeaseName::for_job("long", Scope::Cluster, "n").unwrap();
    let tick = Tick::new(store.now().await.unwrap());
    let ttl = Ttl::new(Duration::from_secs(5)).unwrap();
    let taken = store
        .take(&[TakeRequest::new(name, tick)], ttl)
        .await
        .unwrap();
    !taken.won.is_empty()
}

fn temp_db(test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("scheduler.db")
}

/// SIGTERM while a run is under way: the run finishes within the grace, the lease is
/// released, the process exits 0.
async fn sigterm_mid_run_finishes_the_run_releases_the_lease_and_exits_0() {
    let db = temp_db("sigterm-once");
    let mut child = Running::start(&db, 30, 2);
    child.wait_for("started tick");
    child.signal("TERM");
    let (status, out) = child.exit_within(Duration::from_secs(15));
    assert!(status.success(), "{status}:\n{out}");
    assert!(out.contains("SIGTERM received"), "{out}");
    assert!(
        out.contains("a second Ctrl-C/SIGTERM stops waiting"),
        "{out}"
    );
    assert!(out.contains("finished tick"), "the run was cut:\n{out}");
    assert!(out.contains("stopped"), "{out}");
    assert!(
        lease_is_free(&db).await,
        "the lease is still held (until its ttl):\n{out}"
    );
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

/// A second signal during the grace period: the running job is cancelled at once,
/// its lease released, the process exits 0 long before the grace would end.
async fn a_second_signal_cancels_the_running_job_at_once(first: &str, second: &str) {
    let db = temp_db(&format!("sigterm-twice-{first}-{second}"));
    let mut child = Running::start(&db, 120, 120);
    child.wait_for("started tick");
    child.signal(first);
    child.wait_for("scheduler shutting down");
    let signalled = Instant::now();
    child.signal(second);
    let (status, out) = child.exit_within(Duration::from_secs(15));
    assert!(status.success(), "{status}:\n{out}");
    assert!(
        signalled.elapsed() < Duration::from_secs(10),
        "{:?}",
        signalled.elapsed()
    );
    assert!(out.contains("cancelled tick"), "no cancellation:\n{out}");
    assert!(!out.contains("finished tick"), "{out}");
    assert!(out.contains("cancelling running jobs now"), "{out}");
    assert!(
        lease_is_free(&db).await,
        "the lease is still held (until its ttl):\n{out}"
    );
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

fn main() -> Result<(), BoxError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if let Some(db) = std::env::var_os("SIGTERM_CHILD") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_ansi(false)
            .init();
        let db = db.to_string_lossy().into_owned();
        return runtime.block_on(child(&db));
    }
    if cfg!(not(unix)) {
        return Ok(()); // `kill` sends the signals
    }
    runtime.block_on(async {
        sigterm_mid_run_finishes_the_run_releases_the_lease_and_exits_0().await;
        println!("test sigterm_mid_run_finishes_the_run_releases_the_lease_and_exits_0 ... ok");
        for (first, second) in [("INT", "INT"), ("TERM", "TERM"), ("TERM", "INT")] {
            a_second_signal_cancels_the_running_job_at_once(first, second).await;
            println!(
                "test a_second_signal_cancels_the_running_job_at_once ({first}, {second}) ... ok"
            );
        }
    });
    Ok(())
}
