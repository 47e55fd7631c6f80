//! Payouts in the payments table, and the reservation guard that keeps payouts from overdrawing.
//!
//! **A payout** is one item, `pk` = `payout#{payout id}`: `payout_status` (its own attribute,
//! so the payment change-event filters on `status` never see it), `provider`, `account`,
//! `amount_minor`, `currency`, `destination` (JSON), `narration`, `shard` and `reserve_at_ms`
//! (decided when opened), `moves` (settlement movement times), `words` (final words applied),
//! `sends`, `ambiguous`, `provider_status`, `key` (the reservation's key, the change events'
//! id), and `open` = `PAYOUT#{index shard}` while open, so reconciliation finds it through the
//! table's sparse `open` index. Each settlement word applied since #44 also holds its claim here,
//! `rc#{word key}`, and while that claim is APPLYING `open` = `POSTING#{shard}` lists the payout
//! for the stuck sweep instead (`payout_words.rs`); a word applied without such a claim never
//! removes a `POSTING` entry (`settle_write`).
//!
//! **The guard**, `pk` = `guard#{account}#{currency}`, serialises the *decisions* of one
//! account's payouts in one currency, without transactions. It holds a `version` and the one
//! latest decision, `pending` (`payout`, `decision` = `reserve` | `refuse`, and for a
//! reservation everything its ledger entry needs). A decision is made like this:
//!
//! 1. read the guard (consistent) at version `v`;
//! 2. **apply** its pending decision, whoever made it: post the reservation's entry
//!    (`attribute_not_exists`, so once) and move that payout `new` → `reserved` / `refused`
//!    (conditioned on `new`, so once). If it is this payout's, done;
//! 3. read this payout: if it is decided (someone applied its decision), done;
//! 4. read the account's balance in the currency (the ledger's sum of posted entries: every
//!    earlier reservation is among them, since each was applied before the guard moved past it);
//! 5. decide, and write the decision with `version = v` → `v + 1` (one conditional
//!    `UpdateItem`); if another decision got there first, go back to 1;
//! 6. apply it as in 2.
//!
//! So every decision is taken against a balance that holds every earlier reservation, two
//! decisions never both see the same balance, and each payout gets one decision even when a
//! retry, a takeover and reconciliation race on it: the loser of step 5 finds the winner's
//! decision at step 2 or 3. A crash anywhere leaves the decision in the guard for the next
//! payout, retry or reconciliation to apply. *Available* is therefore exactly the ledger
//! balance: posted credits and debits, reserved payouts included (they are entries at once).
//! A provider-initiated debit (refund, dispute) that lands between step 4 and 5 can still take
//! the account below zero: the payout was decided against the money that was there.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use serde_json::Value;

use super::item::{condition_failed, n, s, unavailable, Item, Reader};
use super::payment_item::{Taking, POSTING};
use super::DynamoStore;
use crate::domain::Operation;
use crate::domain::{AccountId, Currency, IdempotencyKey, ProviderId, TransferState};
use crate::idempotency::{FinalizeOutcome, NewHostClaim, OwnerToken, StoredResponse};
use crate::ledger::{Ledger, PostOutcome, Posting};
use crate::payouts::calls::{CallKind, CallTicket, ProviderNote, CALL_MARGIN_MS};
use crate::payouts::{
    judge_settle, reservation_key, HeldWord, HeldWordCall, NewPayout, PayoutId, PayoutRecord,
    PayoutStatus, Payouts, SettleJudgement, SettleOutcome, WordOrigin,
};
use crate::store::StoreError;

const OPEN: &str = "PAYOUT";
/// Rounds of step 1-5 before giving up (retryable): each lost round means another payout of the
/// same account was decided, so this bounds the wait behind about this many.
const MAX_ROUNDS: usize = 200;

pub(super) fn payout_pk(id: &PayoutId) -> String {
    format!("payout#{id}")
}

fn guard_pk(account: &AccountId, currency: Currency) -> String {
    format!("guard#{account}#{currency}")
}

