//! The claim table on DynamoDB: claim, take over, finalize, release, read. Each write is one
//! conditional statement; the item mapping sits beside the writes that use it.
//!
//! Item: `pk` = the key ([`storage_key`]: hashed past DynamoDB's 2,048 bytes), `status`
//! IN_PROGRESS | DONE, `owner`, `lease_expires_at_ms`, `fingerprint`, `response_status` +
//! `response_body` once DONE (or `answer` = `not_recorded` when the answer would not fit an
//! item), `open` (a sparse index's key) while IN_PROGRESS (`IN_PROGRESS#{shard}`),
//! `expires_at_s` (TTL), set once DONE.
//!
//! # Limits
//!
//! | DynamoDB's limit | what the table does |
//! |------------------|---------------------|
//! | a partition key of at most 2,048 bytes | a longer key is stored as its first 64 bytes, `#sha256:` and the SHA-256 of the whole key ([`storage_key`]); an empty key is refused before any call |
//! | an item of at most 400 KB | a finalize whose item would be larger (sized by DynamoDB's rules, every number at its largest: [`finalized_size`]) is stored as DONE with its status and `answer = not_recorded`; a duplicate gets [`ClaimOutcome::ReplayUnrecorded`] and nothing runs again. If DynamoDB still refuses the size, the same |
//! | TTL deletes expired items late (up to days) | a DONE claim past its `expires_at_s`, in the store's clock, is absent: [`ClaimTable::get`] says `None` and a claim replaces it |

use std::sync::Arc;

use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;

use crate::item::{condition_failed, n, s, sdk_failure, unavailable, Item, Reader};
use crate::protocol::{
    judge_existing, ClaimOutcome, ClaimRecord, ClaimState, Existing, FinalizeOutcome, Fingerprint,
    OwnerToken, StoredResponse,
};
use crate::{StoreClock, StoreError};

/// The `status` of a claim being worked on.
pub const IN_PROGRESS: &str = "IN_PROGRESS";
/// The `status` of a finished claim.
pub const DONE: &str = "DONE";
/// The sparse index over IN_PROGRESS claims (`open`, `lease_expires_at_ms`).
pub const OPEN_INDEX: &str = "open";
/// DynamoDB's largest partition key, in bytes.
pub const MAX_KEY_BYTES: usize = 2_048;
/// DynamoDB's largest item, in bytes (400 KB).
pub const MAX_ITEM_BYTES: usize = 409_600;
/// The readable part kept of a key too long to store as it is.
const KEPT_KEY_BYTES: usize = 64;
/// The `answer` of a DONE claim whose answer was too large to keep.
const NOT_RECORDED: &str = "not_recorded";

/// The partition key a claim key is stored under: itself up to [`MAX_KEY_BYTES`]; a longer one
/// as its first 64 bytes (cut at a character), `#sha256:`, and the SHA-256 of the whole key in
/// hex (2^-256 of a collision, and an operator still reads what it was about). The same key
/// maps to the same item in every process and version: a retry finds its claim.
pub fn storage_key(key: &str) -> std::borrow::Cow<'_, str> {
    use sha2::Digest;
    if key.len() <= MAX_KEY_BYTES {
        return std::borrow::Cow::Borrowed(key);
    }
    let mut cut = KEPT_KEY_BYTES;
    while !key.is_char_boundary(cut) {
        cut -= 1;
    }
    let digest = hex::encode(sha2::Sha256::digest(key.as_bytes()));
    std::borrow::Cow::Owned(format!("{}#sha256:{digest}", &key[..cut]))
}

