//! Process start-up shared by the binaries: the tokio runtime, logging, and the SDK client
//! built once.

use std::time::Duration;

use aws_config::stalled_stream_protection::StalledStreamProtectionConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::BehaviorVersion;

use crate::config::Config;
use crate::dynamodb::DynamoStore;
use crate::metrics::MetricsSink;
use std::sync::Arc;

use crate::http::live::{LiveProviders, Refresh};
use crate::http::payouts::{PayoutAccess, PayoutCaller, PayoutService, ScopedCaller};
use crate::http::{App, ReadAccess};
use crate::pipeline::{Pipeline, Store};
use crate::providers::Providers;
use crate::reconcile::invoke::Ops;
use crate::reconcile::{self, HttpProviderApi};
use crate::secrets::SecretSource;
use std::future::Future;
use std::pin::Pin;

/// Logs to stderr (stdout is for results and metrics); JSON when Lambda asks for it. Audit
/// lines (`payhook::audit`) are written whatever level `RUST_LOG` asks for: an operator's
/// action is never unrecorded because someone quietened the logs (`scripts/dev` runs at warn).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let filter = match "payhook::audit=info".parse() {
        Ok(audit) => filter.add_directive(audit),
        Err(_) => filter,
    };
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().with_current_span(false).init();
    } else {
        builder.with_ansi(false).init();
    }
}

/// Where this process writes its EMF metric lines: what was asked, else stdout inside Lambda
/// (CloudWatch reads it) and nowhere outside ([`MetricsSink::choose`]).
pub fn metrics_sink(asked: Option<MetricsSink>) -> MetricsSink {
    MetricsSink::choose(in_lambda(), asked)
}

/// True inside the Lambda runtime.
pub fn in_lambda() -> bool {
    std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some()
}

/// The tokio runtime of a binary. Inside Lambda one invocation runs at a time (the Runtime API
/// hands out the next event only after the answer), so a current-thread runtime serves it with
/// no worker threads to wake and no hand-offs between them (measured in docs/performance.md);
/// elsewhere (`payhook serve`, the CLI, tests) a multi-thread runtime serves concurrent requests.
pub fn tokio_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    if in_lambda() {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    }
}

/// True when the DynamoDB endpoint the SDK will use is plain `http://` (dynalite, DynamoDB
/// Local): the standard endpoint variables, service-specific first, as the SDK reads them.
fn endpoint_is_plain_http() -> bool {
    service_endpoint_is_plain_http("AWS_ENDPOINT_URL_DYNAMODB")
}

/// The same for one service's endpoint variable.
fn service_endpoint_is_plain_http(var: &str) -> bool {
    let endpoint = std::env::var(var).or_else(|_| std::env::var("AWS_ENDPOINT_URL"));
    endpoint.is_ok_and(|e| e.trim().to_ascii_lowercase().starts_with("http://"))
}

/// One SDK client per process. Endpoint, region and credentials come from the standard chain
/// (`AWS_ENDPOINT_URL_DYNAMODB` points it at dynalite or DynamoDB Local). Attempts are bounded
/// so a stalled call fails inside the Lambda deadline and the provider retries.
///
/// Per-request work the service does not need is switched off (docs/performance.md has each
/// saving): stalled-stream protection watches streaming bodies, and DynamoDB's are small JSON
/// documents whose every attempt is already bounded by `operation_attempt_timeout`; an `http://`
/// endpoint (local only) gets the SDK's own plain-HTTP client, so no TLS stack or root
/// certificates are set up for it. Against AWS (https) the SDK's default HTTPS client is kept.
/// `dynamodb::lean` drops three telemetry headers and remembers resolved endpoints.
pub async fn dynamo_store(config: &Config) -> DynamoStore {
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(2))
        .operation_attempt_timeout(Duration::from_secs(3))
        .operation_timeout(Duration::from_secs(10))
        .build();
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(timeouts)
        .stalled_stream_protection(StalledStreamProtectionConfig::disabled());
    if endpoint_is_plain_http() {
        loader = loader.http_client(aws_smithy_http_client::Builder::new().build_http());
    }
    let sdk = loader.load().await;
    let client_config = crate::dynamodb::lean::lean(aws_sdk_dynamodb::config::Builder::from(&sdk));
    // Every process's claims wait for the multi-Region replication check (started off the path
    // to ready by the binaries; run by the first claim otherwise).
    DynamoStore::new(
        aws_sdk_dynamodb::Client::from_conf(client_config.build()),
        config.tables.clone(),
        config.store,
    )
    .with_replication_gate()
}

