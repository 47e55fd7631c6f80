//! `payhook-tools capacity`: the capacity model you can run. It drives modelled workloads through the
//! real router and pipeline against the configured DynamoDB (dynalite locally), with
//! [`CapacityRecorder`] costing every request by DynamoDB's billing rules, and prints:
//!
//! - requests, write and read units per new delivery and per duplicate, for 1, 4 and 64 KB bodies,
//!   per new refund, reversal and dispute withdrawal, per payout settlement word, and their
//!   duplicates;
//! - the ten hottest partition keys (tables and GSIs), scaled to a delivery rate, for two
//!   scenarios: 10,000 deliveries/s over 10,000 accounts with 30% duplicates, and one account at
//!   1,000 credits/s;
//! - the cost of a balance read on an account with many entries;
//! - the on-demand cost per million deliveries.
//!
//! Deliveries run one at a time (the recorder reads item images around each write). Results go to
//! stdout (a table, or `--json`), progress to stderr. Tables are created under a fresh prefix.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use clap::Args;
use serde::Serialize;
use tower::ServiceExt;

use crate::recorder::{CapacityRecorder, Costed, Totals};
use payhook::cli::client::sign_headers;
use payhook::cli::CliError;
use payhook::config::Config;
use payhook::domain::{now_ms, AccountId, ProviderId};
use payhook::dynamodb::{DynamoStore, TableNames};
use payhook::http::App;
use payhook::ledger::{Layout, Ledger};

/// On-demand prices assumed (us-east-1, from November 2024): per million write / read request
/// units. A GSI write is a write request unit like any other.
pub const USD_PER_MILLION_WRITES: f64 = 0.625;
pub const USD_PER_MILLION_READS: f64 = 0.125;
/// DynamoDB's per-partition-key write ceiling.
pub const KEY_WRITE_LIMIT: f64 = 1_000.0;

#[derive(Debug, Clone, Args)]
pub struct CapacityArgs {
    /// Deliveries per scenario (more is closer to the true spread of keys; each is a few writes).
    #[arg(long, default_value_t = 400)]
    pub deliveries: usize,
    /// Entries of the account whose balance read is costed.
    #[arg(long, default_value_t = 2_000)]
    pub balance_entries: usize,
    /// Seed of the workload (accounts, references, duplicates).
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    #[arg(long)]
    pub json: bool,
}

/// Costs per delivery of one class.
#[derive(Debug, Clone, Serialize)]
pub struct PerDelivery {
    pub class: String,
    pub body_bytes: usize,
    pub requests: BTreeMap<String, f64>,
    pub write_units: f64,
    pub read_units: f64,
}

/// A partition key's expected load at the scenario's rate. Keys of one family (`IN_PROGRESS#0`…
/// `IN_PROGRESS#31`, an account's ledger shards) share the family's load evenly, since the
/// shard is a hash; `sampled_max_per_s` is the busiest member in this run's sample, for scale
/// (a few hundred deliveries over 32 shards is noisy).
#[derive(Debug, Clone, Serialize)]
pub struct HotKey {
    pub target: String,
    /// The family: the key without its `#{shard}` suffix.
    pub key: String,
    pub keys_in_family: u64,
    pub write_units_per_s: f64,
    pub sampled_max_per_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub name: String,
    pub deliveries_per_s: f64,
    pub deliveries: usize,
    pub write_units_per_delivery: f64,
    pub read_units_per_delivery: f64,
    pub hottest: Vec<HotKey>,
    /// True when no key is above DynamoDB's 1,000 write units/s.
    pub within_key_limit: bool,
    pub usd_per_million_deliveries: f64,
}

/// A balance read on an account with many entries: the first read after they were posted (it
/// finds them after the checkpoints and rolls them up) and a later one.
#[derive(Debug, Clone, Serialize)]
pub struct BalanceRead {
    pub entries: usize,
    pub first_requests: BTreeMap<String, u64>,
    pub first_read_units: f64,
    pub requests: BTreeMap<String, u64>,
    pub read_units: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub per_delivery: Vec<PerDelivery>,
    pub scenarios: Vec<Scenario>,
    pub balance_read: BalanceRead,
    pub prices: BTreeMap<&'static str, f64>,
}

/// A recorded store over fresh tables, and the router over it.
pub struct Model {
    pub store: DynamoStore,
    pub recorder: CapacityRecorder,
    app: Arc<App<DynamoStore>>,
    config: Config,
    rng: SplitMix,
}