/// The size DynamoDB counts for a claim item once finalized with `response`, every number
/// counted at its largest (an `i64`: 13 bytes with its sign), so the real item is never
/// larger: attribute names plus UTF-8 values, as DynamoDB sizes items.
pub fn finalized_size(
    key: &str,
    fingerprint: &Fingerprint,
    token: &OwnerToken,
    response: &StoredResponse,
) -> usize {
    const NUMBER_BYTES: usize = 13;
    let strings = [
        ("pk", storage_key(key).len()),
        ("status", DONE.len().max(IN_PROGRESS.len())),
        ("owner", token.as_str().len()),
        ("fingerprint", fingerprint.as_str().len()),
        ("response_body", response.body.len()),
    ];
    let numbers = [
        "lease_expires_at_ms",
        "created_at_ms",
        "updated_at_ms",
        "takeovers",
        "response_status",
        "expires_at_s",
    ];
    strings.iter().map(|(n, v)| n.len() + v).sum::<usize>()
        + numbers
            .iter()
            .map(|n| n.len() + NUMBER_BYTES)
            .sum::<usize>()
}

/// Rounds of put -> judge -> takeover before giving up with "in flight": only reached when other
/// attempts keep changing the item under us, which a retry later settles.
const CLAIM_ROUNDS: usize = 3;

/// Maps a claim item to its record.
pub fn record_of(item: &Item, table: &str) -> Result<ClaimRecord, StoreError> {
    let r = Reader::new(item, table);
    let key = r.str("pk")?.to_owned();
    let fingerprint = Fingerprint::from_stored(r.str("fingerprint")?.to_owned());
    let state = match r.str("status")? {
        IN_PROGRESS => ClaimState::InProgress {
            owner: OwnerToken::from_stored(r.str("owner")?.to_owned()),
            lease_expires_at_ms: r.num("lease_expires_at_ms")?,
        },
        DONE => {
            let status = u16::try_from(r.num("response_status")?)
                .map_err(|_| r.corrupt("response_status out of range"))?;
            if r.opt_str("answer") == Some(NOT_RECORDED) {
                ClaimState::DoneUnrecorded { status }
            } else {
                ClaimState::Done(StoredResponse {
                    status,
                    body: r.str("response_body")?.to_owned(),
                })
            }
        }
        other => return Err(r.corrupt(format!("unknown status {other}"))),
    };
    Ok(ClaimRecord {
        key,
        state,
        fingerprint,
    })
}

/// The shard of `key` among `shards` (FNV-1a): where its IN_PROGRESS claim sits in the `open`
/// index, so no index partition is written by every claim.
pub fn shard_of(key: &str, shards: u32) -> u32 {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    u32::try_from(hash % u64::from(shards.max(1))).unwrap_or(0)
}

/// One DynamoDB table of claims. Cheap to clone.
///
/// Times (leases, `updated_at_ms`, the TTL) are the store's own ([`StoreClock`]), never this
/// process's: a takeover judged by a machine whose clock is wrong would take a live lease.
#[derive(Clone, Debug)]
pub struct ClaimTable {
    client: Client,
    table: Arc<str>,
    clock: StoreClock,
    retention_s: i64,
    open_shards: u32,
}

impl ClaimTable {
    /// Claims in `table`, through `client` (rebuilt to learn DynamoDB's time from its answers).
    /// DONE claims are kept an hour (see [`ClaimTable::retention_s`]).
    pub fn new(client: &Client, table: impl Into<String>) -> Self {
        let clock = StoreClock::default();
        Self::with_clock(clock.attach(client), table, clock)
    }

    /// Claims through a `client` already feeding `clock` ([`StoreClock::attach`]), for a
    /// service whose other tables share the client and the clock. A client that does not feed
    /// it leaves the clock on this process's own time: attach it.
    pub fn with_clock(client: Client, table: impl Into<String>, clock: StoreClock) -> Self {
        ClaimTable {
            client,
            table: Arc::from(table.into()),
            clock,
            retention_s: 3_600,
            open_shards: 1,
        }
    }

    /// How long a DONE claim is kept (its `expires_at_s` TTL): it must outlive every retry of the
    /// same key. Until DynamoDB's TTL removes it, it is replayed.
    pub fn retention_s(mut self, retention_s: i64) -> Self {
        self.retention_s = retention_s.max(0);
        self
    }

