//! One call in flight per reference, ever, and absence that is not a word.
//!
//! A transfer call that timed out is still running somewhere: the provider may take the POST
//! seconds after payhook gave up on it, and keep the transfer invisible to a lookup until it has
//! processed it. So two rules decide every call a payout makes (a send, or a question about its
//! reference):
//!
//! - **The fence.** Before any call, the caller records on the payout, in one conditional write,
//!   until when that call may run (`call_until_ms`: the store's now + the call's bound + a
//!   margin for the store clock's resolution). Nobody sends or asks for that reference before
//!   that time has passed, whoever they are (a retry, a takeover, reconciliation). The holder's
//!   own follow-up (ask, then resend) passes by its holder id. The time is the store's
//!   (DynamoDB's own), recorded once: no process's clock or configuration can move it.
//! - **Absence proves little.** A lookup that finds nothing proves the transfer never arrived
//!   only after the last send's visibility window (`absent_after_ms`, recorded by that send:
//!   its fence plus the provider's documented window). Before that, or once the provider has
//!   accepted the transfer, "not found" is the provider's lag. Money comes back only on the
//!   provider's word: a final state it reports, or its refusal of the send (asked about once).
//!
//! # What the next look does ([`next`])
//!
//! | payout                                           | next                                  |
//! |--------------------------------------------------|---------------------------------------|
//! | `new`                                            | decide the reservation                |
//! | a call may still run (`now < call_until_ms`)     | wait: answer what is known            |
//! | `reserved`                                       | send                                  |
//! | `sent`, the first send was refused (a 4xx)       | ask once: found → its word; none → failed |
//! | `sent`, a resend was refused                     | ask: found → its word; none → a person (the first send may be why) |
//! | `sent`, refused as a duplicate (held)            | as accepted: the provider has it       |
//! | `sent`, accepted by the provider                 | ask: found → its word; none → lag, wait |
//! | `sent`, outcome unknown, window open             | ask: found → its word; none → proves nothing |
//! | `sent`, outcome unknown, window passed           | ask: found → its word; none → resend (same reference), at most [`MAX_SENDS`] sends, then a person |
//! | `refused`, `failed`, `paid`, `reversed`          | nothing                               |
//!
//! Every call also needs time: the request's budget (the claim's lease, the function's
//! remaining time, API Gateway's 29 s) must outlast the call's bound, or the payout is left for
//! the next look, unresolved, rather than called past the point where its caller has gone. A
//! configuration in which no call could ever start is refused when the process starts
//! ([`call_fits`]), and a request with too little time left refuses before it reserves.

use super::{PayoutRecord, PayoutStatus, MAX_SENDS};

/// Added to a call's bound in its fence: the store clock reads DynamoDB's time at most about a
/// second behind (its `Date` header has one-second resolution), plus the fence write's latency.
pub const CALL_MARGIN_MS: i64 = 2_000;

/// Milliseconds a request keeps after its last call, for the writes that record the answer.
pub const FINISH_MS: i64 = 1_000;

/// The longest a fence write may take before its call is not made: the margin less the store
/// clock's second (the fence counts from the store's now before the write).
pub const FENCE_WRITE_MAX_MS: i64 = CALL_MARGIN_MS - 1_000;

/// A request answers within this, whatever its lease: API Gateway gives up at 29 s.
pub const REQUEST_BUDGET_MS: i64 = 25_000;

/// The visibility window of a send recorded by the release before fences (no
/// `absent_after_ms`): the longest any provider's is, counted from the payout's last write.
pub const LEGACY_WINDOW_MS: i64 = 600_000;

/// A payout not settled this long after it was opened needs a person (the default of
/// `PAYHOOK_PAYOUT_UNRESOLVED_AFTER_S`): providers settle transfers within a day.
pub const UNRESOLVED_AFTER_MS: i64 = 24 * 3_600_000;

/// The store clock's resolution (DynamoDB's `Date` header has one-second resolution): kept
/// back from a lease before it is a request's budget.
pub const STORE_CLOCK_MS: i64 = 1_000;

/// The time a request may spend before its call: the claim, the payout's record and the
/// reservation's decision (milliseconds each), and the fence, whose write may take up to
/// [`FENCE_WRITE_MAX_MS`] before the call is given up.
pub const PREPARE_MS: i64 = FENCE_WRITE_MAX_MS;

