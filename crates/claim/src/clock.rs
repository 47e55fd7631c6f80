//! The store's clock: DynamoDB's own time, learned from the `Date` header of its answers.
//!
//! Every timestamp the store writes and later judges by (a claim's lease and creation time, a
//! movement's time and so its ledger sort key, a checkpoint's bound, `updated_at_ms`) is in this
//! clock, so no process's wall clock can move them. An operator laptop 250 s fast, a container
//! whose clock drifted, a Lambda and a CLI on different machines: each reads the same server
//! time within about a second, because each learns its offset from the server it talks to.
//!
//! Each answer bounds the offset from below: the server's time at receipt is at least its `Date`
//! (whole seconds), so `offset >= Date - local receipt time`. The clock keeps the largest such
//! bound it has seen: it is never ahead of the server, at most about a second behind, and never
//! runs backwards between two readings of one process (so a write and a later read of the same
//! process stay in order). Should the local clock jump forward, the kept bound would put the
//! clock ahead; an answer whose `Date` is more than two seconds below the clock's reading at
//! receipt proves that, and the bound is learnt again from that answer.
//!
//! Until a first answer arrives the local clock is all there is ([`StoreClock::now_ms`] falls
//! back to it); what must not trust the local clock at all (a ledger checkpoint's roll) asks
//! [`StoreClock::server_now_ms`], which says `None` then.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::config::interceptors::BeforeDeserializationInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_types::date_time::{DateTime, Format};

/// How far above an answer's lower bound the kept offset may be before it is known wrong: the
/// header's one-second resolution plus a second of latency.
const JUMP_MS: i64 = 2_000;

/// This process's wall clock in epoch milliseconds: only what the server's time is learnt
/// against, and what a process-local duration (a Lambda's remaining time) is measured from.
pub fn local_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A clock shared by a store and the interceptor that feeds it. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct StoreClock {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// What this process's wall clock is off by: zero in every real process; a test sets it to
    /// play a machine whose clock is wrong.
    local_skew_ms: AtomicI64,
    /// Server time minus local time, once known.
    offset_ms: AtomicI64,
    known: AtomicBool,
}

impl StoreClock {
    /// A clock whose local reading is `skew_ms` off the true time (tests: a skewed machine).
    #[doc(hidden)]
    pub fn with_local_skew_ms(skew_ms: i64) -> Self {
        let clock = StoreClock::default();
        clock.inner.local_skew_ms.store(skew_ms, Ordering::Relaxed);
        clock
    }

    /// This process's own wall clock (skew included): what the server time is learned against.
    #[doc(hidden)]
    pub fn local_ms(&self) -> i64 {
        local_now_ms().saturating_add(self.inner.local_skew_ms.load(Ordering::Relaxed))
    }

    /// The server's time, if an answer from it has been seen.
    pub fn server_now_ms(&self) -> Option<i64> {
        self.inner.known.load(Ordering::Acquire).then(|| {
            self.local_ms()
                .saturating_add(self.inner.offset_ms.load(Ordering::Relaxed))
        })
    }

    /// The server's time, or the local clock before any answer came.
    pub fn now_ms(&self) -> i64 {
        self.server_now_ms().unwrap_or_else(|| self.local_ms())
    }

    /// Learns from a `Date` header received now.
    fn observe(&self, date: &str) {
        let Ok(server) = DateTime::from_str(date.trim(), Format::HttpDate) else {
            return;
        };
        let Ok(server_ms) = server.to_millis() else {
            return;
        };
        let bound = server_ms.saturating_sub(self.local_ms());
        let inner = &self.inner;
        if !inner.known.load(Ordering::Acquire) {
            inner.offset_ms.store(bound, Ordering::Relaxed);
            inner.known.store(true, Ordering::Release);
            return;
        }
        let kept = inner.offset_ms.fetch_max(bound, Ordering::Relaxed);
        // The clock read more than the header's second plus a second of latency ahead of the
        // server: the local clock jumped forward since the bound was learnt.
        if kept > bound + JUMP_MS {
            inner.offset_ms.store(bound, Ordering::Relaxed);
        }
    }

    /// The interceptor that feeds this clock from every answer of the client it is added to.
    pub fn interceptor(&self) -> ServerDate {
        ServerDate(self.clone())
    }

    /// `client` rebuilt to feed this clock from every answer (its HTTP connections are shared).
    pub fn attach(&self, client: &aws_sdk_dynamodb::Client) -> aws_sdk_dynamodb::Client {
        let conf = client
            .config()
            .to_builder()
            .interceptor(self.interceptor())
            .build();
        aws_sdk_dynamodb::Client::from_conf(conf)
    }
}

/// Reads the `Date` header of each DynamoDB answer into its [`StoreClock`].
#[derive(Debug)]
pub struct ServerDate(StoreClock);

impl Intercept for ServerDate {
    fn name(&self) -> &'static str {
        "dynamo_claim::ServerDate"
    }

    fn read_after_transmit(
        &self,
        ctx: &BeforeDeserializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(date) = ctx.response().headers().get("date") {
            self.0.observe(date);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skewed_local_clock_reads_the_server_time_once_an_answer_came() {
        let true_now = local_now_ms();
        let date = DateTime::from_millis(true_now)
            .fmt(Format::HttpDate)
            .unwrap_or_default();
        for skew_ms in [-600_000, -1, 0, 250_000, 600_000] {
            let clock = StoreClock::with_local_skew_ms(skew_ms);
            assert_eq!(clock.server_now_ms(), None, "unknown before any answer");
            assert!((clock.now_ms() - (true_now + skew_ms)).abs() < 5_000);
            clock.observe(&date);
            let server = clock.server_now_ms().unwrap_or(i64::MIN);
            assert!(
                (server - true_now).abs() <= 2_000,
                "skew {skew_ms}: {server} vs {true_now}"
            );
        }
    }

    #[test]
    fn the_clock_keeps_the_best_bound_and_relearns_after_a_local_jump() {
        let clock = StoreClock::with_local_skew_ms(0);
        let fmt = |ms: i64| {
            DateTime::from_millis(ms)
                .fmt(Format::HttpDate)
                .unwrap_or_default()
        };
        let now = local_now_ms();
        clock.observe(&fmt(now));
        let first = clock.server_now_ms().unwrap_or(0);
        // An older Date (a slow answer) never moves the clock back.
        clock.observe(&fmt(now - 1_500));
        assert!(clock.server_now_ms().unwrap_or(0) >= first);
        // The local clock jumps an hour forward: the next answer puts the clock back on the server.
        clock
            .inner
            .local_skew_ms
            .store(3_600_000, Ordering::Relaxed);
        clock.observe(&fmt(local_now_ms()));
        let after = clock.server_now_ms().unwrap_or(0);
        assert!((after - local_now_ms()).abs() <= 2_000, "{after}");
    }

    #[test]
    fn an_unreadable_date_teaches_nothing() {
        let clock = StoreClock::with_local_skew_ms(90_000);
        clock.observe("yesterday-ish");
        assert_eq!(clock.server_now_ms(), None);
    }
}