    /// Spreads IN_PROGRESS claims over `shards` keys of the `open` index ([`shard_of`]).
    pub fn open_shards(mut self, shards: u32) -> Self {
        self.open_shards = shards.max(1);
        self
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.table
    }

    /// The store's clock, the one leases are written and judged in.
    pub fn clock(&self) -> &StoreClock {
        &self.clock
    }

    /// Claims `key` for `lease_ms`: one conditional `PutItem`; a duplicate learns from the
    /// claim it met (the `ALL_OLD` image, or a consistent read where the server gives none)
    /// what to do next, and an expired lease is taken over under a condition on its owner.
    pub async fn claim(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        lease_ms: i64,
    ) -> Result<ClaimOutcome, StoreError> {
        if key.is_empty() {
            return Err(self.refused("PutItem", "an empty key names nothing"));
        }
        let key = &*storage_key(key);
        // A cold process knows no server time yet, and a lease written in a wrong local clock
        // could be taken over while it lives: one read teaches the clock first.
        if self.clock.server_now_ms().is_none() {
            self.read(key).await?;
        }
        let token = OwnerToken::generate();
        for _ in 0..CLAIM_ROUNDS {
            let existing = match self.put_claim(key, fingerprint, &token, lease_ms).await? {
                Ok(()) => {
                    return Ok(ClaimOutcome::Claimed {
                        token,
                        took_over: false,
                    })
                }
                Err(Some(old)) => Some(old),
                // The server did not return the item that failed our condition: read it.
                Err(None) => self.read(key).await?,
            };
            // Gone between our put and our read: it was released, so claim again. Expired (a
            // DONE past its retention that TTL has not deleted yet): absent, and our put's
            // condition replaces it.
            let Some(existing) = existing.filter(|item| !self.expired(item)) else {
                continue;
            };
            let record = record_of(&existing, &self.table)?;
            match judge_existing(&record, fingerprint, self.clock.now_ms(), &token) {
                Existing::Decided(outcome) => return Ok(outcome),
                Existing::TakeOver { previous_owner } => {
                    if self
                        .take_over(key, &previous_owner, &token, lease_ms)
                        .await?
                    {
                        return Ok(ClaimOutcome::Claimed {
                            token,
                            took_over: true,
                        });
                    }
                    // Someone else took it over or finished it first: judge again.
                }
            }
        }
        Ok(ClaimOutcome::InFlight {
            retry_after_ms: 1_000,
        })
    }

    /// Marks the claim DONE with `response`, only if `token` still owns it and it is
    /// IN_PROGRESS. A condition that fails on our own DONE (the SDK resent a finalize whose reply
    /// was lost) is `Done`; on another owner's, `Superseded` with its answer if it finished.
    pub async fn finalize(
        &self,
        key: &str,
        token: &OwnerToken,
        response: &StoredResponse,
    ) -> Result<FinalizeOutcome, StoreError> {
        // Without the claim's fingerprint the item's size is not known here: DynamoDB's
        // refusal decides ([`ClaimTable::finalize_with`] decides before it, and writes a
        // vanished claim back).
        self.finalize_sized(key, token, response, None).await
    }

    /// [`ClaimTable::finalize`] knowing the claim's fingerprint, so an answer that would make
    /// the item larger than DynamoDB allows is stored as not recorded before DynamoDB refuses
    /// it ([`finalized_size`]). Without it, the size is judged by DynamoDB's refusal.
    pub async fn finalize_with(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        token: &OwnerToken,
        response: &StoredResponse,
    ) -> Result<FinalizeOutcome, StoreError> {
        self.finalize_sized(key, token, response, Some(fingerprint))
            .await
    }

