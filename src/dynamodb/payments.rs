//! The payments table: one item per `(provider, reference)`, moved only by conditional writes
//! whose condition is the state machine's allowed sources.
//!
//! Item: `pk` = `{provider}#{reference}`, `status`, `account`, `amount_minor`, `currency`,
//! `refundable_minor`, `refunded_minor`, `refund_keys` and `reversed_refund_keys` (string sets),
//! `paid_key`, `ledger_shard`, `credit_at_ms`, `dispute_keys` (string set) and `disputed_minor`
//! (disputes' movements, written by `disputes.rs`), `history` (list; a dispute's entries carry
//! `amount_minor`), `open` (sparse index) while PENDING/PROCESSING, and while a claim held on
//! the payment (the credit's, or one refund's) is APPLYING (`POSTING#{shard}`).
//!
//! A credit's claim (#32), taken by the write that pays: `claim_state` APPLYING | DONE,
//! `claim_owner`, `claim_lease_ms` (the store's time), `claim_fp` (the facts' fingerprint),
//! `answer_status` + `answer_body` once DONE. The same protocol as the claims table. Each
//! refund's claim (#44) is one map attribute `rc#{key}`, taken by the refund's own write here
//! (`refund_to`) and moved on by `held_claims.rs`.
//!
//! Transaction bindings share the table: `pk` = `{provider}:txn:{transaction id}`, `reference`
//! (the provider name is followed by `:` there and by `#` in a payment's key, so they never meet).

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};

use super::item::{condition_failed, n, s, unavailable, Item, Reader};
pub(super) use super::payment_item::POSTING;
use super::payment_item::{
    claim_of, history_entry, totals_condition, ClaimFields, Overlay, Taking, APPLYING, DONE,
    WRITE_ROUNDS,
};
use super::DynamoStore;
use crate::domain::{
    AccountId, Currency, IdempotencyKey, Money, PaymentFacts, PaymentStatus, ProviderId, Reference,
    RefundFacts, StateFacts,
};
use crate::idempotency::{ClaimState, FinalizeOutcome, OwnerToken, StoredResponse};
use crate::payments::parked::{Binding, ParkOutcome, ParkedDebit, TransactionPark};
use crate::payments::{
    judge_paid, judge_refund, judge_reversal, judge_state, mismatch, ExpectedPayment, HistoryEntry,
    NewCredit, PaidJudgement, PaidOutcome, PaymentRecord, Payments, RefundJudgement, RefundOutcome,
    RefundWrite, RegisterOutcome, ReversalJudgement, ReversalOutcome, ReversalWrite, StateOutcome,
};
use crate::payments::{HeldMove, HostClaim, Hosted, NewHostClaim};
use crate::store::StoreError;

/// Whether `payment`'s credit claim is APPLYING under `token`.
fn held_by(payment: Option<&PaymentRecord>, token: &OwnerToken) -> bool {
    payment
        .and_then(|p| p.claim.as_ref())
        .is_some_and(|c| matches!(&c.state, ClaimState::InProgress { owner, .. } if owner == token))
}

/// Whether `payment`'s credit claim was last owned by `token` (the owner stays once DONE).
fn old_owner_is(payment: Option<&PaymentRecord>, token: &OwnerToken) -> bool {
    payment
        .and_then(|p| p.claim.as_ref())
        .is_some_and(|c| &c.owner == token)
}

/// The credit's claim: top-level attributes of the payment item.
const CREDIT_CLAIM: ClaimFields = ClaimFields {
    state: "claim_state",
    owner: "claim_owner",
    lease: "claim_lease_ms",
    fingerprint: "claim_fp",
    answer_status: "answer_status",
    answer_body: "answer_body",
};

/// The credit's claim held on a payment item, if it has one.
fn host_claim(r: &Reader<'_>) -> Result<Option<HostClaim>, StoreError> {
    claim_of(r, &CREDIT_CLAIM)
}

pub(super) fn pk(provider: ProviderId, reference: &Reference) -> AttributeValue {
    s(format!("{provider}#{reference}"))
}

fn history(status: PaymentStatus, note: &str, at_ms: i64) -> AttributeValue {
    history_entry(status, note, at_ms, None, None)
}

/// Keys as stored in a string set.
fn keys(stored: Vec<String>) -> Vec<IdempotencyKey> {
    stored
        .into_iter()
        .map(IdempotencyKey::from_stored)
        .collect()
}

/// How much of a payment item a read keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum View {
    /// All of it: the payment as the console, the API and the judges of refunds and disputes
    /// read it.
    Whole,
    /// What a credit, its claim and the debits parked before it need ([`CREDIT_FIELDS`]):
    /// never the history, the disputes or the dispute keys, which grow with every refund and
    /// dispute; the refund key sets only when debits are parked (`parked::to_take` reads them).
    /// So a credit's duplicate costs the same on a payment's first day and after its 50th
    /// refund. [`PaidOutcome`](crate::payments::PaidOutcome)'s records are read this way.
    Credit,
}

/// The attributes [`View::Credit`] keeps, as a projection (`#reference`, `#status` named).
/// Not the refund key sets: a read that finds debits parked reads the item again, whole.
const CREDIT_FIELDS: &str = "pk, provider, #reference, #status, account, amount_minor, currency, \
     refunded_minor, paid_key, disputed_minor, parked_debits, \
     ledger_shard, credit_at_ms, claim_state, claim_owner, claim_lease_ms, claim_fp, \
     answer_status, answer_body, created_at_ms, updated_at_ms";

fn history_of(r: &Reader<'_>, table: &str) -> Result<Vec<HistoryEntry>, StoreError> {
    r.list("history")
        .iter()
        .filter_map(|v| v.as_m().ok())
        .map(|m| {
            let h = Reader::new(m, table);
            Ok(HistoryEntry {
                at_ms: h.num("at_ms")?,
                status: h.parsed("status", |t| PaymentStatus::parse(t).ok_or(()))?,
                note: h.str("note")?.to_owned(),
                amount_minor: h.opt_num("amount_minor")?,
                debit_minor: h.opt_num("debit_minor")?,
            })
        })
        .collect()
}

pub(super) fn to_record(item: &Item, table: &str) -> Result<PaymentRecord, StoreError> {
    to_view(item, table, View::Whole)
}

