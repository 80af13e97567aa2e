//! The simulation's job: works for a time drawn from the seed, may fail (for the
//! retry policy), and commits its work only under a lease it still holds — the check
//! a fenced write makes — recording every step in the model.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use scheduler_core::{
    BoxError, Duplicate, Handler, Idempotent, JobContext, MemoryStore, Policy, Schedule, Scope,
};

use crate::store::Faults;
use crate::world::World;

/// A job as the simulation declares it.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub(crate) name: String,
    pub(crate) every: Duration,
    pub(crate) scope: Scope,
    pub(crate) duplicate: Duplicate,
    pub(crate) policy: Policy,
    /// The longest a run works (each run works a share of it drawn from the seed).
    pub(crate) work: Duration,
    /// Out of 100 attempts, how many fail.
    pub(crate) fail_percent: u64,
}

/// What an instance's jobs share: who runs them, and where they record.
#[derive(Debug)]
pub(crate) struct Body {
    pub(crate) inst: usize,
    /// Which start of the instance runs them.
    pub(crate) incarnation: usize,
    pub(crate) seed: u64,
    pub(crate) store: Arc<MemoryStore>,
    pub(crate) faults: Arc<Faults>,
    pub(crate) world: Arc<Mutex<World>>,
}

/// `spec` as run by one instance.
#[derive(Debug)]
pub(crate) struct SimJob {
    pub(crate) spec: Spec,
    pub(crate) body: Arc<Body>,
}

/// The handler of the dynamic schedules (`sim`): runs a row's tick as the spec of
/// the same name says (a row's schedule and policy are the row's).
#[derive(Debug)]
pub(crate) struct SimHandler {
    pub(crate) specs: Vec<Spec>,
    pub(crate) body: Arc<Body>,
}

impl Body {
    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        crate::world::lock(&self.world)
    }

    /// A number from the seed, the run and `salt`: the same in every replay,
    /// whatever order the runs interleave in.
    fn draw(&self, spec: &Spec, ctx: &JobContext, salt: u64) -> u64 {
        let mut x = self.seed
            ^ (ctx.tick().at().timestamp_micros() as u64).rotate_left(17)
            ^ u64::from(ctx.attempt()).rotate_left(41)
            ^ salt.rotate_left(7);
        for b in spec.name.bytes() {
            x = (x ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        // splitmix64's finaliser.
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    /// One attempt of `spec`'s run: works, may fail, commits under the lease still
    /// held, and records every step.
    async fn run(&self, spec: &Spec, ctx: JobContext) -> Result<(), BoxError> {
        let job = match spec.scope {
            Scope::Node => format!("{}:{}", spec.name, ctx.node()),
            _ => spec.name.clone(),
        };
        let key = (job, ctx.tick().at());
        let (lease, token) = (ctx.lease().as_str().to_owned(), ctx.token().get());
        let started = self.store.clock().now();
        self.world().began(
            &key,
            (self.inst, self.incarnation),
            ctx.node(),
            &lease,
            ctx.holder().as_str(),
            token,
            ctx.attempt(),
            started,
        );
        let most = u64::try_from(spec.work.as_millis()).unwrap_or(u64::MAX);
        let work = Duration::from_millis(self.draw(spec, &ctx, 1) % most.max(1));
        let cancelled = tokio::select! {
            biased;
            () = ctx.cancellation().cancelled() => true,
            () = tokio::time::sleep(work) => false,
        };
        // A stopped process does nothing until it runs again.
        self.faults.running().await;
        let now = self.store.clock().now();
        let failed = self.draw(spec, &ctx, 2) % 100 < spec.fail_percent;
        let result = if cancelled {
            Err("cancelled".into())
        } else if failed {
            Err("failed, as the seed said".into())
        } else {
            // The fenced write: the work counts only under the lease still held.
            let held = self.store.row(ctx.lease()).is_some_and(|row| {
                row.holder == *ctx.holder()
                    && row.token == ctx.token()
                    && !row.completed
                    && row.expires_at > now
            });
            if held {
                self.world().committed(&key, &lease, self.inst, now);
                Ok(())
            } else {
                self.world().note(
                    now,
                    format!("i{} lost the lease of {lease} before committing", self.inst),
                );
                Err("the lease was lost before the work committed".into())
            }
        };
        self.world().ended(&key, token, &lease, now);
        result
    }
}

#[async_trait]
impl Idempotent for SimJob {
    fn name(&self) -> &str {
        &self.spec.name
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(self.spec.every)
    }
    fn scope(&self) -> Scope {
        self.spec.scope
    }
    fn duplicate(&self) -> Duplicate {
        self.spec.duplicate
    }
    fn policy(&self) -> Policy {
        self.spec.policy
    }
    async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
        self.body.run(&self.spec, ctx).await
    }
}

#[async_trait]
impl Handler for SimHandler {
    async fn run(&self, ctx: JobContext, _args: Arc<str>) -> Result<(), BoxError> {
        let Some(spec) = self.specs.iter().find(|s| s.name == ctx.job()) else {
            return Err(format!("no dynamic spec named {}", ctx.job()).into());
        };
        self.body.run(spec, ctx).await
    }
}
