//! A Patroni cluster on one machine, for the failover scenarios of
//! `tests/patroni.rs`: one etcd member (v3 API), three Patroni nodes managing
//! PostgreSQL 15 with `synchronous_mode`, and HAProxy in front with the canonical
//! Patroni health check. Everything listens on free ports of `127.0.0.1` and runs
//! from a directory of its own; as root, etcd, Patroni and PostgreSQL run as the
//! `postgres` system user (Patroni and `initdb` refuse root).
//!
//! Each node's way to etcd, the clients' way to its PostgreSQL and HAProxy's way to
//! its REST API go through a [`Proxy`] of the driver's, so a node can be cut off
//! from etcd and from its clients without touching the machine's network.
//!
//! Dropping the [`Cluster`] kills every process it started (Patroni, PostgreSQL and
//! its children, etcd, HAProxy) and waits for them, panic or not, and removes the
//! data directories (the logs stay). A watchdog shell does the same if the test
//! process dies without dropping it (`SIGKILL`, `std::process::exit`).

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::proxy::Proxy;

mod config;
mod probe;
mod process;

pub use config::{LOOP_WAIT, PG_BIN, RETRY_TIMEOUT, TTL};
pub use probe::writable;
use probe::{execute, free_ports, http, local, make_dir, postgres_owner, wait_for};
use process::{Daemon, children, signal, watchdog};

/// The database the scenarios' lease tables live in.
pub const DATABASE: &str = "chaos";

/// What a node's REST API says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The leader (`GET /primary` answers 200).
    Primary,
    /// The synchronous standby (`GET /sync` answers 200).
    Sync,
    /// Any other member that answers.
    Replica,
    /// The REST API does not answer.
    Down,
}

/// One Patroni node: its ports, its Patroni process, and the proxies on its paths.
#[derive(Debug)]
pub struct Node {
    /// Its member name (`n1`, `n2`, `n3`).
    pub name: String,
    /// The port its PostgreSQL listens on.
    pub pg_port: u16,
    /// The port its REST API listens on.
    pub rest_port: u16,
    /// Its way to etcd.
    pub etcd_link: Proxy,
    /// The clients' way to its PostgreSQL (HAProxy's backend, the multi-host URL's
    /// host).
    pub client_link: Proxy,
    /// HAProxy's way to its REST API (the health check).
    pub check_link: Proxy,
    dir: PathBuf,
    patroni: Option<Daemon>,
}

impl Node {
    /// Its Patroni configuration file (for `patronictl -c`).
    pub fn config(&self) -> PathBuf {
        self.dir.join("patroni.yml")
    }

    /// Its Patroni log (Patroni's and PostgreSQL's output).
    pub fn log(&self) -> PathBuf {
        self.dir.join("patroni.log")
    }

