//! What every request costs, by DynamoDB's billing rules, for the capacity model (`payhook
//! capacity`). An SDK interceptor reads each write's item before and after it (a consistent
//! `GetItem` through a second, unrecorded client), so the cost is computed from the real images,
//! not from a model of the code:
//!
//! - a write costs one write unit per started KB of the larger of the item's old and new images
//!   (a failed condition: of the existing item, at least one);
//! - each GSI the old or new image belongs to costs another write of the projected item (a
//!   delete when the item leaves the index, a delete and a put when its index key changes,
//!   nothing when neither keys nor projected attributes changed);
//! - a read costs one read unit per started 4 KB (half when eventually consistent); a query per
//!   4 KB of the items it returned.
//!
//! Each write's partition keys (the table's and each GSI's) are recorded with their units, so the
//! model can name the hottest keys. Capacity planning only: never on a production client.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::{
    BeforeSerializationInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemInput;
use aws_sdk_dynamodb::operation::get_item::{GetItemInput, GetItemOutput};
use aws_sdk_dynamodb::operation::put_item::PutItemInput;
use aws_sdk_dynamodb::operation::query::{QueryInput, QueryOutput};
use aws_sdk_dynamodb::operation::update_item::UpdateItemInput;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::Output;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use serde::Serialize;

use dynamo_claim::item::Item;
use payhook::dynamodb::schema::{IndexDef, TableDef, TableNames, ALL};

/// The size DynamoDB bills for an item: attribute names plus values.
pub fn item_size(item: &Item) -> usize {
    item.iter()
        .map(|(name, v)| name.len() + value_size(v))
        .sum()
}

fn value_size(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) => s.len(),
        // Numbers: about one byte per two significant digits, plus one.
        AttributeValue::N(n) => {
            n.trim_start_matches('-')
                .trim_matches('0')
                .replace('.', "")
                .len()
                .div_ceil(2)
                + 1
        }
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Ss(v) => v.iter().map(String::len).sum(),
        AttributeValue::Ns(v) => v.iter().map(|n| n.len().div_ceil(2) + 1).sum(),
        AttributeValue::Bs(v) => v.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(v) => 3 + v.iter().map(|e| 1 + value_size(e)).sum::<usize>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, e)| 1 + k.len() + value_size(e))
                .sum::<usize>()
        }
        _ => 1,
    }
}

fn units(bytes: usize, per: usize) -> f64 {
    bytes.max(1).div_ceil(per) as f64
}

