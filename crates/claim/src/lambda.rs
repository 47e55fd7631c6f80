//! The handler-level entry: a tower layer over a `lambda_runtime` handler. Each invocation's
//! event is keyed and claimed before the handler runs; the lease ends with the invocation's
//! deadline; the handler's value is stored and replayed. The function keeps its own output
//! type: a duplicate gets the stored value as if the handler had run.
//!
//! | the key's claim                 | the function returns                                   |
//! |---------------------------------|--------------------------------------------------------|
//! | new (or taken over)             | the handler's value (the handler is given [`Attempt`]) |
//! | done                            | the stored value                                       |
//! | held by a live lease            | error `Idempotency.InProgress`                         |
//! | claimed for another payload     | error `Idempotency.Conflict`                           |
//! | done, value too large to store  | error `Idempotency.NotRecorded` (it ran; nothing runs) |
//! | no key in the event             | error `Idempotency.NoKey` (nothing runs)               |
//!
//! In-progress and conflict are errors with their own `errorType`, so a trigger that retries
//! only failures (SQS, an asynchronous invocation) retries the duplicate instead of deleting it
//! while the first attempt may still fail.
//!
//! A handler error keeps the claim ([`Failed::Unknown`]): the layer cannot know that nothing
//! happened. A handler that can tell uses [`Idempotency::run`] and says [`Failed::Before`].

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use lambda_runtime::LambdaEvent;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tower_layer::Layer;
use tower_service::Service;

use crate::idempotent::{Answer, Attempt, Deadline, Error, Failed, Idempotency};
use crate::store::Store;
use crate::ClaimTable;

/// Wraps a `Service<Attempted<E>>` so each key runs it at most once.
pub struct IdempotencyLayer<E, St = ClaimTable> {
    idempotency: Idempotency<E, St>,
}

impl<E, St> IdempotencyLayer<E, St> {
    /// The layer over `idempotency`'s key, payload and store.
    pub fn new(idempotency: Idempotency<E, St>) -> Self {
        IdempotencyLayer { idempotency }
    }
}

impl<S, E, St: Clone> Layer<S> for IdempotencyLayer<E, St> {
    type Service = Idempotent<S, E, St>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotent {
            inner,
            idempotency: self.idempotency.clone(),
        }
    }
}

/// The service [`IdempotencyLayer`] makes.
pub struct Idempotent<S, E, St = ClaimTable> {
    inner: S,
    idempotency: Idempotency<E, St>,
}

impl<S: Clone, E, St: Clone> Clone for Idempotent<S, E, St> {
    fn clone(&self) -> Self {
        Idempotent {
            inner: self.inner.clone(),
            idempotency: self.idempotency.clone(),
        }
    }
}

/// What the wrapped handler is called with: the invocation, and what it must know about its
/// attempt (an earlier attempt's lease ran out: its effect may exist, find it by the key).
#[derive(Debug)]
pub struct Attempted<E> {
    /// The invocation as Lambda gave it.
    pub event: LambdaEvent<E>,
    /// Whether an earlier attempt held the key first.
    pub attempt: Attempt,
}

impl<S, E, R, St: Store> Service<LambdaEvent<E>> for Idempotent<S, E, St>
where
    S: Service<Attempted<E>, Response = R> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    E: Serialize + Send + Sync + 'static,
    R: Serialize + DeserializeOwned + Send + 'static,
{
    type Response = R;
    type Error = Error<S::Error>;
    type Future = Pin<Box<dyn Future<Output = Result<R, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Error::Handler)
    }

    fn call(&mut self, event: LambdaEvent<E>) -> Self::Future {
        // The ready service answers this call; a fresh clone waits for the next (tower's rule).
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        let idempotency = self.idempotency.clone();
        Box::pin(async move {
            let deadline = Deadline::of(&event.context);
            let (key, fingerprint) = idempotency.identify(&event.payload).ok_or(Error::NoKey)?;
            let answer = idempotency
                .run_as(key, fingerprint, deadline, |attempt| async move {
                    inner
                        .call(Attempted { event, attempt })
                        .await
                        .map_err(Failed::Unknown)
                })
                .await?;
            match answer {
                Answer::Ran(r) | Answer::Replayed(r) => Ok(r),
                Answer::InProgress { retry_after_ms } => Err(Error::InProgress { retry_after_ms }),
                Answer::Conflict => Err(Error::Conflict),
                Answer::DoneUnrecorded => Err(Error::NotRecorded),
            }
        })
    }
}

impl<X: std::fmt::Display> From<Error<X>> for lambda_runtime::Diagnostic {
    fn from(error: Error<X>) -> Self {
        lambda_runtime::Diagnostic {
            error_type: match &error {
                Error::NoKey => "Idempotency.NoKey",
                Error::Store(e) if e.is_retryable() => "Idempotency.StoreUnavailable",
                Error::Store(_) => "Idempotency.StoreRejected",
                Error::Handler(_) => "Idempotency.Handler",
                Error::Encode(_) => "Idempotency.Encode",
                Error::Decode(_) => "Idempotency.Decode",
                Error::InProgress { .. } => "Idempotency.InProgress",
                Error::Conflict => "Idempotency.Conflict",
                Error::NotRecorded => "Idempotency.NotRecorded",
            }
            .to_owned(),
            error_message: match &error {
                Error::Handler(x) => x.to_string(),
                other => other.to_string(),
            },
        }
    }
}