    /// The URL of the lease database on its PostgreSQL, straight (no proxy).
    pub fn direct_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{DATABASE}", self.pg_port)
    }

    /// What its REST API says it is now.
    pub async fn role(&self) -> Role {
        match http(self.rest_port, "GET", "/primary", "").await {
            None => Role::Down,
            Some((200, _)) => Role::Primary,
            Some(_) => match http(self.rest_port, "GET", "/sync", "").await {
                Some((200, _)) => Role::Sync,
                Some(_) => Role::Replica,
                None => Role::Down,
            },
        }
    }

    /// The pid of its postmaster, from `postmaster.pid`.
    fn postmaster(&self) -> Option<u32> {
        let pid = std::fs::read_to_string(self.dir.join("data/postmaster.pid")).ok()?;
        pid.lines().next()?.trim().parse().ok()
    }

    /// A crash of the machine: `SIGKILL` to Patroni and to PostgreSQL (the
    /// postmaster, stopped first so it forks no more, and each of its children).
    pub fn crash(&mut self) {
        if let Some(mut patroni) = self.patroni.take() {
            patroni.kill();
        }
        if let Some(postmaster) = self.postmaster() {
            signal(&[postmaster], "STOP");
            let mut all = children(postmaster);
            all.push(postmaster);
            signal(&all, "KILL");
            // Reaped by init; wait until the postmaster is gone.
            let gone = Instant::now() + Duration::from_secs(5);
            while Path::new(&format!("/proc/{postmaster}")).exists() && Instant::now() < gone {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// Cuts it off from etcd and from its clients (HAProxy's health check
    /// included): the three proxies blackholed.
    pub fn isolate(&self) {
        self.etcd_link.cut();
        self.client_link.cut();
        self.check_link.cut();
    }

    /// Heals [`isolate`](Self::isolate).
    pub fn heal(&self) {
        self.etcd_link.restore();
        self.client_link.restore();
        self.check_link.restore();
    }
}

/// One etcd member, three Patroni nodes and HAProxy (see the module documentation).
#[derive(Debug)]
pub struct Cluster {
    /// The three nodes.
    pub nodes: Vec<Node>,
    /// The port HAProxy listens on (the leader's PostgreSQL, by the health check).
    pub haproxy_port: u16,
    dir: PathBuf,
    etcd: Option<Daemon>,
    haproxy: Option<Daemon>,
    watchdog: Option<(Child, ChildStdin)>,
}

impl Cluster {
    /// Starts etcd, three Patroni nodes and HAProxy in `dir` (emptied first), waits
    /// for a leader, a synchronous standby and a third member streaming, and creates
    /// the [`DATABASE`] on the leader.
    ///
    /// # Errors
    /// When a daemon cannot be spawned, or the cluster is not ready within 120 s.
    pub async fn start(dir: &Path) -> Result<Cluster> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(Error::io("create the cluster directory"))?;
        let owner = postgres_owner();
        let ports = free_ports(9)?;
        let (etcd_client, etcd_peer, haproxy_port) = (ports[0], ports[1], ports[2]);
        let mut cluster = Cluster {
            nodes: Vec::new(),
            haproxy_port,
            dir: dir.to_path_buf(),
            etcd: None,
            haproxy: None,
            watchdog: None,
        };
        std::fs::create_dir_all(cluster.pids()).map_err(Error::io("create the pid directory"))?;
        cluster.watchdog = Some(watchdog(dir)?);
        let etcd_dir = dir.join("etcd");
        make_dir(&etcd_dir, owner)?;
        let mut etcd = Command::new("etcd");
        let client = format!("http://127.0.0.1:{etcd_client}");
        let peer = format!("http://127.0.0.1:{etcd_peer}");
        etcd.arg("--name=chaos")
            .arg(format!("--data-dir={}", etcd_dir.join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=chaos={peer}"))
            .env("ETCD_UNSUPPORTED_ARCH", std::env::consts::ARCH);
        cluster.etcd = Some(Daemon::spawn(
            etcd,
            &etcd_dir.join("etcd.log"),
            &cluster.pids(),
            owner,
        )?);
        wait_for(
            "etcd to answer /health",
            Duration::from_secs(30),
            || async {
                matches!(
                    http(etcd_client, "GET", "/health", "").await,
                    Some((200, _))
                )
            },
        )
        .await?;

        for (i, ports) in ports[3..].chunks(2).enumerate() {
            let name = format!("n{}", i + 1);
            let node_dir = dir.join(&name);
            make_dir(&node_dir, owner)?;
            let node = Node {
                pg_port: ports[0],
                rest_port: ports[1],
                etcd_link: Proxy::start(local(etcd_client)).await?,
                client_link: Proxy::start(local(ports[0])).await?,
                check_link: Proxy::start(local(ports[1])).await?,
                dir: node_dir,
                patroni: None,
                name,
            };
            let config = config::patroni(
                &node.name,
                node.rest_port,
                node.etcd_link.port(),
                node.pg_port,
                &node.dir,
            );
            std::fs::write(node.config(), config).map_err(Error::io("write patroni.yml"))?;
            cluster.nodes.push(node);
        }
        // The first node bootstraps the cluster; the others clone it once it leads.
        cluster.spawn_patroni(0, owner)?;
        wait_for("n1 to lead", Duration::from_secs(60), || async {
            cluster.nodes[0].role().await == Role::Primary
        })
        .await?;
        cluster.spawn_patroni(1, owner)?;
        cluster.spawn_patroni(2, owner)?;

        let haproxy_cfg = dir.join("haproxy.cfg");
        let servers: Vec<(&str, u16, u16)> = (cluster.nodes.iter())
            .map(|n| (n.name.as_str(), n.client_link.port(), n.check_link.port()))
            .collect();
        std::fs::write(&haproxy_cfg, config::haproxy(haproxy_port, &servers))
            .map_err(Error::io("write haproxy.cfg"))?;
        let mut haproxy = Command::new("haproxy");
        haproxy.arg("-db").arg("-f").arg(&haproxy_cfg);
        cluster.haproxy = Some(Daemon::spawn(
            haproxy,
            &dir.join("haproxy.log"),
            &cluster.pids(),
            None,
        )?);

        wait_for(
            "a leader, a sync standby and a streaming replica",
            Duration::from_secs(120),
            || async {
                let roles = cluster.roles().await;
                roles.contains(&Role::Primary)
                    && roles.contains(&Role::Sync)
                    && roles.contains(&Role::Replica)
            },
        )
        .await?;
        let leader = cluster.leader().await.unwrap_or(0);
        let admin = cluster.nodes[leader]
            .direct_url()
            .replace(&format!("/{DATABASE}"), "/postgres");
        execute(&admin, &format!("CREATE DATABASE {DATABASE}")).await?;
        wait_for(
            "HAProxy to reach the leader",
            // Its health checks see the leader within seconds; a machine busy with
            // other builds took over 30 s once.
            Duration::from_secs(90),
            || writable(cluster.haproxy_url()),
        )
        .await?;
        Ok(cluster)
    }

    /// Where the daemons' pid files are, for the watchdog.
    fn pids(&self) -> PathBuf {
        self.dir.join("pids")
    }

    fn spawn_patroni(&mut self, i: usize, owner: Option<(u32, u32)>) -> Result<()> {
        let pids = self.pids();
        let node = &mut self.nodes[i];
        let mut patroni = Command::new("patroni");
        patroni
            .arg(node.config())
            .current_dir(&node.dir)
            .env("HOME", &node.dir)
            .env("USER", "postgres")
            .env("PYTHONUNBUFFERED", "1");
        node.patroni = Some(Daemon::spawn(patroni, &node.log(), &pids, owner)?);
        Ok(())
    }

    /// Every node's role, in order.
    pub async fn roles(&self) -> Vec<Role> {
        let mut roles = Vec::new();
        for node in &self.nodes {
            roles.push(node.role().await);
        }
        roles
    }

    /// The index of the node whose REST API says it leads, if any.
    pub async fn leader(&self) -> Option<usize> {
        self.roles().await.iter().position(|r| *r == Role::Primary)
    }

    /// The index of the synchronous standby, if any.
    pub async fn sync_standby(&self) -> Option<usize> {
        self.roles().await.iter().position(|r| *r == Role::Sync)
    }

    /// The lease database through HAProxy.
    pub fn haproxy_url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{DATABASE}",
            self.haproxy_port
        )
    }

    /// The lease database through a multi-host URL listing every node's client
    /// path, `target_session_attrs=read-write`.
    pub fn multi_host_url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.client_link.port()))
            .collect();
        format!(
            "postgres://postgres@{}/{DATABASE}?target_session_attrs=read-write",
            hosts.join(",")
        )
    }

    /// The URL of the lease database through node `i`'s client path alone.
    pub fn client_url(&self, i: usize) -> String {
        let port = self.nodes[i].client_link.port();
        format!("postgres://postgres@127.0.0.1:{port}/{DATABASE}")
    }

    /// A planned switchover from `leader` to `candidate` (REST `POST /switchover`
    /// on the leader); returns Patroni's answer.
    ///
    /// # Errors
    /// [`Error::Io`] when Patroni does not answer or refuses.
    pub async fn switchover(&self, leader: usize, candidate: usize) -> Result<String> {
        let body = format!(
            r#"{{"leader":"{}","candidate":"{}"}}"#,
            self.nodes[leader].name, self.nodes[candidate].name
        );
        let port = self.nodes[leader].rest_port;
        match http(port, "POST", "/switchover", &body).await {
            Some((200, text)) => Ok(text),
            other => Err(Error::Io {
                action: format!("switch over from {leader} to {candidate}"),
                source: std::io::Error::other(format!("Patroni answered {other:?}")),
            }),
        }
    }

    /// Copies every daemon's log into `to` (`patroni-n1.log`, …, `etcd.log`,
    /// `haproxy.log`).
    pub fn keep_logs(&self, to: &Path) {
        let _ = std::fs::create_dir_all(to);
        for node in &self.nodes {
            let _ = std::fs::copy(node.log(), to.join(format!("patroni-{}.log", node.name)));
        }
        let _ = std::fs::copy(self.dir.join("etcd/etcd.log"), to.join("etcd.log"));
        let _ = std::fs::copy(self.dir.join("haproxy.log"), to.join("haproxy.log"));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // HAProxy first (no health check sees the rest go), then every node as a
        // crash, then etcd.
        self.haproxy.take();
        for node in &mut self.nodes {
            node.crash();
        }
        self.etcd.take();
        for node in &self.nodes {
            let _ = std::fs::remove_dir_all(node.dir.join("data"));
        }
        let _ = std::fs::remove_dir_all(self.dir.join("etcd/data"));
        if let Some((mut watchdog, input)) = self.watchdog.take() {
            drop(input);
            let _ = watchdog.wait();
        }
    }
}
