//! A TCP proxy on `127.0.0.1` that can cut its connections without closing them, and
//! be pointed at another server (a moved VIP, a changed DNS name).

use std::net::Ipv4Addr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::error::{Error, Result};

/// Forwards connections from a port of `127.0.0.1` to an upstream server, and can be
/// switched to a **blackhole**: nothing is forwarded any more, in either direction,
/// but every socket stays open (a cut without a close: a partition, a dead link, a
/// lost route). Bytes read from one side during a cut are held, and new connections
/// are accepted but not connected upstream; when the proxy is
/// [restored](Self::restore), everything flows again, as TCP retransmission would
/// deliver it once a partition heals.
///
/// It can also be [redirected](Self::redirect) to another server, standing in for the
/// name or address clients use for "the database" when a failover moves it: new
/// connections go to the new server, open ones stay with the old one (a DNS name
/// changed under a pool) unless they are [reset](Self::reset) (a moved VIP: the old
/// host's connections are gone).
///
/// Dropping the proxy closes every connection through it.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    open: watch::Sender<bool>,
    upstream: watch::Sender<(String, u16)>,
    generation: watch::Sender<u64>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Starts forwarding a fresh port of `127.0.0.1` to `upstream` (`host`, `port`).
    ///
    /// # Errors
    /// [`Error::Io`] if no port can be bound.
    pub async fn start(upstream: (String, u16)) -> Result<Proxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(Error::io("bind the proxy's port"))?;
        let port = listener
            .local_addr()
            .map_err(Error::io("read the proxy's port"))?
            .port();
        let (open, gate) = watch::channel(true);
        let (upstream, target) = watch::channel(upstream);
        let (generation, resets) = watch::channel(0);
        let accept = tokio::spawn(accept(listener, target, gate, resets));
        Ok(Proxy {
            port,
            open,
            upstream,
            generation,
            accept,
        })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Cuts every connection, present and future, without closing any.
    pub fn cut(&self) {
        self.open.send_replace(false);
    }

    /// Forwards again.
    pub fn restore(&self) {
        self.open.send_replace(true);
    }

    /// Whether it forwards.
    pub fn is_open(&self) -> bool {
        *self.open.borrow()
    }

    /// Connects new connections to `upstream` (`host`, `port`) from now on; open ones
    /// stay with the server they reached.
    pub fn redirect(&self, upstream: (String, u16)) {
        self.upstream.send_replace(upstream);
    }

    /// The server new connections go to.
    pub fn upstream(&self) -> (String, u16) {
        self.upstream.borrow().clone()
    }

    /// Closes every connection open through it now (both sides see the close); later
    /// ones are not affected.
    pub fn reset(&self) {
        self.generation.send_modify(|generation| *generation += 1);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept(
    listener: TcpListener,
    upstream: watch::Receiver<(String, u16)>,
    gate: watch::Receiver<bool>,
    resets: watch::Receiver<u64>,
) {
    // Dropped with this task (when the proxy is), which aborts every connection.
    let mut connections = JoinSet::new();
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let mut resets = resets.clone();
        resets.mark_unchanged();
        let connection = connect(client, upstream.clone(), gate.clone());
        connections.spawn(async move {
            tokio::select! {
                () = connection => {}
                // Reset: dropping both sockets closes them.
                _ = resets.changed() => {}
            }
        });
        while connections.try_join_next().is_some() {}
    }
}

/// Connects `client` upstream (where the proxy points once it is open), then pumps
/// both ways.
async fn connect(
    client: TcpStream,
    upstream: watch::Receiver<(String, u16)>,
    mut gate: watch::Receiver<bool>,
) {
    if gate.wait_for(|open| *open).await.is_err() {
        return;
    }
    let (host, port) = upstream.borrow().clone();
    // A refused upstream connection drops the client's: the server is down.
    let Ok(server) = TcpStream::connect((host.as_str(), port)).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::join!(
        pump(client_read, server_write, gate.clone()),
        pump(server_read, client_write, gate),
    );
}

