//! The provider adapters a process verifies with, replaceable while it runs: secrets read from
//! Secrets Manager are read again on an interval, and (rate-limited) when a signature fails
//! against every known secret, so a rotation reaches a warm Lambda without a redeploy. A read
//! that fails keeps the last good adapters.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

use crate::domain::now_ms;
use crate::providers::Providers;

/// At most one refresh forced by a failed signature per this many milliseconds: a flood of
/// forged deliveries must not become a flood of Secrets Manager calls.
pub const FORCED_REFRESH_GAP_MS: i64 = 30_000;

/// Reads the adapters again (from the secrets as they are now); `None` when they could not be
/// read, so the current ones stay.
pub trait Refresh: Send + Sync {
    fn read(&self) -> Pin<Box<dyn Future<Output = Option<Providers>> + Send + 'static>>;
}

/// The current adapters, and how to read them again.
pub struct LiveProviders {
    current: RwLock<Arc<Providers>>,
    refresh: Option<Box<dyn Refresh>>,
    interval_ms: i64,
    /// When the next interval refresh is due (process clock: only a timer).
    due_ms: AtomicI64,
    /// When a forced refresh may next run.
    forced_ok_ms: AtomicI64,
    running: AtomicBool,
}

impl LiveProviders {
    /// Adapters that never change (secrets from the environment).
    pub fn fixed(providers: Providers) -> Self {
        Self::build(providers, None, i64::MAX)
    }

    /// Adapters read again every `interval_ms` and after failed signatures.
    pub fn refreshed(providers: Providers, refresh: Box<dyn Refresh>, interval_ms: i64) -> Self {
        Self::build(providers, Some(refresh), interval_ms)
    }

    fn build(providers: Providers, refresh: Option<Box<dyn Refresh>>, interval_ms: i64) -> Self {
        let now = now_ms();
        LiveProviders {
            current: RwLock::new(Arc::new(providers)),
            refresh,
            interval_ms,
            due_ms: AtomicI64::new(now.saturating_add(interval_ms)),
            forced_ok_ms: AtomicI64::new(now),
            running: AtomicBool::new(false),
        }
    }

    /// Whether the adapters can change (secrets read from Secrets Manager).
    pub fn refreshes(&self) -> bool {
        self.refresh.is_some()
    }

    pub fn current(&self) -> Arc<Providers> {
        match self.current.read() {
            Ok(p) => p.clone(),
            // A writer panicked mid-swap: the value is still a whole Arc.
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Reads the adapters again if the interval is over (one request does it; the others use
    /// the current ones meanwhile).
    pub async fn refresh_if_due(&self) {
        let now = now_ms();
        if self.refresh.is_some() && now >= self.due_ms.load(Ordering::Relaxed) {
            self.run(now).await;
        }
    }

    /// After a signature (or a missing adapter) failed: reads again, at most once per
    /// [`FORCED_REFRESH_GAP_MS`]. True when new adapters were read, so the caller verifies again.
    pub async fn refresh_after_failure(&self) -> bool {
        let now = now_ms();
        let ok = self.forced_ok_ms.load(Ordering::Relaxed);
        if self.refresh.is_none()
            || now < ok
            || self
                .forced_ok_ms
                .compare_exchange(
                    ok,
                    now + FORCED_REFRESH_GAP_MS,
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return false;
        }
        self.run(now).await
    }

    async fn run(&self, now: i64) -> bool {
        let Some(refresh) = &self.refresh else {
            return false;
        };
        if self.running.swap(true, Ordering::SeqCst) {
            return false;
        }
        self.due_ms
            .store(now.saturating_add(self.interval_ms), Ordering::Relaxed);
        let read = refresh.read().await;
        self.running.store(false, Ordering::SeqCst);
        match read {
            Some(providers) => {
                let configured = providers.configured();
                match self.current.write() {
                    Ok(mut p) => *p = Arc::new(providers),
                    Err(poisoned) => *poisoned.into_inner() = Arc::new(providers),
                }
                tracing::info!(providers = ?configured, "provider secrets read again");
                true
            }
            None => false,
        }
    }
}

impl std::fmt::Debug for LiveProviders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveProviders")
            .field("current", &self.current())
            .field("refreshed", &self.refresh.is_some())
            .finish_non_exhaustive()
    }
}