    async fn finalize_sized(
        &self,
        key: &str,
        token: &OwnerToken,
        response: &StoredResponse,
        fingerprint: Option<&Fingerprint>,
    ) -> Result<FinalizeOutcome, StoreError> {
        let key = &*storage_key(key);
        let fits =
            fingerprint.is_none_or(|fp| finalized_size(key, fp, token, response) <= MAX_ITEM_BYTES);
        let result = if fits {
            match self.write_done(key, token, response, true).await {
                // Too large after all (an item carrying more than this table writes): the
                // effect happened, so finish it without its answer rather than leave it to run
                // again after the lease.
                Err(StoreError::Rejected {
                    why: crate::error::Rejection::TooLarge,
                    ..
                }) => self.write_done(key, token, response, false).await?,
                other => other?,
            }
        } else {
            self.write_done(key, token, response, false).await?
        };
        let old = match result {
            None => return Ok(FinalizeOutcome::Done),
            Some(Some(old)) => Some(old),
            Some(None) => self.read(key).await?,
        };
        let Some(old) = old else {
            // The claim is gone (deleted, or expired and removed): the effect happened, so the
            // answer is written back where the claim was, unless an attempt claimed it since.
            return self
                .done_in_place_of_nothing(key, token, response, fingerprint)
                .await;
        };
        self.judge_finalize(&old, token)
    }

    /// Marks the claim DONE with `response` (or as not recorded, `None`), only if `token`
    /// still owns it and it is IN_PROGRESS: `Ok(None)` written, `Ok(Some(old?))` the condition
    /// failed (with the item when the server returned it).
    async fn write_done(
        &self,
        key: &str,
        token: &OwnerToken,
        response: &StoredResponse,
        recorded: bool,
    ) -> Result<Option<Option<Item>>, StoreError> {
        let table = &*self.table;
        let now = self.clock.now_ms();
        let set = if recorded {
            "SET #status = :done, response_status = :rs, response_body = :rb, \
             updated_at_ms = :now, expires_at_s = :exp REMOVE #open"
        } else {
            "SET #status = :done, response_status = :rs, answer = :rb, \
             updated_at_ms = :now, expires_at_s = :exp REMOVE #open"
        };
        let result = self
            .client
            .update_item()
            .table_name(table)
            .key("pk", s(key))
            .update_expression(set)
            .condition_expression("#owner = :t AND #status = :inprog")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#open", "open")
            .expression_attribute_values(":t", s(token.as_str()))
            .expression_attribute_values(":inprog", s(IN_PROGRESS))
            .expression_attribute_values(":done", s(DONE))
            .expression_attribute_values(":rs", n(i64::from(response.status)))
            .expression_attribute_values(
                ":rb",
                s(if recorded {
                    response.body.as_str()
                } else {
                    NOT_RECORDED
                }),
            )
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":exp", n(expires_at_s(now, self.retention_s)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(None),
            Err(e) => condition_failed(e, "UpdateItem", table).map(Some),
        }
    }

    /// What a finalize whose condition failed on `old` comes to.
    fn judge_finalize(
        &self,
        old: &Item,
        token: &OwnerToken,
    ) -> Result<FinalizeOutcome, StoreError> {
        let table = &*self.table;
        // DONE under our own token: the SDK retried our finalize after its reply was lost.
        let r = Reader::new(old, table);
        if r.opt_str("owner") == Some(token.as_str()) && r.opt_str("status") == Some(DONE) {
            return Ok(FinalizeOutcome::Done);
        }
        // Not ours any more: a successor took over. Its answer stands if it finished.
        Ok(FinalizeOutcome::Superseded(
            match record_of(old, table)?.state {
                ClaimState::Done(resp) => Some(resp),
                _ => None,
            },
        ))
    }

