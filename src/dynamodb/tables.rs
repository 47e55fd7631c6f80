//! Creating tables from [`super::schema`]: idempotent, so `payhook tables create` can run on
//! every start of the demo.

use std::time::Duration;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, TableStatus, TimeToLiveSpecification,
};

use super::item::unavailable;
use super::schema::{TableDef, ALL};
use super::DynamoStore;
use crate::store::StoreError;

/// What `create_tables` did to one table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TableReport {
    pub table: String,
    pub created: bool,
    /// Whether TTL could be switched on (dynalite has no TTL API; DynamoDB and the template do).
    pub ttl: Option<bool>,
}

fn build_err(e: impl std::error::Error + Send + Sync + 'static, table: &str) -> StoreError {
    unavailable("CreateTable", table, e)
}

fn key(name: &str, kind: KeyType, table: &str) -> Result<KeySchemaElement, StoreError> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kind)
        .build()
        .map_err(|e| build_err(e, table))
}

fn attribute(name: &str, number: bool, table: &str) -> Result<AttributeDefinition, StoreError> {
    let kind = if number {
        ScalarAttributeType::N
    } else {
        ScalarAttributeType::S
    };
    AttributeDefinition::builder()
        .attribute_name(name)
        .attribute_type(kind)
        .build()
        .map_err(|e| build_err(e, table))
}

/// `INCLUDE` of the index's projected attributes, or `KEYS_ONLY`.
fn projection(ix: &super::schema::IndexDef) -> Projection {
    if ix.projected.is_empty() {
        return Projection::builder()
            .projection_type(ProjectionType::KeysOnly)
            .build();
    }
    let mut p = Projection::builder().projection_type(ProjectionType::Include);
    for a in ix.projected {
        p = p.non_key_attributes(*a);
    }
    p.build()
}

impl DynamoStore {
    /// Creates every table that does not exist yet and waits until each is ACTIVE.
    pub async fn create_tables(&self) -> Result<Vec<TableReport>, StoreError> {
        let mut reports = Vec::new();
        for def in ALL {
            reports.push(self.create_table(&def).await?);
        }
        Ok(reports)
    }

    async fn create_table(&self, def: &TableDef) -> Result<TableReport, StoreError> {
        let name = self.tables.name_of(def).to_owned();
        let mut attrs = vec![attribute(def.hash_key, false, &name)?];
        let mut req = self
            .client
            .create_table()
            .table_name(&name)
            .billing_mode(BillingMode::PayPerRequest)
            .key_schema(key(def.hash_key, KeyType::Hash, &name)?);
        if let Some(range) = def.range_key {
            attrs.push(attribute(range, false, &name)?);
            req = req.key_schema(key(range, KeyType::Range, &name)?);
        }
        for index in def.indexes {
            for (attr, number) in [
                (index.hash_key, false),
                (index.range_key, index.range_is_number),
            ] {
                if !attrs.iter().any(|a| a.attribute_name() == attr) {
                    attrs.push(attribute(attr, number, &name)?);
                }
            }
            let gsi = GlobalSecondaryIndex::builder()
                .index_name(index.name)
                .key_schema(key(index.hash_key, KeyType::Hash, &name)?)
                .key_schema(key(index.range_key, KeyType::Range, &name)?)
                .projection(projection(index))
                .build()
                .map_err(|e| build_err(e, &name))?;
            req = req.global_secondary_indexes(gsi);
        }
        let created = match req.set_attribute_definitions(Some(attrs)).send().await {
            Ok(_) => true,
            Err(e)
                if e.as_service_error().and_then(|s| s.code())
                    == Some("ResourceInUseException") =>
            {
                false
            }
            Err(e) => return Err(unavailable("CreateTable", &name, e)),
        };
        self.wait_active(&name).await?;
        let ttl = match def.ttl_attribute {
            Some(attr) => Some(self.enable_ttl(&name, attr).await),
            None => None,
        };
        Ok(TableReport {
            table: name,
            created,
            ttl,
        })
    }

    async fn wait_active(&self, name: &str) -> Result<(), StoreError> {
        for _ in 0..120 {
            let out = self
                .client
                .describe_table()
                .table_name(name)
                .send()
                .await
                .map_err(|e| unavailable("DescribeTable", name, e))?;
            if out.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(StoreError::Corrupt {
            table: name.to_owned(),
            key: "-".into(),
            reason: "table never became ACTIVE".into(),
        })
    }

    /// Best effort: dynalite has no TTL API, and expiry is never what correctness rests on
    /// (leases are compared by timestamp in conditions).
    async fn enable_ttl(&self, name: &str, attr: &str) -> bool {
        let spec = TimeToLiveSpecification::builder()
            .enabled(true)
            .attribute_name(attr)
            .build();
        let Ok(spec) = spec else { return false };
        match self
            .client
            .update_time_to_live()
            .table_name(name)
            .time_to_live_specification(spec)
            .send()
            .await
        {
            Ok(_) => true,
            Err(e) => {
                // Already enabled is success; anything else is reported, not fatal.
                let already = e
                    .as_service_error()
                    .and_then(|s| s.message())
                    .is_some_and(|m| m.contains("already enabled"));
                if !already {
                    tracing::debug!(table = name, error = %e, "TTL not enabled");
                }
                already
            }
        }
    }
}
