//! Per-request SDK work that DynamoDB does not use, switched off; every saving is measured in
//! docs/performance.md ("Levers taken").
//!
//! Both pieces change what the SDK does around a request, never the request's meaning: the same
//! operations, conditions, signatures, retries and timeouts reach the same endpoint.

use std::sync::RwLock;

use aws_runtime::invocation_id::InvocationIdInterceptor;
use aws_runtime::request_info::RequestInfoInterceptor;
use aws_runtime::user_agent::UserAgentInterceptor;
use aws_sdk_dynamodb::config::endpoint::{DefaultResolver, Endpoint, Params, ResolveEndpoint};
use aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::endpoint::EndpointFuture;
use aws_smithy_runtime_api::client::interceptors::disable_interceptor;

/// The client settings of every payhook process (the binaries and the test suite's store).
pub fn lean(builder: aws_sdk_dynamodb::config::Builder) -> aws_sdk_dynamodb::config::Builder {
    builder
        .interceptor(Telemetryless)
        .endpoint_resolver(MemoEndpoint::default())
}

/// Turns off, for each operation, three SDK interceptors whose only product is a header that
/// DynamoDB does not act on: `User-Agent`/`x-amz-user-agent` (the SDK formats its version,
/// features and metrics into it on every request: 4% of a new delivery's instructions),
/// `amz-sdk-invocation-id` (a random UUID per operation) and `amz-sdk-request` (attempt
/// counters). Retries, clock-skew correction, signing and connection poisoning are untouched.
///
/// The SDK's own switch for this is `DisableInterceptor<T>` in the operation's config bag; the
/// client config offers no public way to put it there once, so this interceptor does it first
/// thing in each operation (`read_before_execution` runs before any of their hooks).
///
/// An SDK upgrade cannot turn this into a silent change: should a later SDK register one of the
/// three as permanent, debug builds (the test suite) panic at the first request, and
/// `tests/it/webhook.rs` fails if any of the headers is sent again.
#[derive(Debug)]
struct Telemetryless;

impl Intercept for Telemetryless {
    fn name(&self) -> &'static str {
        "payhook::Telemetryless"
    }

    fn read_before_execution(
        &self,
        _ctx: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        const WHY: &str = "payhook: a header DynamoDB does not act on";
        let state = cfg.interceptor_state();
        state.store_put(disable_interceptor::<UserAgentInterceptor>(WHY));
        state.store_put(disable_interceptor::<InvocationIdInterceptor>(WHY));
        state.store_put(disable_interceptor::<RequestInfoInterceptor>(WHY));
        Ok(())
    }
}

/// The SDK's endpoint resolver, remembered per distinct set of parameters.
///
/// The endpoint rules are a pure function of their parameters. The SDK's resolver keeps only
/// the last set, and the parameters carry the table's name (`ResourceArn`), so alternating
/// between payhook's four tables re-ran the rules (URL parsing included) on most requests.
/// Here every set seen is kept (a handful: one per table), compared whole, so an endpoint is
/// only ever one the SDK's own rules gave for exactly these parameters.
#[derive(Debug, Default)]
struct MemoEndpoint {
    rules: DefaultResolver,
    seen: RwLock<Vec<(Params, Endpoint)>>,
}

/// More distinct parameter sets than any payhook process uses; past it, resolve each time.
const MEMO_LIMIT: usize = 32;

impl MemoEndpoint {
    fn remembered(&self, params: &Params) -> Option<Endpoint> {
        let seen = self.seen.read().ok()?;
        seen.iter()
            .find(|(p, _)| p == params)
            .map(|(_, e)| e.clone())
    }

    fn remember(&self, params: &Params, endpoint: &Endpoint) {
        if let Ok(mut seen) = self.seen.write() {
            if seen.len() < MEMO_LIMIT && !seen.iter().any(|(p, _)| p == params) {
                seen.push((params.clone(), endpoint.clone()));
            }
        }
    }
}

impl ResolveEndpoint for MemoEndpoint {
    fn resolve_endpoint<'a>(&'a self, params: &'a Params) -> EndpointFuture<'a> {
        if let Some(endpoint) = self.remembered(params) {
            return EndpointFuture::ready(Ok(endpoint));
        }
        EndpointFuture::new(async move {
            let endpoint = self.rules.resolve_endpoint(params).await?;
            self.remember(params, &endpoint);
            Ok(endpoint)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(region: &str, endpoint: Option<&str>, arn: &str) -> Params {
        Params::builder()
            .region(region)
            .use_fips(false)
            .use_dual_stack(false)
            .set_endpoint(endpoint.map(str::to_string))
            .resource_arn(arn)
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn gives_what_the_sdk_rules_give_for_each_parameter_set() {
        let memo = MemoEndpoint::default();
        let cases = [
            params("eu-west-1", None, "payhook-claims"),
            params("eu-west-1", None, "payhook-ledger"),
            params("us-east-1", None, "payhook-claims"),
            params("us-east-1", Some("http://127.0.0.1:8000"), "payhook-claims"),
        ];
        for round in 0..3 {
            for p in &cases {
                let want = DefaultResolver::new().resolve_endpoint(p).await.unwrap();
                let got = memo.resolve_endpoint(p).await.unwrap();
                assert_eq!(got, want, "round {round}: {p:?}");
            }
        }
        assert_eq!(memo.seen.read().unwrap().len(), cases.len());
        assert_eq!(
            memo.resolve_endpoint(&cases[0]).await.unwrap().url(),
            "https://dynamodb.eu-west-1.amazonaws.com"
        );
    }

    #[tokio::test]
    async fn an_unresolvable_set_is_an_error_and_not_remembered() {
        let memo = MemoEndpoint::default();
        // The rules refuse FIPS together with a custom endpoint.
        let bad = Params::builder()
            .region("us-east-1")
            .use_fips(true)
            .use_dual_stack(false)
            .endpoint("http://127.0.0.1:8000")
            .build()
            .unwrap();
        assert!(memo.resolve_endpoint(&bad).await.is_err());
        assert!(memo.seen.read().unwrap().is_empty());
    }
}