fn to_view(item: &Item, table: &str, view: View) -> Result<PaymentRecord, StoreError> {
    let r = Reader::new(item, table);
    let whole = view == View::Whole;
    let history = if whole {
        history_of(&r, table)?
    } else {
        Vec::new()
    };
    let disputes = crate::payments::disputes::disputes_of(&history);
    let parked_debits: Vec<ParkedDebit> = r
        .str_set("parked_debits")
        .iter()
        .filter_map(|t| ParkedDebit::parse(t))
        .collect();
    let refund_sets = whole || !parked_debits.is_empty();
    let set = |name: &str, read: bool| {
        if read {
            keys(r.str_set(name))
        } else {
            Vec::new()
        }
    };
    Ok(PaymentRecord {
        provider: r.parsed("provider", |t| ProviderId::parse(t).ok_or(()))?,
        reference: r.parsed("reference", Reference::parse)?,
        status: r.parsed("status", |t| PaymentStatus::parse(t).ok_or(()))?,
        account: r
            .opt_str("account")
            .map(AccountId::parse)
            .transpose()
            .map_err(|_| r.corrupt("account"))?,
        amount_minor: r.opt_num("amount_minor")?,
        currency: r
            .opt_str("currency")
            .map(Currency::parse)
            .transpose()
            .map_err(|_| r.corrupt("currency"))?,
        refunded_minor: r.opt_num("refunded_minor")?.unwrap_or(0),
        refund_keys: set("refund_keys", refund_sets),
        reversed_refund_keys: set("reversed_refund_keys", refund_sets),
        paid_key: r
            .opt_str("paid_key")
            .map(|k| IdempotencyKey::from_stored(k.to_owned())),
        dispute_keys: set("dispute_keys", whole),
        disputed_minor: r.opt_num("disputed_minor")?.unwrap_or(0),
        parked_debits,
        disputes,
        ledger_shard: r
            .opt_num("ledger_shard")?
            .map(|v| u32::try_from(v).map_err(|_| r.corrupt("ledger_shard out of range")))
            .transpose()?,
        credit_at_ms: r.opt_num("credit_at_ms")?,
        claim: host_claim(&r)?,
        held_claims: if whole {
            super::payment_item::held_claims_of(item, table)?
        } else {
            Default::default()
        },
        posting: r.opt_str("open").is_some_and(|o| o.starts_with(POSTING)),
        history,
        created_at_ms: r.opt_num("created_at_ms")?.unwrap_or(0),
        updated_at_ms: r.opt_num("updated_at_ms")?.unwrap_or(0),
    })
}

/// `attribute_not_exists(a) OR a = :v` for each money field the event carries, so a payment
/// registered with other money fails the transition's own condition.
fn money_guard(
    mut update: UpdateItemFluentBuilder,
    account: Option<&AccountId>,
    money: Option<&Money>,
) -> (
    UpdateItemFluentBuilder,
    Vec<&'static str>,
    Vec<&'static str>,
) {
    let mut conds = Vec::new();
    let mut sets = Vec::new();
    if let Some(a) = account {
        update = update.expression_attribute_values(":acct", s(a.as_str()));
        conds.push("(attribute_not_exists(account) OR account = :acct)");
        sets.push("account = if_not_exists(account, :acct)");
    }
    if let Some(m) = money {
        update = update
            .expression_attribute_values(":amt", n(m.amount.get()))
            .expression_attribute_values(":cur", s(m.currency.as_str()));
        conds.push("(attribute_not_exists(amount_minor) OR amount_minor = :amt)");
        conds.push("(attribute_not_exists(currency) OR currency = :cur)");
        sets.push("amount_minor = if_not_exists(amount_minor, :amt)");
        sets.push("currency = if_not_exists(currency, :cur)");
    }
    (update, conds, sets)
}

/// What a PAID write sets besides its claim and history ([`Overlay`]): the same parts, in the
/// same order, as the `SET` of `paid_write`, so the payment after the write is known without
/// reading it back.
fn paid_overlay(
    provider: ProviderId,
    facts: &PaymentFacts,
    key: &IdempotencyKey,
    account: Option<&AccountId>,
    now: i64,
    shard: u32,
) -> Overlay {
    let mut image = Overlay::default();
    image.set("status", s(PaymentStatus::Paid.as_str()));
    image.set("provider", s(provider.as_str()));
    image.set("reference", s(facts.reference.as_str()));
    if let Some(a) = account {
        image.if_not_exists("account", s(a.as_str()));
    }
    image.if_not_exists("amount_minor", n(facts.money.amount.get()));
    image.if_not_exists("currency", s(facts.money.currency.as_str()));
    image.set("refundable_minor", n(facts.money.amount.get()));
    image.set("refunded_minor", n(0));
    image.set("paid_key", s(key.as_str()));
    image.if_not_exists("ledger_shard", n(i64::from(shard)));
    image.set("credit_at_ms", n(now));
    image.if_not_exists("created_at_ms", n(now));
    image.set("updated_at_ms", n(now));
    image
}

/// `#status IN (:s0, :s1…)` for the sources of a transition.
fn status_in(
    mut update: UpdateItemFluentBuilder,
    sources: &[PaymentStatus],
) -> (UpdateItemFluentBuilder, String) {
    let names: Vec<String> = (0..sources.len()).map(|i| format!(":src{i}")).collect();
    for (name, status) in names.iter().zip(sources) {
        update = update.expression_attribute_values(name, s(status.as_str()));
    }
    (update, format!("#status IN ({})", names.join(", ")))
}

/// The update and condition of a state move. A payment may first be heard of by a state event,
/// so the SETs create what a registration would (`if_not_exists`), and the condition admits a
/// missing item as well as the transition's sources.
fn state_move_expressions(
    to: PaymentStatus,
    sources: &str,
    money_conds: Vec<&'static str>,
    money_sets: Vec<&'static str>,
) -> (String, String) {
    // PROCESSING stays open for reconciliation; FAILED is terminal and leaves the index.
    let open = if to == PaymentStatus::Processing {
        "SET #open = :openv"
    } else {
        "REMOVE #open"
    };
    let mut sets = vec![
        "#status = :to",
        "provider = :prov",
        "#reference = :ref",
        "refunded_minor = if_not_exists(refunded_minor, :zero)",
        "refundable_minor = if_not_exists(refundable_minor, :zero)",
        "created_at_ms = if_not_exists(created_at_ms, :now)",
        "updated_at_ms = :now",
        "history = list_append(if_not_exists(history, :empty), :h)",
    ];
    sets.extend(money_sets);
    let mut conds = vec![format!("(attribute_not_exists(pk) OR {sources})")];
    conds.extend(money_conds.into_iter().map(str::to_owned));
    let (set_open, remove_open) = match open.strip_prefix("SET ") {
        Some(set) => (format!(", {set}"), String::new()),
        None => (String::new(), format!(" {open}")),
    };
    (
        format!("SET {}{set_open}{remove_open}", sets.join(", ")),
        conds.join(" AND "),
    )
}

/// What a registration refused because the payment exists means. A repeat of the same
/// expectation is `Exists`; other account or money is a `Mismatch`, never an overwrite, since
/// what a payment is expected to be is set once. A payment a webhook made without an account
/// gets one (`Fill`): absent is not a match, or its unassigned success could never be credited.
enum Registered {
    Decided(RegisterOutcome),
    Fill(PaymentRecord),
}

fn already_registered(
    existing: Option<PaymentRecord>,
    expected: &ExpectedPayment,
    table: &str,
) -> Result<Registered, StoreError> {
    let Some(existing) = existing else {
        return Err(StoreError::Corrupt {
            table: table.to_owned(),
            key: expected.reference.to_string(),
            reason: "condition failed on a missing item".into(),
        });
    };
    Ok(
        match mismatch(&existing, Some(&expected.account), Some(&expected.money)) {
            Some(m) => Registered::Decided(RegisterOutcome::Mismatch(m, existing)),
            None if existing.account.is_none() => Registered::Fill(existing),
            None => Registered::Decided(RegisterOutcome::Exists(existing)),
        },
    )
}