/// Why an open payout needs a person, if it does. Never a guess at how it ended.
pub fn needs_person(record: &PayoutRecord, now_ms: i64, horizon_ms: i64) -> Option<&'static str> {
    if !record.status.is_open() {
        return None;
    }
    if record.conflict.is_some() {
        return Some("a word of its provider named other money or another recipient: ask the provider what its reference holds");
    }
    if now_ms.saturating_sub(record.created_at_ms) >= horizon_ms {
        return Some("not settled past the horizon: ask the provider about the reference");
    }
    // The request that reserved it had at most a request's budget to start its call.
    let never_sent = record.status == PayoutStatus::Reserved
        && now_ms.saturating_sub(record.updated_at_ms) >= REQUEST_BUDGET_MS + CALL_MARGIN_MS;
    if never_sent {
        return Some("reserved and never sent: no call started within a request's time (a crash, or a process that could not call)");
    }
    if record.status != PayoutStatus::Sent || record.accepted {
        return None;
    }
    if record.refused.is_some() && record.sends > 1 {
        return Some("a resend was refused and the provider shows no transfer: it may hold the first send under the reference");
    }
    let spent = record.ambiguous && record.sends >= MAX_SENDS;
    spent.then_some("sent as often as allowed and the provider shows no transfer")
}

/// Why no transfer call can ever start under these settings, if none can: the rule a
/// request applies before every call ([`Budget::allows`]), applied once at start so that a
/// configuration that would reserve and never send is refused with its numbers.
///
/// `lease_ms` is the longest lease a request gets (outside Lambda `PAYHOOK_LEASE_MS` capped by
/// `PAYHOOK_MAX_LEASE_MS`; inside, `PAYHOOK_MAX_LEASE_MS`, with the function's timeout checked
/// against template.yaml and each invocation's deadline checked before it reserves).
pub fn call_fits(lease_ms: i64, bound_ms: i64) -> Result<(), String> {
    let budget_ms = (lease_ms - STORE_CLOCK_MS).min(REQUEST_BUDGET_MS);
    let needed_ms = needed_ms(bound_ms);
    if budget_ms >= needed_ms {
        return Ok(());
    }
    Err(format!(
        "no transfer call can start: a request's time is its lease ({lease_ms} ms) less the store \
         clock's {STORE_CLOCK_MS} ms, at most {REQUEST_BUDGET_MS} ms (API Gateway gives up at 29 s): \
         {budget_ms} ms; a call needs {PREPARE_MS} ms before it, PAYHOOK_PROVIDER_TIMEOUT_MS \
         ({bound_ms} ms) and {FINISH_MS} ms after it: {needed_ms} ms. Raise the lease \
         (PAYHOOK_LEASE_MS, PAYHOOK_MAX_LEASE_MS, the function's Timeout) or lower \
         PAYHOOK_PROVIDER_TIMEOUT_MS (at most {} ms)",
        REQUEST_BUDGET_MS - PREPARE_MS - FINISH_MS
    ))
}

/// The time a request needs for one call bounded by `bound_ms`, from its start.
pub fn needed_ms(bound_ms: i64) -> i64 {
    PREPARE_MS + bound_ms + FINISH_MS
}

/// What a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    Send,
    Ask,
}

/// Why a payout is asked about: what "not found" means then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskPurpose {
    /// The provider refused the last send (a 4xx): no transfer under the reference confirms
    /// the refusal, its word that this payout failed. `absence_proves`: the refused send was
    /// the first (nothing else was ever sent under the reference). A refused resend never
    /// proves a failure, however long after the first send: a provider refuses a duplicate
    /// reference because the first send arrived, and its lookup may still miss it.
    AfterRefusal { absence_proves: bool },
    /// The provider accepted the transfer; waiting for its final word. Not found is its lag.
    Status,
    /// The last send's outcome is unknown. `absence_proves`: its visibility window has passed,
    /// so not found means it never arrived (and it may be sent again under the same reference).
    AfterAmbiguous { absence_proves: bool },
}

/// What to do next with a payout (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Reserve,
    Send,
    Ask(AskPurpose),
    /// A call may be in flight until `until_ms` (store time): nobody calls before.
    Wait {
        until_ms: i64,
    },
    /// Nothing to do: settled, refused, or sent as often as allowed without an answer.
    Nothing,
}

/// The rule (pure: unit-tested without a store). `now_ms` is the store's time.
pub fn next(record: &PayoutRecord, now_ms: i64) -> Next {
    match record.status {
        PayoutStatus::New => return Next::Reserve,
        PayoutStatus::Reserved | PayoutStatus::Sent => {}
        _ => return Next::Nothing,
    }
    if now_ms < record.call_until_ms {
        return Next::Wait {
            until_ms: record.call_until_ms,
        };
    }
    if record.status == PayoutStatus::Reserved {
        return Next::Send;
    }
    Next::Ask(ask_purpose(record, now_ms))
}

