//! Announced control changes ([`Controls::watch`](scheduler_core::Controls::watch)):
//! every control statement announces the new control version on the lease table's
//! channel (`pg_notify`, [`crate::controls_sql::channel`]), and a store whose
//! schedulers watch keeps **one connection of its own** (not one of the pool's) in
//! `LISTEN` on it, named `controls listener` in `pg_stat_activity` (after the pool's
//! own `application_name`, if it has one). An instance is then polled by a change, not by a timer: while
//! nothing changes it sends no control read.
//!
//! The listener starts with the first scheduler that watches, and stops (closing its
//! connection) when the last one stops. The signal it keeps is the runtime's rule
//! ([`ControlSignal`]): `changes` moves for every notification, and once more each
//! time the connection listens anew (a change made meanwhile went unannounced), so
//! the runtime polls then; `live` is `false` while it is not listening, and the
//! runtime polls on its timer.
//!
//! The server is asked to send TCP keepalives on the listener's connection after a
//! minute of silence (`KEEPALIVE`), so that a NAT or firewall does not take it for
//! a dead flow while nothing changes.
//!
//! A connection cut cleanly is noticed at once (sqlx reconnects and listens again).
//! One cut silently (a firewall that dropped an idle flow, a server gone without a
//! reset) would leave a listener that hears nothing, so the connection is checked (an
//! empty query, which the server answers without parsing or running a statement,
//! answered within [`CHECK_TIMEOUT`]) at the first lease take at least
//! [`CHECK_AT_TAKE`] after the last check — with the instance's own traffic, never
//! between its ticks — and after [`CHECK_QUIET`] without one. A failed check, a
//! failed connection or a failed `LISTEN` drops the connection; it is opened again
//! after a backoff (1 s, doubling, at most 30 s), the timer polling meanwhile.
//!
//! Behind a transaction pooler `LISTEN` is not kept between transactions, so a store
//! in that mode does not watch ([`Controls::watch`](scheduler_core::Controls::watch)
//! is `None`): its instances poll on the timer. Its control statements still
//! announce, for instances connected directly. Unless it is given a URL of its own
//! to listen on (`PostgresOptions::listen_url`): then each connection the listener
//! opens is verified before it counts as live — the store sends a probe on the
//! channel (as its other statements: behind the pooler, unnamed in a transaction of
//! its own), which the listener must hear within [`CHECK_TIMEOUT`] — since a URL that
//! leads to another database would hear nothing, and a live watch stops the timer.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use scheduler_core::{ControlSignal, Holder};
use sea_orm::sqlx::postgres::{PgConnectOptions, PgListener, PgNotification, PgPoolOptions};
use sea_orm::sqlx::{self, Executor};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::session::Session;

/// A take at least this long after the last check checks the listener's connection.
pub(crate) const CHECK_AT_TAKE: Duration = Duration::from_secs(30);
/// Without takes, the connection is checked after this long.
pub(crate) const CHECK_QUIET: Duration = Duration::from_secs(300);
/// How long a check (or opening the connection) may take.
pub(crate) const CHECK_TIMEOUT: Duration = Duration::from_secs(10);
/// Appended to the pool's `application_name` (or alone): how the listener's
/// connection shows in `pg_stat_activity`.
pub(crate) const LISTENER_NAME: &str = "controls listener";
/// Set on the listener's connection, so that the server sends TCP keepalives after a
/// minute of silence (the system default is usually two hours): a listener hears
/// nothing for as long as nothing changes, and a NAT or firewall that drops flows idle
/// for a few minutes (some cloud load balancers: 4 minutes) would otherwise cut it
/// silently between two checks. Ignored on a Unix socket.
const KEEPALIVE: &str = "SET tcp_keepalives_idle = 60; SET tcp_keepalives_interval = 10; \
                         SET tcp_keepalives_count = 6";
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_CAP: Duration = Duration::from_secs(30);

/// The start of a probe's payload: a notification on the channel that announces no
/// control (another store verifying its listener).
const PROBE: &str = "probe ";

/// Where a listener connects, and the store's session when that place must be
/// verified (a listen URL of its own): the session sends a probe the listener must
/// hear.
pub(crate) type ListenAt = (Arc<PgConnectOptions>, Option<Session>);

/// A store's side of the watch, shared by its clones.
#[derive(Debug)]
pub(crate) struct Watcher {
    /// Where the listener connects; `None`: the store does not watch.
    connect: Option<ListenAt>,
    channel: String,
    /// The running listener, if any.
    running: Arc<Mutex<Option<Arc<Listening>>>>,
}

