//! The lease model: who may run which tick, until when, with which fencing token.
//!
//! A lease is a row in the store, keyed by its [`LeaseName`]. It records the
//! [`Holder`] that took it, the [`Tick`] it was taken for, a [`FencingToken`] that
//! grows with every acquisition of the name, and an expiry on the store's clock.
//! Only the store decides who holds what; this module has no clock and no SQL.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};

use crate::error::{Error, Result};

/// How many runs a tick gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Scope {
    /// One run per tick in the whole cluster.
    #[default]
    Cluster,
    /// One run per tick per node: the lease name includes the node id.
    Node,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scope::Cluster => "cluster",
            Scope::Node => "node",
        })
    }
}

/// The name of a lease: a job's name for cluster jobs, `job:node` for node jobs
/// ([`LeaseName::for_job`]).
///
/// Between 1 and [`LeaseName::MAX_LEN`] bytes of UTF-8, without NUL or other control
/// characters (PostgreSQL's `text` cannot hold NUL; control characters only make
/// operators' lives hard). Quotes, spaces and any other Unicode are fine: names only
/// ever reach SQL as bound parameters.
///
/// Cloning one shares it (the loop hands each lease's name to its take, its run and
/// its release: 10,000 a second at 10,000 jobs).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseName(Arc<str>);

impl LeaseName {
    /// The longest accepted name, in bytes.
    pub const MAX_LEN: usize = scheduler_spec::MAX_NAME_LEN;

    /// Parses a lease name.
    ///
    /// # Errors
    /// [`Error::InvalidName`] if the name is empty, longer than [`Self::MAX_LEN`]
    /// bytes, or holds a control character.
    pub fn new(name: impl Into<String>) -> Result<Self> {
        name.into().parse()
    }

    /// The lease of job `job` in `scope` on node `node`: the job's name for a cluster
    /// job, `job:node` for a node job, with every `\\` and `:` inside either name
    /// escaped by a `\\` (`a:b` becomes `a\\:b`). A cluster lease name so never holds an
    /// unescaped `:` and a node lease name holds exactly one: a cluster job named
    /// `report:eu` and the node job `report` on node `eu` get different leases.
    ///
    /// # Errors
    /// [`Error::InvalidName`] if the result breaks the rules of [`LeaseName::new`].
    pub fn for_job(job: &str, scope: Scope, node: &str) -> Result<Self> {
        fn escape(s: &str) -> std::borrow::Cow<'_, str> {
            if s.contains(['\\', ':']) {
                s.replace('\\', "\\\\").replace(':', "\\:").into()
            } else {
                s.into()
            }
        }
        match scope {
            Scope::Cluster => Self::new(escape(job)),
            Scope::Node => Self::new(format!("{}:{}", escape(job), escape(node))),
        }
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Checks the rules shared by lease and job names (one rule, in `scheduler-spec`,
/// which the `#[job]` macro uses too).
pub(crate) fn validate_name(name: &str) -> Result<()> {
    scheduler_spec::check_name(name).map_err(|reason| Error::InvalidName {
        name: name.chars().take(64).collect(),
        reason,
    })
}

impl FromStr for LeaseName {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        validate_name(s)?;
        Ok(Self(Arc::from(s)))
    }
}

impl TryFrom<String> for LeaseName {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        Self::new(s)
    }
}