impl DynamoStore {
    /// The payment a registration just created, read back so the caller gets the record as
    /// stored (with its defaults and history), the same shape every other answer carries.
    async fn registered(&self, expected: &ExpectedPayment) -> Result<RegisterOutcome, StoreError> {
        self.read_payment(expected.provider, &expected.reference)
            .await?
            .map(RegisterOutcome::Created)
            .ok_or_else(|| StoreError::Corrupt {
                table: self.tables.payments.clone(),
                key: expected.reference.to_string(),
                reason: "registered payment vanished".into(),
            })
    }

    /// The `open` index key of a PENDING/PROCESSING payment: `{status}#{shard}`, the shard from
    /// the payment's key, so no index key is shared by every open payment.
    async fn open_key(
        &self,
        status: PaymentStatus,
        provider: ProviderId,
        reference: &Reference,
    ) -> Result<String, StoreError> {
        let layout = crate::ledger::Ledger::placement_layout(self).await?;
        Ok(format!(
            "{status}#{}",
            layout.index_shard(&format!("{provider}#{reference}"))
        ))
    }

    pub(super) async fn read_payment(
        &self,
        provider: ProviderId,
        reference: &Reference,
    ) -> Result<Option<PaymentRecord>, StoreError> {
        self.read_view(provider, reference, View::Whole).await
    }

    /// A consistent read of the payment as `view` sees it: for [`View::Credit`] only
    /// [`CREDIT_FIELDS`], unless debits are parked on it (then the item again, whole: the
    /// credit takes them first and needs the refund key sets; a rare payment, read twice).
    async fn read_view(
        &self,
        provider: ProviderId,
        reference: &Reference,
        view: View,
    ) -> Result<Option<PaymentRecord>, StoreError> {
        let table = &self.tables.payments;
        let mut item = self.get_payment(provider, reference, view).await?;
        let parked = |i: &Item| {
            i.get("parked_debits")
                .is_some_and(|v| v.as_ss().is_ok_and(|s| !s.is_empty()))
        };
        if view == View::Credit && item.as_ref().is_some_and(parked) {
            item = self.get_payment(provider, reference, View::Whole).await?;
        }
        item.map(|i| to_view(&i, table, view)).transpose()
    }

    async fn get_payment(
        &self,
        provider: ProviderId,
        reference: &Reference,
        view: View,
    ) -> Result<Option<Item>, StoreError> {
        let table = &self.tables.payments;
        let get = self
            .client
            .get_item()
            .table_name(table)
            .key("pk", pk(provider, reference))
            .consistent_read(true);
        let get = match view {
            View::Whole => get,
            View::Credit => get
                .projection_expression(CREDIT_FIELDS)
                .expression_attribute_names("#reference", "reference")
                .expression_attribute_names("#status", "status"),
        };
        let out = get
            .send()
            .await
            .map_err(|e| unavailable("GetItem", table, e))?;
        Ok(out.item)
    }

    /// Sends a conditional update; `Ok(Ok(new))` on success, `Ok(Err(old))` when the condition
    /// failed (old read back if the server did not return it).
    pub(super) async fn conditional_update(
        &self,
        update: UpdateItemFluentBuilder,
        provider: ProviderId,
        reference: &Reference,
    ) -> Result<Result<PaymentRecord, Option<PaymentRecord>>, StoreError> {
        self.update_viewed(update, provider, reference, View::Whole)
            .await
    }