/// The image an index holds of `item`: its keys (table and index) and projected attributes.
fn projected(item: &Item, table: &TableDef, ix: &IndexDef) -> Option<Item> {
    item.get(ix.hash_key)?;
    let keep = |name: &str| {
        name == table.hash_key
            || Some(name) == table.range_key
            || name == ix.hash_key
            || name == ix.range_key
            || ix.projected.contains(&name)
    };
    Some(
        item.iter()
            .filter(|(k, _)| keep(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

/// One partition key a request wrote, and the units it took there.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KeyWrite {
    /// `table` or `table/index`.
    pub target: String,
    pub key: String,
    pub units: f64,
}

/// One request, costed.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Costed {
    pub table: String,
    pub operation: &'static str,
    pub write_units: f64,
    pub read_units: f64,
    pub keys: Vec<KeyWrite>,
}

/// Costs of a write from its old and new images (either absent).
pub fn write_cost(
    def: &TableDef,
    old: Option<&Item>,
    new: Option<&Item>,
    condition_failed: bool,
) -> (f64, Vec<KeyWrite>) {
    let pk = |i: &Item| i.get(def.hash_key).map(key_text).unwrap_or_default();
    let table_bytes = old.map_or(0, item_size).max(if condition_failed {
        0
    } else {
        new.map_or(0, item_size)
    });
    let table_units = units(table_bytes, 1024);
    let mut keys = vec![KeyWrite {
        target: def.role.into(),
        key: new.or(old).map(pk).unwrap_or_default(),
        units: table_units,
    }];
    if condition_failed {
        return (table_units, keys);
    }
    let mut total = table_units;
    for ix in def.indexes {
        let (o, n) = (
            old.and_then(|i| projected(i, def, ix)),
            new.and_then(|i| projected(i, def, ix)),
        );
        let target = format!("{}/{}", def.role, ix.name);
        let hash = |i: &Item| i.get(ix.hash_key).map(key_text).unwrap_or_default();
        let mut add = |key: String, bytes: usize| {
            let u = units(bytes, 1024);
            total += u;
            keys.push(KeyWrite {
                target: target.clone(),
                key,
                units: u,
            });
        };
        match (o, n) {
            (None, None) => {}
            (None, Some(n)) => add(hash(&n), item_size(&n)),
            (Some(o), None) => add(hash(&o), item_size(&o)),
            (Some(o), Some(n)) if o == n => {}
            (Some(o), Some(n))
                if hash(&o) == hash(&n) && o.get(ix.range_key) == n.get(ix.range_key) =>
            {
                add(hash(&n), item_size(&o).max(item_size(&n)));
            }
            (Some(o), Some(n)) => {
                add(hash(&o), item_size(&o));
                add(hash(&n), item_size(&n));
            }
        }
    }
    (total, keys)
}

fn key_text(v: &AttributeValue) -> String {
    match v {
        AttributeValue::S(s) => s.clone(),
        AttributeValue::N(n) => n.clone(),
        other => format!("{other:?}"),
    }
}

/// A write in flight: its table and key, and the item before it. Kept in the request's own
/// config bag, so concurrent writes through one client never see each other's.
#[derive(Debug, Clone)]
struct Pending {
    def: TableDef,
    table: String,
    key: Item,
    old: Option<Item>,
    operation: &'static str,
    /// A PutItem's new image is its item.
    put: Option<Item>,
}

impl Storable for Pending {
    type Storer = StoreReplace<Self>;
}

/// The interceptor. Interceptors are synchronous, so item images are read by a thread of its
/// own ([`ImageReader`]): the caller's runtime (any flavour) is never re-entered or starved.
#[derive(Debug, Clone)]
pub struct CapacityRecorder {
    images: Client,
    reader: ImageReader,
    tables: Arc<TableNames>,
    log: Arc<Mutex<Vec<Costed>>>,
}

impl CapacityRecorder {
    /// `images` reads item images; it must not carry this recorder.
    pub fn new(images: Client, tables: TableNames) -> Self {
        let reader = ImageReader::start(&images);
        CapacityRecorder {
            images,
            reader,
            tables: Arc::new(tables),
            log: Arc::default(),
        }
    }

    /// The unrecorded client that reads images.
    pub fn images(&self) -> &Client {
        &self.images
    }

    /// Every request costed so far, in order; clears the record.
    pub fn take(&self) -> Vec<Costed> {
        self.log
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default()
    }

    fn def_of(&self, table: &str) -> Option<TableDef> {
        ALL.iter()
            .find(|d| self.tables.name_of(d) == table)
            .copied()
    }

    fn read_image(&self, table: &str, key: &Item) -> Option<Item> {
        self.reader.read(table, key)
    }

    fn key_of(def: &TableDef, item: &Item) -> Item {
        item.iter()
            .filter(|(k, _)| k.as_str() == def.hash_key || Some(k.as_str()) == def.range_key)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Costs a finished write from its item's images before and after, since DynamoDB bills the
    /// larger of the two and each index either belongs to.
    fn record_write(&self, p: Pending, failed: bool) {
        let new = match (&p.put, failed, p.operation) {
            // A failed write (a refused condition) changed nothing: the item is as it was.
            (_, true, _) => p.old.clone(),
            (Some(item), false, _) => Some(item.clone()),
            (None, false, "DeleteItem") => None,
            // An update's result is only in the table: read it back.
            (None, false, _) => self.read_image(&p.table, &p.key),
        };
        let (write_units, keys) = write_cost(&p.def, p.old.as_ref(), new.as_ref(), failed);
        self.record(Costed {
            table: p.def.role.into(),
            operation: p.operation,
            write_units,
            read_units: 0.0,
            keys,
        });
    }

    fn record(&self, c: Costed) {
        if let Ok(mut l) = self.log.lock() {
            l.push(c);
        }
    }
}

impl Intercept for CapacityRecorder {
    fn name(&self) -> &'static str {
        "payhook.CapacityRecorder"
    }

    fn read_before_execution(
        &self,
        ctx: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let input = ctx.input();
        let (table, key, operation, put) = if let Some(p) = input.downcast_ref::<PutItemInput>() {
            let Some(def) = p.table_name().and_then(|t| self.def_of(t)) else {
                return Ok(());
            };
            let item = p.item().cloned().unwrap_or_default();
            (
                p.table_name().unwrap_or_default().to_owned(),
                Self::key_of(&def, &item),
                "PutItem",
                Some(item),
            )
        } else if let Some(u) = input.downcast_ref::<UpdateItemInput>() {
            (
                u.table_name().unwrap_or_default().to_owned(),
                u.key().cloned().unwrap_or_default(),
                "UpdateItem",
                None,
            )
        } else if let Some(d) = input.downcast_ref::<DeleteItemInput>() {
            (
                d.table_name().unwrap_or_default().to_owned(),
                d.key().cloned().unwrap_or_default(),
                "DeleteItem",
                None,
            )
        } else {
            return Ok(());
        };
        let Some(def) = self.def_of(&table) else {
            return Ok(());
        };
        let old = self.read_image(&table, &key);
        cfg.interceptor_state().store_put(Pending {
            def,
            table,
            key,
            old,
            operation,
            put,
        });
        Ok(())
    }

    fn read_after_execution(
        &self,
        ctx: &FinalizerInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(out) = ctx.output_or_error() else {
            return Ok(());
        };
        if let Some(p) = cfg.load::<Pending>().cloned() {
            self.record_write(p, out.is_err());
            return Ok(());
        }
        let Ok(output) = out else { return Ok(()) };
        let Some((table, operation, read_units)) = read_cost(ctx, output) else {
            return Ok(());
        };
        let role = self.def_of(&table).map_or("other", |d| d.role);
        self.record(Costed {
            table: role.into(),
            operation,
            write_units: 0.0,
            read_units,
            keys: Vec::new(),
        });
        Ok(())
    }
}

/// A read's table, operation and read units, from its answer: billed by the bytes it returned,
/// which only the output knows; `None` for anything but `GetItem` and `Query`.
fn read_cost(
    ctx: &FinalizerInterceptorContextRef<'_>,
    output: &Output,
) -> Option<(String, &'static str, f64)> {
    if let Some(g) = output.downcast_ref::<GetItemOutput>() {
        let input = ctx.input().and_then(|i| i.downcast_ref::<GetItemInput>());
        let consistent = input
            .and_then(GetItemInput::consistent_read)
            .unwrap_or(false);
        let bytes = g.item().map_or(0, item_size);
        let table = input
            .and_then(GetItemInput::table_name)
            .unwrap_or_default()
            .to_owned();
        Some((
            table,
            "GetItem",
            units(bytes, 4096) / if consistent { 1.0 } else { 2.0 },
        ))
    } else if let Some(q) = output.downcast_ref::<QueryOutput>() {
        let input = ctx.input().and_then(|i| i.downcast_ref::<QueryInput>());
        let consistent = input.and_then(QueryInput::consistent_read).unwrap_or(false);
        let bytes: usize = q.items().iter().map(item_size).sum();
        let table = input
            .and_then(QueryInput::table_name)
            .unwrap_or_default()
            .to_owned();
        Some((
            table,
            "Query",
            units(bytes, 4096) / if consistent { 1.0 } else { 2.0 },
        ))
    } else {
        None
    }
}

type ImageRequest = (String, Item, std::sync::mpsc::Sender<Option<Item>>);

/// Reads item images for the synchronous interceptor on a thread with its own current-thread
/// runtime and its own HTTP connections. Reading them on the caller's runtime instead
/// (`block_in_place` + `block_on`) hung now and then under parallel tests: the nested read
/// shared the caller's runtime and connection pool with the request being intercepted.
#[derive(Debug, Clone)]
struct ImageReader {
    requests: std::sync::mpsc::Sender<ImageRequest>,
}

impl ImageReader {
    /// How long a write waits for its image before it is costed without one.
    const WAIT: std::time::Duration = std::time::Duration::from_secs(60);

    fn start(images: &Client) -> Self {
        use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
        // Its own connection pool (the SDK's default client, https or http), never the caller's.
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(Provider::Rustls(CryptoMode::AwsLc))
            .build_https();
        let conf = images.config().to_builder().http_client(http).build();
        let client = Client::from_conf(conf);
        let (requests, inbox) = std::sync::mpsc::channel::<ImageRequest>();
        // The thread ends when the last recorder clone (and with it the sender) is dropped.
        let spawned = std::thread::Builder::new()
            .name("capacity-images".into())
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                while let Ok((table, key, reply)) = inbox.recv() {
                    let get = client
                        .get_item()
                        .table_name(table)
                        .set_key(Some(key))
                        .consistent_read(true);
                    let _ = reply.send(rt.block_on(get.send()).ok().and_then(|o| o.item));
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "capacity image reader not started; writes are costed without images");
        }
        ImageReader { requests }
    }

    fn read(&self, table: &str, key: &Item) -> Option<Item> {
        let (reply, answer) = std::sync::mpsc::channel();
        self.requests
            .send((table.to_owned(), key.clone(), reply))
            .ok()?;
        answer.recv_timeout(Self::WAIT).ok().flatten()
    }
}

/// Sums of a set of costed requests.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Totals {
    pub requests: BTreeMap<String, u64>,
    pub write_units: f64,
    pub read_units: f64,
}

