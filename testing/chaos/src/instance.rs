//! App instances as OS processes: spawned from the `chaos-app` binary, signalled with
//! the `kill` command, their output captured to a log file each.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use chrono::TimeDelta;
use tokio::process::{Child, ChildStdin, Command};

use crate::error::{Error, Result};

/// How to start one instance.
#[derive(Debug, Clone)]
pub struct InstanceSpec {
    /// Its name, as recorded in `runs` and `heartbeats`; also its log file's name.
    pub name: String,
    /// The database URL it connects to (maybe through a proxy or PgBouncer).
    pub url: String,
    /// Where it records runs and heartbeats, if not in that database.
    pub record_url: Option<String>,
    /// Its node id.
    pub node: String,
    /// The lease ttl.
    pub ttl: Duration,
    /// Every job's period.
    pub period: Duration,
    /// How long a graceful shutdown waits for running jobs.
    pub grace: Duration,
    /// How far its clock is off (positive: ahead).
    pub clock_offset: TimeDelta,
}

impl InstanceSpec {
    /// An instance `name` on `node-a` against `url`, ttl 2 s, period 1 s, grace 5 s,
    /// its clock right.
    pub fn new(name: &str, url: &str) -> Self {
        Self {
            name: name.to_owned(),
            url: url.to_owned(),
            record_url: None,
            node: "node-a".to_owned(),
            ttl: Duration::from_secs(2),
            period: Duration::from_secs(1),
            grace: Duration::from_secs(5),
            clock_offset: TimeDelta::zero(),
        }
    }
}

/// A signal the driver sends to an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `SIGKILL`: a crash.
    Kill,
    /// `SIGSTOP`: a pause (GC pause, VM stall); nothing in the process runs.
    Stop,
    /// `SIGCONT`: the end of the pause.
    Cont,
    /// `SIGTERM`: a graceful shutdown.
    Term,
}

impl Signal {
    fn name(self) -> &'static str {
        match self {
            Signal::Kill => "KILL",
            Signal::Stop => "STOP",
            Signal::Cont => "CONT",
            Signal::Term => "TERM",
        }
    }
}

/// A running `chaos-app` process.
///
/// Dropping it kills the process (`SIGKILL`, which also ends a stopped one), so a
/// test that fails leaves nothing behind; and the process exits by itself when the
/// driver's process ends, because it watches its standard input (a pipe the driver
/// holds).
#[derive(Debug)]
pub struct Instance {
    spec: InstanceSpec,
    child: Child,
    pid: u32,
    log: PathBuf,
    /// The write end of the process's standard input: closed, the process exits.
    _stdin: Option<ChildStdin>,
    exited: Option<ExitStatus>,
}

impl Instance {
    /// Spawns `bin` (the `chaos-app` binary) for `spec`, its standard output and
    /// error going to `log_dir/NAME.log`. Does not wait for it to be ready.
    ///
    /// # Errors
    /// [`Error::Io`] if the log file cannot be created or the process not spawned.
    pub fn spawn(bin: &Path, spec: &InstanceSpec, log_dir: &Path) -> Result<Instance> {
        std::fs::create_dir_all(log_dir)
            .map_err(Error::io(format!("create {}", log_dir.display())))?;
        let log = log_dir.join(format!("{}.log", spec.name));
        let out = File::create(&log).map_err(Error::io(format!("create {}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(Error::io(format!("reopen {}", log.display())))?;
        let mut command = Command::new(bin);
        if let Some(record) = &spec.record_url {
            command.arg("--record-url").arg(record);
        }
        let mut child = command
            .arg("--url")
            .arg(&spec.url)
            .arg("--instance")
            .arg(&spec.name)
            .arg("--node")
            .arg(&spec.node)
            .arg(format!("--ttl-ms={}", spec.ttl.as_millis()))
            .arg(format!("--period-ms={}", spec.period.as_millis()))
            .arg(format!("--grace-ms={}", spec.grace.as_millis()))
            .arg(format!(
                "--clock-offset-ms={}",
                spec.clock_offset.num_milliseconds()
            ))
            .arg("--exit-with-stdin")
            .env_remove("DATABASE_URL")
            .stdin(Stdio::piped())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .kill_on_drop(true)
            .spawn()
            .map_err(Error::io(format!("spawn {}", bin.display())))?;
        let pid = child.id().ok_or_else(|| Error::NotRunning {
            name: spec.name.clone(),
            log: log.display().to_string(),
        })?;
        let stdin = child.stdin.take();
        Ok(Instance {
            spec: spec.clone(),
            child,
            pid,
            log,
            _stdin: stdin,
            exited: None,
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// How it was started.
    pub fn spec(&self) -> &InstanceSpec {
        &self.spec
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its log file (standard output and error).
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Whether the process still runs (a stopped process runs).
    pub fn is_running(&mut self) -> bool {
        if self.exited.is_some() {
            return false;
        }
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.exited = Some(status);
                false
            }
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// How it exited, once it has.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.exited
    }

    /// Sends `signal` with the `kill` command.
    ///
    /// # Errors
    /// [`Error::NotRunning`] if the process has exited, [`Error::Io`] if `kill` fails.
    pub async fn signal(&mut self, signal: Signal) -> Result<()> {
        if !self.is_running() {
            return Err(self.not_running());
        }
        let action = format!("send SIG{} to {}", signal.name(), self.spec.name);
        let status = Command::new("kill")
            .arg(format!("-{}", signal.name()))
            .arg(self.pid.to_string())
            .status()
            .await
            .map_err(Error::io(action.clone()))?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::Io {
                action,
                source: std::io::Error::other(format!("kill exited with {status}")),
            })
        }
    }

    /// Waits until the process exits, for at most `limit`.
    ///
    /// # Errors
    /// [`Error::Timeout`] if it is still running then, [`Error::Io`] if waiting fails.
    pub async fn wait(&mut self, limit: Duration) -> Result<ExitStatus> {
        if let Some(status) = self.exited {
            return Ok(status);
        }
        let what = format!("instance {} to exit", self.spec.name);
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(Ok(status)) => {
                self.exited = Some(status);
                Ok(status)
            }
            Ok(Err(source)) => Err(Error::Io {
                action: what,
                source,
            }),
            Err(_) => Err(Error::Timeout {
                what,
                waited: limit,
            }),
        }
    }

    /// A crash: `SIGKILL`, then waits until the process is gone.
    ///
    /// # Errors
    /// As [`signal`](Self::signal) and [`wait`](Self::wait).
    pub async fn kill(&mut self) -> Result<ExitStatus> {
        self.signal(Signal::Kill).await?;
        self.wait(Duration::from_secs(10)).await
    }

    /// A graceful shutdown: `SIGTERM`, then waits until the process has exited (it
    /// lets running jobs finish within its grace period and releases its leases).
    ///
    /// # Errors
    /// As [`signal`](Self::signal) and [`wait`](Self::wait).
    pub async fn terminate(&mut self) -> Result<ExitStatus> {
        self.signal(Signal::Term).await?;
        let limit = self.spec.grace + Duration::from_secs(10);
        self.wait(limit).await
    }

    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn not_running(&self) -> Error {
        Error::NotRunning {
            name: self.spec.name.clone(),
            log: self.log.display().to_string(),
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.start_kill();
        }
    }
}