/// What a lookup's "not found" would mean for a `sent` payout now (its own fence aside): the
/// asker judges again from the record its fence write returned, so a send that came and went
/// between its first read and its fence cannot make an old judgement pass for a new one.
pub fn ask_purpose(record: &PayoutRecord, now_ms: i64) -> AskPurpose {
    // The provider's having the transfer outranks any refusal after it.
    if record.accepted {
        return AskPurpose::Status;
    }
    if record.refused.is_some() {
        // Only a first send's refusal is about this send alone: a resend may be refused
        // because the first arrived (a duplicate reference), however long ago it was sent.
        return AskPurpose::AfterRefusal {
            absence_proves: record.sends <= 1 && record.conflict.is_none(),
        };
    }
    if !record.ambiguous {
        return AskPurpose::Status;
    }
    AskPurpose::AfterAmbiguous {
        absence_proves: now_ms >= record.absent_after_ms,
    }
}

/// Whether a payout whose lookup proved its last send never arrived may be sent again.
pub fn may_resend(record: &PayoutRecord) -> bool {
    record.status == PayoutStatus::Sent
        && !record.accepted
        && record.refused.is_none()
        && record.conflict.is_none()
        && record.sends < MAX_SENDS
}

/// A call about to start, as its fence records it.
#[derive(Debug, Clone, Copy)]
pub struct CallTicket<'a> {
    pub kind: CallKind,
    /// Who holds the fence (one id per look at the payout): its own next call passes.
    pub holder: &'a str,
    /// `sends` as the caller read it: a send is conditioned on it, so of two that both want to
    /// send, one does.
    pub seen_sends: u32,
    /// The call's bound (its client timeout).
    pub bound_ms: i64,
    /// For a send: how long after the fence the provider may still make a transfer visible
    /// (its documented window).
    pub visibility_ms: i64,
}

/// What the provider's answer adds to the record (besides a final word, which settles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderNote<'a> {
    /// Its status word, or what went wrong.
    pub status: &'a str,
    /// The provider has the transfer: from now on, not found is its lag, never a reason to
    /// send again.
    pub accepted: bool,
    /// It refused the send (a 4xx): ask once, then failed.
    pub refused: bool,
}

/// The time a request has, measured on this process's monotonic clock (never a wall clock).
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    deadline: tokio::time::Instant,
}

impl Budget {
    /// A request's budget from its lease: less the store clock's resolution (a call must end
    /// before anyone could take the claim over), capped at [`REQUEST_BUDGET_MS`].
    pub fn of_lease_ms(lease_ms: i64) -> Self {
        Self::from_now_ms(lease_ms - STORE_CLOCK_MS)
    }

    /// `ms` from now, capped at [`REQUEST_BUDGET_MS`].
    pub fn from_now_ms(ms: i64) -> Self {
        let ms = u64::try_from(ms.clamp(0, REQUEST_BUDGET_MS)).unwrap_or(0);
        Budget {
            deadline: tokio::time::Instant::now() + std::time::Duration::from_millis(ms),
        }
    }

