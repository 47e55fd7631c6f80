//! `payhook serve`'s start: every configured payout caller's scope, read from the recorded
//! bindings of its tokens, judged by [`crate::payouts::callers::resolve`], and its unbound
//! tokens bound, before anything is served. A binding write lost to another process starting at
//! the same time (with another configuration) is read back and the whole configuration judged
//! again against it: the first write decides, never the last configuration.

use crate::payouts::callers::{
    resolve, Bindings, Configured, Holder, Refusal, Resolved, Scopes, TokenId,
};
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
    let names: Vec<String> = callers.iter().map(|c| c.name.clone()).collect();
    let mut bound = store.bound_scopes(&tokens, &names).await?;
    for _ in 0..MAX_ROUNDS {
        let resolved = resolve(callers, &bound)?;
        let won = bind_all(store, callers, &resolved).await?;
        if won.tokens.is_empty() && won.names.is_empty() {
            return Ok(resolved);
        }
        bound.tokens.extend(won.tokens);
        bound.names.extend(won.names);
    }
    Err(ScopeError::Contended)
}

/// Binds every unbound token (and name) to its caller's scope; the bindings another process
/// wrote first (to judge again), empty when every write was this one's (or agreed).
async fn bind_all(
    store: &impl Scopes,
    callers: &[Configured],
    resolved: &[Resolved],
) -> Result<Bindings, StoreError> {
    let mut lost = Bindings::default();
    for (c, r) in callers.iter().zip(resolved) {
        for token in &r.unbound {
            if let Some(other) = store.bind_scope(Holder::Token(token), &r.scope).await? {
                tracing::warn!(token = %token, scope = %other, "another start bound this payout token first; judging again");
                lost.tokens.insert(token.clone(), other);
            }
        }
        if r.name_unbound {
            if let Some(other) = store.bind_scope(Holder::Name(&c.name), &r.scope).await? {
                tracing::warn!(caller = %c.name, scope = %other, "another start bound this payout caller's name first; judging again");
                lost.names.insert(c.name.clone(), other);
            }
        }
    }
    Ok(lost)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::payouts::callers::Scope;
    use std::sync::Mutex;

    /// Bindings in memory; `racer` is another start's: written just before this one's first
    /// write, as a concurrent start with another configuration would.
    #[derive(Default)]
    struct Memory {
        bound: Mutex<Bindings>,
        racer: Mutex<Option<(TokenId, Scope)>>,
        writes: Mutex<usize>,
    }

    impl Scopes for Memory {
        async fn bound_scopes(
            &self,
            tokens: &[TokenId],
            names: &[String],
        ) -> Result<Bindings, StoreError> {
            let b = self.bound.lock().unwrap();
            Ok(Bindings {
                tokens: tokens
                    .iter()
                    .filter_map(|t| b.tokens.get(t).map(|s| (t.clone(), s.clone())))
                    .collect(),
                names: names
                    .iter()
                    .filter_map(|n| b.names.get(n).map(|s| (n.clone(), s.clone())))
                    .collect(),
            })
        }

        async fn bind_scope(
            &self,
            holder: Holder<'_>,
            scope: &Scope,
        ) -> Result<Option<Scope>, StoreError> {
            *self.writes.lock().unwrap() += 1;
            let mut b = self.bound.lock().unwrap();
            if let Some((t, s)) = self.racer.lock().unwrap().take() {
                b.tokens.entry(t).or_insert(s);
            }
            let held = match holder {
                Holder::Token(t) => b.tokens.entry(t.clone()).or_insert(scope.clone()),
                Holder::Name(n) => b.names.entry(n.to_owned()).or_insert(scope.clone()),
            }
            .clone();
            Ok((held != *scope).then_some(held))
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
        assert_eq!(*store.writes.lock().unwrap(), 3);
        let again = settle_scopes(&store, &[caller("erp", &["a", "b"])])
            .await
            .unwrap();
        assert_eq!(again[0].scope.as_str(), "caller:local");
        assert!(again[0].unbound.is_empty());
        // erp's name is new: bound to the scope its tokens keep.
        assert_eq!(*store.writes.lock().unwrap(), 4);
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
        assert_eq!(b.tokens[&TokenId("a".into())].as_str(), "caller:erp");
        assert_eq!(b.tokens[&TokenId("b".into())].as_str(), "caller:shop");
    }
}