/// What a running listener shares with the store.
#[derive(Debug)]
struct Listening {
    signal: watch::Sender<ControlSignal>,
    /// A take was sent (the store's own traffic): check the connection if due.
    took: Notify,
}

impl Watcher {
    /// A watcher connecting as `connect` to `channel`; `None`: no watch.
    pub(crate) fn new(connect: Option<ListenAt>, channel: String) -> Self {
        Self {
            connect,
            channel,
            running: Arc::new(Mutex::new(None)),
        }
    }

    fn running(&self) -> MutexGuard<'_, Option<Arc<Listening>>> {
        lock(&self.running)
    }

    /// A receiver of the signal, starting the listener if none runs; `None` when the
    /// store does not watch or no tokio runtime is current.
    pub(crate) fn subscribe(&self) -> Option<watch::Receiver<ControlSignal>> {
        let connect = self.connect.clone()?;
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let mut running = self.running();
        if let Some(listening) = running.as_ref() {
            return Some(listening.signal.subscribe());
        }
        let listening = Arc::new(Listening {
            signal: watch::Sender::new(ControlSignal::default()),
            took: Notify::new(),
        });
        let receiver = listening.signal.subscribe();
        *running = Some(Arc::clone(&listening));
        runtime.spawn(listen(
            listening,
            Arc::clone(&self.running),
            connect,
            self.channel.clone(),
        ));
        Some(receiver)
    }

    /// The store sends a take: the listener checks its connection now if the last
    /// check is [`CHECK_AT_TAKE`] old.
    pub(crate) fn took(&self) {
        if let Some(listening) = self.running().as_ref() {
            listening.took.notify_one();
        }
    }
}

/// The running listener's slot. Only assignments happen under the lock: a poisoned
/// one is still sound.
fn lock(slot: &Mutex<Option<Arc<Listening>>>) -> MutexGuard<'_, Option<Arc<Listening>>> {
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Why a listening session ended.
enum Ended {
    /// No scheduler watches any more.
    Unwatched,
    /// The connection, `LISTEN` or a check failed.
    Failed(String),
}

/// The listener's task: sessions, with a backoff between them, until nobody watches.
async fn listen(
    listening: Arc<Listening>,
    running: Arc<Mutex<Option<Arc<Listening>>>>,
    connect: ListenAt,
    channel: String,
) {
    let mut backoff = BACKOFF_FIRST;
    loop {
        let ended = tokio::select! {
            () = listening.signal.closed() => Ended::Unwatched,
            ended = session(&listening, &connect, &channel, &mut backoff) => ended,
        };
        listening
            .signal
            .send_if_modified(|s| std::mem::replace(&mut s.live, false));
        if let Ended::Failed(error) = &ended {
            // One warning per outage: the retries after it at debug.
            if backoff == BACKOFF_FIRST {
                tracing::warn!(channel = %channel, error = %error, retry_in = ?backoff,
                    "listening for control changes failed; the controls are polled on the timer \
                     meanwhile (one line when it listens again)");
            } else {
                tracing::debug!(channel = %channel, error = %error, retry_in = ?backoff,
                    "listening for control changes failed again");
            }
            tokio::select! {
                () = listening.signal.closed() => {}
                () = tokio::time::sleep(backoff) => {
                    backoff = backoff.saturating_mul(2).min(BACKOFF_CAP);
                    continue;
                }
            }
        }
        // Nobody watches: stop, unless a scheduler subscribed meanwhile (subscribing
        // holds the same lock).
        let mut slot = lock(&running);
        if listening.signal.receiver_count() == 0 {
            *slot = None;
            tracing::debug!(channel = %channel, "no scheduler watches the controls; listener stopped");
            return;
        }
    }
}

