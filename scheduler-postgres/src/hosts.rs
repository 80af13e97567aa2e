//! [`Hosts`]: URLs listing several servers, as libpq reads them
//! (`postgres://u@h1:p1,h2:p2/db`, or `?host=a,b&port=p1,p2`), with
//! `target_session_attrs`, `load_balance_hosts` and `connect_timeout`.
//!
//! sqlx's options hold one host, so the store parses the list itself: the pool opens
//! on the first host that suits ([`Hosts::pick`]), and every new connection of the
//! pool is checked ([`Hosts::after_connect`]): one on a server that no longer suits
//! (a demoted primary behind the same address) is replaced by one to the first host
//! of the list that does.

use std::hash::{BuildHasher, Hasher};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sea_orm::DbErr;
use sea_orm::sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};
use sea_orm::sqlx::{self, Connection, Executor, Row};

use crate::error::{Error, Result};

/// Rejects options that name no database (neither the URL's path, `?dbname=` nor
/// `PGDATABASE`): the server would pick the one named after the user (`postgres`),
/// most likely not the app's, and the scheduler would run a second, silent cluster
/// there.
pub(crate) fn check_database(options: &PgConnectOptions) -> Result<()> {
    match options.get_database() {
        Some(name) if !name.is_empty() => Ok(()),
        _ => Err(Error::InvalidUrl {
            reason: "the URL names no database: write postgres://host/DBNAME (without one, \
                     the server picks the database named after the user, another than the \
                     app's)"
                .to_owned(),
        }),
    }
}

/// What a server must be to be used (`target_session_attrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionAttrs {
    /// Any server that accepts the connection (libpq's default).
    Any,
    /// One whose sessions may write (`transaction_read_only` off).
    ReadWrite,
    /// One that is not in recovery (not a standby).
    Primary,
}

impl SessionAttrs {
    fn parse(value: &str) -> Result<Self> {
        match value {
            "any" => Ok(Self::Any),
            "read-write" => Ok(Self::ReadWrite),
            "primary" => Ok(Self::Primary),
            other => Err(Error::InvalidUrl {
                reason: format!(
                    "target_session_attrs={other} is not supported: use any, read-write or primary"
                ),
            }),
        }
    }
}

/// The servers a URL lists, in order, and how to choose among them.
#[derive(Debug)]
pub(crate) struct Hosts {
    /// One set of options per host, in the URL's order.
    targets: Vec<PgConnectOptions>,
    /// What a server must be.
    pub(crate) attrs: SessionAttrs,
    /// How long to wait for each host.
    per_host: Duration,
    /// `load_balance_hosts=random`: the list is shuffled at each walk.
    random: bool,
    /// The URL sqlx reads: the first host, without the parameters read here.
    pub(crate) base_url: String,
    /// The pool's own options (logging, statement cache, application name), once it
    /// is built: the hosts [`after_connect`](Self::after_connect) tries get them.
    template: OnceLock<PgConnectOptions>,
    /// The host [`after_connect`](Self::after_connect) last moved a connection to,
    /// or [`NOWHERE`], for [`follow`](Self::follow) to aim the pool at.
    moved: AtomicUsize,
    /// Whether a [`repoint`](Self::repoint) is under way.
    repointing: AtomicBool,
}

/// No host: [`Hosts::moved`] when no connection moved.
const NOWHERE: usize = usize::MAX;

/// The parameters read here, taken out of the URL sqlx reads.
const OURS: [&str; 5] = [
    "host",
    "port",
    "target_session_attrs",
    "load_balance_hosts",
    "connect_timeout",
];