    /// The claim vanished under a finished effect: writes it back DONE (one `PutItem` if the
    /// key is still absent), so duplicates replay instead of running the effect again. Without
    /// the fingerprint (plain [`ClaimTable::finalize`]) nothing can be written back safely: a
    /// duplicate must be compared with what ran, so the caller is told it was superseded.
    async fn done_in_place_of_nothing(
        &self,
        key: &str,
        token: &OwnerToken,
        response: &StoredResponse,
        fingerprint: Option<&Fingerprint>,
    ) -> Result<FinalizeOutcome, StoreError> {
        let Some(fingerprint) = fingerprint else {
            return Ok(FinalizeOutcome::Superseded(None));
        };
        let table = &*self.table;
        let now = self.clock.now_ms();
        let recorded = finalized_size(key, fingerprint, token, response) <= MAX_ITEM_BYTES;
        let mut put = self
            .client
            .put_item()
            .table_name(table)
            .item("pk", s(key))
            .item("status", s(DONE))
            .item("owner", s(token.as_str()))
            .item("lease_expires_at_ms", n(now))
            .item("fingerprint", s(fingerprint.as_str()))
            .item("created_at_ms", n(now))
            .item("updated_at_ms", n(now))
            .item("response_status", n(i64::from(response.status)))
            .item("expires_at_s", n(expires_at_s(now, self.retention_s)))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        put = if recorded {
            put.item("response_body", s(response.body.as_str()))
        } else {
            put.item("answer", s(NOT_RECORDED))
        };
        let old = match put.send().await {
            Ok(_) => return Ok(FinalizeOutcome::Done),
            Err(e) => match condition_failed(e, "PutItem", table)? {
                Some(old) => Some(old),
                None => self.read(key).await?,
            },
        };
        match old {
            Some(old) => self.judge_finalize(&old, token),
            None => Ok(FinalizeOutcome::Superseded(None)),
        }
    }

    /// A refusal of our own, before any call: what DynamoDB would refuse anyway.
    fn refused(&self, operation: &'static str, why: &str) -> StoreError {
        StoreError::Rejected {
            operation,
            table: self.table.to_string(),
            why: crate::error::Rejection::Invalid,
            source: Box::new(std::io::Error::other(why.to_owned())),
        }
    }

    /// A DONE claim past its retention by the store's clock: absent, whatever TTL has done.
    fn expired(&self, item: &Item) -> bool {
        let r = Reader::new(item, &self.table);
        let until = r.opt_num("expires_at_s").ok().flatten();
        r.opt_str("status") == Some(DONE)
            && until.is_some_and(|s| s.saturating_mul(1_000) <= self.clock.now_ms())
    }