    /// Whether a call bounded by `bound_ms` ends with [`FINISH_MS`] to spare.
    pub fn allows(&self, bound_ms: i64) -> bool {
        let left = self
            .deadline
            .saturating_duration_since(tokio::time::Instant::now());
        i64::try_from(left.as_millis()).unwrap_or(i64::MAX) >= bound_ms + FINISH_MS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{AccountId, Currency, ProviderId};
    use crate::payouts::PayoutId;

    fn record(status: PayoutStatus) -> PayoutRecord {
        PayoutRecord {
            payout: PayoutId::parse("po_00000000000000000000000000000001").unwrap(),
            status,
            provider: ProviderId::GENERIC,
            account: AccountId::parse("a").unwrap(),
            amount: 100,
            currency: Currency::parse("NGN").unwrap(),
            destination: serde_json::Map::new(),
            narration: None,
            shard: 0,
            reserve_at_ms: 0,
            moves: Default::default(),
            words: vec![],
            sends: 1,
            ambiguous: true,
            accepted: false,
            refused: None,
            conflict: None,
            call_until_ms: 10_000,
            absent_after_ms: 20_000,
            provider_status: None,
            available_minor: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            held_claims: Default::default(),
            posting: false,
        }
    }

    #[test]
    fn nobody_calls_while_a_call_may_run() {
        let r = record(PayoutStatus::Sent);
        assert_eq!(next(&r, 9_999), Next::Wait { until_ms: 10_000 });
        let mut reserved = record(PayoutStatus::Reserved);
        reserved.sends = 0;
        assert_eq!(next(&reserved, 9_999), Next::Wait { until_ms: 10_000 });
        assert_eq!(next(&reserved, 10_000), Next::Send);
    }

    #[test]
    fn absence_proves_nothing_inside_the_window_or_after_acceptance() {
        let r = record(PayoutStatus::Sent);
        assert_eq!(
            next(&r, 15_000),
            Next::Ask(AskPurpose::AfterAmbiguous {
                absence_proves: false
            })
        );
        assert_eq!(
            next(&r, 20_000),
            Next::Ask(AskPurpose::AfterAmbiguous {
                absence_proves: true
            })
        );
        let accepted = PayoutRecord {
            accepted: true,
            ..r.clone()
        };
        assert_eq!(next(&accepted, 99_000), Next::Ask(AskPurpose::Status));
        assert!(!may_resend(&accepted));
        let refused = PayoutRecord {
            refused: Some("refused: HTTP 400".into()),
            ambiguous: false,
            ..r.clone()
        };
        // A resend refused (sends 2): not found never proves the failure, even past the
        // window (issue #42, case 2: the first send arrived and the provider refused the
        // resend as a duplicate reference); a person looks.
        let resent = PayoutRecord {
            sends: 2,
            ..refused.clone()
        };
        for now in [10_000, 20_000, 10_000_000] {
            assert_eq!(
                next(&resent, now),
                Next::Ask(AskPurpose::AfterRefusal {
                    absence_proves: false
                })
            );
        }
        assert!(needs_person(&resent, 20_000, UNRESOLVED_AFTER_MS).is_some());
        assert!(needs_person(&refused, 20_000, UNRESOLVED_AFTER_MS).is_none());
        assert_eq!(
            next(&refused, 10_000),
            Next::Ask(AskPurpose::AfterRefusal {
                absence_proves: true
            })
        );
        assert!(!may_resend(&refused));
        // Accepted outranks an earlier refusal: not found is lag.
        let both = PayoutRecord {
            accepted: true,
            ..refused.clone()
        };
        assert_eq!(next(&both, 10_000), Next::Ask(AskPurpose::Status));
        let spent = PayoutRecord {
            sends: MAX_SENDS,
            ..r
        };
        assert!(!may_resend(&spent));
    }

    #[test]
    fn settled_payouts_call_nobody() {
        for s in [
            PayoutStatus::Refused,
            PayoutStatus::Failed,
            PayoutStatus::Paid,
            PayoutStatus::Reversed,
        ] {
            assert_eq!(next(&record(s), 99_000), Next::Nothing);
        }
        assert_eq!(next(&record(PayoutStatus::New), 0), Next::Reserve);
    }

    #[test]
    fn a_conflicting_word_stops_sends_and_shows_the_payout_to_a_person() {
        let conflict = PayoutRecord {
            conflict: Some("the word names 1 NGN".into()),
            ..record(PayoutStatus::Sent)
        };
        assert!(!may_resend(&conflict));
        assert!(needs_person(&conflict, 0, UNRESOLVED_AFTER_MS).is_some());
        let refused_first = PayoutRecord {
            refused: Some("refused: HTTP 400".into()),
            ..conflict
        };
        assert_eq!(
            ask_purpose(&refused_first, 99_000),
            AskPurpose::AfterRefusal {
                absence_proves: false
            }
        );
    }

    #[test]
    fn a_payout_reserved_past_a_request_s_time_needs_a_person_at_once() {
        let mut r = record(PayoutStatus::Reserved);
        r.updated_at_ms = 1_000;
        let late = 1_000 + REQUEST_BUDGET_MS + CALL_MARGIN_MS;
        assert_eq!(needs_person(&r, late - 1, UNRESOLVED_AFTER_MS), None);
        assert!(needs_person(&r, late, UNRESOLVED_AFTER_MS).is_some());
    }

    #[test]
    fn a_configuration_fits_a_call_only_with_time_before_and_after_it() {
        // The defaults: a 30 s lease, a 5 s bound.
        assert!(call_fits(30_000, 5_000).is_ok());
        // Issue #42, case 4: each of these reserved and never sent.
        for (lease_ms, bound_ms) in [(5_000, 5_000), (30_000, 24_000), (6_000, 5_000)] {
            let why = call_fits(lease_ms, bound_ms).unwrap_err();
            assert!(why.contains(&format!("{bound_ms} ms")), "{why}");
        }
        // At the edge, and one under.
        let lease = STORE_CLOCK_MS + needed_ms(5_000);
        assert!(call_fits(lease, 5_000).is_ok());
        assert!(call_fits(lease - 1, 5_000).is_err());
        let max_bound = REQUEST_BUDGET_MS - PREPARE_MS - FINISH_MS;
        assert!(call_fits(900_000, max_bound).is_ok());
        assert!(call_fits(900_000, max_bound + 1).is_err());
        // The request's own check agrees with the start's.
        assert!(!Budget::of_lease_ms(lease - 1).allows(5_000 + PREPARE_MS));
    }
}