/// A small deterministic generator for the workload (splitmix64): reproducible by `--seed`,
/// no dependency for a planning tool.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % u64::try_from(n.max(1)).unwrap_or(1)).unwrap_or(0)
    }

    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

impl Model {
    /// Creates tables under `prefix` (through `base`'s client) and a recorded store over them.
    pub async fn new(
        base: &DynamoStore,
        prefix: &str,
        config: &Config,
        seed: u64,
    ) -> Result<Self, CliError> {
        let tables = TableNames::with_prefix(prefix);
        let plain = DynamoStore::new(base.client().clone(), tables.clone(), base.settings());
        plain.create_tables().await?;
        let recorder = CapacityRecorder::new(base.client().clone(), tables.clone());
        let conf = base
            .client()
            .config()
            .to_builder()
            .interceptor(recorder.clone())
            .build();
        let store = DynamoStore::new(
            aws_sdk_dynamodb::Client::from_conf(conf),
            tables,
            base.settings(),
        );
        let mut app = payhook::runtime::build_app(config, store.clone());
        if let Some(a) = Arc::get_mut(&mut app) {
            a.metrics = payhook::metrics::MetricsSink::Off;
        }
        let model = Model {
            store,
            recorder,
            app,
            config: config.clone(),
            rng: SplitMix(seed),
        };
        // A process reads the stored layout once: not a per-delivery cost.
        model.store.placement_layout().await?;
        model.recorder.take();
        Ok(model)
    }

    /// Sends one signed generic delivery through the router; returns its HTTP status and the
    /// requests it cost.
    pub async fn deliver(&self, body: &str) -> Result<(u16, Vec<Costed>), CliError> {
        let headers = sign_headers(
            ProviderId::GENERIC,
            &self.config,
            body.as_bytes(),
            "msg_capacity",
            now_ms() / 1000,
        )?;
        let mut req =
            http::Request::post("/webhooks/generic").header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(k, v);
        }
        let req = req
            .body(Body::from(body.to_owned()))
            .map_err(|e| CliError::Other(e.to_string()))?;
        let res = payhook::http::router(self.app.clone())
            .oneshot(req)
            .await
            .map_err(|e| CliError::Other(e.to_string()))?;
        Ok((res.status().as_u16(), self.recorder.take()))
    }

    fn reference(&mut self) -> String {
        format!("cap_{:016x}", self.rng.next())
    }
}

/// `#{digits}` at the end of a key: its family and shard.
fn shard_of(key: &str) -> Option<(&str, u32)> {
    let (family, shard) = key.rsplit_once('#')?;
    shard.parse().ok().map(|n| (family, n))
}

