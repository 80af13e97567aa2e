//! The process's shutdown signal: Ctrl-C or SIGTERM, and what a second one does.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

/// Fired by a signal received after [`shutdown_signal`] completed: every scheduler of
/// the process stops waiting for its running jobs.
static SECOND: OnceLock<CancellationToken> = OnceLock::new();

/// Whether a task already waits for the second signal.
static ARMED: AtomicBool = AtomicBool::new(false);

/// What a scheduler's drain watches: it fires on a second Ctrl-C or SIGTERM.
pub(crate) fn second_signal() -> &'static CancellationToken {
    SECOND.get_or_init(CancellationToken::new)
}

/// Completes when the process is asked to stop: on Ctrl-C (SIGINT) or, on Unix,
/// SIGTERM (what Docker, systemd and Kubernetes send). Give it to
/// [`Scheduler::run_until`](crate::Scheduler::run_until).
///
/// A **second** Ctrl-C or SIGTERM, received after this completed, stops waiting for
/// the grace period ([`SchedulerBuilder::shutdown_grace`](crate::SchedulerBuilder::shutdown_grace))
/// in every scheduler of the process: running jobs are cancelled at once (their
/// [`JobContext::cancellation`](crate::JobContext::cancellation) fires), their leases
/// are released, and `run_until` returns.
///
/// ```no_run
/// use scheduler_core::{MemoryStore, Report, Scheduler, shutdown_signal};
///
/// #[tokio::main]
/// async fn main() -> Result<(), Report> {
///     let scheduler = Scheduler::builder(MemoryStore::new()).build()?;
///     scheduler.run_until(shutdown_signal()).await;
///     Ok(())
/// }
/// ```
///
/// If the process cannot listen for either signal, this logs an error and never
/// completes.
///
/// Cancel safety: dropping it before a signal loses nothing, but the signal handlers
/// it installed stay for the life of the process (tokio never removes them), so a
/// Ctrl-C no longer ends the process by itself.
///
/// # Panics
///
/// Outside a tokio runtime, or on a runtime built without I/O (`enable_io`, which
/// `#[tokio::main]` enables).
pub async fn shutdown_signal() {
    let mut signals = Signals::listen();
    let first = signals.recv().await;
    info!(
        signal = first,
        "shutting down: {first} received; running jobs get their grace period, a second Ctrl-C/SIGTERM stops waiting"
    );
    if !ARMED.swap(true, Ordering::SeqCst) {
        tokio::spawn(async move {
            let second = signals.recv().await;
            warn!(
                signal = second,
                "{second} received during the shutdown: cancelling running jobs now"
            );
            second_signal().cancel();
        });
    }
}

/// The signals listened for, registered once so that none between two waits is lost.
struct Signals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    #[cfg(unix)]
    fn listen() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        let listen = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(s) => Some(s),
            Err(err) => {
                error!(error = %err, "cannot listen for {name}");
                None
            }
        };
        Signals {
            interrupt: listen(SignalKind::interrupt(), "Ctrl-C (SIGINT)"),
            terminate: listen(SignalKind::terminate(), "SIGTERM"),
        }
    }

    #[cfg(not(unix))]
    fn listen() -> Self {
        Signals {}
    }

    /// The next signal's name; never, if no signal can be listened for.
    #[cfg(unix)]
    async fn recv(&mut self) -> &'static str {
        async fn next(signal: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
            match signal {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            Some(()) = next(&mut self.interrupt) => "Ctrl-C (SIGINT)",
            Some(()) = next(&mut self.terminate) => "SIGTERM",
            else => std::future::pending().await,
        }
    }

    #[cfg(not(unix))]
    async fn recv(&mut self) -> &'static str {
        match tokio::signal::ctrl_c().await {
            Ok(()) => "Ctrl-C",
            Err(err) => {
                error!(error = %err, "cannot listen for Ctrl-C");
                std::future::pending().await
            }
        }
    }
}