    /// [`Self::conditional_update`], both images read as `view`.
    async fn update_viewed(
        &self,
        update: UpdateItemFluentBuilder,
        provider: ProviderId,
        reference: &Reference,
        view: View,
    ) -> Result<Result<PaymentRecord, Option<PaymentRecord>>, StoreError> {
        let table = &self.tables.payments;
        let result = update
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(out) => {
                let item = out.attributes.ok_or_else(|| StoreError::Corrupt {
                    table: table.clone(),
                    key: format!("{provider}#{reference}"),
                    reason: "update returned no item".into(),
                })?;
                Ok(Ok(to_view(&item, table, view)?))
            }
            Err(e) => self.failed_image(e, provider, reference, view).await,
        }
    }

    /// A credit's first write: on success the payment is the item it replaced (`ALL_OLD`,
    /// empty for a new payment) with `image` applied, read as [`View::Credit`]; on a failed
    /// condition, the item it met, as [`update_viewed`](Self::update_viewed) gives it.
    async fn update_overlaid(
        &self,
        update: UpdateItemFluentBuilder,
        image: Overlay,
        provider: ProviderId,
        reference: &Reference,
    ) -> Result<Result<PaymentRecord, Option<PaymentRecord>>, StoreError> {
        let result = update
            .return_values(ReturnValue::AllOld)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(out) => {
                let item = image.apply(out.attributes.unwrap_or_default());
                Ok(Ok(to_view(&item, &self.tables.payments, View::Credit)?))
            }
            Err(e) => {
                self.failed_image(e, provider, reference, View::Credit)
                    .await
            }
        }
    }

    /// The item a failed conditional update met: the server's `ALL_OLD`, else a consistent read.
    pub(super) async fn failed_image<T>(
        &self,
        e: aws_sdk_dynamodb::error::SdkError<
            aws_sdk_dynamodb::operation::update_item::UpdateItemError,
            aws_smithy_runtime_api::http::Response,
        >,
        provider: ProviderId,
        reference: &Reference,
        view: View,
    ) -> Result<Result<T, Option<PaymentRecord>>, StoreError> {
        let table = &self.tables.payments;
        match condition_failed(e, "UpdateItem", table)? {
            Some(old) => Ok(Err(Some(to_view(&old, table, view)?))),
            None => Ok(Err(self.read_view(provider, reference, view).await?)),
        }
    }

    /// A write of a claim held on a payment alone (takeover, finalize, giving up): nothing read
    /// back on success, the item as `view` when the condition failed (a credit's claim needs
    /// [`View::Credit`]; another movement's claim is an attribute named by its key, so
    /// [`View::Whole`]).
    pub(super) async fn claim_write(
        &self,
        update: UpdateItemFluentBuilder,
        provider: ProviderId,
        reference: &Reference,
        view: View,
    ) -> Result<Result<(), Option<PaymentRecord>>, StoreError> {
        let result = update
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Ok(())),
            Err(e) => self.failed_image(e, provider, reference, view).await,
        }
    }

    /// An update of a payment's credit claim alone (names and values as each write needs).
    pub(super) fn claim_update(
        &self,
        provider: ProviderId,
        reference: &Reference,
    ) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.tables.payments)
            .key("pk", pk(provider, reference))
    }

    pub(super) fn payment_update(
        &self,
        provider: ProviderId,
        reference: &Reference,
        now: i64,
    ) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.tables.payments)
            .key("pk", pk(provider, reference))
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":empty", AttributeValue::L(Vec::new()))
    }

    /// One PAID write: from absent/PENDING/PROCESSING, or (`recover`) from FAILED. Records the
    /// key that paid it and where its ledger entries live, in the same conditional write.
    async fn paid_write(
        &self,
        provider: ProviderId,
        facts: &PaymentFacts,
        key: &IdempotencyKey,
        new: NewCredit<'_>,
        recover: bool,
    ) -> Result<Result<PaymentRecord, Option<PaymentRecord>>, StoreError> {
        let now = self.clock.now_ms();
        let paid = PaymentStatus::Paid;
        let update = self.payment_update(provider, &facts.reference, now);
        let (update, money_conds, mut sets) =
            money_guard(update, facts.account.as_ref(), Some(&facts.money));
        let mut conds: Vec<String> = money_conds.into_iter().map(str::to_owned).collect();
        // No account in the event: the payment's own, else the default, else nothing moves.
        let update = match (facts.account.as_ref(), new.default_account) {
            (Some(_), _) => update,
            (None, Some(default)) => {
                sets.push("account = if_not_exists(account, :acct)");
                update.expression_attribute_values(":acct", s(default.as_str()))
            }
            (None, None) => {
                conds.push("attribute_exists(account)".to_owned());
                update
            }
        };
        let (update, sources, note) = if recover {
            let (u, src) = status_in(update, &[PaymentStatus::Failed]);
            (u, src, format!("recovered from FAILED: {key}"))
        } else {
            let (u, src) = status_in(update, &[PaymentStatus::Pending, PaymentStatus::Processing]);
            (
                u,
                format!("(attribute_not_exists(pk) OR {src})"),
                key.to_string(),
            )
        };
        conds.insert(0, sources);
        let account = facts.account.as_ref().or(new.default_account);
        let mut image = paid_overlay(provider, facts, key, account, now, new.shard);
        // The credit's claim, in the same write: nobody else holds it (`claim_state` absent),
        // and the payment is listed under `POSTING#{shard}` until the claim is DONE.
        let (update, open) = match new.claim {
            Some(claim) => {
                conds.push("attribute_not_exists(claim_state)".to_owned());
                sets.push(
                    "claim_state = :applying, claim_owner = :tok, claim_lease_ms = :lease, \
                     claim_fp = :fp, #open = :posting",
                );
                let layout = crate::ledger::Ledger::placement_layout(self).await?;
                let posting = s(format!("{POSTING}#{}", layout.index_shard(key.as_str())));
                let (tok, fp) = (s(claim.token.as_str()), s(claim.fingerprint.as_str()));
                let lease = n(now.saturating_add(claim.lease_ms));
                image.set("claim_state", s(APPLYING));
                image.set("claim_owner", tok.clone());
                image.set("claim_lease_ms", lease.clone());
                image.set("claim_fp", fp.clone());
                image.set("open", posting.clone());
                let update = update
                    .expression_attribute_values(":applying", s(APPLYING))
                    .expression_attribute_values(":tok", tok)
                    .expression_attribute_values(":lease", lease)
                    .expression_attribute_values(":fp", fp)
                    .expression_attribute_values(":posting", posting);
                (update, "")
            }
            None => {
                image.remove("open");
                (update, " REMOVE #open")
            }
        };
        let entry = history(paid, &note, now);
        image.append("history", &entry);
        let update = update
            .update_expression(format!(
                "SET #status = :to, provider = :prov, #reference = :ref, {}, \
                 refundable_minor = :amt, refunded_minor = :zero, paid_key = :key, \
                 ledger_shard = if_not_exists(ledger_shard, :shard), credit_at_ms = :now, \
                 created_at_ms = if_not_exists(created_at_ms, :now), updated_at_ms = :now, \
                 history = list_append(if_not_exists(history, :empty), :h){open}",
                sets.join(", ")
            ))
            .condition_expression(conds.join(" AND "))
            .expression_attribute_names("#open", "open")
            .expression_attribute_names("#reference", "reference")
            .expression_attribute_values(":to", s(paid.as_str()))
            .expression_attribute_values(":prov", s(provider.as_str()))
            .expression_attribute_values(":ref", s(facts.reference.as_str()))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":key", s(key.as_str()))
            .expression_attribute_values(":shard", n(i64::from(new.shard)))
            .expression_attribute_values(":h", entry);
        self.update_overlaid(update, image, provider, &facts.reference)
            .await
    }

    /// One refund attempt as `aim` says: REFUNDED needs the remainder to equal the refund,
    /// PARTIALLY_REFUNDED needs it to exceed it. DynamoDB conditions cannot add, so the remainder
    /// is stored (`refundable_minor`) and compared directly. On a payment whose refunds repeat
    /// its disputes the write is also conditioned on the totals the judge read, and a paired
    /// refund (its money left with a withdrawal) records itself without taking the remainder.
    pub(super) async fn refund_to(
        &self,
        provider: ProviderId,
        facts: &RefundFacts,
        key: &IdempotencyKey,
        aim: RefundWrite,
        claim: Option<&Taking<'_>>,
    ) -> Result<Result<PaymentRecord, Option<PaymentRecord>>, StoreError> {
        let now = self.clock.now_ms();
        let amount = facts.money.amount.get();
        let paired = aim.pair.is_some_and(|g| g.paired);
        // Any paid status: the remainder decides, not the status. A REFUNDED payment can hold a
        // remainder again (a won dispute's reinstatement gives its money back to it).
        let statuses = "(:paid, :partial, :refunded)";
        let (take, remainder) = if paired {
            ("", String::new())
        } else if aim.repeats_withdrawal {
            // Conditioned on the totals the judge read (`totals`), not on the remainder.
            ("refundable_minor = :zero, ", String::new())
        } else if aim.target == PaymentStatus::Refunded {
            (
                "refundable_minor = refundable_minor - :amt, ",
                " AND refundable_minor = :amt".to_owned(),
            )
        } else {
            (
                "refundable_minor = refundable_minor - :amt, ",
                " AND refundable_minor > :amt".to_owned(),
            )
        };
        let totals = aim.pair.map_or(String::new(), |g| totals_condition(&g));
        // The amount and decision are kept only where pairing reads them back.
        let (h_amount, h_debit) = match aim.pair {
            Some(g) => (Some(amount), Some(g.debit_minor(amount))),
            None => (None, None),
        };
        // The refund's claim, in the same write (#44).
        let (claim_set, claim_cond) = Taking::clauses(claim);
        let mut update = self
            .payment_update(provider, &facts.payment_reference, now)
            .update_expression(format!(
                "SET #status = :to, {take}refunded_minor = refunded_minor + :amt, updated_at_ms = :now, \
                 history = list_append(if_not_exists(history, :empty), :h){claim_set} ADD refund_keys :keys"
            ))
            .condition_expression(format!(
                "attribute_exists(pk) AND #status IN {statuses} AND currency = :cur \
                 AND NOT contains(refund_keys, :key) AND NOT contains(reversed_refund_keys, :key){remainder}{totals}{claim_cond}"
            ))
            .expression_attribute_values(":to", s(aim.target.as_str()))
            .expression_attribute_values(":amt", n(amount))
            .expression_attribute_values(":cur", s(facts.money.currency.as_str()))
            .expression_attribute_values(":key", s(key.as_str()))
            .expression_attribute_values(":keys", AttributeValue::Ss(vec![key.to_string()]))
            .expression_attribute_values(":paid", s(PaymentStatus::Paid.as_str()))
            .expression_attribute_values(":partial", s(PaymentStatus::PartiallyRefunded.as_str()))
            .expression_attribute_values(":refunded", s(PaymentStatus::Refunded.as_str()))
            .expression_attribute_values(
                ":h",
                history_entry(aim.target, key.as_str(), now, h_amount, h_debit),
            );
        if aim.repeats_withdrawal {
            update = update.expression_attribute_values(":zero", n(0));
        }
        if let Some(taking) = claim {
            update = taking.bind(update, now);
        }
        if let Some(g) = aim.pair {
            update = update
                .expression_attribute_values(":r0", n(g.refunded_minor))
                .expression_attribute_values(":d0", n(g.disputed_minor));
        }
        self.conditional_update(update, provider, &facts.payment_reference)
            .await
    }
}