pub(super) fn to_record(item: &Item, table: &str) -> Result<PayoutRecord, StoreError> {
    let r = Reader::new(item, table);
    let destination = serde_json::from_str::<Value>(r.str("destination")?)
        .ok()
        .and_then(|v| v.as_object().cloned())
        .ok_or_else(|| r.corrupt("destination is not a JSON object"))?;
    let mut moves = BTreeMap::new();
    if let Some(AttributeValue::M(m)) = item.get("moves") {
        for (op, v) in m {
            let at = v
                .as_n()
                .ok()
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| r.corrupt("moves"))?;
            moves.insert(op.clone(), at);
        }
    }
    let u32_of = |name: &str| -> Result<u32, StoreError> {
        u32::try_from(r.opt_num(name)?.unwrap_or(0)).map_err(|_| r.corrupt(name.to_owned()))
    };
    Ok(PayoutRecord {
        payout: PayoutId::parse(r.str("payout")?).ok_or_else(|| r.corrupt("payout id"))?,
        status: PayoutStatus::parse(r.str("payout_status")?)
            .ok_or_else(|| r.corrupt("payout_status"))?,
        provider: ProviderId::parse(r.str("provider")?).ok_or_else(|| r.corrupt("provider"))?,
        account: r.parsed("account", AccountId::parse)?,
        amount: r.num("amount_minor")?,
        currency: r.parsed("currency", Currency::parse)?,
        destination,
        narration: r.opt_str("narration").map(str::to_owned),
        shard: u32_of("shard")?,
        reserve_at_ms: r.num("reserve_at_ms")?,
        moves,
        words: r.str_set("words"),
        sends: u32_of("sends")?,
        ambiguous: matches!(item.get("ambiguous"), Some(AttributeValue::Bool(true))),
        accepted: matches!(item.get("accepted"), Some(AttributeValue::Bool(true))),
        refused: r.opt_str("refused").map(str::to_owned),
        conflict: r.opt_str("word_conflict").map(str::to_owned),
        // Absent on payouts sent by the release before fences: no fence (its calls were bounded
        // by 5 s and are long over, or still run under the old code's own rules), and the
        // longest window any provider has, from the payout's last write: decided by what is
        // stored, so every process judges it alike.
        call_until_ms: r.opt_num("call_until_ms")?.unwrap_or(0),
        absent_after_ms: match r.opt_num("absent_after_ms")? {
            Some(at) => at,
            None => r
                .num("updated_at_ms")?
                .saturating_add(crate::payouts::calls::LEGACY_WINDOW_MS),
        },
        provider_status: r.opt_str("provider_status").map(str::to_owned),
        available_minor: r.opt_num("available_minor")?,
        created_at_ms: r.num("created_at_ms")?,
        updated_at_ms: r.num("updated_at_ms")?,
        held_claims: super::payment_item::held_claims_of(item, table)?,
        posting: r
            .opt_str("open")
            .is_some_and(|o| o.starts_with(super::payment_item::POSTING)),
    })
}

/// A guard's latest decision.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decision {
    payout: PayoutId,
    reserve: bool,
    available_minor: i64,
    posting: Posting,
}