/// One connection in `LISTEN`: returns when it fails (it never ends otherwise).
async fn session(
    listening: &Listening,
    (connect, probe): &ListenAt,
    channel: &str,
    backoff: &mut Duration,
) -> Ended {
    let failed = |e: sqlx::Error| Ended::Failed(e.to_string());
    let name = match connect.get_application_name() {
        Some(app) => format!("{app} {LISTENER_NAME}"),
        None => LISTENER_NAME.to_owned(),
    };
    // A pool of one, for this listener only: sqlx's listener reconnects through it.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .idle_timeout(None)
        .max_lifetime(None)
        .test_before_acquire(false)
        .acquire_timeout(CHECK_TIMEOUT)
        // A server that refuses the settings (a proxy in front of it, say) still
        // gets a listener; it is checked as any other.
        .after_connect(|conn, _| {
            Box::pin(async move {
                if let Err(e) = conn.execute(KEEPALIVE).await {
                    tracing::debug!(error = %e, "the listener's TCP keepalive settings were refused");
                }
                Ok(())
            })
        })
        .connect_lazy_with(PgConnectOptions::clone(connect).application_name(&name));
    let mut listener = match PgListener::connect_with(&pool).await {
        Ok(listener) => listener,
        Err(e) => return failed(e),
    };
    match tokio::time::timeout(CHECK_TIMEOUT, listener.listen(channel)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return failed(e),
        Err(_) => return Ended::Failed(format!("LISTEN took over {CHECK_TIMEOUT:?}")),
    }
    if let Some(store) = probe
        && let Err(why) = verify(&mut listener, store, channel, listening).await
    {
        return Ended::Failed(why);
    }
    if *backoff == BACKOFF_FIRST {
        tracing::debug!(channel = %channel, "listening for control changes");
    } else {
        tracing::info!(channel = %channel, "listening for control changes again");
    }
    *backoff = BACKOFF_FIRST;
    // Listening from here on: whatever changed before is for the poll this prompts.
    listening.signal.send_modify(|s| {
        s.live = true;
        s.changes += 1;
    });
    let mut checked = Instant::now();
    loop {
        let check = tokio::select! {
            received = listener.try_recv() => {
                match received {
                    Ok(Some(n)) => heard(listening, &n),
                    // The connection was lost. A listener of a URL of its own is
                    // verified on each connection: a new session verifies the next.
                    Ok(None) if probe.is_some() => {
                        return Ended::Failed(
                            "the listener's connection was lost; a new one is verified first"
                                .to_owned(),
                        );
                    }
                    // Otherwise sqlx listens again on a new one: what changed in
                    // between went unannounced.
                    Ok(None) => {
                        tracing::debug!(channel = %channel, "listener reconnected");
                        checked = Instant::now();
                        listening.signal.send_modify(|s| s.changes += 1);
                    }
                    Err(e) => return failed(e),
                }
                false
            }
            () = listening.took.notified() => checked.elapsed() >= CHECK_AT_TAKE,
            () = tokio::time::sleep_until(checked + CHECK_QUIET) => true,
        };
        if check {
            match tokio::time::timeout(CHECK_TIMEOUT, listener.execute("")).await {
                Ok(Ok(_)) => checked = Instant::now(),
                Ok(Err(e)) => return failed(e),
                Err(_) => {
                    return Ended::Failed(format!(
                        "the listener's connection did not answer a check within {CHECK_TIMEOUT:?}"
                    ));
                }
            }
        }
    }
}

/// A notification on the channel: a change, announced — unless it is another store
/// verifying its listener.
fn heard(listening: &Listening, notification: &PgNotification) {
    if !notification.payload().starts_with(PROBE) {
        listening.signal.send_modify(|s| s.changes += 1);
    }
}

/// Sends a probe on `channel` through the store's session and waits, at most
/// [`CHECK_TIMEOUT`], for `listener` to hear it: a listener connected to another
/// database or server would hear no control, and nothing else would show it. Changes
/// announced meanwhile count as such.
async fn verify(
    listener: &mut PgListener,
    store: &Session,
    channel: &str,
    listening: &Listening,
) -> Result<(), String> {
    // Unique to this verification (host, process, random bits).
    let nonce = format!("{PROBE}{}", Holder::generate());
    let deadline = Instant::now() + CHECK_TIMEOUT;
    // As the store's statements: behind a transaction pooler unnamed, in a
    // transaction of its own (a statement prepared under a name would clash with
    // another client's of the same name on the server connection it lands on).
    let sent = store.execute(
        "send a probe to the controls listener",
        "SELECT pg_notify($1, $2)",
        vec![channel.into(), nonce.clone().into()],
    );
    match tokio::time::timeout_at(deadline, sent).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(format!("the probe of the listener could not be sent: {e}")),
        Err(_) => {
            return Err(format!(
                "the probe of the listener took over {CHECK_TIMEOUT:?}"
            ));
        }
    }
    loop {
        match tokio::time::timeout_at(deadline, listener.try_recv()).await {
            Ok(Ok(Some(n))) if n.payload() == nonce => return Ok(()),
            Ok(Ok(Some(n))) => heard(listening, &n),
            Ok(Ok(None)) => {
                return Err("the listener's connection was lost while it was verified".to_owned());
            }
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => {
                return Err(format!(
                    "the listener did not hear the store's own notification within \
                     {CHECK_TIMEOUT:?}: does listen_url lead to the store's database?"
                ));
            }
        }
    }
}
