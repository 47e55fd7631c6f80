//! Account postings: the ledger entries money movements write, where they live (the stored
//! layout of shards) and balances as sums of them. Each entry is keyed by the movement's
//! idempotency key and written with `attribute_not_exists`, so a retry never posts twice, and
//! balances are derived from the entries, so no bare `ADD` can ever be repeated.

use std::collections::BTreeMap;
use std::future::Future;

use serde::Serialize;

use crate::domain::{AccountId, Currency, IdempotencyKey, Reference};
use crate::payments::PaymentRecord;
use crate::store::StoreError;

/// One ledger entry: a signed amount under the operation's key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Posting {
    pub key: IdempotencyKey,
    pub account: AccountId,
    /// The partition of the account's entries this one lives in: the payment's recorded
    /// `ledger_shard`, never recomputed from a count that may have grown since.
    pub shard: u32,
    /// The movement's time as recorded on the payment in the write that made it (so a retry
    /// writes the same sort key, `{at:013}#{key}`, and a checkpoint can roll entries up in time
    /// order). `None` for movements recorded before times were: the sort key is the bare key.
    pub at_ms: Option<i64>,
    pub currency: Currency,
    /// Positive credits, negative debits.
    pub amount_minor: i64,
    pub reference: Reference,
    pub posted_at_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostOutcome {
    Posted,
    /// The entry exists: an earlier attempt under this key posted it.
    AlreadyPosted,
}

/// How many partitions things that many deliveries share are spread over, stored in the ledger
/// table so every writer and reader (Lambda, CLI, another deploy) sees the same layout, and not a
/// per-process setting. It only grows.
///
/// - `ledger_shards`: an account's entries. Writers use it only to *place a new payment*; the
///   placement is then recorded on the payment, so growing it never moves an entry a retry,
///   takeover or replay looks for.
/// - `index_shards`: the keys of the indexes every delivery or claim writes (`IN_PROGRESS#{n}`,
///   `{day}#{n}`, …), so none is a hot partition key. Readers query every shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Layout {
    pub ledger_shards: u32,
    pub index_shards: u32,
}

impl Layout {
    /// The ledger shards of a table that never stored a layout (the count every deployment used
    /// before the layout was stored).
    pub const DEFAULT_LEDGER_SHARDS: u32 = 4;
    /// Index shards: at 10,000 deliveries/s, 32 keys take ~310 writes/s each (the claim index,
    /// written twice per claim, ~440), well under DynamoDB's 1,000 per key.
    pub const DEFAULT_INDEX_SHARDS: u32 = 32;
    /// Reads query every shard, so the counts are bounded.
    pub const MAX_SHARDS: u32 = 256;

    pub fn with_ledger_shards(ledger_shards: u32) -> Self {
        Layout {
            ledger_shards,
            ..Layout::default()
        }
    }

    /// The shard for a payment paid for the first time under `key`.
    pub fn place(&self, key: &IdempotencyKey) -> u32 {
        shard_of(key, self.ledger_shards)
    }

    /// Where entries of a payment paid before placements were recorded live: the old formula,
    /// over the old default count.
    pub fn legacy_place(key: &IdempotencyKey) -> u32 {
        shard_of(key, Self::DEFAULT_LEDGER_SHARDS)
    }

    /// The index shard of an item named by `text` (its key, its delivery id).
    pub fn index_shard(&self, text: &str) -> u32 {
        // The claim crate's placement, so a claim's `open` shard and every other table's agree.
        dynamo_claim::shard_of(text, self.index_shards)
    }

    /// Each field at least as large as in `other`: layouts only grow.
    pub fn grown_to(self, other: Layout) -> Layout {
        let clamp = |n: u32| n.min(Self::MAX_SHARDS);
        Layout {
            ledger_shards: clamp(self.ledger_shards.max(other.ledger_shards)),
            index_shards: clamp(self.index_shards.max(other.index_shards)),
        }
    }
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            ledger_shards: Self::DEFAULT_LEDGER_SHARDS,
            index_shards: Self::DEFAULT_INDEX_SHARDS,
        }
    }
}

fn shard_of(key: &IdempotencyKey, shards: u32) -> u32 {
    let n = u64::from(shards.max(1));
    // The remainder is below `shards`, a u32.
    u32::try_from(fnv1a(key.as_str()) % n).unwrap_or(0)
}

/// FNV-1a: a stable, dependency-free hash (std's hasher is randomly seeded per process, which
/// would scatter one key over shards across restarts).
pub fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The shard a payment's entries go to.
pub fn shard_of_payment(payment: &PaymentRecord, key: &IdempotencyKey) -> u32 {
    payment
        .ledger_shard
        .unwrap_or_else(|| Layout::legacy_place(key))
}

/// When the movement under `key` was made, as the payment recorded it in the same write: the
/// credit's `credit_at_ms`, a refund's history entry (noted with its key), a reversal's (noted
/// `refund reversed: {refund key}`).
///
/// Whether a payment's entries are timed at all is decided once, by its credit: a payment paid
/// before movement times were recorded (no `credit_at_ms`, or no recorded placement) keeps the
/// bare sort key for *every* movement, its later refunds and reversals included, because the
/// previous release wrote its entries that way and a retry under this code must meet them
/// (`None` here). A timed payment's entries are all timed.
pub fn movement_time(payment: &PaymentRecord, key: &IdempotencyKey) -> Option<i64> {
    payment.ledger_shard?;
    let credit_at_ms = payment.credit_at_ms?;
    if payment.paid_key.as_ref() == Some(key) {
        return Some(credit_at_ms);
    }
    let reversal = key
        .refund_of_reversal()
        .map(|r| format!("refund reversed: {r}"));
    payment
        .history
        .iter()
        .find(|h| h.note == key.as_str() || Some(&h.note) == reversal.as_ref())
        .map(|h| h.at_ms)
}