fn decision_value(d: &Decision) -> AttributeValue {
    let p = &d.posting;
    AttributeValue::M(
        [
            ("payout", s(d.payout.as_str())),
            ("decision", s(if d.reserve { "reserve" } else { "refuse" })),
            ("available_minor", n(d.available_minor)),
            ("key", s(p.key.as_str())),
            ("account", s(p.account.as_str())),
            ("shard", n(i64::from(p.shard))),
            ("at_ms", n(p.at_ms.unwrap_or(0))),
            ("currency", s(p.currency.as_str())),
            ("amount_minor", n(p.amount_minor)),
            ("reference", s(p.reference.as_str())),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect(),
    )
}

fn to_decision(m: &Item, table: &str) -> Result<Decision, StoreError> {
    let r = Reader::new(m, table);
    let payout = PayoutId::parse(r.str("payout")?).ok_or_else(|| r.corrupt("guard payout"))?;
    Ok(Decision {
        reserve: r.str("decision")? == "reserve",
        available_minor: r.num("available_minor")?,
        posting: Posting {
            key: IdempotencyKey::from_stored(r.str("key")?.to_owned()),
            account: r.parsed("account", AccountId::parse)?,
            shard: u32::try_from(r.num("shard")?).map_err(|_| r.corrupt("guard shard"))?,
            at_ms: Some(r.num("at_ms")?),
            currency: r.parsed("currency", Currency::parse)?,
            amount_minor: r.num("amount_minor")?,
            reference: payout.reference(),
            posted_at_ms: 0,
        },
        payout,
    })
}

/// A guard as read: its version (0 when absent) and latest decision.
struct Guard {
    version: i64,
    pending: Option<Decision>,
}

impl DynamoStore {
    pub(super) async fn get_payout_item(
        &self,
        id: &PayoutId,
    ) -> Result<Option<PayoutRecord>, StoreError> {
        let table = &self.tables.payments;
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key("pk", s(payout_pk(id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("GetItem", table, e))?;
        out.item.map(|i| to_record(&i, table)).transpose()
    }

    async fn must_payout(&self, id: &PayoutId) -> Result<PayoutRecord, StoreError> {
        self.get_payout_item(id)
            .await?
            .ok_or_else(|| StoreError::Corrupt {
                table: self.tables.payments.clone(),
                key: payout_pk(id),
                reason: "the payout vanished".into(),
            })
    }

    async fn payout_open_key(&self, id: &PayoutId) -> Result<String, StoreError> {
        let layout = self.placement_layout().await?;
        Ok(format!("{OPEN}#{}", layout.index_shard(id.as_str())))
    }

    async fn guard(&self, account: &AccountId, currency: Currency) -> Result<Guard, StoreError> {
        let table = &self.tables.payments;
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key("pk", s(guard_pk(account, currency)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("GetItem", table, e))?;
        let Some(item) = out.item else {
            return Ok(Guard {
                version: 0,
                pending: None,
            });
        };
        let r = Reader::new(&item, table);
        let pending = match item.get("pending") {
            Some(AttributeValue::M(m)) => Some(to_decision(m, table)?),
            _ => None,
        };
        Ok(Guard {
            version: r.opt_num("version")?.unwrap_or(0),
            pending,
        })
    }

    /// Step 2: makes a decision's effects real, each once: the entry, then the payout's status.
    async fn apply_decision(&self, d: &Decision) -> Result<(), StoreError> {
        if d.reserve {
            let posting = Posting {
                posted_at_ms: self.clock.now_ms(),
                ..d.posting.clone()
            };
            let _: PostOutcome = self.post(&posting).await?;
        }
        let table = &self.tables.payments;
        let (to, open) = if d.reserve {
            (PayoutStatus::Reserved, "SET #open = :open")
        } else {
            (PayoutStatus::Refused, "REMOVE #open")
        };
        let (set_open, remove) = match open.strip_prefix("SET ") {
            Some(set) => (format!(", {set}"), String::new()),
            None => (String::new(), format!(" {open}")),
        };
        let update = self
            .client
            .update_item()
            .table_name(table)
            .key("pk", s(payout_pk(&d.payout)))
            .update_expression(format!(
                "SET payout_status = :to, available_minor = :avail, updated_at_ms = :now{set_open}{remove}"
            ))
            .condition_expression("payout_status = :new")
            .expression_attribute_names("#open", "open")
            .expression_attribute_values(":to", s(to.as_str()))
            .expression_attribute_values(":new", s(PayoutStatus::New.as_str()))
            .expression_attribute_values(":avail", n(d.available_minor))
            .expression_attribute_values(":now", n(self.clock.now_ms()));
        let update = if d.reserve {
            update.expression_attribute_values(":open", s(self.payout_open_key(&d.payout).await?))
        } else {
            update
        };
        match update.send().await {
            Ok(_) => Ok(()),
            // Applied already (by whoever got here first).
            Err(e) => condition_failed(e, "UpdateItem", table).map(|_| ()),
        }
    }

    /// Step 5: writes `decision` as the guard's latest, if the guard is still at `version`.
    async fn write_decision(
        &self,
        account: &AccountId,
        currency: Currency,
        version: i64,
        decision: &Decision,
    ) -> Result<bool, StoreError> {
        let table = &self.tables.payments;
        let update = self
            .client
            .update_item()
            .table_name(table)
            .key("pk", s(guard_pk(account, currency)))
            .update_expression("SET version = :v1, pending = :d")
            .expression_attribute_values(":v1", n(version + 1))
            .expression_attribute_values(":d", decision_value(decision));
        let update = if version == 0 {
            update.condition_expression("attribute_not_exists(version)")
        } else {
            update
                .condition_expression("version = :v0")
                .expression_attribute_values(":v0", n(version))
        };
        match update.send().await {
            Ok(_) => Ok(true),
            Err(e) => condition_failed(e, "UpdateItem", table).map(|_| false),
        }
    }
}

/// Where a word's write moves its payout (judged from `current`).
#[derive(Debug, Clone, Copy)]
pub(super) struct SettleAim {
    pub from: &'static [PayoutStatus],
    pub to: PayoutStatus,
    pub movement: Option<(Operation, i64)>,
}

/// One settlement word's conditional write, as judged from the payout it read.
pub(super) struct WordWrite<'a> {
    pub current: &'a PayoutRecord,
    pub origin: &'a WordOrigin,
    pub word: TransferState,
    pub provider_status: &'a str,
    pub aim: SettleAim,
}

impl DynamoStore {
    /// The word's one conditional write: the status it moves to, its movement's time, the word
    /// among `words`; taking its claim too when `taking` (#44). The payout as written
    /// (`ALL_NEW`), or `None` when the condition failed (moved by someone else: judge again).
    ///
    /// `open`: a word applied without a claim here takes the payout off the open index
    /// (`PAYOUT#…`), except while another word's claim APPLYING lists it under `POSTING#…`,
    /// which that claim's finalize removes; a word taking its claim lists it there itself.
    /// Each case is part of the condition, so the entry is never overwritten unseen.
    pub(super) async fn settle_write(
        &self,
        w: WordWrite<'_>,
        taking: Option<&Taking<'_>>,
    ) -> Result<Option<PayoutRecord>, StoreError> {
        let table = &self.tables.payments;
        let now = self.clock.now_ms();
        let mut sets = vec![
            "payout_status = :to",
            "provider_status = :ps",
            "ambiguous = :f",
            "updated_at_ms = :now",
        ];
        if w.aim.movement.is_some() {
            sets.push("moves = :moves");
        }
        let (open_set, remove, open_cond) = match (taking, w.current.posting) {
            (Some(_), _) => (
                ", #rc = :rc, #open = :posting",
                "",
                " AND attribute_not_exists(#rc) AND (attribute_not_exists(#open) OR NOT begins_with(#open, :pp))",
            ),
            (None, true) => ("", "", " AND begins_with(#open, :pp)"),
            (None, false) => (
                "",
                " REMOVE #open",
                " AND (attribute_not_exists(#open) OR NOT begins_with(#open, :pp))",
            ),
        };
        let from = (0..w.aim.from.len())
            .map(|i| format!(":f{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut update = self
            .client
            .update_item()
            .table_name(table)
            .key("pk", s(payout_pk(&w.current.payout)))
            .update_expression(format!(
                "SET {}{open_set} ADD words :w{remove}",
                sets.join(", ")
            ))
            // The provider too, in the statement itself: a word moves only its own payouts.
            .condition_expression(format!(
                "payout_status IN ({from}) AND provider = :prov AND (attribute_not_exists(words) OR NOT contains(words, :word)){open_cond}"
            ))
            .expression_attribute_names("#open", "open")
            .expression_attribute_values(":pp", s(POSTING))
            .expression_attribute_values(":prov", s(w.origin.provider.as_str()))
            .expression_attribute_values(":to", s(w.aim.to.as_str()))
            .expression_attribute_values(":ps", s(w.provider_status))
            .expression_attribute_values(":f", AttributeValue::Bool(false))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":w", AttributeValue::Ss(vec![w.word.as_str().to_owned()]))
            .expression_attribute_values(":word", s(w.word.as_str()))
            .return_values(ReturnValue::AllNew);
        for (i, st) in w.aim.from.iter().enumerate() {
            update = update.expression_attribute_values(format!(":f{i}"), s(st.as_str()));
        }
        if let Some((op, _)) = w.aim.movement {
            let mut moves = w.current.moves.clone();
            moves.insert(op.as_str().to_owned(), now);
            update = update.expression_attribute_values(
                ":moves",
                AttributeValue::M(moves.iter().map(|(k, v)| (k.clone(), n(*v))).collect()),
            );
        }
        if let Some(taking) = taking {
            update = taking.bind(update, now);
        }
        match update.send().await {
            Ok(out) => match out.attributes {
                Some(item) => Ok(Some(to_record(&item, table)?)),
                None => self.must_payout(&w.current.payout).await.map(Some),
            },
            Err(e) => condition_failed(e, "UpdateItem", table).map(|_| None),
        }
    }
}

impl Payouts for DynamoStore {
    async fn payout(&self, id: &PayoutId) -> Result<Option<PayoutRecord>, StoreError> {
        self.get_payout_item(id).await
    }

    async fn open_payout(&self, new: NewPayout<'_>) -> Result<PayoutRecord, StoreError> {
        let table = &self.tables.payments;
        let req = new.request;
        let now = self.clock.now_ms();
        let put = self
            .client
            .put_item()
            .table_name(table)
            .item("pk", s(payout_pk(new.payout)))
            .item("payout", s(new.payout.as_str()))
            .item("reference", s(new.payout.as_str()))
            .item(
                "key",
                s(reservation_key(req.provider, new.payout).to_string()),
            )
            .item("payout_status", s(PayoutStatus::New.as_str()))
            .item("provider", s(req.provider.as_str()))
            .item("account", s(req.account.as_str()))
            .item("amount_minor", n(req.money.amount.get()))
            .item("currency", s(req.money.currency.as_str()))
            .item(
                "destination",
                s(Value::Object(req.destination.clone()).to_string()),
            )
            .item("shard", n(i64::from(new.shard)))
            // The reservation's movement time: after the payout's claim was taken, and its
            // entry is posted before that claim is finalized (the ledger's checkpoint rule).
            .item("reserve_at_ms", n(now))
            .item("sends", n(0))
            .item("created_at_ms", n(now))
            .item("updated_at_ms", n(now))
            .item("open", s(self.payout_open_key(new.payout).await?))
            .condition_expression("attribute_not_exists(pk)");
        let put = match &req.narration {
            Some(text) => put.item("narration", s(text)),
            None => put,
        };
        match put.send().await {
            Ok(_) => {}
            // Opened by an earlier attempt of the same request: its record stands.
            Err(e) => {
                condition_failed(e, "PutItem", table)?;
            }
        }
        self.must_payout(new.payout).await
    }

    async fn reserve(&self, payout: &PayoutRecord) -> Result<PayoutRecord, StoreError> {
        let (account, currency) = (&payout.account, payout.currency);
        let mine = Decision {
            payout: payout.payout.clone(),
            reserve: true,
            available_minor: 0,
            posting: Posting {
                key: payout.reservation_key(),
                account: account.clone(),
                shard: payout.shard,
                at_ms: Some(payout.reserve_at_ms),
                currency,
                amount_minor: -payout.amount,
                reference: payout.payout.reference(),
                posted_at_ms: 0,
            },
        };
        for round in 0..MAX_ROUNDS {
            let guard = self.guard(account, currency).await?;
            if let Some(pending) = &guard.pending {
                self.apply_decision(pending).await?;
            }
            let current = self.must_payout(&payout.payout).await?;
            if current.status != PayoutStatus::New {
                return Ok(current);
            }
            let balance = self.balance(account).await?;
            let available = balance.balances.get(&currency).copied().unwrap_or(0);
            let decision = Decision {
                reserve: available >= payout.amount,
                available_minor: available,
                ..mine.clone()
            };
            if self
                .write_decision(account, currency, guard.version, &decision)
                .await?
            {
                self.apply_decision(&decision).await?;
                return self.must_payout(&payout.payout).await;
            }
            // Another decision came first: back off a little (spread by the payout id and the
            // round, so racing payouts do not retry in step), then read the guard again.
            let spread = crate::ledger::fnv1a(&format!("{}{round}", payout.payout)) % 20;
            tokio::time::sleep(Duration::from_millis(2 + spread)).await;
        }
        Err(StoreError::Contended {
            table: self.tables.payments.clone(),
            key: guard_pk(account, currency),
        })
    }

    async fn take_call(
        &self,
        id: &PayoutId,
        t: CallTicket<'_>,
    ) -> Result<Option<PayoutRecord>, StoreError> {
        let table = &self.tables.payments;
        let now = self.clock.now_ms();
        let until = now
            .saturating_add(t.bound_ms)
            .saturating_add(CALL_MARGIN_MS);
        // Nobody else's call may still run: its fence has passed, or it is ours.
        let free = "(attribute_not_exists(call_until_ms) OR call_until_ms <= :now OR call_holder = :holder)";
        let update = self
            .client
            .update_item()
            .table_name(table)
            .key("pk", s(payout_pk(id)))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":until", n(until))
            .expression_attribute_values(":holder", s(t.holder))
            .expression_attribute_values(":sent", s(PayoutStatus::Sent.as_str()))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew);
        let update = match t.kind {
            CallKind::Send => update
                .update_expression(
                    "SET payout_status = :sent, sends = :next, ambiguous = :t, call_until_ms = :until, \
                     absent_after_ms = :absent, call_holder = :holder, updated_at_ms = :now REMOVE refused",
                )
                // Never again once the provider has the transfer, or has shown something else
                // under the reference; one send per `sends` seen.
                .condition_expression(format!(
                    "payout_status IN (:reserved, :sent) AND sends = :seen \
                     AND (attribute_not_exists(accepted) OR accepted = :f) \
                     AND attribute_not_exists(word_conflict) AND {free}"
                ))
                .expression_attribute_values(":reserved", s(PayoutStatus::Reserved.as_str()))
                .expression_attribute_values(":seen", n(i64::from(t.seen_sends)))
                .expression_attribute_values(":next", n(i64::from(t.seen_sends) + 1))
                // Until the provider answers, the send's outcome is unknown.
                .expression_attribute_values(":t", AttributeValue::Bool(true))
                .expression_attribute_values(":f", AttributeValue::Bool(false))
                .expression_attribute_values(
                    ":absent",
                    n(until.saturating_add(t.visibility_ms)),
                ),
            // A payout sent by the release before fences gets its window recorded by its first
            // question (the longest any provider has), so later looks judge it alike.
            CallKind::Ask => update
                .update_expression(
                    "SET call_until_ms = :until, call_holder = :holder, updated_at_ms = :now, \
                     absent_after_ms = if_not_exists(absent_after_ms, :legacy)",
                )
                .condition_expression(format!("payout_status = :sent AND {free}"))
                .expression_attribute_values(
                    ":legacy",
                    n(now.saturating_add(crate::payouts::calls::LEGACY_WINDOW_MS)),
                ),
        };
        match update.send().await {
            Ok(out) => out.attributes.map(|i| to_record(&i, table)).transpose(),
            Err(e) => condition_failed(e, "UpdateItem", table).map(|_| None),
        }
    }

    async fn note_provider(&self, id: &PayoutId, note: ProviderNote<'_>) -> Result<(), StoreError> {
        let table = &self.tables.payments;
        let mut sets = vec!["provider_status = :ps", "updated_at_ms = :now"];
        if note.accepted {
            sets.push("accepted = :t");
        }
        if note.refused {
            sets.push("refused = :ps");
        }
        if note.accepted || note.refused {
            // Its outcome is known now: the provider answered.
            sets.push("ambiguous = :f");
        }
        // The provider's having the transfer outranks a refusal noted before (a resend refused
        // as a duplicate of an earlier send that did arrive).
        let remove = if note.accepted { " REMOVE refused" } else { "" };
        let mut update = self
            .client
            .update_item()
            .table_name(table)
            .key("pk", s(payout_pk(id)))
            .update_expression(format!("SET {}{remove}", sets.join(", ")))
            // Only an open payout: a settled one keeps the word that settled it.
            .condition_expression("payout_status = :sent")
            .expression_attribute_values(":ps", s(note.status))
            .expression_attribute_values(":sent", s(PayoutStatus::Sent.as_str()))
            .expression_attribute_values(":now", n(self.clock.now_ms()));
        if note.accepted {
            update = update.expression_attribute_values(":t", AttributeValue::Bool(true));
        }
        if note.accepted || note.refused {
            update = update.expression_attribute_values(":f", AttributeValue::Bool(false));
        }
        match update.send().await {
            Ok(_) => Ok(()),
            Err(e) => condition_failed(e, "UpdateItem", table).map(|_| ()),
        }
    }

    async fn note_conflict(&self, id: &PayoutId, reason: &str) -> Result<(), StoreError> {
        let table = &self.tables.payments;
        // Not `updated_at_ms`: a conflict is no progress, and reconciliation's "untouched
        // since" must keep asking about the payout.
        let update = self
            .client
            .update_item()
            .table_name(table)
            .key("pk", s(payout_pk(id)))
            .update_expression("SET word_conflict = :c")
            .condition_expression("attribute_exists(pk)")
            // Bounded: the reason quotes the provider's words.
            .expression_attribute_values(":c", s(reason.chars().take(500).collect::<String>()));
        match update.send().await {
            Ok(_) => Ok(()),
            Err(e) => condition_failed(e, "UpdateItem", table).map(|_| ()),
        }
    }

    async fn settle_payout(
        &self,
        id: &PayoutId,
        origin: WordOrigin,
        word: TransferState,
        provider_status: &str,
    ) -> Result<SettleOutcome, StoreError> {
        for _ in 0..8 {
            let current = self.get_payout_item(id).await?;
            let (current, aim) = match judge_settle(current, &origin, word) {
                SettleJudgement::Decided(outcome) => return Ok(outcome),
                SettleJudgement::Move {
                    current,
                    from,
                    to,
                    movement,
                } => (current, SettleAim { from, to, movement }),
            };
            let write = WordWrite {
                current: &current,
                origin: &origin,
                word,
                provider_status,
                aim,
            };
            // Moved by someone else in between: judge again from what it is now.
            if let Some(record) = self.settle_write(write, None).await? {
                let movement = aim.movement;
                return Ok(SettleOutcome::Applied { record, movement });
            }
        }
        Err(StoreError::Contended {
            table: self.tables.payments.clone(),
            key: payout_pk(id),
        })
    }

    async fn settle_held(
        &self,
        id: &PayoutId,
        word: HeldWordCall<'_>,
        claim: NewHostClaim<'_>,
    ) -> Result<HeldWord, StoreError> {
        self.apply_held_word(id, word, claim).await
    }

    async fn take_over_word(
        &self,
        id: &PayoutId,
        key: &IdempotencyKey,
        previous: &OwnerToken,
        token: &OwnerToken,
        lease_ms: i64,
    ) -> Result<bool, StoreError> {
        self.take_over_held_word(id, key, previous, token, lease_ms)
            .await
    }

    async fn finalize_word(
        &self,
        id: &PayoutId,
        key: &IdempotencyKey,
        token: &OwnerToken,
        answer: &StoredResponse,
    ) -> Result<FinalizeOutcome, StoreError> {
        self.finalize_held_word(id, key, token, answer).await
    }

    async fn open_payouts(
        &self,
        before_ms: i64,
        limit: usize,
    ) -> Result<Vec<PayoutRecord>, StoreError> {
        let table = self.tables.payments.clone();
        let ids = self
            .read_open(
                &table,
                "updated_at_ms",
                OPEN,
                before_ms,
                limit,
                |item, t| {
                    let r = Reader::new(item, t);
                    PayoutId::parse(r.str("reference")?).ok_or_else(|| r.corrupt("payout id"))
                },
            )
            .await?;
        let mut out = Vec::new();
        for id in ids {
            if let Some(p) = self.get_payout_item(&id).await? {
                out.push(p);
            }
        }
        Ok(out)
    }
}