/// The router's state, built once per process: providers from config (problems logged, the
/// provider left out), the pipeline over the store.
pub fn build_app<S: Store>(config: &Config, store: S) -> Arc<App<S>> {
    let (providers, problems) = config.providers();
    for (p, e) in problems {
        tracing::error!(provider = %p, error = %e, "provider refused: its webhooks will get 503 until its secret is fixed");
    }
    tracing::info!(providers = ?providers.configured(), "providers configured");
    let providers = match &config.secret_source {
        Some(source) => LiveProviders::refreshed(
            providers,
            Box::new(SecretsRefresh {
                source: source.clone(),
                config: config.clone(),
            }),
            config.secrets_refresh_ms,
        ),
        None => LiveProviders::fixed(providers),
    };
    Arc::new(App {
        pipeline: Pipeline::new(store)
            .with_default_account(config.default_account.clone())
            .with_order_keys(config.order_keys.clone()),
        providers,
        lease_ms: config.lease_ms,
        max_lease_ms: config.max_lease_ms,
        metrics: metrics_sink(None),
        // Fail closed: only a request carrying an IAM caller identity (API Gateway's AWS_IAM
        // authorizer) may read, until `serve` says otherwise.
        read_access: ReadAccess::Iam,
        source_allowlists: config.source_allowlists.clone(),
        payouts: payout_service(config, PayoutAccess::Iam),
        event_doors: match config.event_doors() {
            Ok(doors) => doors,
            Err(e) => {
                tracing::error!(error = %e, "EventBridge doors refused: their events are refused until fixed");
                Vec::new()
            }
        },
    })
}

/// Who may pay out under `payhook serve`: the configured callers, each with the scope its
/// tokens are bound to in the store (read, judged and bound here, before anything is served;
/// `crate::payouts::callers`). Off without a payout token. A configuration that would re-scope
/// keys a retry must find again is the error, with the declaration that resolves it.
pub async fn serve_payout_access(
    config: &Config,
    store: &DynamoStore,
) -> Result<PayoutAccess, crate::pipeline::callers::ScopeError> {
    if config.payout_callers.is_empty() {
        return Ok(PayoutAccess::Off);
    }
    let configured: Vec<_> = config
        .payout_callers
        .iter()
        .map(PayoutCaller::configured)
        .collect();
    let resolved = crate::pipeline::callers::settle_scopes(store, &configured).await?;
    let callers = config
        .payout_callers
        .iter()
        .cloned()
        .zip(resolved)
        .map(|(caller, r)| {
            tracing::info!(caller = %caller.name, scope = %r.scope, newly_bound = r.unbound.len(), "payout caller scoped");
            ScopedCaller::new(caller, r)
        })
        .collect();
    Ok(PayoutAccess::Callers(callers))
}

/// The payout routes' provider client (the providers whose API key is set) and access.
pub fn payout_service(config: &Config, access: PayoutAccess) -> Option<PayoutService> {
    // A process that could reserve and never send serves no payouts (503), whatever start
    // path built it; the binaries refuse to start on the same check first.
    if let Err(e) = config.check_payout_timing(in_lambda()) {
        tracing::error!(error = %e, "payouts off: no transfer call could start");
        return None;
    }
    let timeout = std::time::Duration::from_millis(
        u64::try_from(config.provider_timeout_ms).unwrap_or(5_000),
    );
    match HttpProviderApi::new(config.api_endpoints.clone()) {
        Ok(api) => Some(PayoutService {
            api: api
                .with_timeout(timeout)
                .with_generic_visibility_ms(config.generic_transfer_visibility_ms),
            access,
            max_amount_minor: config.payout_max_minor,
        }),
        Err(e) => {
            tracing::error!(error = %e, "no provider client: payouts answer 503");
            None
        }
    }
}

