//! `payhook demo`: sends the sample event as a provider would (first delivery, a duplicate, 20
//! concurrent copies, a forged one) and prints what happened and the resulting balance.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};

use super::client::{post, sign_headers, Reply, Sample};
use super::{print_json, CliError};
use crate::config::Config;
use crate::domain::{now_ms, AccountId};
use crate::dynamodb::DynamoStore;

fn step(name: &str, reply: &Reply) {
    eprintln!(
        "{name:<28} -> {} {}{}",
        reply.status,
        if reply.replayed { "(replayed) " } else { "" },
        reply.body
    );
}

pub async fn run(
    url: &str,
    sample: &Path,
    config: &Config,
    store: &DynamoStore,
) -> Result<(), CliError> {
    let Sample {
        provider,
        body,
        event_id,
        ..
    } = Sample::read(sample)?;
    let event_id = event_id.unwrap_or_else(|| "evt".to_owned());
    let target = format!("{}/webhooks/{provider}", url.trim_end_matches('/'));
    let send = |id: String| {
        let headers = sign_headers(provider, config, body.as_bytes(), &id, now_ms() / 1_000);
        let (target, body) = (target.clone(), body.clone().into_bytes());
        async move { post(&target, &headers?, body).await }
    };

    eprintln!("sending {} to {target}", sample.display());
    let first = send(event_id.clone()).await?;
    step("first delivery", &first);
    let duplicate = send(event_id.clone()).await?;
    step("duplicate delivery", &duplicate);

    let copies =
        futures::future::join_all((0..20).map(|i| send(format!("{event_id}_retry{i}")))).await;
    let tally = tally(copies)?;
    eprintln!("{:<28} -> {tally:?}", "20 concurrent copies");

    let mut forged = sign_headers(
        provider,
        config,
        body.as_bytes(),
        &event_id,
        now_ms() / 1_000,
    )?;
    for (k, v) in forged.iter_mut() {
        if k.ends_with("signature") {
            *v = "v1,Zm9yZ2VkIHNpZ25hdHVyZSBvZiB0aGlydHktdHdvIGJ5dGVzIQ==".into();
        }
    }
    let bad = post(&target, &forged, body.clone().into_bytes()).await?;
    step("bad signature", &bad);
    summary(store, first, duplicate, tally, bad).await
}

/// Replies counted by status, and whether they were replays.
fn tally(replies: Vec<Result<Reply, CliError>>) -> Result<BTreeMap<String, usize>, CliError> {
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for reply in replies {
        let reply = reply?;
        let label = format!(
            "{}{}",
            reply.status,
            if reply.replayed { " replayed" } else { "" }
        );
        *tally.entry(label).or_default() += 1;
    }
    Ok(tally)
}

/// The JSON summary on stdout, with the balance of the account the first delivery credited.
async fn summary(
    store: &DynamoStore,
    first: Reply,
    duplicate: Reply,
    tally: BTreeMap<String, usize>,
    bad: Reply,
) -> Result<(), CliError> {
    // The applied answer names the credited account, whatever the provider's payload shape.
    let applied: Value = serde_json::from_str(&first.body).unwrap_or(Value::Null);
    let account = applied
        .get("account")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let account = AccountId::parse(account).map_err(|e| {
        CliError::Other(format!(
            "first delivery was not applied ({e}): {}",
            first.body
        ))
    })?;
    let balance = crate::read::balance(store, &account, false).await?;
    print_json(&json!({
        "first": first,
        "duplicate": duplicate,
        "concurrent_copies": tally,
        "bad_signature": bad,
        "balance": balance,
        "byte_identical_replay": first.body == duplicate.body && duplicate.replayed,
    }))
}
