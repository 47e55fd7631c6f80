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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::payouts::callers::Scope;
    use std::sync::Mutex;

    /// Bindings in memory; `racer` is another start's: written just before this one's first
    /// write of that token, as a concurrent start with another configuration would.
    #[derive(Default)]
    struct Memory {
        bound: Mutex<BTreeMap<TokenId, Scope>>,
        racer: Mutex<Option<(TokenId, Scope)>>,
        writes: Mutex<usize>,
    }

    impl Scopes for Memory {
        async fn bound_scopes(
            &self,
            tokens: &[TokenId],
        ) -> Result<BTreeMap<TokenId, Scope>, StoreError> {
            let b = self.bound.lock().unwrap();
            Ok(tokens
                .iter()
                .filter_map(|t| b.get(t).map(|s| (t.clone(), s.clone())))
                .collect())
        }

        async fn bind_scope(
            &self,
            token: &TokenId,
            scope: &Scope,
        ) -> Result<Option<Scope>, StoreError> {
            *self.writes.lock().unwrap() += 1;
            let mut b = self.bound.lock().unwrap();
            if let Some((t, s)) = self.racer.lock().unwrap().take() {
                b.entry(t).or_insert(s);
            }
            let held = b.entry(token.clone()).or_insert_with(|| scope.clone());
            Ok((held != scope).then(|| held.clone()))
        }
    }

    fn caller(name: &str, tokens: &[&str]) -> Configured {
        Configured {
            name: name.to_owned(),
            tokens: tokens.iter().map(|t| TokenId((*t).to_owned())).collect(),
            declared: None,
        }
    }

    #[tokio::test]
    async fn first_start_binds_every_token_and_the_next_writes_nothing() {
        let store = Memory::default();
        let got = settle_scopes(&store, &[caller("local", &["a", "b"])])
            .await
            .unwrap();
        assert_eq!(got[0].scope.as_str(), "caller:local");
        assert_eq!(*store.writes.lock().unwrap(), 2);
        let again = settle_scopes(&store, &[caller("erp", &["a", "b"])])
            .await
            .unwrap();
        assert_eq!(again[0].scope.as_str(), "caller:local");
        assert!(again[0].unbound.is_empty());
        assert_eq!(*store.writes.lock().unwrap(), 2);
    }

    #[tokio::test]
    async fn a_start_that_loses_a_binding_judges_the_winners_and_agrees() {
        // Another start bound a first, under a name it was given (a rename it knew of).
        let store = Memory::default();
        *store.racer.lock().unwrap() = Some((TokenId("a".into()), Scope::of_name("finance")));
        let got = settle_scopes(&store, &[caller("erp", &["a"])])
            .await
            .unwrap();
        assert_eq!(got[0].scope.as_str(), "caller:finance");
    }

    #[tokio::test]
    async fn a_start_that_loses_one_of_its_tokens_to_another_caller_refuses() {
        // This start binds a to erp; the other start bound b to shop meanwhile: a merge.
        let store = Memory::default();
        *store.racer.lock().unwrap() = Some((TokenId("b".into()), Scope::of_name("shop")));
        let e = settle_scopes(&store, &[caller("erp", &["a", "b"])])
            .await
            .unwrap_err();
        assert!(
            matches!(e, ScopeError::Refused(Refusal::Merge { .. })),
            "{e}"
        );
        let b = store.bound.lock().unwrap();
        assert_eq!(b[&TokenId("a".into())].as_str(), "caller:erp");
        assert_eq!(b[&TokenId("b".into())].as_str(), "caller:shop");
    }
}
