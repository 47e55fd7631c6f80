//! `payhook serve`'s start: every configured payout caller's scope, read from the recorded
//! bindings of its tokens, judged by [`crate::payouts::callers::resolve`], and its unbound
//! tokens bound, before anything is served. A binding write lost to another process starting at
//! the same time (with another configuration) is read back and the whole configuration judged
//! again against it: the first write decides, never the last configuration.

use std::collections::BTreeMap;

use crate::payouts::callers::{resolve, Configured, Refusal, Resolved, Scopes, TokenId};
use crate::store::StoreError;

/// Rounds of read, judge, bind: each lost round means another process bound one of these
/// tokens meanwhile, which can happen at most once per token.
const MAX_ROUNDS: usize = 8;

/// Why the scopes are not decided.
#[derive(Debug, thiserror::Error)]
pub enum ScopeError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("payout caller scopes not read or recorded: {0}")]
    Store(#[from] StoreError),
    #[error("payout caller scopes kept changing under concurrent starts; start again")]
    Contended,
}

/// The scope of each of `callers` (same order), recorded for every one of their tokens.
pub async fn settle_scopes(
    store: &impl Scopes,
    callers: &[Configured],
) -> Result<Vec<Resolved>, ScopeError> {
    let tokens: Vec<TokenId> = callers.iter().flat_map(|c| c.tokens.clone()).collect();
    if tokens.is_empty() {
        return Ok(Vec::new());
    }
    let mut bound = store.bound_scopes(&tokens).await?;
    for _ in 0..MAX_ROUNDS {
        let resolved = resolve(callers, &bound)?;
        match bind_all(store, &resolved).await? {
            None => return Ok(resolved),
            Some(won) => bound.extend(won),
        }
    }
    Err(ScopeError::Contended)
}

/// Binds every unbound token to its caller's scope; `Some` the bindings another process wrote
/// first (to judge again), `None` when every write was this one's (or agreed).
async fn bind_all(
    store: &impl Scopes,
    resolved: &[Resolved],
) -> Result<Option<BTreeMap<TokenId, crate::payouts::callers::Scope>>, StoreError> {
    let mut lost = BTreeMap::new();
    for r in resolved {
        for token in &r.unbound {
            if let Some(other) = store.bind_scope(token, &r.scope).await? {
                tracing::warn!(token = %token, scope = %other, "another start bound this payout token first; judging again");
                lost.insert(token.clone(), other);
            }
        }
    }
    Ok((!lost.is_empty()).then_some(lost))
}
