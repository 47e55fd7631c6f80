//! An SQS-triggered Lambda that charges each order once, however often SQS delivers it (at least
//! once, in batches). The key is the order's id, not the message id, so a producer that sends
//! the same order twice is caught too; the payload compared is the order, not the message's
//! delivery metadata. An order still in progress elsewhere, a conflict or a failure is reported
//! as a batch item failure by `Idempotency::batch`, so SQS delivers it again
//! (`ReportBatchItemFailures` on the mapping); a FIFO queue's failed group stops there.
//!
//! `CLAIMS_TABLE=claims cargo lambda watch --example sqs`
use aws_lambda_events::sqs::{SqsEventObj, SqsMessageObj};
use dynamo_claim::{BatchItem, BatchResponse, ClaimTable, Deadline, Failed, Idempotency};
use lambda_runtime::{service_fn, Error, LambdaEvent};

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Order {
    order_id: String,
    amount_minor: i64,
}

type Message = SqsMessageObj<Order>;

fn once(table: ClaimTable) -> Idempotency<Message> {
    Idempotency::new(table, |m: &Message| Some(m.body.order_id.clone()))
        .validate(|m: &Message| m.body.clone())
        .prefix("charge")
}

async fn handle(
    once: &Idempotency<Message>,
    event: LambdaEvent<SqsEventObj<Order>>,
) -> BatchResponse {
    let item = |m: &Message| BatchItem {
        id: m.message_id.clone().unwrap_or_default(),
        group: m.attributes.get("MessageGroupId").cloned(),
    };
    let deadline = Deadline::of(&event.context);
    once.batch(&event.payload.records, item, deadline, |m, _| {
        charge(&m.body)
    })
    .await
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let aws = aws_config::load_from_env().await;
    let client = aws_sdk_dynamodb::Client::new(&aws);
    let once = once(ClaimTable::new(&client, std::env::var("CLAIMS_TABLE")?));
    let once = &once;
    lambda_runtime::run(service_fn(move |event| async move {
        Ok::<_, Error>(handle(once, event).await)
    }))
    .await
}

/// The side effect (a payment provider's API in a real function). `Failed::Unknown` if the
/// call's outcome is unknown: the claim is kept, never released for a blind retry. A retry that
/// takes over (`Attempt::took_over`) must not charge blindly either: a real charge sends the
/// order id as the provider's own idempotency key (Stripe's `Idempotency-Key`), so the
/// provider answers a repeat with the first charge.
async fn charge(order: &Order) -> Result<String, Failed<std::io::Error>> {
    let n = CHARGES.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    eprintln!(
        "charging {} {} (charge {n})",
        order.order_id, order.amount_minor
    );
    Ok(format!("ch_{n}"))
}

static CHARGES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// One SQS record as Lambda delivers it (the body is the order's JSON, as a string).
    fn record(id: &str, order_id: &str, amount_minor: i64, receive: &str) -> serde_json::Value {
        let body = serde_json::json!({"order_id": order_id, "amount_minor": amount_minor});
        serde_json::json!({
            "messageId": id,
            "receiptHandle": format!("rh-{id}-{receive}"),
            "body": body.to_string(),
            "attributes": {"ApproximateReceiveCount": receive},
            "messageAttributes": {},
            "eventSource": "aws:sqs",
        })
    }

    #[tokio::test]
    async fn a_batch_delivered_twice_charges_each_order_once() {
        let endpoint = std::env::var("AWS_ENDPOINT_URL_DYNAMODB")
            .expect("AWS_ENDPOINT_URL_DYNAMODB (scripts/test starts dynalite)");
        let conf = aws_sdk_dynamodb::config::Builder::new()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "t", "t", None, None, "t",
            ))
            .build();
        let client = aws_sdk_dynamodb::Client::from_conf(conf);
        let table = ClaimTable::new(&client, format!("sqs-example-{}", std::process::id()));
        table.create_if_missing().await.unwrap();
        let once = once(table);
        let batch = |receive: &str| {
            let mut context = lambda_runtime::Context::default();
            context.deadline = u64::try_from(dynamo_claim::local_now_ms() + 30_000).unwrap();
            let records = serde_json::json!({"Records": [
                record("m1", "ord_1", 500, receive),
                // The producer sent ord_1 twice: another message id, the same order.
                record("m2", "ord_1", 500, receive),
                record("m3", "ord_2", 700, receive),
                // Another order under ord_2's id: a conflict, left to SQS's redrive policy.
                record("m4", "ord_2", 9_999, receive),
            ]});
            let event: SqsEventObj<Order> = serde_json::from_value(records).unwrap();
            LambdaEvent::new(event, context)
        };
        let first = handle(&once, batch("1")).await;
        let again = handle(&once, batch("2")).await;
        assert_eq!(CHARGES.load(std::sync::atomic::Ordering::SeqCst), 2);
        for response in [first, again] {
            let failed: Vec<_> = response
                .batch_item_failures
                .iter()
                .map(|f| f.item_identifier.as_str())
                .collect();
            assert_eq!(failed, ["m4"]);
        }
    }
}