/// Copies `from` to `to` while the gate is open; holds what it read during a cut.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut gate: watch::Receiver<bool>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if gate.wait_for(|open| *open).await.is_err() {
            return;
        }
        let read = tokio::select! {
            read = from.read(&mut buf) => read,
            // Cut while waiting to read: stop reading (reads are cancel safe).
            _ = gate.wait_for(|open| !*open) => continue,
        };
        let n = match read {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if gate.wait_for(|open| *open).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// The host and port of a `postgres://` URL (port 5432 when it has none).
///
/// # Errors
/// [`Error::Url`] if the URL does not have that shape.
pub fn url_address(url: &str) -> Result<(String, u16)> {
    let (_, _, address, _) = split_url(url)?;
    let (host, port) = match address.rsplit_once(':') {
        Some((host, port)) => {
            let port = port
                .parse()
                .map_err(|_| bad_url(url, "the port is not a number"))?;
            (host, port)
        }
        None => (address, 5432),
    };
    if host.is_empty() {
        return Err(bad_url(url, "it has no host"));
    }
    Ok((host.to_owned(), port))
}

/// `url` pointing at `127.0.0.1:port` instead of its own host and port, keeping its
/// credentials, database and parameters.
///
/// # Errors
/// [`Error::Url`] if the URL does not have the shape `scheme://[user@]host[:port]/…`.
pub fn url_via(url: &str, port: u16) -> Result<String> {
    let (scheme, credentials, _, rest) = split_url(url)?;
    Ok(format!("{scheme}://{credentials}127.0.0.1:{port}{rest}"))
}

/// `(scheme, "user@" or "", host[:port], the rest from the first '/', '?' or '#')`.
fn split_url(url: &str) -> Result<(&str, &str, &str, &str)> {
    let (scheme, after) = url
        .split_once("://")
        .ok_or_else(|| bad_url(url, "it has no scheme"))?;
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (authority, rest) = after.split_at(end);
    let (credentials, address) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    Ok((scheme, credentials, address, rest))
}

fn bad_url(url: &str, reason: &'static str) -> Error {
    let shown = match split_url_unchecked(url) {
        Some((scheme, address_and_rest)) => format!("{scheme}://{address_and_rest}"),
        None => "(unparsable)".to_owned(),
    };
    Error::Url { url: shown, reason }
}

/// The URL without credentials, for messages; `None` if it has no scheme.
fn split_url_unchecked(url: &str) -> Option<(&str, &str)> {
    let (scheme, after) = url.split_once("://")?;
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let start = after[..end].rfind('@').map_or(0, |at| at + 1);
    Some((scheme, &after[start..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_taken_apart_and_redirected() {
        let url = "postgres://postgres@127.0.0.1:5433/test_1?pgbouncer=true";
        assert_eq!(url_address(url).unwrap(), ("127.0.0.1".to_owned(), 5433));
        assert_eq!(
            url_via(url, 40000).unwrap(),
            "postgres://postgres@127.0.0.1:40000/test_1?pgbouncer=true"
        );
        assert_eq!(
            url_address("postgres://u:p@db/app").unwrap(),
            ("db".to_owned(), 5432)
        );
        assert_eq!(
            url_via("postgres://db:1/app", 2).unwrap(),
            "postgres://127.0.0.1:2/app"
        );
        let err = url_address("postgres://u:secret@db:x/app").unwrap_err();
        assert!(!err.to_string().contains("secret"), "{err}");
        assert!(url_address("db:5432").is_err());
    }

    #[tokio::test]
    async fn a_cut_holds_the_bytes_and_a_restore_delivers_them() {
        let server = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let upstream = ("127.0.0.1".to_owned(), server.local_addr().unwrap().port());
        let proxy = Proxy::start(upstream).await.unwrap();
        let mut client = TcpStream::connect((Ipv4Addr::LOCALHOST, proxy.port()))
            .await
            .unwrap();
        let (mut accepted, _) = server.accept().await.unwrap();
        client.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        accepted.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");

        proxy.cut();
        assert!(!proxy.is_open());
        client.write_all(b"lost").await.unwrap();
        let held = tokio::time::timeout(
            std::time::Duration::from_millis(300),
            accepted.read_exact(&mut buf),
        )
        .await;
        assert!(held.is_err(), "bytes crossed a cut proxy");

        proxy.restore();
        accepted.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"lost");
        accepted.write_all(b"pong").await.unwrap();
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"pong");
    }

    #[tokio::test]
    async fn a_redirect_moves_new_connections_and_a_reset_closes_the_old_ones() {
        let first = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let second = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = |l: &TcpListener| ("127.0.0.1".to_owned(), l.local_addr().unwrap().port());
        let proxy = Proxy::start(port(&first)).await.unwrap();
        let mut old = TcpStream::connect((Ipv4Addr::LOCALHOST, proxy.port()))
            .await
            .unwrap();
        let (mut on_first, _) = first.accept().await.unwrap();

        proxy.redirect(port(&second));
        assert_eq!(proxy.upstream(), port(&second));
        let mut new = TcpStream::connect((Ipv4Addr::LOCALHOST, proxy.port()))
            .await
            .unwrap();
        let (mut on_second, _) = second.accept().await.unwrap();
        let mut buf = [0u8; 3];
        // The open connection still reaches the first server, the new one the second.
        old.write_all(b"old").await.unwrap();
        on_first.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"old");
        new.write_all(b"new").await.unwrap();
        on_second.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"new");

        proxy.reset();
        let closed =
            tokio::time::timeout(std::time::Duration::from_secs(5), on_second.read(&mut buf))
                .await
                .expect("a reset closes the server's side");
        assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
        let closed = tokio::time::timeout(std::time::Duration::from_secs(5), old.read(&mut buf))
            .await
            .expect("a reset closes the client's side");
        assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
        // Later connections are not affected.
        let mut later = TcpStream::connect((Ipv4Addr::LOCALHOST, proxy.port()))
            .await
            .unwrap();
        let (mut on_second, _) = second.accept().await.unwrap();
        later.write_all(b"hey").await.unwrap();
        on_second.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hey");
    }
}
