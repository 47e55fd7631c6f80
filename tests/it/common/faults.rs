//! Fault injection for tests: an SDK interceptor that, inside one simulated invocation (a tokio
//! task-local scope), fails the Nth DynamoDB call or "crashes" right after it applied. The
//! production code path is unchanged: the same pipeline and store, one more interceptor.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeSerializationInterceptorContextRef, FinalizerInterceptorContextMut,
    FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::OrchestratorError;
use aws_smithy_runtime_api::client::result::ConnectorError;

/// What goes wrong at the chosen call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The call applies, then the invocation dies: every later call fails too.
    CrashAfter,
    /// The call applies but the caller never hears (a timeout); later calls work.
    LostReply,
    /// The call fails without applying (throttling after the SDK's retries).
    Throttle,
    /// The call fails without applying (a 500).
    ServerError,
    /// The call applies, its reply is lost on the wire (a timeout), and the SDK's own retry sends
    /// the same request again: a conditional write then meets its own first attempt.
    LostReplyRetried,
}

pub const ALL_FAULTS: [Fault; 5] = [
    Fault::CrashAfter,
    Fault::LostReply,
    Fault::Throttle,
    Fault::ServerError,
    Fault::LostReplyRetried,
];

/// One simulated invocation's plan and progress.
#[derive(Debug, Default)]
pub struct Invocation {
    plan: Option<(usize, Fault)>,
    calls: AtomicUsize,
    current: AtomicUsize,
    dead: AtomicBool,
    fired: AtomicBool,
}

impl Invocation {
    pub fn new(plan: Option<(usize, Fault)>) -> Arc<Self> {
        Arc::new(Invocation {
            plan,
            ..Invocation::default()
        })
    }
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

tokio::task_local! {
    static INVOCATION: Arc<Invocation>;
}

/// Runs `f` as one invocation under `inv`'s plan.
pub async fn invoke<F: std::future::Future>(inv: Arc<Invocation>, f: F) -> F::Output {
    INVOCATION.scope(inv, f).await
}

/// The interceptor; add it to the client the store uses.
#[derive(Debug, Clone, Default)]
pub struct FaultInjector;

#[derive(Debug)]
struct Injected(&'static str);
impl std::fmt::Display for Injected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "injected fault: {}", self.0)
    }
}
impl std::error::Error for Injected {}

impl Intercept for FaultInjector {
    fn name(&self) -> &'static str {
        "tests.FaultInjector"
    }

    fn read_before_execution(
        &self,
        _: &BeforeSerializationInterceptorContextRef<'_>,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        INVOCATION
            .try_with(|inv| {
                if inv.dead.load(Ordering::SeqCst) {
                    return Err(Box::new(Injected("invocation is dead")) as BoxError);
                }
                let n = inv.calls.fetch_add(1, Ordering::SeqCst);
                inv.current.store(n, Ordering::SeqCst);
                match inv.plan {
                    Some((at, Fault::Throttle)) if at == n => {
                        inv.fired.store(true, Ordering::SeqCst);
                        Err(Box::new(Injected("ThrottlingException")) as BoxError)
                    }
                    Some((at, Fault::ServerError)) if at == n => {
                        inv.fired.store(true, Ordering::SeqCst);
                        Err(Box::new(Injected("InternalServerError")) as BoxError)
                    }
                    _ => Ok(()),
                }
            })
            .unwrap_or(Ok(()))
    }

    /// After the first attempt of the chosen call applied, its outcome becomes a connection
    /// timeout, which the SDK's standard retry classifies as transient and retries.
    fn modify_before_attempt_completion(
        &self,
        ctx: &mut FinalizerInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let _ = INVOCATION.try_with(|inv| {
            let n = inv.current.load(Ordering::SeqCst);
            if inv.plan == Some((n, Fault::LostReplyRetried))
                && !inv.fired.swap(true, Ordering::SeqCst)
            {
                if let Some(out) = ctx.output_or_error_mut() {
                    *out = Err(OrchestratorError::connector(ConnectorError::timeout(
                        Box::new(Injected("reply lost")),
                    )));
                }
            }
        });
        Ok(())
    }

    fn read_after_execution(
        &self,
        _: &FinalizerInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        INVOCATION
            .try_with(|inv| {
                let n = inv.current.load(Ordering::SeqCst);
                match inv.plan {
                    Some((at, fault @ (Fault::CrashAfter | Fault::LostReply)))
                        if at == n && !inv.fired.load(Ordering::SeqCst) =>
                    {
                        inv.fired.store(true, Ordering::SeqCst);
                        if fault == Fault::CrashAfter {
                            inv.dead.store(true, Ordering::SeqCst);
                        }
                        Err(Box::new(Injected("the write applied; the reply was lost")) as BoxError)
                    }
                    _ => Ok(()),
                }
            })
            .unwrap_or(Ok(()))
    }
}
