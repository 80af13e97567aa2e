//! The cluster's processes: daemons in process groups of their own, signals, and
//! the watchdog that cleans up after a test process that died.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::error::{Error, Result};

/// A process the cluster started, in a process group of its own; killed (the whole
/// group) and reaped on drop. While it runs, an empty file named after its process
/// group sits in the cluster's `pids` directory, for the watchdog.
#[derive(Debug)]
pub(super) struct Daemon {
    child: Child,
    pid_file: PathBuf,
}

impl Daemon {
    pub(super) fn spawn(
        mut command: Command,
        log: &Path,
        pids: &Path,
        as_postgres: Option<(u32, u32)>,
    ) -> Result<Daemon> {
        let out = std::fs::File::create(log).map_err(Error::io("create a daemon log"))?;
        let err = out.try_clone().map_err(Error::io("clone a daemon log"))?;
        command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        if let Some((uid, gid)) = as_postgres {
            command.uid(uid).gid(gid);
        }
        let child = command.spawn().map_err(Error::io("spawn a daemon"))?;
        let pid_file = pids.join(child.id().to_string());
        let mut daemon = Daemon { child, pid_file };
        if let Err(error) = std::fs::write(&daemon.pid_file, "") {
            daemon.kill();
            return Err(Error::io("write a daemon's pid file")(error));
        }
        Ok(daemon)
    }

    pub(super) fn kill(&mut self) {
        signal_group(self.child.id(), "KILL");
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.pid_file);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The watchdog shell (`sh -c WATCHDOG patroni-watchdog DIR`): it waits for the end
/// of its input, which comes when the cluster is dropped or the test process ends
/// however it ends (a `SIGKILL` included: the kernel closes the pipe), then kills
/// what is left: every daemon's process group (`DIR/pids`), every node's postmaster
/// and its children, and removes the data directories. After a normal drop nothing
/// is left for it to do. It runs in a process group of its own, so a Ctrl-C aimed
/// at the test does not stop it first.
const WATCHDOG: &str = r#"
set -u
trap '' PIPE INT
dir=$1
while read -r _; do :; done
for f in "$dir"/pids/*; do
    # dash's kill takes no `--`: a negative number is a process group.
    [ -e "$f" ] && kill -9 "-${f##*/}" 2>/dev/null
done
for f in "$dir"/n*/data/postmaster.pid; do
    [ -e "$f" ] || continue
    pid=$(sed -n 1p "$f")
    [ -n "$pid" ] || continue
    kill -STOP "$pid" 2>/dev/null
    pkill -KILL -P "$pid" 2>/dev/null
    kill -KILL "$pid" 2>/dev/null
done
rm -rf "$dir"/n*/data "$dir"/etcd/data "$dir"/pids
"#;

/// Starts the watchdog on `dir`; its input is the returned pipe.
pub(super) fn watchdog(dir: &Path) -> Result<(Child, ChildStdin)> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(WATCHDOG)
        .arg("patroni-watchdog")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(Error::io("spawn the cluster's watchdog"))?;
    match child.stdin.take() {
        Some(input) => Ok((child, input)),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err(Error::io("open the watchdog's input")(
                std::io::Error::other("no pipe"),
            ))
        }
    }
}

/// Sends `signal` to process group `pgid` (best effort).
fn signal_group(pgid: u32, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg("--")
        .arg(format!("-{pgid}"))
        .stderr(Stdio::null())
        .status();
}

/// Sends `signal` to each of `pids` (best effort).
pub(super) fn signal(pids: &[u32], signal: &str) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .args(pids.iter().map(u32::to_string))
        .stderr(Stdio::null())
        .status();
}

/// The pids of the processes whose parent is `parent`.
pub(super) fn children(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // pid (comm) state ppid …: comm may hold spaces, not a ')'.
            let after = stat.rsplit_once(')')?.1;
            let ppid: u32 = after.split_whitespace().nth(1)?.parse().ok()?;
            (ppid == parent).then_some(pid)
        })
        .collect()
}