/// Reads the adapters again from the secrets as they are now.
struct SecretsRefresh {
    source: Arc<SecretSource>,
    config: Config,
}

impl Refresh for SecretsRefresh {
    fn read(&self) -> Pin<Box<dyn Future<Output = Option<Providers>> + Send + 'static>> {
        let (source, config) = (self.source.clone(), self.config.clone());
        Box::pin(async move {
            match source.read().await {
                Ok(values) => Some(config.with_secret_values(&values).providers().0),
                Err(e) => {
                    tracing::warn!(error = %e, "provider secrets not read again; the last good ones stay");
                    None
                }
            }
        })
    }
}

/// Reads the provider secrets the environment names (`PAYHOOK_*_ARN`) from Secrets Manager,
/// once at start-up, and returns the configuration with their values and the source for
/// refreshes. Unreadable at start: logged, and those providers answer 503 (never accept
/// unsigned) until a refresh reads them.
pub async fn read_secrets(config: Config) -> Config {
    let refs = config.secret_refs();
    if refs.is_empty() {
        return config;
    }
    let started = std::time::Instant::now();
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(2))
        .operation_attempt_timeout(Duration::from_secs(3))
        .operation_timeout(Duration::from_secs(6))
        .build();
    let mut loader = aws_config::defaults(BehaviorVersion::latest()).timeout_config(timeouts);
    // moto locally: the SDK's plain-HTTP client (its default client speaks only HTTPS).
    if service_endpoint_is_plain_http("AWS_ENDPOINT_URL_SECRETS_MANAGER") {
        loader = loader.http_client(aws_smithy_http_client::Builder::new().build_http());
    }
    let sdk = loader.load().await;
    let source = Arc::new(
        SecretSource::new(aws_sdk_secretsmanager::Client::new(&sdk), refs)
            .with_previous_grace_ms(config.secret_previous_grace_ms),
    );
    let read = source.read().await;
    let mut config = config;
    config.secret_source = Some(source.clone());
    match read {
        Ok(values) => {
            tracing::info!(
                secrets = values.len(),
                read_ms = started.elapsed().as_millis() as u64,
                "provider secrets read from Secrets Manager"
            );
            config = config.with_secret_values(&values);
        }
        Err(e) => tracing::error!(error = %e, cause = ?std::error::Error::source(&e),
            "provider secrets unreadable: their webhooks answer 503 until a refresh reads them"),
    }
    config
}

/// What the operations function (reconcile, replay) needs.
pub fn ops<S: Store>(config: &Config, store: S) -> Result<Ops<S>, std::io::Error> {
    let (providers, problems) = config.providers();
    for (p, e) in problems {
        tracing::error!(provider = %p, error = %e, "provider refused: its stored events cannot be replayed");
    }
    // Reconciliation resolves payouts with its own lease: it must fit a call too.
    config
        .check_payout_timing(false)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    let mut settings = reconcile::ReconcileSettings::from_policy(
        config.reconcile,
        config.lease_ms.min(config.max_lease_ms),
    );
    settings.call_timeout_ms = config.provider_timeout_ms;
    let call_timeout =
        std::time::Duration::from_millis(u64::try_from(settings.call_timeout_ms).unwrap_or(5_000));
    Ok(Ops {
        pipeline: Pipeline::new(store)
            .with_default_account(config.default_account.clone())
            .with_order_keys(config.order_keys.clone()),
        providers,
        api: HttpProviderApi::new(config.api_endpoints.clone())?
            .with_timeout(call_timeout)
            .with_generic_visibility_ms(config.generic_transfer_visibility_ms),
        settings,
        metrics: metrics_sink(None),
    })
}