impl DynamoStore {
    /// One reversal write: `Restore` gives an applied refund back (the refunded total must cover
    /// it, and the status follows what remains refunded); `Void` records a refund never applied.
    /// Either way the refund key joins `reversed_refund_keys` in the same write, so a reversal
    /// applies once and a voided refund's late success finds it.
    pub(super) async fn reversal_write(
        &self,
        provider: ProviderId,
        facts: &RefundFacts,
        refund_key: &IdempotencyKey,
        write: ReversalWrite,
        claim: Option<&Taking<'_>>,
    ) -> Result<Result<PaymentRecord, Option<PaymentRecord>>, StoreError> {
        // A void may meet a payment not paid yet, whose credit's write would list its own claim
        // over the void's `open` entry: a void claims in the claims table, never here.
        if write == ReversalWrite::Void && claim.is_some() {
            return Err(StoreError::Corrupt {
                table: self.tables.payments.clone(),
                key: refund_key.to_string(),
                reason: "a void aimed to take its claim on its payment".into(),
            });
        }
        let now = self.clock.now_ms();
        // The reversal's claim, in the same write (#44).
        let (claim_set, claim_cond) = Taking::clauses(claim);
        // A payment heard of only by a state event without money has no currency yet: a
        // refund of it can only be voided, and the judge finds no mismatch to refuse it for.
        let fresh = "attribute_exists(pk) AND (attribute_not_exists(currency) OR currency = :cur) \
                     AND NOT contains(reversed_refund_keys, :rk)";
        let update = match write {
            ReversalWrite::Restore(to) => {
                let refunded = if to == PaymentStatus::Paid {
                    "refunded_minor = :amt"
                } else {
                    "refunded_minor > :amt"
                };
                self.payment_update(provider, &facts.payment_reference, now)
                    .update_expression(format!(
                        "SET #status = :to, refundable_minor = refundable_minor + :amt, \
                         refunded_minor = refunded_minor - :amt, updated_at_ms = :now, \
                         history = list_append(if_not_exists(history, :empty), :h){claim_set} ADD reversed_refund_keys :rks",
                    ))
                    .condition_expression(format!("{fresh} AND contains(refund_keys, :rk) AND {refunded}{claim_cond}"))
                    .expression_attribute_values(":to", s(to.as_str()))
                    .expression_attribute_values(":amt", n(facts.money.amount.get()))
                    .expression_attribute_values(":h", history(to, &format!("refund reversed: {refund_key}"), now))
            }
            // The status does not change, so no history entry (it records statuses); the void
            // is the key in `reversed_refund_keys`.
            ReversalWrite::Void => self
                .client
                .update_item()
                .table_name(&self.tables.payments)
                .key("pk", pk(provider, &facts.payment_reference))
                .update_expression(format!(
                    "SET updated_at_ms = :now{claim_set} ADD reversed_refund_keys :rks"
                ))
                .condition_expression(format!(
                    "{fresh} AND NOT contains(refund_keys, :rk){claim_cond}"
                ))
                .expression_attribute_values(":now", n(now)),
        };
        let update = match claim {
            Some(taking) => taking.bind(update, now),
            None => update,
        };
        let update = update
            .expression_attribute_values(":rk", s(refund_key.as_str()))
            .expression_attribute_values(":rks", AttributeValue::Ss(vec![refund_key.to_string()]))
            .expression_attribute_values(":cur", s(facts.money.currency.as_str()));
        self.conditional_update(update, provider, &facts.payment_reference)
            .await
    }
}

impl DynamoStore {
    /// Gives an account-less payment the registered account (and the money fields it lacks):
    /// one conditional write, only while it still has no account, its money agrees and its
    /// status is the one judged (the history entry names it). Of two registrations one fills it
    /// and the other is judged against what that one wrote.
    async fn assign(
        &self,
        expected: &ExpectedPayment,
        mut judged: PaymentRecord,
    ) -> Result<RegisterOutcome, StoreError> {
        let table = &self.tables.payments;
        for _ in 0..WRITE_ROUNDS {
            let now = self.clock.now_ms();
            let note = "registered: account assigned";
            // A PENDING payment made by a debit that came first (`payments::parked`) was never
            // in the open index: registered now, reconciliation asks about it like any other.
            let open_key = match judged.status {
                PaymentStatus::Pending => Some(
                    self.open_key(judged.status, expected.provider, &expected.reference)
                        .await?,
                ),
                _ => None,
            };
            let set_open = if open_key.is_some() {
                ", #open = if_not_exists(#open, :openv)"
            } else {
                ""
            };
            let mut update = self
                .payment_update(expected.provider, &expected.reference, now)
                .update_expression(format!(
                    "SET account = :acct, amount_minor = if_not_exists(amount_minor, :amt), \
                     currency = if_not_exists(currency, :cur), updated_at_ms = :now, \
                     history = list_append(if_not_exists(history, :empty), :h){set_open}"
                ))
                .condition_expression(
                    "attribute_exists(pk) AND attribute_not_exists(account) AND #status = :st \
                     AND (attribute_not_exists(amount_minor) OR amount_minor = :amt) \
                     AND (attribute_not_exists(currency) OR currency = :cur)",
                )
                .expression_attribute_values(":acct", s(expected.account.as_str()))
                .expression_attribute_values(":amt", n(expected.money.amount.get()))
                .expression_attribute_values(":cur", s(expected.money.currency.as_str()))
                .expression_attribute_values(":st", s(judged.status.as_str()))
                .expression_attribute_values(":h", history(judged.status, note, now));
            if let Some(open) = open_key {
                update = update
                    .expression_attribute_names("#open", "open")
                    .expression_attribute_values(":openv", s(open));
            }
            let old = match self
                .conditional_update(update, expected.provider, &expected.reference)
                .await?
            {
                Ok(record) => return Ok(RegisterOutcome::Assigned(record)),
                Err(old) => old,
            };
            // Changed under us (another registration, a webhook naming an account, a status
            // move): judge what it holds now.
            match already_registered(old, expected, table)? {
                Registered::Decided(outcome) => return Ok(outcome),
                Registered::Fill(now_holds) => judged = now_holds,
            }
        }
        Err(StoreError::Unavailable {
            operation: "UpdateItem",
            table: table.clone(),
            source: "the payment kept changing while its account was assigned".into(),
        })
    }
}