    /// Deletes the claim, only if `token` still owns it and it is IN_PROGRESS. Only when no
    /// attempt did anything: after a takeover that means the caller judged it from what the
    /// store holds (an attempt that only knows *it* did nothing abandons instead,
    /// [`ClaimTable::abandon`]); never after an effect whose outcome is unknown. Returns whether
    /// it was ours to delete (`false` too when the SDK resent a delete whose reply was lost).
    pub async fn release(&self, key: &str, token: &OwnerToken) -> Result<bool, StoreError> {
        let key = &*storage_key(key);
        let table = &*self.table;
        let result = self
            .client
            .delete_item()
            .table_name(table)
            .key("pk", s(key))
            .condition_expression("#owner = :t AND #status = :inprog")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":t", s(token.as_str()))
            .expression_attribute_values(":inprog", s(IN_PROGRESS))
            .return_values(ReturnValue::None)
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) => condition_failed(e, "DeleteItem", table).map(|_| false),
        }
    }

    /// Reads a claim with a consistent read.
    /// A DONE claim past its retention is `None`, as if TTL had deleted it.
    pub async fn get(&self, key: &str) -> Result<Option<ClaimRecord>, StoreError> {
        if key.is_empty() {
            return Ok(None);
        }
        let item = self.read(&storage_key(key)).await?;
        item.filter(|i| !self.expired(i))
            .map(|i| record_of(&i, &self.table))
            .transpose()
    }

    async fn read(&self, key: &str) -> Result<Option<Item>, StoreError> {
        let table = &*self.table;
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key("pk", s(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk_failure("GetItem", table, e))?;
        Ok(out.item)
    }

    /// The fresh claim: one PutItem that succeeds only if the key was never claimed.
    async fn put_claim(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        token: &OwnerToken,
        lease_ms: i64,
    ) -> Result<Result<(), Option<Item>>, StoreError> {
        let table = &*self.table;
        let open = format!("{IN_PROGRESS}#{}", shard_of(key, self.open_shards));
        let now = self.clock.now_ms();
        let result = self
            .client
            .put_item()
            .table_name(table)
            .item("pk", s(key))
            .item("status", s(IN_PROGRESS))
            .item("open", s(open))
            .item("owner", s(token.as_str()))
            .item("lease_expires_at_ms", n(now.saturating_add(lease_ms)))
            .item("fingerprint", s(fingerprint.as_str()))
            .item("created_at_ms", n(now))
            .item("updated_at_ms", n(now))
            // No TTL until DONE (finalize sets it): a claim stuck IN_PROGRESS stays until
            // someone resumes it, so nothing it holds back can silently expire. A DONE claim
            // past its retention is absent (TTL deletes late): the put replaces it.
            .condition_expression(
                "attribute_not_exists(pk) OR (#status = :done AND expires_at_s <= :now_s)",
            )
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":done", s(DONE))
            .expression_attribute_values(":now_s", n(now.div_euclid(1_000)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Ok(())),
            Err(e) => Ok(Err(condition_failed(e, "PutItem", table)?)),
        }
    }

    /// Takes over an expired lease from `previous`. The condition repeats the facts we judged on
    /// (same owner, still IN_PROGRESS, lease expired by the clock now), so of two takers one wins.
    async fn take_over(
        &self,
        key: &str,
        previous: &OwnerToken,
        token: &OwnerToken,
        lease_ms: i64,
    ) -> Result<bool, StoreError> {
        let table = &*self.table;
        let now = self.clock.now_ms();
        let result = self
            .client
            .update_item()
            .table_name(table)
            .key("pk", s(key))
            .update_expression(
                "SET #owner = :t, lease_expires_at_ms = :lease, updated_at_ms = :now, \
                 takeovers = if_not_exists(takeovers, :zero) + :one",
            )
            .condition_expression(
                "#owner = :prev AND #status = :inprog AND lease_expires_at_ms <= :now",
            )
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":t", s(token.as_str()))
            .expression_attribute_values(":prev", s(previous.as_str()))
            .expression_attribute_values(":inprog", s(IN_PROGRESS))
            .expression_attribute_values(":lease", n(now.saturating_add(lease_ms)))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let old = match result {
            Ok(_) => return Ok(true),
            Err(e) => match condition_failed(e, "UpdateItem", table)? {
                Some(old) => Some(old),
                None => self.read(key).await?,
            },
        };
        // Ours already: the SDK resent a takeover whose reply was lost. It is still a takeover
        // (the caller must be told an earlier attempt came first).
        Ok(old.is_some_and(|item| {
            let r = Reader::new(&item, table);
            r.opt_str("owner") == Some(token.as_str()) && r.opt_str("status") == Some(IN_PROGRESS)
        }))
    }

    /// Gives an attempt's lease up without deleting the claim: for an attempt that took over
    /// and did nothing itself, since an earlier attempt's effect may exist. The next attempt
    /// takes over at once and is told `took_over`. Conditioned on `token` still owning it.
    pub async fn abandon(&self, key: &str, token: &OwnerToken) -> Result<bool, StoreError> {
        let key = &*storage_key(key);
        let table = &*self.table;
        let result = self
            .client
            .update_item()
            .table_name(table)
            .key("pk", s(key))
            .update_expression("SET lease_expires_at_ms = :zero")
            .condition_expression("#owner = :t AND #status = :inprog")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":t", s(token.as_str()))
            .expression_attribute_values(":inprog", s(IN_PROGRESS))
            .expression_attribute_values(":zero", n(0))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) => condition_failed(e, "UpdateItem", table).map(|_| false),
        }
    }
}

