//! The one definition of payhook's tables: names (from env), keys, indexes and TTL attributes.
//! `payhook tables create` builds tables from it and `payhook tables schema` prints it, which is
//! what the template check compares template.yaml against: no second list kept by hand.

use serde::Serialize;

/// A secondary index: every key attribute is a string except where `range_is_number`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct IndexDef {
    pub name: &'static str,
    pub hash_key: &'static str,
    pub range_key: &'static str,
    pub range_is_number: bool,
}

/// A table's shape. Key attributes are strings.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TableDef {
    /// Stable role name used in code and in the template's logical ids.
    pub role: &'static str,
    /// Environment variable carrying the physical name.
    pub env_var: &'static str,
    pub hash_key: &'static str,
    pub range_key: Option<&'static str>,
    pub indexes: &'static [IndexDef],
    pub ttl_attribute: Option<&'static str>,
}

pub const IDEMPOTENCY: TableDef = TableDef {
    role: "idempotency",
    env_var: "PAYHOOK_IDEMPOTENCY_TABLE",
    hash_key: "pk",
    range_key: None,
    // Sparse: only IN_PROGRESS claims carry `open`, so reconciliation finds stuck ones cheaply.
    indexes: &[IndexDef { name: "open", hash_key: "open", range_key: "lease_expires_at_ms", range_is_number: true }],
    ttl_attribute: Some("expires_at_s"),
};

pub const PAYMENTS: TableDef = TableDef {
    role: "payments",
    env_var: "PAYHOOK_PAYMENTS_TABLE",
    hash_key: "pk",
    range_key: None,
    // Sparse: only PENDING/PROCESSING payments carry `open`.
    indexes: &[IndexDef { name: "open", hash_key: "open", range_key: "updated_at_ms", range_is_number: true }],
    // Payments are financial records: no TTL.
    ttl_attribute: None,
};

pub const LEDGER: TableDef = TableDef {
    role: "ledger",
    env_var: "PAYHOOK_LEDGER_TABLE",
    hash_key: "pk",
    range_key: Some("sk"),
    indexes: &[],
    ttl_attribute: None,
};

pub const EVENTS: TableDef = TableDef {
    role: "events",
    env_var: "PAYHOOK_EVENTS_TABLE",
    hash_key: "pk",
    range_key: Some("sk"),
    indexes: &[
        IndexDef { name: "by_event", hash_key: "event_key", range_key: "sk", range_is_number: false },
        IndexDef { name: "by_time", hash_key: "time_bucket", range_key: "sk", range_is_number: false },
        IndexDef { name: "by_outcome", hash_key: "outcome_bucket", range_key: "sk", range_is_number: false },
    ],
    ttl_attribute: Some("expires_at_s"),
};

pub const ALL: [TableDef; 4] = [IDEMPOTENCY, PAYMENTS, LEDGER, EVENTS];

/// Physical table names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableNames {
    pub idempotency: String,
    pub payments: String,
    pub ledger: String,
    pub events: String,
}

impl TableNames {
    /// `{prefix}-idempotency`, … : the defaults use prefix `payhook`; tests use a unique prefix.
    pub fn with_prefix(prefix: &str) -> Self {
        TableNames {
            idempotency: format!("{prefix}-idempotency"),
            payments: format!("{prefix}-payments"),
            ledger: format!("{prefix}-ledger"),
            events: format!("{prefix}-events"),
        }
    }

    /// Reads each name from its table's env var, falling back to `payhook-{role}`.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Self {
        let defaults = TableNames::with_prefix("payhook");
        let pick = |def: &TableDef, fallback: String| get(def.env_var).filter(|v| !v.is_empty()).unwrap_or(fallback);
        TableNames {
            idempotency: pick(&IDEMPOTENCY, defaults.idempotency),
            payments: pick(&PAYMENTS, defaults.payments),
            ledger: pick(&LEDGER, defaults.ledger),
            events: pick(&EVENTS, defaults.events),
        }
    }

    pub fn name_of(&self, def: &TableDef) -> &str {
        match def.role {
            "idempotency" => &self.idempotency,
            "payments" => &self.payments,
            "ledger" => &self.ledger,
            _ => &self.events,
        }
    }
}
