//! The handler-level entry: a tower layer over a `lambda_runtime` handler. Each invocation's
//! event is keyed and claimed before the handler runs; the lease ends with the invocation's
//! deadline; the handler's value is stored and replayed; the service answers an [`Answer`].
//!
//! A handler error keeps the claim ([`Failed::Unknown`]): the layer cannot know that nothing
//! happened. A handler that can tell uses [`Idempotency::run`] and says [`Failed::Before`].
//!
//! The function then returns an [`Answer`], so `InProgress` and `Conflict` reach Lambda as
//! successful results (`{"in_progress":{…}}`): right for a synchronous caller that reads them,
//! wrong for a trigger that retries only failures (SQS, an asynchronous invocation), which
//! would drop the duplicate. For those, run [`Idempotency::run`] per record and report what is
//! in progress as failed (`examples/sqs.rs`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use lambda_runtime::LambdaEvent;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tower_layer::Layer;
use tower_service::Service;

use crate::idempotent::{Answer, Deadline, Error, Failed, Idempotency};

/// Wraps a `Service<LambdaEvent<E>>` so each key runs it at most once.
pub struct IdempotencyLayer<E> {
    idempotency: Idempotency<E>,
}

impl<E> IdempotencyLayer<E> {
    /// The layer over `idempotency`'s key, payload and table.
    pub fn new(idempotency: Idempotency<E>) -> Self {
        IdempotencyLayer { idempotency }
    }
}

impl<S, E> Layer<S> for IdempotencyLayer<E> {
    type Service = Idempotent<S, E>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotent {
            inner,
            idempotency: self.idempotency.clone(),
        }
    }
}

/// The service [`IdempotencyLayer`] makes.
pub struct Idempotent<S, E> {
    inner: S,
    idempotency: Idempotency<E>,
}

impl<S: Clone, E> Clone for Idempotent<S, E> {
    fn clone(&self) -> Self {
        Idempotent {
            inner: self.inner.clone(),
            idempotency: self.idempotency.clone(),
        }
    }
}

impl<S, E, R> Service<LambdaEvent<E>> for Idempotent<S, E>
where
    S: Service<LambdaEvent<E>, Response = R> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    E: Serialize + Send + Sync + 'static,
    R: Serialize + DeserializeOwned + Send + 'static,
{
    type Response = Answer<R>;
    type Error = Error<S::Error>;
    type Future = Pin<Box<dyn Future<Output = Result<Answer<R>, Self::Error>> + Send>>;

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
            idempotency
                .run_as(key, fingerprint, deadline, |_| async move {
                    inner.call(event).await.map_err(Failed::Unknown)
                })
                .await
        })
    }
}

impl<X: std::fmt::Display> From<Error<X>> for lambda_runtime::Diagnostic {
    fn from(error: Error<X>) -> Self {
        lambda_runtime::Diagnostic {
            error_type: match &error {
                Error::NoKey => "Idempotency.NoKey",
                Error::Store(_) => "Idempotency.Store",
                Error::Handler(_) => "Idempotency.Handler",
                Error::Encode(_) => "Idempotency.Encode",
                Error::Decode(_) => "Idempotency.Decode",
            }
            .to_owned(),
            error_message: match &error {
                Error::Handler(x) => x.to_string(),
                other => other.to_string(),
            },
        }
    }
}
