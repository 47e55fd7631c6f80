//! An SDK interceptor that counts DynamoDB requests by operation, and the bytes of their
//! responses. The benchmark reports requests per delivery with it and tests assert exact counts
//! (and that a duplicate's reads do not grow with its payment's life); the money path is the
//! same code with or without it (it only reads).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::{
    AfterDeserializationInterceptorContextRef, BeforeSerializationInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept};
use aws_sdk_dynamodb::operation::{
    create_table::CreateTableInput, delete_item::DeleteItemInput,
    describe_table::DescribeTableInput, get_item::GetItemInput, put_item::PutItemInput,
    query::QueryInput, scan::ScanInput, update_item::UpdateItemInput,
};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::Input;

/// The operation name of a request, from its input type.
fn operation(input: &Input) -> &'static str {
    macro_rules! by_type {
        ($($ty:ty => $name:literal),* $(,)?) => {
            $(if input.downcast_ref::<$ty>().is_some() { return $name; })*
        };
    }
    by_type!(
        PutItemInput => "PutItem", UpdateItemInput => "UpdateItem", DeleteItemInput => "DeleteItem",
        GetItemInput => "GetItem", QueryInput => "Query", ScanInput => "Scan",
        CreateTableInput => "CreateTable", DescribeTableInput => "DescribeTable",
    );
    "other"
}

/// Counts operations (one per call, however many retry attempts it took) and response bytes.
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
    bytes_in: Arc<std::sync::atomic::AtomicU64>,
}

impl RequestCounter {
    pub fn new() -> Self {
        RequestCounter::default()
    }

    /// Counts so far by operation name (`PutItem`, `GetItem`, …).
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }

    pub fn reset(&self) {
        if let Ok(mut c) = self.counts.lock() {
            c.clear();
        }
        self.bytes_in.store(0, std::sync::atomic::Ordering::Relaxed);
    }

    /// Bytes of every response body so far (each attempt's): what the SDK parsed.
    pub fn bytes_in(&self) -> u64 {
        self.bytes_in.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn get(&self, operation: &str) -> u64 {
        self.snapshot().get(operation).copied().unwrap_or(0)
    }

    /// Writes: PutItem + UpdateItem + DeleteItem.
    pub fn writes(&self) -> u64 {
        ["PutItem", "UpdateItem", "DeleteItem"]
            .iter()
            .map(|o| self.get(o))
            .sum()
    }

    /// Reads: GetItem + Query.
    pub fn reads(&self) -> u64 {
        ["GetItem", "Query"].iter().map(|o| self.get(o)).sum()
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "payhook.RequestCounter"
    }

    fn read_before_execution(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = operation(context.input()).to_owned();
        if let Ok(mut c) = self.counts.lock() {
            *c.entry(op).or_default() += 1;
        }
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _components: &aws_sdk_dynamodb::config::RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let bytes = context.response().body().bytes().map_or(0, <[u8]>::len);
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        self.bytes_in
            .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}
