//! The simulation's job: works for a time drawn from the seed, may fail (for the
//! retry policy), and commits its work only under a lease it still holds — the check
//! a fenced write makes — recording every step in the model.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use scheduler_core::{
    BoxError, Duplicate, Idempotent, JobContext, MemoryStore, Policy, Schedule, Scope,
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

/// `spec` as run by instance `inst`.
#[derive(Debug)]
pub(crate) struct SimJob {
    pub(crate) spec: Spec,
    pub(crate) inst: usize,
    /// Which start of the instance runs it.
    pub(crate) incarnation: usize,
    pub(crate) seed: u64,
    pub(crate) store: Arc<MemoryStore>,
    pub(crate) faults: Arc<Faults>,
    pub(crate) world: Arc<Mutex<World>>,
}

impl SimJob {
    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        crate::world::lock(&self.world)
    }

    /// A number from the seed, the run and `salt`: the same in every replay,
    /// whatever order the runs interleave in.
    fn draw(&self, ctx: &JobContext, salt: u64) -> u64 {
        let mut x = self.seed
            ^ (ctx.tick().at().timestamp_micros() as u64).rotate_left(17)
            ^ u64::from(ctx.attempt()).rotate_left(41)
            ^ salt.rotate_left(7);
        for b in self.spec.name.bytes() {
            x = (x ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        // splitmix64's finaliser.
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    fn key(&self, ctx: &JobContext) -> crate::world::Key {
        let job = match self.spec.scope {
            Scope::Node => format!("{}:{}", self.spec.name, ctx.node()),
            _ => self.spec.name.clone(),
        };
        (job, ctx.tick().at())
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
        let key = self.key(&ctx);
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
        let most = u64::try_from(self.spec.work.as_millis()).unwrap_or(u64::MAX);
        let work = Duration::from_millis(self.draw(&ctx, 1) % most.max(1));
        let cancelled = tokio::select! {
            biased;
            () = ctx.cancellation().cancelled() => true,
            () = tokio::time::sleep(work) => false,
        };
        // A stopped process does nothing until it runs again.
        self.faults.running().await;
        let now = self.store.clock().now();
        let failed = self.draw(&ctx, 2) % 100 < self.spec.fail_percent;
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
                self.world().committed(&key, self.inst, now);
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