impl Hosts {
    /// The hosts of `url` (without its `pgbouncer` parameter), or `None` for a URL of
    /// one host that none of the parameters read here: sqlx reads it as it is.
    /// `default_timeout` bounds each host without a `connect_timeout`.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] for an empty host in the list, as many ports as neither
    /// one nor the hosts, an unknown `target_session_attrs` or `load_balance_hosts`,
    /// or a URL sqlx does not read.
    pub(crate) fn parse(url: &str, default_timeout: Duration) -> Result<Option<Self>> {
        let invalid = |reason: String| Error::InvalidUrl { reason };
        let Some((scheme, rest)) = url.split_once("://") else {
            return Ok(None);
        };
        let (authority, tail) = match rest.find(['/', '?']) {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        let (userinfo, hostlist) = match authority.rsplit_once('@') {
            Some((user, hosts)) => (Some(user), hosts),
            None => (None, authority),
        };
        let (path, query) = match tail.split_once('?') {
            Some((path, query)) => (path, query),
            None => (tail, ""),
        };
        let mut params = Vec::new();
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if OURS.contains(&key) {
                params.push((key, decode(value)));
            } else {
                kept.push(pair);
            }
        }
        let param = |name: &str| {
            params
                .iter()
                .rev()
                .find(|(key, _)| *key == name)
                .map(|(_, v)| v.as_str())
        };
        let listed = hostlist.contains(',') || param("host").is_some_and(|h| h.contains(','));
        let asked = [
            "target_session_attrs",
            "load_balance_hosts",
            "connect_timeout",
        ]
        .iter()
        .any(|name| param(name).is_some());
        if !listed && !asked {
            return Ok(None);
        }
        // (host, port as written) pairs.
        let mut hosts: Vec<(String, Option<String>)> = match param("host") {
            Some(list) => list.split(',').map(|h| (h.to_owned(), None)).collect(),
            None => hostlist.split(',').map(split_port).collect(),
        };
        if let Some(ports) = param("port") {
            let ports: Vec<&str> = ports.split(',').collect();
            match ports.len() {
                1 => hosts
                    .iter_mut()
                    .for_each(|h| h.1 = Some(ports[0].to_owned())),
                n if n == hosts.len() => {
                    for (host, port) in hosts.iter_mut().zip(ports) {
                        host.1 = Some(port.to_owned());
                    }
                }
                n => {
                    return Err(invalid(format!(
                        "the URL lists {} hosts but {n} ports: give one port for all, or one per host",
                        hosts.len()
                    )));
                }
            }
        }
        if hosts.len() > 1 && hosts.iter().any(|(h, _)| h.is_empty()) {
            return Err(invalid(
                "an empty host in the URL's host list (two commas, or one at an end)".to_owned(),
            ));
        }
        let attrs =
            param("target_session_attrs").map_or(Ok(SessionAttrs::Any), SessionAttrs::parse)?;
        let random = match param("load_balance_hosts") {
            None | Some("disable") => false,
            Some("random") => true,
            Some(other) => {
                return Err(invalid(format!(
                    "load_balance_hosts={other} is not supported: use disable or random"
                )));
            }
        };
        let per_host = match param("connect_timeout") {
            None => default_timeout,
            Some(secs) => match secs.trim().parse::<i64>() {
                // libpq: zero or less waits forever; the pool's timeout still bounds it.
                Ok(s) if s <= 0 => default_timeout,
                // libpq: one second is taken as two.
                Ok(s) => Duration::from_secs(s.max(2).unsigned_abs()),
                Err(_) => {
                    return Err(invalid(format!(
                        "connect_timeout={secs} is not a whole number of seconds"
                    )));
                }
            },
        };
        let user = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        let query = if kept.is_empty() {
            String::new()
        } else {
            format!("?{}", kept.join("&"))
        };
        let base_url = format!(
            "{scheme}://{user}{path}{query}",
            path = host_path(&hosts, path)
        );
        let base = PgConnectOptions::from_str(&base_url).map_err(|e| invalid(e.to_string()))?;
        check_database(&base)?;
        let mut targets = Vec::with_capacity(hosts.len());
        for (host, port) in hosts {
            let port = match port.as_deref() {
                None | Some("") => base.get_port(),
                Some(p) => p
                    .parse()
                    .map_err(|_| invalid(format!("invalid port number {p:?}")))?,
            };
            let target = base.clone().port(port);
            targets.push(match host.as_str() {
                "" => target,
                socket if socket.starts_with('/') => target.socket(socket),
                name => target.host(name.trim_start_matches('[').trim_end_matches(']')),
            });
        }
        Ok(Some(Self {
            targets,
            attrs,
            per_host,
            random,
            base_url,
            template: OnceLock::new(),
            moved: AtomicUsize::new(NOWHERE),
            repointing: AtomicBool::new(false),
        }))
    }

    /// The hosts as `host:port,host:port`, for errors.
    pub(crate) fn describe(&self) -> String {
        let each: Vec<String> = self.targets.iter().map(server).collect();
        each.join(",")
    }

    /// The pool's options `pool` aimed at host `index` (in the URL's order); the first
    /// call also keeps them for the hosts tried later.
    pub(crate) fn aim(&self, index: usize, pool: PgConnectOptions) -> PgConnectOptions {
        let _ = self.template.set(pool.clone());
        let Some(target) = self.targets.get(index) else {
            return pool;
        };
        let pool = pool.port(target.get_port());
        match target.get_socket() {
            Some(socket) => pool.socket(socket),
            None => pool.host(target.get_host()),
        }
    }

    /// The index of the first host that accepts a connection and suits, trying each
    /// in order (shuffled with `load_balance_hosts=random`).
    ///
    /// # Errors
    /// [`Error::Connect`] naming every host and what each said.
    pub(crate) async fn pick(&self) -> Result<usize> {
        match self.walk().await {
            Ok((index, conn)) => {
                let _ = conn.close().await;
                Ok(index)
            }
            Err(why) => Err(Error::Connect {
                server: Some(self.describe()),
                cause: DbErr::Custom(why),
            }),
        }
    }