impl fmt::Display for LeaseName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for LeaseName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Who holds a lease: `node:pid:64-random-bits-in-hex` (the scheduler's node id,
/// the hostname by default), new for every acquisition.
///
/// Because a holder is never reused, renewing or releasing "as this holder" can only
/// ever touch the acquisition it was made for: two tasks of one process exclude each
/// other, and a late release cannot delete a lease someone has taken since.
///
/// Cloning one shares it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Holder(Arc<str>);

impl Holder {
    /// A fresh holder for one acquisition, on this host: `host:pid:random`.
    ///
    /// The host name is read once per process (a system call per holder was a
    /// tenth of the loop's CPU at 10,000 jobs).
    pub fn generate() -> Self {
        static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let prefix =
            PREFIX.get_or_init(|| Self::prefix(&gethostname::gethostname().to_string_lossy()));
        Self::generate_on(prefix)
    }

    /// What the holders of node `node` in this process start with: `node:pid`.
    pub fn prefix(node: &str) -> String {
        format!("{node}:{}", std::process::id())
    }

    /// A fresh holder for one acquisition, starting with `prefix` (see
    /// [`Holder::prefix`]): `prefix:random`. The scheduler's holders name its node
    /// id, so an operator reading a lease sees which instance holds it.
    pub fn generate_on(prefix: &str) -> Self {
        use std::fmt::Write as _;
        thread_local! {
            /// Where a holder is written before it is shared (one allocation each).
            static TEXT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
        }
        let bits = crate::random::bits();
        TEXT.with_borrow_mut(|text| {
            text.clear();
            let _ = write!(text, "{prefix}:{bits:016x}");
            Self(Arc::from(text.as_str()))
        })
    }

    /// A holder as read back from a store. Stores only; nothing checks its shape.
    pub fn from_stored(holder: String) -> Self {
        Self(Arc::from(holder))
    }

    /// The holder as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A number that strictly increases with every acquisition of a lease name.
///
/// A write that carries the token it was granted can be refused once somebody else
/// has acquired the name since: see the fenced transaction of the store crates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FencingToken(i64);

impl FencingToken {
    /// Wraps a token as stored.
    pub fn new(token: i64) -> Self {
        Self(token)
    }

    /// The token's value.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One scheduled instant of a job: the unit that runs once.
///
/// Kept to microsecond precision, the finest a PostgreSQL `timestamptz` holds, so a
/// tick read back from a store compares equal to the one written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tick(DateTime<Utc>);

impl Tick {
    /// The tick at `at`, truncated to microseconds.
    pub fn new(at: DateTime<Utc>) -> Self {
        Self(at.trunc_subsecs(6))
    }

    /// The instant of the tick.
    pub fn at(self) -> DateTime<Utc> {
        self.0
    }
}

impl From<DateTime<Utc>> for Tick {
    fn from(at: DateTime<Utc>) -> Self {
        Self::new(at)
    }
}

impl fmt::Display for Tick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}",
            self.0.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
        )
    }
}

/// How long a lease lasts unless renewed, measured on the store's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ttl(Duration);

impl Ttl {
    /// The shortest accepted ttl.
    pub const MIN: Duration = Duration::from_millis(10);
    /// The longest accepted ttl.
    pub const MAX: Duration = Duration::from_secs(7 * 24 * 3600);

    /// A ttl of `ttl`.
    ///
    /// # Errors
    /// [`Error::InvalidTtl`] unless `ttl` lies within [`Self::MIN`]..=[`Self::MAX`].
    pub fn new(ttl: Duration) -> Result<Self> {
        if (Self::MIN..=Self::MAX).contains(&ttl) {
            Ok(Self(ttl))
        } else {
            Err(Error::InvalidTtl {
                ttl,
                min: Self::MIN,
                max: Self::MAX,
            })
        }
    }

    /// The ttl as a duration.
    pub fn get(self) -> Duration {
        self.0
    }