/// An account's balances per currency, derived from its entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Balance {
    pub account: AccountId,
    pub balances: BTreeMap<Currency, i64>,
    pub entries: u64,
}

/// A balance that does not fit an `i64` (only reachable with corrupt entries: amounts are at most
/// 10^15 each).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {currency} balance of {account} overflows")]
pub struct BalanceOverflow {
    pub account: AccountId,
    pub currency: Currency,
}

impl Balance {
    pub fn from_postings(
        account: AccountId,
        postings: &[Posting],
    ) -> Result<Self, BalanceOverflow> {
        let mut balances = BTreeMap::new();
        for p in postings {
            let sum: &mut i64 = balances.entry(p.currency).or_insert(0);
            *sum = sum
                .checked_add(p.amount_minor)
                .ok_or_else(|| BalanceOverflow {
                    account: account.clone(),
                    currency: p.currency,
                })?;
        }
        Ok(Balance {
            account,
            balances,
            entries: postings.len() as u64,
        })
    }
}

/// The ledger capability.
pub trait Ledger: Sync {
    fn post(
        &self,
        posting: &Posting,
    ) -> impl Future<Output = Result<PostOutcome, StoreError>> + Send;
    /// The stored layout (the default if none was stored), read now.
    fn layout(&self) -> impl Future<Output = Result<Layout, StoreError>> + Send;
    /// The layout for placing new items, read once per process: a placement only needs some
    /// count readers cover, and readers always read the stored layout.
    fn placement_layout(&self) -> impl Future<Output = Result<Layout, StoreError>> + Send {
        self.layout()
    }
    /// Grows the stored layout to at least `want` (never shrinks it); returns the layout now stored.
    fn grow_layout(&self, want: Layout) -> impl Future<Output = Result<Layout, StoreError>> + Send;
    /// Whether the entry `posting` would write exists (at its own sort key): how a resumed
    /// movement finds an entry an earlier release posted under the bare key.
    fn posted(&self, posting: &Posting) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Every entry of `account`, from every shard of the stored layout.
    fn entries(
        &self,
        account: &AccountId,
    ) -> impl Future<Output = Result<Vec<Posting>, StoreError>> + Send;
    fn balance(
        &self,
        account: &AccountId,
    ) -> impl Future<Output = Result<Balance, StoreError>> + Send {
        async move {
            let postings = self.entries(account).await?;
            Balance::from_postings(account.clone(), &postings).map_err(|e| StoreError::Corrupt {
                table: "ledger".into(),
                key: account.to_string(),
                reason: e.to_string(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Currency, Operation};
    use crate::payments::tests::{key, ngn, R};

    fn posting(amount: i64, cur: &str) -> R<Posting> {
        Ok(Posting {
            key: IdempotencyKey::from_stored(format!("k{amount}{cur}")),
            account: AccountId::parse("a")?,
            shard: 0,
            at_ms: None,
            currency: Currency::parse(cur)?,
            amount_minor: amount,
            reference: Reference::parse("r")?,
            posted_at_ms: 0,
        })
    }

    #[test]
    fn balances_sum_signed_entries_per_currency() -> R {
        let acct = AccountId::parse("a")?;
        let b = Balance::from_postings(
            acct,
            &[
                posting(100, "NGN")?,
                posting(-30, "NGN")?,
                posting(5, "USD")?,
            ],
        )?;
        assert_eq!(b.balances.get(&ngn()), Some(&70));
        assert_eq!(b.balances.get(&Currency::parse("USD")?), Some(&5));
        assert_eq!(b.entries, 3);
        Ok(())
    }

    #[test]
    fn a_balance_that_overflows_is_an_error_not_a_wrap() -> R {
        let acct = AccountId::parse("a")?;
        let huge = [posting(i64::MAX - 1, "NGN")?, posting(2, "NGN")?];
        assert!(Balance::from_postings(acct, &huge).is_err());
        Ok(())
    }

    #[test]
    fn placement_is_stable_and_within_the_layout() -> R {
        let k = key(Operation::Payment, "pay_1")?;
        let four = Layout::with_ledger_shards(4);
        let eight = Layout::with_ledger_shards(8);
        assert!(four.place(&k) < 4 && eight.place(&k) < 8);
        assert_eq!(
            four.grown_to(Layout::with_ledger_shards(2)).ledger_shards,
            4,
            "never shrinks"
        );
        assert_eq!(four.place(&k), Layout::legacy_place(&k));
        // Some key lands elsewhere once the layout grows: why placements are recorded.
        let moved = (0..64).any(|i| {
            let k = IdempotencyKey::from_stored(format!("generic:payment:p{i}"));
            four.place(&k) != eight.place(&k)
        });
        assert!(moved);
        Ok(())
    }
}