    /// A connection to the first host that suits, and its index; else what each host
    /// said.
    async fn walk(&self) -> Result<(usize, PgConnection), String> {
        let mut failures = Vec::new();
        for index in self.order() {
            let Some(target) = self.targets.get(index) else {
                continue;
            };
            let options = match self.template.get() {
                Some(pool) => self.aim(index, pool.clone()),
                None => target.clone(),
            };
            let attempt = async {
                let mut conn = PgConnection::connect_with(&options).await?;
                if self.suits(&mut conn).await? {
                    Ok(Some(conn))
                } else {
                    let _ = conn.close().await;
                    Ok::<_, sqlx::Error>(None)
                }
            };
            let why = match tokio::time::timeout(self.per_host, attempt).await {
                Ok(Ok(Some(conn))) => return Ok((index, conn)),
                Ok(Ok(None)) => match self.attrs {
                    SessionAttrs::Primary => "a standby (in recovery)".to_owned(),
                    _ => "read-only".to_owned(),
                },
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {:?}", self.per_host),
            };
            failures.push(format!("{}: {why}", server(target)));
        }
        Err(format!(
            "no host suits target_session_attrs={}: {}",
            self.attrs_name(),
            failures.join("; ")
        ))
    }

    fn attrs_name(&self) -> &'static str {
        match self.attrs {
            SessionAttrs::Any => "any",
            SessionAttrs::ReadWrite => "read-write",
            SessionAttrs::Primary => "primary",
        }
    }

    /// The order hosts are tried in.
    fn order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.targets.len()).collect();
        if self.random {
            let mut seed = std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
                | 1;
            for i in (1..order.len()).rev() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let j = usize::try_from(seed % (i as u64 + 1)).unwrap_or(0);
                order.swap(i, j);
            }
        }
        order
    }

    /// Whether `conn`'s server is what `target_session_attrs` asks: one statement,
    /// none for `any`.
    async fn suits(&self, conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
        let (sql, unsuitable) = match self.attrs {
            SessionAttrs::Any => return Ok(true),
            SessionAttrs::ReadWrite => ("SHOW transaction_read_only", "on"),
            SessionAttrs::Primary => ("SELECT pg_is_in_recovery()::text", "true"),
        };
        let row = conn.fetch_one(sqlx::raw_sql(sql)).await?;
        let value: String = row.try_get(0)?;
        Ok(value != unsuitable)
    }

    /// What a new connection of the pool goes through: when it does not suit, it is
    /// replaced by a connection to the first host that does (or the pool is told it
    /// failed, and tries again within its timeout).
    pub(crate) async fn after_connect(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        if self.suits(conn).await? {
            return Ok(());
        }
        let (index, fresh) = self.walk().await.map_err(sqlx::Error::Protocol)?;
        self.moved.store(index, Ordering::Relaxed);
        let old = std::mem::replace(conn, fresh);
        let _ = old.close().await;
        Ok(())
    }

    /// Aims `pool`'s next connections at the host a connection last moved to, if one
    /// did since the last call: called by the store after it got a connection.
    pub(crate) fn follow(&self, pool: &PgPool) {
        let index = self.moved.swap(NOWHERE, Ordering::Relaxed);
        if index != NOWHERE {
            let aimed = self.aim(index, pool.connect_options().as_ref().clone());
            pool.set_connect_options(aimed);
        }
    }

    /// In the background, aims `pool`'s next connections at the first host that
    /// suits now: called by the store when the pool could not connect (its host is
    /// down). One at a time; a walk that finds none leaves the pool as it was.
    pub(crate) fn repoint(self: &Arc<Self>, pool: &PgPool) {
        if self.repointing.swap(true, Ordering::AcqRel) {
            return;
        }
        let (hosts, pool) = (Arc::clone(self), pool.clone());
        tokio::spawn(async move {
            match hosts.walk().await {
                Ok((index, conn)) => {
                    let _ = conn.close().await;
                    let aimed = hosts.aim(index, pool.connect_options().as_ref().clone());
                    pool.set_connect_options(aimed);
                }
                // At debug: the call that failed is the runtime's to report (once per
                // outage, not once per connection attempt).
                Err(why) => tracing::debug!(%why, "no host of the URL can be reached"),
            }
            hosts.repointing.store(false, Ordering::Release);
        });
    }
}

/// `host:port` of `target`, or its socket path.
fn server(target: &PgConnectOptions) -> String {
    match target.get_socket() {
        Some(socket) => socket.display().to_string(),
        None => format!("{}:{}", target.get_host(), target.get_port()),
    }
}

/// The authority and path sqlx reads: the first host only (its port too).
fn host_path(hosts: &[(String, Option<String>)], path: &str) -> String {
    match hosts.first() {
        Some((host, _)) if !host.is_empty() && !host.starts_with('/') => format!("{host}{path}"),
        _ => format!("localhost{path}"),
    }
}

/// `host:port`, `[v6]:port` or `host` of one entry of the authority's list.
fn split_port(entry: &str) -> (String, Option<String>) {
    if let Some(end) = entry.rfind(']') {
        let (host, rest) = entry.split_at(end + 1);
        let port = rest.strip_prefix(':').map(str::to_owned);
        return (host.to_owned(), port);
    }
    match entry.rsplit_once(':') {
        Some((host, port)) => (host.to_owned(), Some(port.to_owned())),
        None => (entry.to_owned(), None),
    }
}

/// A query value with its `%XX` escapes decoded (a socket path's `%2F`).
fn decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests;