    /// The ttl in whole milliseconds, as stores pass it to SQL.
    pub fn as_millis(self) -> i64 {
        // At most 7 days: always fits.
        i64::try_from(self.0.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A request to take `name` for `tick`, as `holder`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeRequest {
    /// The lease to take.
    pub name: LeaseName,
    /// The tick it is taken for.
    pub tick: Tick,
    /// The fresh holder that will hold it.
    pub holder: Holder,
    /// The job the lease runs and the node asking: a store that keeps controls
    /// refuses the take while the job is paused (everywhere, or on this node) and
    /// reports it in [`Taken::paused`]. `None`: no pause applies.
    pub control: Option<ControlKey>,
}

/// The job and node a take is for, as pauses name them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ControlKey {
    /// The job.
    pub job: std::sync::Arc<str>,
    /// The node asking.
    pub node: std::sync::Arc<str>,
    /// Whether a resume's catch-up runs this tick if a pause covered it: the job
    /// catches up every tick paused over ([`CatchUp::All`](crate::CatchUp::All)),
    /// live and at start-up. The store then
    /// also refuses the take, as paused, when the job's last pause (everywhere, or
    /// on this node) ended with a catch-up and the tick lies within it (`since ≤
    /// tick ≤ resumed_at`): a take that reaches the store just after such a resume,
    /// for a tick from just before it, would run that tick live and the catch-up
    /// would run it again (under a lease of its own, which fencing cannot tell apart).
    pub caught_up_on_resume: bool,
}

impl TakeRequest {
    /// A request with a freshly generated holder.
    pub fn new(name: LeaseName, tick: Tick) -> Self {
        Self {
            name,
            tick,
            holder: Holder::generate(),
            control: None,
        }
    }

    /// Refused while `job` is paused everywhere or on `node`.
    pub fn controlled_by(
        mut self,
        job: impl Into<std::sync::Arc<str>>,
        node: impl Into<std::sync::Arc<str>>,
    ) -> Self {
        self.control = Some(ControlKey {
            job: job.into(),
            node: node.into(),
            caught_up_on_resume: false,
        });
        self
    }

    /// Refused also for a tick within the job's last pause when that pause ended
    /// with a catch-up ([`ControlKey::caught_up_on_resume`]); only with
    /// [`controlled_by`](Self::controlled_by), before or after.
    pub fn caught_up_on_resume(mut self) -> Self {
        if let Some(key) = &mut self.control {
            key.caught_up_on_resume = true;
        }
        self
    }
}

/// A lease the store granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The lease's name.
    pub name: LeaseName,
    /// Who holds it.
    pub holder: Holder,
    /// The tick it was taken for.
    pub tick: Tick,
    /// Its fencing token.
    pub token: FencingToken,
    /// When it expires unless renewed, on the store's clock.
    pub expires_at: DateTime<Utc>,
}

impl Lease {
    /// The (name, holder) pair that renewals and releases are conditional on.
    pub fn key(&self) -> LeaseKey {
        LeaseKey {
            name: self.name.clone(),
            holder: self.holder.clone(),
        }
    }
}

/// What one batched take got: the leases won, and what stood in the way of the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taken {
    /// The leases won.
    pub won: Vec<Lease>,
    /// For requests not won, the lease's state as the take saw it. A name may be
    /// missing if the row was free (or absent) when the statement read it and
    /// another taker won it meanwhile: the runtime reads a missing name as a race
    /// just lost. It uses these rows to know when a retry could succeed; they never
    /// decide ownership.
    pub held: Vec<Held>,
    /// The store's clock while the take ran, when the store reports it: the runtime
    /// estimates its offset to the store from it instead of reading the clock
    /// separately, taking it as read when the answer arrived (so it errs late, never
    /// early, by the time from the reading to the answer: read it as late in the
    /// take as you can). `None` is always correct (the runtime then reads
    /// [`Store::now`](crate::Store::now) when it needs to).
    pub now: Option<DateTime<Utc>>,
    /// Requests refused because their job is paused ([`TakeRequest::control`]);
    /// they are in neither `won` nor `held`.
    pub paused: Vec<LeaseName>,
}

/// The state of a lease that a take did not win.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The lease.
    pub name: LeaseName,
    /// The tick it was last taken for.
    pub tick: Tick,
    /// When it expires (or expired), on the store's clock.
    pub expires_at: DateTime<Utc>,
    /// Whether that tick was released as completed.
    pub completed: bool,
}

/// Identifies one acquisition: a name and the holder that took it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseKey {
    /// The lease's name.
    pub name: LeaseName,
    /// The holder of that acquisition.
    pub holder: Holder,
}

/// A lease the store renewed, with its new expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewed {
    /// The renewed lease.
    pub name: LeaseName,
    /// Its new expiry, on the store's clock.
    pub expires_at: DateTime<Utc>,
    /// A newer tick of the job asked this run to stop
    /// ([`Store::request_cancel`](crate::Store::request_cancel)): the runtime cancels
    /// the run, whose lease stays held until it ends.
    pub cancel_requested: bool,
}

