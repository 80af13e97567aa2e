//! This crate with PgBouncer always in front: [`TestDb::new`] and [`TestServer::start`]
//! here are the crate's [`TestDb::through_pgbouncer`](crate::TestDb::through_pgbouncer)
//! and [`TestServer::start_through_pgbouncer`](crate::TestServer::start_through_pgbouncer);
//! everything else is the crate's own.
//!
//! It exists to rerun test files written against `test_postgres` behind PgBouncer,
//! unchanged: a test binary that includes them as modules makes the name
//! `test_postgres` mean this module, with three lines at its root:
//!
//! ```no_run
//! extern crate self as test_postgres;
//! extern crate test_postgres as harness;
//! use harness::through_pgbouncer::*;
//!
//! // In a test binary: `#[path = "lease_invariants.rs"] mod lease_invariants;`, a file
//! // that reads, as this module does:
//! mod lease_invariants {
//!     use test_postgres::TestDb;
//!
//!     pub async fn url() -> String {
//!         TestDb::new().await.url().to_owned()
//!     }
//! }
//! # fn main() {}
//! ```
//!
//! `extern crate self as test_postgres` makes that name mean the binary's own root
//! (an `extern crate` item at the root shadows the dependency of that name), which the
//! `use` fills with this module; `extern crate test_postgres as harness` still loads
//! the dependency itself (an `extern crate` names a crate, not a path), as `harness`.
//! Every `test_postgres::…` path in the included files, and in the modules they
//! include, then resolves here. (It must be written out: a macro-expanded `extern
//! crate` may not shadow a dependency.) libtest runs nothing before the tests, so a
//! switch set at run time could not be set before the first of them; this one is
//! decided when the binary is compiled.

use std::io;
use std::ops::Deref;

pub use crate::{PGBOUNCER_ENV, PgBouncer, admin_url, direct_url, inspect};

/// A [`crate::TestDb`] whose [`url`](crate::TestDb::url) goes through PgBouncer; it
/// dereferences to one, so it is used as one.
#[derive(Debug, Clone)]
pub struct TestDb(crate::TestDb);

impl TestDb {
    /// [`crate::TestDb::through_pgbouncer`].
    ///
    /// # Panics
    ///
    /// As [`crate::TestDb::through_pgbouncer`].
    pub async fn new() -> TestDb {
        TestDb(crate::TestDb::through_pgbouncer().await)
    }
}

impl Deref for TestDb {
    type Target = crate::TestDb;

    fn deref(&self) -> &crate::TestDb {
        &self.0
    }
}

/// A [`crate::TestServer`] with a [`PgBouncer`] in front; it dereferences to one, so
/// it is used as one.
#[derive(Debug)]
pub struct TestServer(crate::TestServer);

impl TestServer {
    /// [`crate::TestServer::start_through_pgbouncer`].
    ///
    /// # Errors
    ///
    /// As [`crate::TestServer::start_through_pgbouncer`].
    pub fn start() -> io::Result<TestServer> {
        crate::TestServer::start_through_pgbouncer().map(TestServer)
    }
}

impl Deref for TestServer {
    type Target = crate::TestServer;

    fn deref(&self) -> &crate::TestServer {
        &self.0
    }
}

/// Always `true`: here [`TestDb::new`] and [`TestServer::start`] go through PgBouncer
/// (see [`crate::pgbouncer_mode`] for the crate's own).
pub fn pgbouncer_mode() -> bool {
    true
}