impl Payments for DynamoStore {
    async fn register(&self, expected: &ExpectedPayment) -> Result<RegisterOutcome, StoreError> {
        let table = &self.tables.payments;
        let now = self.clock.now_ms();
        let pending = PaymentStatus::Pending;
        let result = self
            .client
            .put_item()
            .table_name(table)
            .item("pk", pk(expected.provider, &expected.reference))
            .item("provider", s(expected.provider.as_str()))
            .item("reference", s(expected.reference.as_str()))
            .item("status", s(pending.as_str()))
            .item(
                "open",
                s(self
                    .open_key(pending, expected.provider, &expected.reference)
                    .await?),
            )
            .item("account", s(expected.account.as_str()))
            .item("amount_minor", n(expected.money.amount.get()))
            .item("currency", s(expected.money.currency.as_str()))
            .item("refunded_minor", n(0))
            .item("refundable_minor", n(0))
            .item("created_at_ms", n(now))
            .item("updated_at_ms", n(now))
            .item("history", history(pending, "registered", now))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let existing = match result {
            Ok(_) => return self.registered(expected).await,
            Err(e) => match condition_failed(e, "PutItem", table)? {
                Some(old) => Some(to_record(&old, table)?),
                // No old image came back with the refusal: read the payment that refused it.
                None => {
                    self.read_payment(expected.provider, &expected.reference)
                        .await?
                }
            },
        };
        match already_registered(existing, expected, table)? {
            Registered::Decided(outcome) => Ok(outcome),
            Registered::Fill(existing) => self.assign(expected, existing).await,
        }
    }

    async fn mark_paid(
        &self,
        provider: ProviderId,
        facts: &PaymentFacts,
        key: &IdempotencyKey,
        new: NewCredit<'_>,
    ) -> Result<PaidOutcome, StoreError> {
        // A credit claimed on its payment: this is the first write of its money movement, so
        // never on tables that cannot referee it (as a claims-table claim, `dynamodb::regions`).
        if new.claim.is_some() {
            self.replication_allows().await?;
        }
        let mut recover = false;
        for _ in 0..WRITE_ROUNDS {
            let old = match self.paid_write(provider, facts, key, new, recover).await? {
                Ok(record) => return Ok(PaidOutcome::Applied(record)),
                Err(old) => old,
            };
            match judge_paid(old, facts, key, new.default_account.is_some()) {
                PaidJudgement::Decided(outcome) => return Ok(outcome),
                PaidJudgement::Recover => recover = true,
                PaidJudgement::Retry => recover = false,
            }
        }
        Ok(PaidOutcome::Contended)
    }

    async fn take_over_credit(
        &self,
        provider: ProviderId,
        reference: &Reference,
        previous: &OwnerToken,
        token: &OwnerToken,
        lease_ms: i64,
    ) -> Result<bool, StoreError> {
        let now = self.clock.now_ms();
        let update = self
            .claim_update(provider, reference)
            .update_expression("SET claim_owner = :tok, claim_lease_ms = :lease")
            .condition_expression(
                "claim_owner = :prev AND claim_state = :applying AND claim_lease_ms <= :now",
            )
            .expression_attribute_values(":tok", s(token.as_str()))
            .expression_attribute_values(":prev", s(previous.as_str()))
            .expression_attribute_values(":applying", s(APPLYING))
            .expression_attribute_values(":lease", n(now.saturating_add(lease_ms)))
            .expression_attribute_values(":now", n(now));
        Ok(
            match self
                .claim_write(update, provider, reference, View::Credit)
                .await?
            {
                Ok(()) => true,
                // Ours already: the SDK resent a takeover whose reply was lost.
                Err(old) => held_by(old.as_ref(), token),
            },
        )
    }

    async fn finalize_credit(
        &self,
        provider: ProviderId,
        reference: &Reference,
        token: &OwnerToken,
        answer: &StoredResponse,
    ) -> Result<FinalizeOutcome, StoreError> {
        let write = |with_body: bool| {
            let body = if with_body { ", answer_body = :ab" } else { "" };
            let mut update = self
                .claim_update(provider, reference)
                .update_expression(format!(
                    "SET claim_state = :done, answer_status = :as{body} REMOVE #open"
                ))
                .condition_expression("claim_owner = :tok AND claim_state = :applying")
                .expression_attribute_names("#open", "open")
                .expression_attribute_values(":tok", s(token.as_str()))
                .expression_attribute_values(":applying", s(APPLYING))
                .expression_attribute_values(":done", s(DONE))
                .expression_attribute_values(":as", n(i64::from(answer.status)));
            if with_body {
                update = update.expression_attribute_values(":ab", s(answer.body.as_str()));
            }
            self.claim_write(update, provider, reference, View::Credit)
        };
        let written = match write(true).await {
            // The answer does not fit on the payment (400 KB): the credit happened, so its claim
            // is finished without the body (the item only shrinks), as a held claim's is.
            Err(StoreError::Rejected {
                why: dynamo_claim::Rejection::TooLarge,
                ..
            }) => write(false).await?,
            other => other?,
        };
        let old = match written {
            Ok(()) => return Ok(FinalizeOutcome::Done),
            Err(old) => old,
        };
        let claim = old.as_ref().and_then(|p| p.claim.as_ref());
        Ok(match claim.map(|c| &c.state) {
            // DONE under our own token: the SDK resent our finalize after losing its reply.
            Some(ClaimState::Done(_) | ClaimState::DoneUnrecorded { .. })
                if old_owner_is(old.as_ref(), token) =>
            {
                FinalizeOutcome::Done
            }
            Some(ClaimState::Done(stored)) => FinalizeOutcome::Superseded(Some(stored.clone())),
            Some(ClaimState::DoneUnrecorded { status }) => {
                FinalizeOutcome::Superseded(Some(StoredResponse::unrecorded(*status)))
            }
            _ => FinalizeOutcome::Superseded(None),
        })
    }

    async fn give_up_credit(
        &self,
        provider: ProviderId,
        reference: &Reference,
        token: &OwnerToken,
    ) -> Result<bool, StoreError> {
        let update = self
            .claim_update(provider, reference)
            .update_expression("SET claim_lease_ms = :zero")
            .condition_expression("claim_owner = :tok AND claim_state = :applying")
            .expression_attribute_values(":tok", s(token.as_str()))
            .expression_attribute_values(":applying", s(APPLYING))
            .expression_attribute_values(":zero", n(0));
        Ok(self
            .claim_write(update, provider, reference, View::Credit)
            .await?
            .is_ok())
    }