impl ClaimTable {
    /// Creates the table (on-demand, `pk`, the sparse `open` index) if it does not exist, and
    /// asks for TTL on `expires_at_s` where the server has it: for development and tests.
    /// Production tables come from the deployment template (see the README's schema).
    pub async fn create_if_missing(&self) -> Result<(), StoreError> {
        use aws_sdk_dynamodb::types::{
            AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType,
            Projection, ProjectionType, ScalarAttributeType, TimeToLiveSpecification,
        };
        let table = &*self.table;
        let attr = |name: &str, kind| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(kind)
                .build()
                .map_err(|e| unavailable("CreateTable", table, e))
        };
        let key = |name: &str, kind| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(kind)
                .build()
                .map_err(|e| unavailable("CreateTable", table, e))
        };
        let projection = Projection::builder()
            .projection_type(ProjectionType::Include)
            .set_non_key_attributes(Some(
                ["status", "owner", "fingerprint", "created_at_ms"]
                    .map(String::from)
                    .to_vec(),
            ))
            .build();
        let index = GlobalSecondaryIndex::builder()
            .index_name(OPEN_INDEX)
            .key_schema(key("open", KeyType::Hash)?)
            .key_schema(key("lease_expires_at_ms", KeyType::Range)?)
            .projection(projection)
            .build()
            .map_err(|e| unavailable("CreateTable", table, e))?;
        let created = self
            .client
            .create_table()
            .table_name(table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(attr("pk", ScalarAttributeType::S)?)
            .attribute_definitions(attr("open", ScalarAttributeType::S)?)
            .attribute_definitions(attr("lease_expires_at_ms", ScalarAttributeType::N)?)
            .key_schema(key("pk", KeyType::Hash)?)
            .global_secondary_indexes(index)
            .send()
            .await;
        if let Err(e) = created {
            let exists = e
                .as_service_error()
                .is_some_and(|s| s.is_resource_in_use_exception());
            if !exists {
                return Err(unavailable("CreateTable", table, e));
            }
        }
        self.wait_active().await?;
        let ttl = TimeToLiveSpecification::builder()
            .attribute_name("expires_at_s")
            .enabled(true)
            .build()
            .map_err(|e| unavailable("UpdateTimeToLive", table, e))?;
        // dynalite has no TTL: a DONE claim is then kept until deleted, which is only safer.
        let _ = self
            .client
            .update_time_to_live()
            .table_name(table)
            .time_to_live_specification(ttl)
            .send()
            .await;
        Ok(())
    }
}

impl ClaimTable {
    /// Waits (up to two minutes) until the table and its index are ACTIVE.
    async fn wait_active(&self) -> Result<(), StoreError> {
        use aws_sdk_dynamodb::types::{IndexStatus, TableStatus};
        let table = &*self.table;
        for _ in 0..240 {
            let out = self
                .client
                .describe_table()
                .table_name(table)
                .send()
                .await
                .map_err(|e| unavailable("DescribeTable", table, e))?;
            let Some(desc) = out.table else {
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                continue;
            };
            let indexes_active = desc
                .global_secondary_indexes()
                .iter()
                .all(|i| i.index_status() == Some(&IndexStatus::Active));
            if desc.table_status() == Some(&TableStatus::Active) && indexes_active {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        let late = std::io::Error::other("the table is not ACTIVE after two minutes");
        Err(unavailable("DescribeTable", table, late))
    }
}

/// Epoch seconds `retention_s` after `now_ms`: the value DynamoDB's TTL attribute wants.
pub fn expires_at_s(now_ms: i64, retention_s: i64) -> i64 {
    (now_ms / 1_000).saturating_add(retention_s)
}