/// A generic payment body of about `bytes`: the padding is line items as a checkout sends them
/// (names, ids, quantities): repetitive in shape, varied in content, so it deflates about as
/// much as real webhook JSON (to a third or so), not to nothing.
pub fn body(event_id: &str, reference: &str, account: &str, bytes: usize) -> String {
    let base = format!(
        r#"{{"id":"{event_id}","type":"payment.succeeded","created":1764670000,"data":{{"reference":"{reference}","account":"{account}","amount":125000,"currency":"NGN","items":[]}}}}"#
    );
    let mut rng = SplitMix(payhook::ledger::fnv1a(reference));
    let words = [
        "shirt", "mug", "ticket", "plan", "bundle", "voucher", "sticker", "book", "lamp", "chair",
    ];
    let mut items = Vec::new();
    let mut len = base.len();
    while len < bytes {
        let item = format!(
            r#"{{"sku":"{:08x}","name":"{} {}","qty":{},"unit_minor":{},"customer_note":"{:016x}"}}"#,
            rng.next() as u32,
            words[rng.below(words.len())],
            words[rng.below(words.len())],
            rng.below(9) + 1,
            rng.below(90_000) + 100,
            rng.next()
        );
        len += item.len() + 1;
        items.push(item);
    }
    base.replacen(
        r#""items":[]"#,
        &format!(r#""items":[{}]"#, items.join(",")),
        1,
    )
}

fn per_delivery(class: &str, body_bytes: usize, runs: &[Vec<Costed>]) -> PerDelivery {
    let n = runs.len().max(1) as f64;
    let mut requests = BTreeMap::new();
    let (mut w, mut r) = (0.0, 0.0);
    for run in runs {
        let t = Totals::of(run);
        for (op, c) in t.requests {
            *requests.entry(op).or_insert(0.0) += c as f64 / n;
        }
        w += t.write_units / n;
        r += t.read_units / n;
    }
    PerDelivery {
        class: class.into(),
        body_bytes,
        requests,
        write_units: w,
        read_units: r,
    }
}

/// New deliveries and duplicates of them, for one body size.
pub async fn classes(
    model: &mut Model,
    body_bytes: usize,
    count: usize,
) -> Result<Vec<PerDelivery>, CliError> {
    let (mut new, mut dup) = (Vec::new(), Vec::new());
    for i in 0..count {
        let r = model.reference();
        let b = body(&format!("evt_{r}"), &r, &format!("acct_{i}"), body_bytes);
        let (status, costed) = model.deliver(&b).await?;
        if status != 200 {
            return Err(CliError::Other(format!("a new delivery answered {status}")));
        }
        new.push(costed);
        dup.push(model.deliver(&b).await?.1);
    }
    Ok(vec![
        per_delivery("new", body_bytes, &new),
        per_delivery("duplicate", body_bytes, &dup),
    ])
}

/// A generic refund body: `refund` of `payment`, the whole 125,000 NGN of [`body`]'s payments.
pub fn refund_body(event_id: &str, refund: &str, payment: &str) -> String {
    format!(
        r#"{{"id":"{event_id}","type":"refund.succeeded","created":1764670000,"data":{{"reference":"{refund}","payment_reference":"{payment}","amount":125000,"currency":"NGN"}}}}"#
    )
}

/// A generic `refund.failed` body: the reversal of `refund` (as [`refund_body`]).
pub fn reversal_body(event_id: &str, refund: &str, payment: &str) -> String {
    refund_body(event_id, refund, payment).replacen("refund.succeeded", "refund.failed", 1)
}

/// A generic `dispute.funds_withdrawn` body: the whole 125,000 NGN of `payment` withdrawn.
pub fn withdrawal_body(event_id: &str, dispute: &str, payment: &str) -> String {
    format!(
        r#"{{"id":"{event_id}","type":"dispute.funds_withdrawn","created":1764670000,"data":{{"dispute":"{dispute}","reference":"{payment}","amount":125000,"currency":"NGN"}}}}"#
    )
}

/// New refunds (each of a payment credited just before, in full) and duplicates of them; then
/// each refund's reversal (`refund.failed`) and its duplicate; then a withdrawal of a payment
/// of its own and its duplicate (#44: each claims on its payment).
pub async fn refund_classes(model: &mut Model, count: usize) -> Result<Vec<PerDelivery>, CliError> {
    let mut runs: [Vec<Vec<Costed>>; 6] = Default::default();
    let mut bytes = [0; 3];
    for i in 0..count {
        let r = model.reference();
        let rf = format!("rf_{r}");
        let w = model.reference();
        let movements = [
            (
                body(&format!("evt_{r}"), &r, &format!("acct_r{i}"), 0),
                None,
            ),
            (refund_body(&format!("evt_rf_{r}"), &rf, &r), Some(0)),
            (reversal_body(&format!("evt_rv_{r}"), &rf, &r), Some(1)),
            (
                body(&format!("evt_{w}"), &w, &format!("acct_w{i}"), 0),
                None,
            ),
            (
                withdrawal_body(&format!("evt_dw_{w}"), &format!("dsp_{w}"), &w),
                Some(2),
            ),
        ];
        for (b, class) in movements {
            let (status, costed) = model.deliver(&b).await?;
            if status != 200 {
                return Err(CliError::Other(format!("{b} answered {status}")));
            }
            if let Some(c) = class {
                bytes[c] = b.len();
                runs[2 * c].push(costed);
                runs[2 * c + 1].push(model.deliver(&b).await?.1);
            }
        }
    }
    let names = [
        "new refund",
        "duplicate refund",
        "new reversal",
        "duplicate reversal",
        "new withdrawal",
        "duplicate withdrawal",
    ];
    Ok(names
        .iter()
        .enumerate()
        .map(|(i, name)| per_delivery(name, bytes[i / 2], &runs[i]))
        .collect())
}

/// A payout as `POST /payouts` leaves it once sent (status `sent`, 100 NGN, listed as an open
/// payout), written directly: the model has no transfer API behind it, and only the word about
/// it is costed.
pub async fn sent_payout(store: &DynamoStore, id: &str, account: &str) -> Result<(), CliError> {
    use aws_sdk_dynamodb::types::AttributeValue::{N, S};
    let now = now_ms().to_string();
    store
        .client()
        .put_item()
        .table_name(&store.tables().payments)
        .item("pk", S(format!("payout#{id}")))
        .item("payout", S(id.into()))
        .item("payout_status", S("sent".into()))
        .item("provider", S("generic".into()))
        .item("account", S(account.into()))
        .item("amount_minor", N("100".into()))
        .item("currency", S("NGN".into()))
        .item(
            "destination",
            S(r#"{"bank":"058","account_number":"0123456789"}"#.into()),
        )
        .item("shard", N("0".into()))
        .item("reserve_at_ms", N(now.clone()))
        .item("sends", N("1".into()))
        .item("open", S("PAYOUT#0".into()))
        .item("created_at_ms", N(now.clone()))
        .item("updated_at_ms", N(now))
        .send()
        .await
        .map_err(|e| CliError::Other(format!("writing a payout: {e}")))?;
    Ok(())
}

/// A generic `transfer.failed` body about `payout` (100 NGN).
pub fn transfer_failed_body(event_id: &str, payout: &str) -> String {
    format!(
        r#"{{"id":"{event_id}","type":"transfer.failed","created":1764670000,"data":{{"reference":"{payout}","amount":100,"currency":"NGN"}}}}"#
    )
}

/// New payout settlement words (a failure, credited back) and their duplicates (#44: each
/// claims on its payout).
pub async fn word_classes(model: &mut Model, count: usize) -> Result<Vec<PerDelivery>, CliError> {
    let mut runs: [Vec<Vec<Costed>>; 2] = Default::default();
    let mut bytes = 0;
    for i in 0..count {
        let id = format!("po_{:016x}{:016x}", model.rng.next(), model.rng.next());
        sent_payout(&model.store, &id, &format!("acct_p{i}")).await?;
        model.recorder.take();
        let b = transfer_failed_body(&format!("evt_tf_{id}"), &id);
        bytes = b.len();
        for run in &mut runs {
            let (status, costed) = model.deliver(&b).await?;
            if status != 200 {
                return Err(CliError::Other(format!("{b} answered {status}")));
            }
            run.push(costed);
        }
    }
    Ok(["new payout word", "duplicate payout word"]
        .iter()
        .zip(&runs)
        .map(|(name, run)| per_delivery(name, bytes, run))
        .collect())
}

/// Runs a scenario: `count` deliveries, accounts drawn from `accounts`, `dup_share` of them
/// redeliveries of earlier ones; keys scaled to `rate` deliveries/s.
pub async fn scenario(
    model: &mut Model,
    name: &str,
    rate: f64,
    accounts: usize,
    dup_share: f64,
    count: usize,
) -> Result<Scenario, CliError> {
    let (all, keys) = drive_workload(model, name, accounts, dup_share, count).await?;
    let n = count.max(1) as f64;
    let totals = Totals::of(&all);
    let layout = model.store.layout().await?;
    let mut hottest: Vec<HotKey> = family_loads(keys)
        .into_iter()
        .map(|((target, key), load)| hot_key(target, key, load, &layout, accounts, n, rate))
        .collect();
    hottest.sort_by(|a, b| b.write_units_per_s.total_cmp(&a.write_units_per_s));
    let within_key_limit = hottest
        .first()
        .is_none_or(|h| h.write_units_per_s <= KEY_WRITE_LIMIT);
    hottest.truncate(10);
    let (w, r) = (totals.write_units / n, totals.read_units / n);
    Ok(Scenario {
        name: name.into(),
        deliveries_per_s: rate,
        deliveries: count,
        write_units_per_delivery: w,
        read_units_per_delivery: r,
        hottest,
        within_key_limit,
        usd_per_million_deliveries: w * USD_PER_MILLION_WRITES + r * USD_PER_MILLION_READS,
    })
}

/// Write units summed per `(target, key)`, for the keys that belong to a sharded family.
type KeyUnits = BTreeMap<(String, String), f64>;

/// Sends the scenario's deliveries one at a time (the recorder reads item images around each
/// write), redelivering earlier bodies at `dup_share` so duplicates cost what they really cost.
/// Returns every costed request and the write units landing on shared (sharded) keys.
async fn drive_workload(
    model: &mut Model,
    name: &str,
    accounts: usize,
    dup_share: f64,
    count: usize,
) -> Result<(Vec<Costed>, KeyUnits), CliError> {
    let mut sent: Vec<String> = Vec::new();
    let mut keys: KeyUnits = BTreeMap::new();
    let mut all = Vec::new();
    for i in 0..count {
        let redeliver = !sent.is_empty() && model.rng.chance(dup_share);
        let b = if redeliver {
            sent[model.rng.below(sent.len())].clone()
        } else {
            let r = model.reference();
            let acct = format!("acct_{}", model.rng.below(accounts));
            body(&format!("evt_{name}_{i}"), &r, &acct, 1_024)
        };
        let (_, costed) = model.deliver(&b).await?;
        for c in &costed {
            // Keys unique to one reference or event (a claim, a payment, a delivery) take a few
            // writes over their life, whatever the rate: only shared keys can run hot.
            for k in c.keys.iter().filter(|k| shard_of(&k.key).is_some()) {
                *keys.entry((k.target.clone(), k.key.clone())).or_default() += k.units;
            }
        }
        all.extend(costed);
        if !redeliver {
            sent.push(b);
        }
    }
    Ok((all, keys))
}

/// Folds sampled keys into their families, as `(total units, busiest member's units)`: a
/// family's shards are picked by hash, so only the family's total predicts a key's load.
/// An account's ledger shards all fold into one `{account}` family, since the sample's
/// accounts are interchangeable.
fn family_loads(keys: KeyUnits) -> BTreeMap<(String, String), (f64, f64)> {
    let mut families: BTreeMap<(String, String), (f64, f64)> = BTreeMap::new();
    for ((target, key), units) in keys {
        let (family, _) = shard_of(&key).unwrap_or((key.as_str(), 0));
        let family = if target == "ledger" {
            "{account}".to_owned()
        } else {
            family.to_owned()
        };
        let entry = families.entry((target, family)).or_default();
        entry.0 += units;
        entry.1 = entry.1.max(units);
    }
    families
}

/// Scales a family's sampled load to `rate` deliveries/s per key: the load of all shards of a
/// key, spread evenly over the family's shards (and, for an account's ledger shards, over the
/// scenario's accounts), since that spread is what the hash gives at full rate.
fn hot_key(
    target: String,
    key: String,
    (units, max): (f64, f64),
    layout: &Layout,
    accounts: usize,
    n: f64,
    rate: f64,
) -> HotKey {
    let shards = if target == "ledger" {
        layout.ledger_shards
    } else {
        layout.index_shards
    };
    let per_account = if target == "ledger" {
        accounts.max(1) as f64
    } else {
        1.0
    };
    let spread = f64::from(shards.max(1)) * per_account;
    HotKey {
        keys_in_family: (spread as u64).max(1),
        write_units_per_s: units / n * rate / spread,
        sampled_max_per_s: max / n * rate / per_account,
        target,
        key,
    }
}

/// Posts `entries` credits to one account (timed ten minutes ago, as a busy day's history is)
/// through the ledger's own write, on a store without the recorder (16 at a time), then costs
/// two balance reads.
pub async fn balance_read(model: &mut Model, entries: usize) -> Result<BalanceRead, CliError> {
    use futures::StreamExt;
    let account = AccountId::parse("acct_balance").map_err(|e| CliError::Other(e.to_string()))?;
    let currency =
        payhook::domain::Currency::parse("NGN").map_err(|e| CliError::Other(e.to_string()))?;
    let plain = DynamoStore::new(
        model.recorder.images().clone(),
        model.store.tables().clone(),
        model.store.settings(),
    );
    let layout = plain.placement_layout().await?;
    let at = now_ms() - 600_000;
    let posts = futures::stream::iter(0..entries)
        .map(|i| {
            let (plain, account) = (&plain, account.clone());
            async move {
                let key = payhook::domain::IdempotencyKey::from_stored(format!(
                    "generic:payment:bal_{i}"
                ));
                let posting = payhook::ledger::Posting {
                    shard: layout.place(&key),
                    at_ms: Some(at + i64::try_from(i).unwrap_or(0)),
                    key,
                    account,
                    currency,
                    amount_minor: 100,
                    reference: payhook::domain::Reference::parse(&format!("bal_{i}"))
                        .map_err(|e| CliError::Other(e.to_string()))?,
                    posted_at_ms: at,
                };
                plain.post(&posting).await.map_err(CliError::from)
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    for p in posts {
        p?;
    }
    model.recorder.take();
    model.store.balance(&account).await?;
    let first = Totals::of(&model.recorder.take());
    let balance = model.store.balance(&account).await?;
    let later = Totals::of(&model.recorder.take());
    Ok(BalanceRead {
        entries: usize::try_from(balance.entries).unwrap_or(entries),
        first_requests: first.requests,
        first_read_units: first.read_units + first.write_units,
        requests: later.requests,
        read_units: later.read_units,
    })
}

/// The Standard Webhooks secret the model signs its own deliveries with: `payhook-tools capacity`
/// works on fresh tables and needs no provider configured.
const MODEL_SECRET: &str = "whsec_Y2FwYWNpdHktbW9kZWwtc2VjcmV0LWtleQ==";

pub async fn run(args: CapacityArgs, config: Config, store: DynamoStore) -> Result<(), CliError> {
    let prefix = format!("capacity-{}", now_ms());
    let config = config.with_provider_var("PAYHOOK_GENERIC_SECRETS", MODEL_SECRET);
    let mut model = Model::new(&store, &prefix, &config, args.seed).await?;
    let each = (args.deliveries / 10).max(5);
    let mut per = Vec::new();
    for bytes in [1_024, 4_096, 65_536] {
        eprintln!("capacity: {each} new + {each} duplicate deliveries of {bytes} bytes");
        per.extend(classes(&mut model, bytes, each).await?);
    }
    eprintln!("capacity: {each} new + {each} duplicate refunds, reversals and withdrawals");
    per.extend(refund_classes(&mut model, each).await?);
    eprintln!("capacity: {each} new + {each} duplicate payout settlement words");
    per.extend(word_classes(&mut model, each).await?);
    eprintln!(
        "capacity: {} deliveries over 10,000 accounts, 30% duplicates",
        args.deliveries
    );
    let wide = scenario(
        &mut model,
        "10,000/s over 10,000 accounts, 30% duplicates",
        10_000.0,
        10_000,
        0.3,
        args.deliveries,
    )
    .await?;
    eprintln!("capacity: {} credits to one account", args.deliveries);
    let hot = scenario(
        &mut model,
        "one account at 1,000 credits/s",
        1_000.0,
        1,
        0.0,
        args.deliveries,
    )
    .await?;
    eprintln!(
        "capacity: balance read over {} entries",
        args.balance_entries
    );
    let balance_read = balance_read(&mut model, args.balance_entries).await?;
    let prices = [
        ("usd_per_million_write_units", USD_PER_MILLION_WRITES),
        ("usd_per_million_read_units", USD_PER_MILLION_READS),
    ]
    .into_iter()
    .collect();
    let report = Report {
        per_delivery: per,
        scenarios: vec![wide, hot],
        balance_read,
        prices,
    };
    if args.json {
        return payhook::cli::print_json(&report);
    }
    print_table(&report);
    Ok(())
}

fn print_table(r: &Report) {
    println!(
        "{:<16} {:>8} {:>10} {:>10}  requests",
        "class", "body", "write u.", "read u."
    );
    for p in &r.per_delivery {
        let reqs: Vec<String> = p
            .requests
            .iter()
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect();
        println!(
            "{:<16} {:>8} {:>10.2} {:>10.2}  {}",
            p.class,
            p.body_bytes,
            p.write_units,
            p.read_units,
            reqs.join(", ")
        );
    }
    for s in &r.scenarios {
        println!();
        println!(
            "{} ({} deliveries): {:.2} write u. + {:.2} read u. per delivery, ${:.2} per million; hottest keys:",
            s.name, s.deliveries, s.write_units_per_delivery, s.read_units_per_delivery, s.usd_per_million_deliveries
        );
        for h in &s.hottest {
            println!(
                "  {:>7.0} WCU/s per key  {:<20} {} (x{}; busiest in sample {:.0})",
                h.write_units_per_s, h.target, h.key, h.keys_in_family, h.sampled_max_per_s
            );
        }
        println!(
            "  every key within {KEY_WRITE_LIMIT} WCU/s: {}",
            s.within_key_limit
        );
    }
    let b = &r.balance_read;
    println!();
    println!(
        "balance read over {} entries: first {:?}, {:.1} units (it rolls the checkpoints); then {:?}, {:.1} read units",
        b.entries, b.first_requests, b.first_read_units, b.requests, b.read_units
    );
}