    async fn move_state(
        &self,
        provider: ProviderId,
        facts: &StateFacts,
        to: PaymentStatus,
    ) -> Result<StateOutcome, StoreError> {
        let now = self.clock.now_ms();
        let update = self.payment_update(provider, &facts.reference, now);
        let (update, money_conds, money_sets) =
            money_guard(update, facts.account.as_ref(), facts.money.as_ref());
        let (update, sources) = status_in(update, to.sources_of());
        let (update_expression, condition_expression) =
            state_move_expressions(to, &sources, money_conds, money_sets);
        let update = update
            .update_expression(update_expression)
            .condition_expression(condition_expression)
            .expression_attribute_names("#open", "open")
            .expression_attribute_names("#reference", "reference")
            .expression_attribute_values(":to", s(to.as_str()))
            .expression_attribute_values(":prov", s(provider.as_str()))
            .expression_attribute_values(":ref", s(facts.reference.as_str()))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":h", history(to, "state event", now));
        let update = if to == PaymentStatus::Processing {
            update.expression_attribute_values(
                ":openv",
                s(self.open_key(to, provider, &facts.reference).await?),
            )
        } else {
            update
        };
        Ok(
            match self
                .conditional_update(update, provider, &facts.reference)
                .await?
            {
                Ok(record) => StateOutcome::Applied(record),
                Err(old) => judge_state(old, facts),
            },
        )
    }

    async fn hold(
        &self,
        provider: ProviderId,
        movement: HeldMove<'_>,
        key: &IdempotencyKey,
        claim: NewHostClaim<'_>,
    ) -> Result<Hosted, StoreError> {
        self.apply_hosted(provider, movement, key, claim).await
    }

    async fn take_over_held(
        &self,
        provider: ProviderId,
        payment: &Reference,
        key: &IdempotencyKey,
        previous: &OwnerToken,
        token: &OwnerToken,
        lease_ms: i64,
    ) -> Result<bool, StoreError> {
        self.take_over_hosted(provider, payment, key, previous, token, lease_ms)
            .await
    }

    async fn finalize_held(
        &self,
        provider: ProviderId,
        payment: &Reference,
        key: &IdempotencyKey,
        token: &OwnerToken,
        answer: &StoredResponse,
    ) -> Result<FinalizeOutcome, StoreError> {
        self.finalize_hosted(provider, payment, key, token, answer)
            .await
    }

    async fn refund(
        &self,
        provider: ProviderId,
        facts: &RefundFacts,
        key: &IdempotencyKey,
    ) -> Result<RefundOutcome, StoreError> {
        // A full refund is the common case, so aim there first; each failed write shows the
        // payment as it is, and the judge re-aims or decides.
        let mut aim = RefundWrite::first(key);
        for _ in 0..WRITE_ROUNDS {
            let old = match self.refund_to(provider, facts, key, aim, None).await? {
                Ok(record) => return Ok(RefundOutcome::Applied(record)),
                Err(old) => old,
            };
            match judge_refund(old, facts, key) {
                RefundJudgement::Decided(outcome) => return Ok(outcome),
                RefundJudgement::Aim(next) => aim = next,
            }
        }
        Ok(RefundOutcome::Contended)
    }

    async fn dispute(
        &self,
        provider: ProviderId,
        facts: &crate::domain::DisputeFacts,
        movement: crate::domain::DisputeMovement,
        key: &IdempotencyKey,
    ) -> Result<crate::payments::DisputeOutcome, StoreError> {
        self.apply_dispute(provider, facts, movement, key).await
    }

    async fn park_debit(
        &self,
        provider: ProviderId,
        reference: &Reference,
        debit: &ParkedDebit,
    ) -> Result<ParkOutcome, StoreError> {
        let now = self.clock.now_ms();
        let waiting = [
            PaymentStatus::Pending,
            PaymentStatus::Processing,
            PaymentStatus::Failed,
        ];
        let (update, not_paid) = status_in(self.payment_update(provider, reference, now), &waiting);
        // Absent: a PENDING payment without account or money, as a state event would make it.
        // Its `updated_at_ms` is the payment's, not the debit's: a refund redelivered hourly must
        // not keep the payment too young for reconciliation to ask about.
        let update = update
            .update_expression(
                "SET provider = if_not_exists(provider, :prov), \
                 #reference = if_not_exists(#reference, :ref), #status = if_not_exists(#status, :pending), \
                 refunded_minor = if_not_exists(refunded_minor, :zero), \
                 refundable_minor = if_not_exists(refundable_minor, :zero), \
                 created_at_ms = if_not_exists(created_at_ms, :now), \
                 updated_at_ms = if_not_exists(updated_at_ms, :now), \
                 history = if_not_exists(history, :empty) ADD parked_debits :debit",
            )
            .condition_expression(format!("attribute_not_exists(pk) OR {not_paid}"))
            .expression_attribute_names("#reference", "reference")
            .expression_attribute_values(":prov", s(provider.as_str()))
            .expression_attribute_values(":ref", s(reference.as_str()))
            .expression_attribute_values(":pending", s(PaymentStatus::Pending.as_str()))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":debit", AttributeValue::Ss(vec![debit.tag()]));
        match self.conditional_update(update, provider, reference).await? {
            Ok(_) => Ok(ParkOutcome::Parked),
            Err(_) => Ok(ParkOutcome::PaidMeanwhile),
        }
    }

    async fn reverse_refund(
        &self,
        provider: ProviderId,
        facts: &RefundFacts,
        refund_key: &IdempotencyKey,
    ) -> Result<ReversalOutcome, StoreError> {
        // Most reversals follow an applied refund that took the whole remainder.
        let mut write = ReversalWrite::Restore(PaymentStatus::Paid);
        for _ in 0..WRITE_ROUNDS {
            let result = self
                .reversal_write(provider, facts, refund_key, write, None)
                .await?;
            match (result, write) {
                (Ok(record), ReversalWrite::Restore(_)) => {
                    return Ok(ReversalOutcome::Applied(record))
                }
                (Ok(record), ReversalWrite::Void) => return Ok(ReversalOutcome::Voided(record)),
                (Err(old), _) => match judge_reversal(old, facts, refund_key) {
                    ReversalJudgement::Decided(outcome) => return Ok(outcome),
                    ReversalJudgement::Write(w) => write = w,
                },
            }
        }
        Ok(ReversalOutcome::Contended)
    }

    async fn bound_reference(
        &self,
        provider: ProviderId,
        transaction_id: &str,
    ) -> Result<Option<Reference>, StoreError> {
        let table = &self.tables.payments;
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key("pk", s(format!("{provider}:txn:{transaction_id}")))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("GetItem", table, e))?;
        // An item without `reference` only holds debits parked on the unbound transaction.
        let Some(item) = out.item.filter(|i| i.contains_key("reference")) else {
            return Ok(None);
        };
        Reader::new(&item, table)
            .parsed("reference", Reference::parse)
            .map(Some)
    }

    async fn bind_reference(
        &self,
        provider: ProviderId,
        transaction_id: &str,
        reference: &Reference,
    ) -> Result<Binding, StoreError> {
        let pk = s(format!("{provider}:txn:{transaction_id}"));
        // An item without `reference` holds debits parked on the unbound transaction: binding
        // it returns them (ALL_NEW), and a later binder reads them back from the bound item.
        let result = self
            .while_unbound(&pk)
            .update_expression(
                "SET #reference = :ref, created_at_ms = if_not_exists(created_at_ms, :now)",
            )
            .expression_attribute_values(":ref", s(reference.as_str()))
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        let item = match result {
            Ok(out) => out.attributes,
            Err(e) => condition_failed(e, "UpdateItem", &self.tables.payments)?,
        };
        self.binding_or_read(item, &pk).await
    }

    async fn park_on_transaction(
        &self,
        provider: ProviderId,
        transaction_id: &str,
        debit: &ParkedDebit,
    ) -> Result<TransactionPark, StoreError> {
        let pk = s(format!("{provider}:txn:{transaction_id}"));
        let result = self
            .while_unbound(&pk)
            .update_expression(
                "SET created_at_ms = if_not_exists(created_at_ms, :now) ADD parked_debits :debit",
            )
            .expression_attribute_values(":debit", AttributeValue::Ss(vec![debit.tag()]))
            .send()
            .await;
        let old = match result {
            Ok(_) => return Ok(TransactionPark::Parked),
            Err(e) => condition_failed(e, "UpdateItem", &self.tables.payments)?,
        };
        Ok(TransactionPark::Bound(
            self.binding_or_read(old, &pk).await?.reference,
        ))
    }

    async fn stop_asking(
        &self,
        provider: ProviderId,
        reference: &Reference,
        status: PaymentStatus,
        note: &str,
    ) -> Result<bool, StoreError> {
        let now = self.clock.now_ms();
        let update = self
            .payment_update(provider, reference, now)
            .update_expression(
                "SET updated_at_ms = :now, reconcile_stopped_at_ms = :now, \
                 history = list_append(if_not_exists(history, :empty), :h) REMOVE #open",
            )
            // Only while it is still the open payment we judged: a webhook may have paid it since.
            .condition_expression("#status = :s AND attribute_exists(#open)")
            .expression_attribute_names("#open", "open")
            .expression_attribute_values(":s", s(status.as_str()))
            .expression_attribute_values(":h", history(status, note, now));
        Ok(self
            .claim_write(update, provider, reference, View::Credit)
            .await?
            .is_ok())
    }

    async fn payment(
        &self,
        provider: ProviderId,
        reference: &Reference,
    ) -> Result<Option<PaymentRecord>, StoreError> {
        self.read_payment(provider, reference).await
    }

    /// Claims held on payments (credits' and refunds') APPLYING past their lease, from `POSTING` in
    /// the sparse `open` index.
    async fn stuck_credits(
        &self,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<crate::idempotency::ClaimRecord>, StoreError> {
        let table = self.tables.payments.clone();
        // The index lists the payments (its projection has no claim fields): each is read
        // whole, consistently, and judged by its claim's lease.
        let listed = self
            .read_open(
                &table,
                "updated_at_ms",
                POSTING,
                i64::MAX,
                limit,
                |item, t| Ok(Reader::new(item, t).str("pk")?.to_owned()),
            )
            .await?;
        let keys = listed
            .into_iter()
            .map(|k| std::collections::HashMap::from([("pk".to_owned(), s(k))]))
            .collect();
        // Whole: a refund's claim is an attribute named by its key (`rc#{key}`), which no
        // projection can name unseen. The index lists only payments with a claim APPLYING.
        let read = super::BatchRead {
            projection: "",
            names: &[],
            consistent: true,
            rounds: 8,
        };
        let (items, _unread) = self.batch_get(&table, keys, read).await?;
        let mut stuck = Vec::new();
        let expired = |record: crate::idempotency::ClaimRecord, stuck: &mut Vec<_>| {
            if let ClaimState::InProgress {
                lease_expires_at_ms,
                ..
            } = &record.state
            {
                if *lease_expires_at_ms <= now_ms {
                    stuck.push(record);
                }
            }
        };
        for item in &items {
            let r = Reader::new(item, &table);
            if let (Some(claim), Some(key)) = (host_claim(&r)?, r.opt_str("paid_key")) {
                expired(
                    claim.record(&IdempotencyKey::from_stored(key.to_owned())),
                    &mut stuck,
                );
            }
            for (key, claim) in super::payment_item::held_claims_of(item, &table)? {
                expired(claim.record(&IdempotencyKey::from_stored(key)), &mut stuck);
            }
        }
        Ok(stuck)
    }

    async fn open_payments(
        &self,
        status: PaymentStatus,
        before_ms: i64,
        limit: usize,
    ) -> Result<Vec<PaymentRecord>, StoreError> {
        let table = self.tables.payments.clone();
        self.read_open(
            &table,
            "updated_at_ms",
            status.as_str(),
            before_ms,
            limit,
            to_record,
        )
        .await
    }
}

