//! The configuration files of the cluster's daemons, and the Patroni settings
//! chosen.

use std::fmt::Write as _;
use std::path::Path;

/// Patroni's `ttl`: the leader key expires this long after its last update.
pub const TTL: u32 = 10;
/// Patroni's `loop_wait`: seconds between two runs of its HA loop.
pub const LOOP_WAIT: u32 = 1;
/// Patroni's `retry_timeout`: how long DCS and PostgreSQL operations are retried
/// before a leader that cannot update its key demotes itself
/// (`loop_wait + 2 × retry_timeout ≤ ttl`).
pub const RETRY_TIMEOUT: u32 = 3;

/// Where the PostgreSQL 15 binaries Patroni runs are.
pub const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// Patroni's configuration of node `name`: its REST API on `rest`, etcd (v3 API)
/// reached on `etcd`, PostgreSQL on `pg`, its files in `dir`.
pub(super) fn patroni(name: &str, rest: u16, etcd: u16, pg: u16, dir: &Path) -> String {
    let dir = dir.display();
    let mut yml = String::new();
    let _ = write!(
        yml,
        "scope: chaos
name: {name}
log:
  level: INFO
restapi:
  listen: 127.0.0.1:{rest}
  connect_address: 127.0.0.1:{rest}
etcd3:
  hosts: 127.0.0.1:{etcd}
  protocol: http
  # The hosts are the driver's proxies: no discovery of the members' own
  # addresses, which would bypass them.
  use_proxies: true
watchdog:
  mode: off
bootstrap:
  dcs:
    ttl: {TTL}
    loop_wait: {LOOP_WAIT}
    retry_timeout: {RETRY_TIMEOUT}
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        max_connections: 200
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 128MB
  initdb:
    - encoding: UTF8
    - locale: C
    - auth: trust
  pg_hba:
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg}
  data_dir: {dir}/data
  bin_dir: {PG_BIN}
  pgpass: {dir}/pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: {dir}
",
    );
    yml
}

/// HAProxy's configuration: listening on `port`, a backend per server (name, the
/// port clients reach its PostgreSQL on, the port of its REST API for the check).
pub(super) fn haproxy(port: u16, servers: &[(&str, u16, u16)]) -> String {
    let mut cfg = format!(
        "global
    maxconn 1000

defaults
    mode tcp
    retries 0
    timeout connect 2s
    timeout client 30m
    timeout server 30m
    timeout check 1s

listen primary
    bind 127.0.0.1:{port}
    option httpchk OPTIONS /primary
    http-check expect status 200
    default-server inter 1s fall 2 rise 1 on-marked-down shutdown-sessions
"
    );
    for (name, client, check) in servers {
        let _ = writeln!(
            cfg,
            "    server {name} 127.0.0.1:{client} maxconn 300 check port {check}"
        );
    }
    cfg
}
