//! The one definition of payhook's tables: names (from env), keys, indexes and TTL attributes.
//! `payhook tables create` builds tables from it and `payhook tables schema` prints it, which is
//! what the template check compares template.yaml against: no second list kept by hand.

use serde::Serialize;

/// A secondary index: every key attribute is a string except where `range_is_number`. Every GSI
/// write is another write of the projected item, so an index projects only what its queries
/// return (`INCLUDE` of these attributes besides the keys), never a raw body.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct IndexDef {
    pub name: &'static str,
    pub hash_key: &'static str,
    pub range_key: &'static str,
    pub range_is_number: bool,
    /// Non-key attributes projected (`INCLUDE`); empty means `KEYS_ONLY`.
    pub projected: &'static [&'static str],
}

/// What a delivery listing shows: everything a `Delivery` holds except its body, which is read
/// from the table when a replay needs it.
const LISTING: &[&str] = &[
    "provider",
    "event_id",
    "event_type",
    "key",
    "reference",
    "outcome",
    "http_status",
    "received_at_ms",
    "replay_of",
    "started_by",
    "redriven",
];

/// [`LISTING`] and a delivery's details (`eventlog::Details`) but its headers: what a row shows.
/// The older indexes keep [`LISTING`] (DynamoDB cannot change an index's projection in place);
/// their rows read the details in one batch per page.
const LISTING_AND_DETAILS: &[&str] = &[
    "provider",
    "event_id",
    "event_type",
    "key",
    "reference",
    "outcome",
    "http_status",
    "received_at_ms",
    "replay_of",
    "started_by",
    "redriven",
    "amount_minor",
    "currency",
    "account",
    "order_id",
];

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
    /// The DynamoDB stream the change events are read from (`StreamViewType`), if any. Only
    /// the deployed tables have it (template.yaml, checked against this); dynalite has no
    /// streams, so `payhook tables create` leaves it out.
    pub stream: Option<&'static str>,
}

pub const IDEMPOTENCY: TableDef = TableDef {
    role: "idempotency",
    env_var: "PAYHOOK_IDEMPOTENCY_TABLE",
    hash_key: "pk",
    range_key: None,
    // Sparse: only IN_PROGRESS claims carry `open` (`IN_PROGRESS#{shard}`, the shard from the
    // key, so no partition key is shared by every claim), so reconciliation finds stuck ones.
    indexes: &[IndexDef {
        name: "open",
        hash_key: "open",
        range_key: "lease_expires_at_ms",
        range_is_number: true,
        projected: &["status", "owner", "fingerprint", "created_at_ms"],
    }],
    ttl_attribute: Some("expires_at_s"),
    stream: None,
};

pub const PAYMENTS: TableDef = TableDef {
    role: "payments",
    env_var: "PAYHOOK_PAYMENTS_TABLE",
    hash_key: "pk",
    range_key: None,
    // Sparse: only PENDING/PROCESSING payments carry `open` (`{status}#{shard}`).
    indexes: &[IndexDef {
        name: "open",
        hash_key: "open",
        range_key: "updated_at_ms",
        range_is_number: true,
        projected: &[
            "provider",
            "reference",
            "status",
            "account",
            "amount_minor",
            "currency",
            "refunded_minor",
            "created_at_ms",
        ],
    }],
    // Payments are financial records: no TTL.
    ttl_attribute: None,
    // State changes (paid, failed, processing, refunded): a filter sees a transition only with
    // the old image beside the new.
    stream: Some("NEW_AND_OLD_IMAGES"),
};

pub const LEDGER: TableDef = TableDef {
    role: "ledger",
    env_var: "PAYHOOK_LEDGER_TABLE",
    hash_key: "pk",
    range_key: Some("sk"),
    indexes: &[],
    ttl_attribute: None,
    // Money movements: entries are inserted once, so the new image is all there is.
    stream: Some("NEW_IMAGE"),
};

pub const EVENTS: TableDef = TableDef {
    role: "events",
    env_var: "PAYHOOK_EVENTS_TABLE",
    hash_key: "pk",
    range_key: Some("sk"),
    indexes: &[
        // `{provider}#{event id}`: one event's deliveries.
        IndexDef {
            name: "by_event",
            hash_key: "event_key",
            range_key: "sk",
            range_is_number: false,
            projected: LISTING,
        },
        // `{day}#{shard}`: every delivery, spread over the layout's index shards.
        IndexDef {
            name: "by_time",
            hash_key: "time_bucket",
            range_key: "sk",
            range_is_number: false,
            projected: LISTING,
        },
        // `{outcome}#{day}#{shard}`, sparse: only outcomes someone must act on (failed, parked,
        // unassigned, conflict); the bulk (applied, replayed) is found through `by_time`.
        IndexDef {
            name: "by_outcome",
            hash_key: "outcome_bucket",
            range_key: "sk",
            range_is_number: false,
            projected: LISTING,
        },
        // `{provider}#{merchant order id}`, sparse: only deliveries whose payload carries one.
        // Written per order, so no key takes every delivery. Projects the details too: an
        // order's rows show amount and account without a second read.
        IndexDef {
            name: "by_order",
            hash_key: "order_key",
            range_key: "sk",
            range_is_number: false,
            projected: LISTING_AND_DETAILS,
        },
    ],
    ttl_attribute: Some("expires_at_s"),
    stream: None,
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
        let pick = |def: &TableDef, fallback: String| {
            get(def.env_var)
                .filter(|v| !v.is_empty())
                .unwrap_or(fallback)
        };
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