/// A transaction's binding item: its payment reference and the debits that waited on it.
fn to_binding(item: &Item, table: &str) -> Result<Binding, StoreError> {
    let r = Reader::new(item, table);
    Ok(Binding {
        reference: r.parsed("reference", Reference::parse)?,
        parked: r
            .str_set("parked_debits")
            .iter()
            .filter_map(|t| ParkedDebit::parse(t))
            .collect(),
    })
}

impl DynamoStore {
    /// An update of a transaction's binding item, only while it is unbound (`:now` set), that
    /// returns the item when it is bound already.
    fn while_unbound(&self, pk: &AttributeValue) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.tables.payments)
            .key("pk", pk.clone())
            .condition_expression("attribute_not_exists(#reference)")
            .expression_attribute_names("#reference", "reference")
            .expression_attribute_values(":now", n(self.clock.now_ms()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
    }

    /// The binding a write returned, or (a failed condition whose old item the server did not
    /// return: dynalite) read back consistently. Bindings are never deleted, so the item a
    /// write made or failed on is still there.
    async fn binding_or_read(
        &self,
        item: Option<Item>,
        pk: &AttributeValue,
    ) -> Result<Binding, StoreError> {
        let table = &self.tables.payments;
        let item = match item {
            Some(item) => Some(item),
            None => {
                self.client
                    .get_item()
                    .table_name(table)
                    .key("pk", pk.clone())
                    .consistent_read(true)
                    .send()
                    .await
                    .map_err(|e| unavailable("GetItem", table, e))?
                    .item
            }
        };
        let item = item.ok_or_else(|| StoreError::Corrupt {
            table: table.clone(),
            key: pk.as_s().map_or("?", String::as_str).to_owned(),
            reason: "binding vanished".into(),
        })?;
        to_binding(&item, table)
    }
}
