//! A memory store that takes a while to answer: every call waits `latency` (paused
//! tokio time) before it reaches the store, as a loaded database or network makes it.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// The memory store `inner`, each call `latency` late.
#[derive(Debug)]
pub(crate) struct Slow {
    pub(crate) inner: Arc<scheduler_core::MemoryStore>,
    pub(crate) latency: Duration,
}

#[scheduler_core::async_trait]
impl scheduler_core::Store for Slow {
    async fn take(
        &self,
        r: &[scheduler_core::TakeRequest],
        ttl: scheduler_core::Ttl,
    ) -> scheduler_core::Result<scheduler_core::Taken> {
        tokio::time::sleep(self.latency).await;
        self.inner.take(r, ttl).await
    }
    async fn renew(
        &self,
        l: &[scheduler_core::LeaseKey],
        ttl: scheduler_core::Ttl,
    ) -> scheduler_core::Result<Vec<scheduler_core::Renewed>> {
        tokio::time::sleep(self.latency).await;
        self.inner.renew(l, ttl).await
    }
    async fn release(
        &self,
        l: &[scheduler_core::LeaseKey],
        how: scheduler_core::Release,
    ) -> scheduler_core::Result<Vec<scheduler_core::LeaseName>> {
        tokio::time::sleep(self.latency).await;
        self.inner.release(l, how).await
    }
    async fn now(&self) -> scheduler_core::Result<DateTime<Utc>> {
        tokio::time::sleep(self.latency).await;
        self.inner.now().await
    }
}
