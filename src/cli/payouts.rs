//! `payhook payouts create|show|list`: the same steps and records as `POST /payouts` and
//! `GET /payouts/{payout}`, from a shell. The caller is `cli:$USER`, so the operator's keys are
//! their own, and each create writes an audit line.

use clap::Subcommand;
use serde_json::json;

use super::{operator, print_json, usage, CliError};
use crate::config::Config;
use crate::dynamodb::DynamoStore;
use crate::idempotency::Claims;
use crate::payouts::calls::needs_person;
use crate::payouts::{Limits, PayoutId, PayoutRequest, Payouts, RequestKey, Transfers};
use crate::pipeline::{PayoutCall, Pipeline};
use crate::reconcile::HttpProviderApi;

#[derive(Debug, Subcommand)]
pub enum PayoutsAction {
    /// Pay out: reserve against the balance, send once, print the answer (JSON).
    Create {
        /// The Idempotency-Key: run the same command again to get the same payout.
        #[arg(long)]
        key: String,
        #[arg(long, default_value = "generic")]
        provider: String,
        #[arg(long)]
        account: String,
        /// Minor units.
        #[arg(long)]
        amount: i64,
        #[arg(long)]
        currency: String,
        /// The provider's recipient, as JSON (`{"recipient":"RCP_…"}`).
        #[arg(long)]
        destination: String,
        #[arg(long)]
        narration: Option<String>,
    },
    /// One payout's record.
    Show { payout: String },
    /// Payouts not settled yet (new, reserved, sent), oldest first.
    List {
        #[arg(long, default_value_t = 100)]
        max: usize,
        /// Only those that need a person (past PAYHOOK_PAYOUT_UNRESOLVED_AFTER_S, or sent as
        /// often as allowed with no transfer shown), each with why.
        #[arg(long)]
        unsettled: bool,
    },
}

pub async fn run(
    action: PayoutsAction,
    config: &Config,
    store: DynamoStore,
) -> Result<(), CliError> {
    match action {
        PayoutsAction::Create {
            key,
            provider,
            account,
            amount,
            currency,
            destination,
            narration,
        } => {
            // As `payhook serve`: no payout is reserved where no call could send it.
            config.check_payout_timing(false)?;
            let destination: serde_json::Value =
                usage("--destination", serde_json::from_str(&destination))?;
            let body = json!({"provider": provider, "account": account, "amount": amount,
                "currency": currency, "destination": destination, "narration": narration});
            let api = HttpProviderApi::new(config.api_endpoints.clone())?
                .with_timeout(std::time::Duration::from_millis(
                    u64::try_from(config.provider_timeout_ms).unwrap_or(5_000),
                ))
                .with_generic_visibility_ms(config.generic_transfer_visibility_ms);
            let supports = |p| api.supports(p);
            let request = usage(
                "request",
                PayoutRequest::parse(
                    body.to_string().as_bytes(),
                    Limits {
                        max_amount_minor: config.payout_max_minor,
                        supports: &supports,
                    },
                ),
            )?;
            let key = usage("--key", RequestKey::parse(&key))?;
            let who = operator();
            let pipeline = Pipeline::new(store);
            let call = PayoutCall {
                caller: &who,
                key: &key,
                request: &request,
                lease_ms: config.lease_ms.min(config.max_lease_ms),
                aliases: &[],
            };
            // As the API: an amount the provider cannot carry is refused before any write,
            // unless the key already names a payout (then it is told as it is).
            let units = crate::providers::units_of(request.provider);
            if let Err(e) = units.to_api(request.money) {
                let named = pipeline
                    .names_a_payout(&call)
                    .await
                    .map_err(|e| CliError::Other(e.to_string()))?;
                if !named {
                    return Err(CliError::Usage(format!("--amount: {e}")));
                }
            }
            let answer = pipeline
                .payout(&api, call)
                .await
                .map_err(|e| CliError::Other(e.to_string()))?;
            let detail = json!({"payout": answer.payout.as_ref().map(PayoutId::as_str),
                "account": request.account.as_str(), "amount": amount, "currency": request.money.currency.as_str()});
            let result = json!({"http_status": answer.status, "payout_status": answer.payout_status.map(|s| s.as_str())});
            crate::audit::record(&who, "payouts.create", &detail, Ok(&result));
            let body: serde_json::Value =
                serde_json::from_str(&answer.body).unwrap_or(serde_json::Value::Null);
            print_json(
                &json!({"status": answer.status, "replayed": answer.replayed,
                "payout_status": answer.payout_status.map(|s| s.as_str()), "answer": body}),
            )
        }
        PayoutsAction::Show { payout } => {
            let id = PayoutId::parse(&payout)
                .ok_or_else(|| CliError::Usage("payout: po_ and 32 hex digits".into()))?;
            match store.payout(&id).await? {
                Some(record) => {
                    let text = crate::http::payouts::payout_json(&record)
                        .map_err(|e| CliError::Other(e.to_string()))?;
                    println!("{text}");
                    Ok(())
                }
                None => Err(CliError::Other(format!("no payout {id}"))),
            }
        }
        PayoutsAction::List { max, unsettled } => {
            let open = store.open_payouts(i64::MAX, max).await?;
            if !unsettled {
                return print_json(&open);
            }
            let (now, horizon) = (store.now_ms(), config.reconcile.payout_unresolved_after_ms);
            let people: Vec<_> = open
                .iter()
                .filter_map(|p| {
                    needs_person(p, now, horizon).map(|why| {
                        json!({"payout": p.payout.as_str(), "status": p.status.as_str(),
                            "provider": p.provider.as_str(), "reference": p.payout.as_str(),
                            "account": p.account.as_str(), "amount": p.amount,
                            "currency": p.currency.as_str(), "sends": p.sends,
                            "provider_status": p.provider_status, "age_s": (now - p.created_at_ms) / 1_000,
                            "why": why})
                    })
                })
                .collect();
            print_json(&people)
        }
    }
}