impl Totals {
    pub fn of(costed: &[Costed]) -> Self {
        let mut t = Totals::default();
        for c in costed {
            *t.requests.entry(c.operation.to_owned()).or_default() += 1;
            t.write_units += c.write_units;
            t.read_units += c.read_units;
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use payhook::dynamodb::schema::{EVENTS, IDEMPOTENCY};

    fn item(pairs: &[(&str, AttributeValue)]) -> Item {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn a_claim_costs_its_item_and_an_index_write_and_finalize_a_removal() {
        let s = |t: &str| AttributeValue::S(t.into());
        let n = |t: &str| AttributeValue::N(t.into());
        let claim = item(&[
            ("pk", s("generic:payment:p")),
            ("status", s("IN_PROGRESS")),
            ("open", s("IN_PROGRESS#3")),
            ("lease_expires_at_ms", n("1")),
        ]);
        let (units, keys) = write_cost(&IDEMPOTENCY, None, Some(&claim), false);
        assert_eq!(units, 2.0);
        assert_eq!(
            keys[1],
            KeyWrite {
                target: "idempotency/open".into(),
                key: "IN_PROGRESS#3".into(),
                units: 1.0
            }
        );
        let mut done = claim.clone();
        done.remove("open");
        done.insert("status".into(), s("DONE"));
        assert_eq!(
            write_cost(&IDEMPOTENCY, Some(&claim), Some(&done), false).0,
            2.0,
            "item + index removal"
        );
        assert_eq!(
            write_cost(&IDEMPOTENCY, Some(&done), Some(&done), true).0,
            1.0,
            "a failed condition: the item only"
        );
    }

    #[test]
    fn a_body_is_billed_in_the_table_never_in_an_index() {
        let s = |t: &str| AttributeValue::S(t.into());
        let body = "x".repeat(3_000);
        let d = item(&[
            ("pk", s("ref#generic#p")),
            ("sk", s("1-a")),
            ("event_key", s("generic#e")),
            ("time_bucket", s("2026-12-02#1")),
            ("raw_body", s(&body)),
        ]);
        let (units, keys) = write_cost(&EVENTS, None, Some(&d), false);
        assert_eq!(keys[0].units, 3.0);
        assert_eq!(units, 5.0, "3 for the item, 1 per index it is in");
    }
}