/// How a lease is given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Release {
    /// The tick ran to its end: nobody may take this tick again; the next tick is free.
    Completed,
    /// The run was interrupted (shutdown, cancellation): the lease expires at once and
    /// the same tick may be taken again, so another instance can retry it.
    Interrupted,
}

/// Rejects a batch that names one lease twice (one statement cannot take or
/// update a row twice).
///
/// # Errors
/// [`Error::DuplicateInBatch`] naming the first repeated name.
pub fn ensure_unique<'a>(names: impl IntoIterator<Item = &'a LeaseName>) -> Result<()> {
    let names = names.into_iter();
    // Sized for the batch at once: growing it rehashed a 10,000-name batch a dozen
    // times, which showed in the loop's CPU.
    let mut seen = std::collections::HashSet::with_capacity(names.size_hint().0);
    for name in names {
        if !seen.insert(name) {
            return Err(Error::DuplicateInBatch {
                name: name.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_at_the_edge() {
        assert!(LeaseName::new("sweep").is_ok());
        assert!(LeaseName::new("uptime:node-a").is_ok());
        assert!(LeaseName::new("it's \"quoted\" ünïcødé ✓").is_ok());
        assert!(matches!(LeaseName::new(""), Err(Error::InvalidName { .. })));
        assert!(matches!(
            LeaseName::new("a\0b"),
            Err(Error::InvalidName { .. })
        ));
        assert!(LeaseName::new("x".repeat(200)).is_ok());
        let err = LeaseName::new("x".repeat(201)).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "invalid name \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\": \
                 a name must be at most 200 bytes long"
            )
        );
    }

    #[test]
    fn cluster_and_node_lease_names_never_collide() {
        use super::Scope::{Cluster, Node};
        let lease = |job, scope, node| LeaseName::for_job(job, scope, node).map(|l| l.0).ok();
        assert_eq!(lease("sweep", Cluster, "eu").as_deref(), Some("sweep"));
        assert_eq!(lease("uptime", Node, "eu").as_deref(), Some("uptime:eu"));
        assert_eq!(
            lease("report:eu", Cluster, "eu").as_deref(),
            Some("report\\:eu")
        );
        assert_ne!(
            lease("report:eu", Cluster, "eu"),
            lease("report", Node, "eu")
        );
        assert_ne!(lease("a:b", Node, "c"), lease("a", Node, "b:c"));
        assert_ne!(lease("a\\", Node, "b"), lease("a", Node, "\\b"));
        assert_eq!(lease("a\\:b", Cluster, "n").as_deref(), Some("a\\\\\\:b"));
    }

    #[test]
    fn ttl_must_be_positive_and_bounded() {
        assert!(Ttl::new(Duration::ZERO).is_err());
        assert!(Ttl::new(Duration::from_millis(9)).is_err());
        assert!(Ttl::new(Duration::from_secs(8 * 24 * 3600)).is_err());
        assert_eq!(
            Ttl::new(Duration::from_secs(120)).map(Ttl::as_millis).ok(),
            Some(120_000)
        );
    }

    #[test]
    fn holders_are_fresh_and_name_the_process() {
        let a = Holder::generate();
        let b = Holder::generate();
        assert_ne!(a, b);
        assert!(a.as_str().contains(&format!(":{}:", std::process::id())));
    }

    #[test]
    fn ticks_keep_microseconds() {
        let at = DateTime::from_timestamp(1_700_000_000, 123_456_789).unwrap_or_default();
        assert_eq!(Tick::new(at).at().timestamp_subsec_nanos(), 123_456_000);
    }

    #[test]
    fn a_batch_names_each_lease_once() {
        let a = LeaseName::new("a").ok();
        let b = LeaseName::new("b").ok();
        let names: Vec<_> = [a.clone(), b, a].into_iter().flatten().collect();
        assert!(matches!(
            ensure_unique(&names),
            Err(Error::DuplicateInBatch { name }) if name == "a"
        ));
        assert!(ensure_unique(&names[..2]).is_ok());
    }
}
