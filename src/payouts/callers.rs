//! Whose keys a payout request's `Idempotency-Key` is: the caller's *scope*, decided once per
//! token and recorded, never recomputed from configuration.
//!
//! A payout id is `po_` + SHA-256(scope, key). Under `payhook serve` a caller is configured by
//! name with its bearer tokens, and names and lists change (a rotation, moving a token from
//! `PAYHOOK_PAYOUT_TOKEN` to `PAYHOOK_PAYOUT_CALLERS`, a rename). So the scope is not the
//! configured name: it is what the caller's tokens are **bound** to in the store (one item per
//! token, keyed by the token's digest id, written once; and one per caller name, the fallback
//! when none of its tokens is bound, so a rotation without overlap keeps the scope too). At start, [`resolve`] judges the
//! configuration against the bindings:
//!
//! | the caller's tokens | its scope | then |
//! |---|---|---|
//! | bound, all to one scope | that scope (a rename, token → named callers, a rotation with overlap keep it) | its unbound tokens are bound to it |
//! | none bound | the scope its name is bound to, else `caller:{name}` (what this release used before bindings) | its tokens (and name) are bound to it |
//! | bound to two scopes (a merge) | refused, unless declared (`name@scope=…`) | a declared caller's tokens bound elsewhere keep that scope as an earlier name |
//! | two callers end on one scope (a split) | refused, unless one declares another scope | — |
//!
//! A refusal names the tokens by digest id (never their value), the scopes, and the declaration
//! to write. The store's capability is [`Scopes`]; `pipeline::callers` runs the start-up loop
//! (a lost binding write is read back and judged again).

use std::collections::BTreeMap;
use std::future::Future;

use crate::store::StoreError;

/// What keys are scoped by (`caller:erp`): the string payout ids are derived from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Scope(String);

impl Scope {
    /// The scope a caller named `name` gets when none of its tokens is bound.
    pub fn of_name(name: &str) -> Self {
        Scope(format!("caller:{name}"))
    }

    /// A declared or stored scope: `caller:` and a caller's name (1 to 64 letters, digits, `-`,
    /// `_`).
    pub fn parse(text: &str) -> Option<Self> {
        let name = text.strip_prefix("caller:")?;
        valid_name(name).then(|| Scope(text.to_owned()))
    }

    /// A scope read back from the store, as it was written.
    pub fn from_stored(text: String) -> Self {
        Scope(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A caller's name: 1 to 64 letters, digits, `-` or `_`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A token's public digest id (`ReadToken::id`): what a binding is keyed by. Never the token.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TokenId(pub String);

impl std::fmt::Display for TokenId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a binding item is kept for: a token (by digest id) or a caller's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder<'a> {
    Token(&'a TokenId),
    Name(&'a str),
}

/// The recorded scopes of tokens and of caller names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bindings {
    pub tokens: BTreeMap<TokenId, Scope>,
    /// A name's scope is a fallback only, for a caller none of whose tokens is bound (a rotation
    /// without overlap after a rename or a move to named callers): a token's binding wins.
    pub names: BTreeMap<String, Scope>,
}

/// A configured caller, as [`resolve`] needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Configured {
    pub name: String,
    pub tokens: Vec<TokenId>,
    /// `name@scope=…`: the operator's word on the caller's scope, whatever its tokens are bound to.
    pub declared: Option<Scope>,
}

/// A caller's scope, decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub scope: Scope,
    /// Its tokens not bound yet: to bind to `scope`.
    pub unbound: Vec<TokenId>,
    /// Its name is not bound yet: to bind to `scope`.
    pub name_unbound: bool,
    /// Its tokens bound to another scope (a declared merge): each token's earlier name, looked
    /// up before `scope` so a retry with that token finds the payouts it made there. Never
    /// another configured caller's scope (that would replay that caller's payouts).
    pub earlier: BTreeMap<TokenId, Scope>,
}

/// Why `payhook serve` refuses to start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("payout token {token} is listed under two callers, {first} and {second}: a token names one caller")]
    TokenTwice {
        token: TokenId,
        first: String,
        second: String,
    },
    #[error(
        "payout caller {caller}'s tokens are bound to different scopes ({}): a retry with one of them would not find the payouts made with another. Declare the scope {caller} keeps: write `{caller}@{keep}=` in place of `{caller}=` in PAYHOOK_PAYOUT_CALLERS (its other tokens still find the payouts they made)",
        list(.bound)
    )]
    Merge {
        caller: String,
        bound: Vec<(TokenId, Scope)>,
        keep: Scope,
    },
    #[error(
        "payout callers {first} and {second} would both use the scope {scope} (tokens {}): each could replay the other's payouts. Declare a scope of its own for {second}: write `{second}@{fresh}=` in place of `{second}=` in PAYHOOK_PAYOUT_CALLERS (its keys then start afresh)",
        tokens.iter().map(|t| t.0.as_str()).collect::<Vec<_>>().join(", ")
    )]
    Split {
        first: String,
        second: String,
        scope: Scope,
        tokens: Vec<TokenId>,
        fresh: Scope,
    },
}

fn list(bound: &[(TokenId, Scope)]) -> String {
    bound
        .iter()
        .map(|(t, s)| format!("token {t} -> {s}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The scope of every caller in `callers` (same order), given the recorded `bound` scopes of
/// their tokens, or why the configuration must not start. Pure: the bindings are all it reads.
pub fn resolve(callers: &[Configured], bindings: &Bindings) -> Result<Vec<Resolved>, Refusal> {
    let bound = &bindings.tokens;
    let mut owner: BTreeMap<&TokenId, &str> = BTreeMap::new();
    for c in callers {
        for t in &c.tokens {
            if let Some(first) = owner.insert(t, &c.name) {
                if first != c.name {
                    return Err(Refusal::TokenTwice {
                        token: t.clone(),
                        first: first.to_owned(),
                        second: c.name.clone(),
                    });
                }
            }
        }
    }
    let mut out: Vec<Resolved> = Vec::with_capacity(callers.len());
    for c in callers {
        let held: Vec<(TokenId, Scope)> = c
            .tokens
            .iter()
            .filter_map(|t| bound.get(t).map(|s| (t.clone(), s.clone())))
            .collect();
        let mut scopes: Vec<&Scope> = held.iter().map(|(_, s)| s).collect();
        scopes.sort();
        scopes.dedup();
        let scope = match (&c.declared, scopes.as_slice()) {
            (Some(declared), _) => declared.clone(),
            (None, []) => bindings
                .names
                .get(&c.name)
                .cloned()
                .unwrap_or_else(|| Scope::of_name(&c.name)),
            (None, [one]) => (*one).clone(),
            (None, [first, ..]) => {
                return Err(Refusal::Merge {
                    caller: c.name.clone(),
                    keep: (*first).clone(),
                    bound: held,
                })
            }
        };
        let unbound = c
            .tokens
            .iter()
            .filter(|t| !bound.contains_key(*t))
            .cloned()
            .collect();
        out.push(Resolved {
            scope,
            unbound,
            name_unbound: !bindings.names.contains_key(&c.name),
            earlier: held.into_iter().collect(),
        });
    }
    for (i, r) in out.iter().enumerate() {
        if let Some(j) = out[..i].iter().position(|e| e.scope == r.scope) {
            return Err(Refusal::Split {
                first: callers[j].name.clone(),
                second: callers[i].name.clone(),
                scope: r.scope.clone(),
                tokens: callers[j]
                    .tokens
                    .iter()
                    .chain(&callers[i].tokens)
                    .cloned()
                    .collect(),
                fresh: fresh_scope(&callers[i].name, &out),
            });
        }
    }
    let primary: Vec<Scope> = out.iter().map(|r| r.scope.clone()).collect();
    for r in &mut out {
        let own = r.scope.clone();
        r.earlier.retain(|_, s| *s != own && !primary.contains(s));
    }
    Ok(out)
}

/// A scope no caller uses, for the refusal's declaration: `caller:{name}`, else with a suffix.
fn fresh_scope(name: &str, taken: &[Resolved]) -> Scope {
    let used = |s: &Scope| taken.iter().any(|r| r.scope == *s);
    let plain = Scope::of_name(name);
    if !used(&plain) {
        return plain;
    }
    (2..)
        .map(|n| Scope::of_name(&format!("{}-{n}", &name[..name.len().min(60)])))
        .find(|s| !used(s))
        .unwrap_or(plain)
}

/// The recorded scopes of tokens and caller names, in the payments table.
pub trait Scopes: Sync {
    /// The scopes `tokens` and `names` are bound to (those not bound are absent). Consistent.
    fn bound_scopes(
        &self,
        tokens: &[TokenId],
        names: &[String],
    ) -> impl Future<Output = Result<Bindings, StoreError>> + Send;

    /// Binds `holder` to `scope` unless it is bound: `Ok(None)` when this write bound it (or it
    /// was bound to `scope` already), `Ok(Some(other))` when it is bound to another scope.
    fn bind_scope(
        &self,
        holder: Holder<'_>,
        scope: &Scope,
    ) -> impl Future<Output = Result<Option<Scope>, StoreError>> + Send;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn t(id: &str) -> TokenId {
        TokenId(id.to_owned())
    }
    fn scope(s: &str) -> Scope {
        Scope::parse(s).unwrap()
    }
    fn caller(name: &str, tokens: &[&str]) -> Configured {
        Configured {
            name: name.to_owned(),
            tokens: tokens.iter().map(|x| t(x)).collect(),
            declared: None,
        }
    }
    fn tokens(pairs: &[(&str, &str)]) -> BTreeMap<TokenId, Scope> {
        pairs.iter().map(|(k, s)| (t(k), scope(s))).collect()
    }
    fn bound(pairs: &[(&str, &str)]) -> Bindings {
        Bindings {
            tokens: tokens(pairs),
            names: BTreeMap::new(),
        }
    }

    #[test]
    fn nothing_bound_is_the_callers_name() {
        let got = resolve(&[caller("local", &["a"])], &Bindings::default()).unwrap();
        assert_eq!(got[0].scope, scope("caller:local"));
        assert_eq!(got[0].unbound, vec![t("a")]);
    }

    #[test]
    fn token_to_named_caller_and_rename_keep_the_bound_scope() {
        let b = bound(&[("a", "caller:local")]);
        for name in ["erp", "finance"] {
            let got = resolve(&[caller(name, &["a"])], &b).unwrap();
            assert_eq!(got[0].scope, scope("caller:local"));
            assert!(got[0].unbound.is_empty());
            assert!(got[0].earlier.is_empty());
        }
    }

    #[test]
    fn a_rotation_binds_the_new_token_to_the_old_scope() {
        let b = bound(&[("a", "caller:erp")]);
        let got = resolve(&[caller("erp", &["a", "b"])], &b).unwrap();
        assert_eq!(got[0].scope, scope("caller:erp"));
        assert_eq!(got[0].unbound, vec![t("b")]);
    }

    #[test]
    fn a_merge_is_refused_naming_tokens_scopes_and_the_declaration() {
        let b = bound(&[("a", "caller:local"), ("c", "caller:shop")]);
        let e = resolve(&[caller("erp", &["a", "c"])], &b).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, Refusal::Merge { .. }));
        for part in ["token a", "token c", "caller:shop", "`erp@caller:local=`"] {
            assert!(text.contains(part), "{text}");
        }
    }

    #[test]
    fn a_declared_merge_keeps_the_declared_scope_and_the_other_as_earlier_name() {
        let b = bound(&[("a", "caller:local"), ("c", "caller:shop")]);
        let mut erp = caller("erp", &["a", "c"]);
        erp.declared = Some(scope("caller:local"));
        let got = resolve(&[erp], &b).unwrap();
        assert_eq!(got[0].scope, scope("caller:local"));
        assert_eq!(got[0].earlier, tokens(&[("c", "caller:shop")]));
    }

    #[test]
    fn a_split_is_refused_and_its_declaration_starts_without_sharing() {
        let b = bound(&[("a", "caller:local"), ("b", "caller:local")]);
        let callers = [caller("erp", &["a"]), caller("shop", &["b"])];
        let e = resolve(&callers, &b).unwrap_err();
        assert!(e.to_string().contains("`shop@caller:shop=`"), "{e}");
        let mut shop = caller("shop", &["b"]);
        shop.declared = Some(scope("caller:shop"));
        let got = resolve(&[caller("erp", &["a"]), shop], &b).unwrap();
        assert_eq!(got[0].scope, scope("caller:local"));
        assert_eq!(got[1].scope, scope("caller:shop"));
        // b's old scope is erp's: never an earlier name of shop's.
        assert!(got[1].earlier.is_empty());
    }

    #[test]
    fn a_new_caller_named_like_a_bound_scope_is_a_split() {
        // `local`'s token moved to erp; a new caller named local would take erp's payouts.
        let b = bound(&[("a", "caller:local")]);
        let e = resolve(&[caller("erp", &["a"]), caller("local", &["z"])], &b).unwrap_err();
        assert!(matches!(e, Refusal::Split { .. }), "{e}");
        assert!(e.to_string().contains("`local@caller:local-2=`"), "{e}");
    }

    #[test]
    fn a_token_under_two_callers_is_refused() {
        let e = resolve(
            &[caller("erp", &["a"]), caller("shop", &["a"])],
            &Bindings::default(),
        );
        assert!(matches!(e, Err(Refusal::TokenTwice { .. })));
    }

    #[test]
    fn a_rotation_without_overlap_keeps_the_scope_the_name_was_bound_to() {
        // erp was local's token moved over (t1 -> caller:local); t1 is replaced by t2 at once.
        let mut b = bound(&[("a", "caller:local")]);
        b.names.insert("erp".into(), scope("caller:local"));
        let got = resolve(&[caller("erp", &["b"])], &b).unwrap();
        assert_eq!(got[0].scope, scope("caller:local"));
        assert!(!got[0].name_unbound);
        // A token's binding wins over the name's.
        b.tokens.insert(t("b"), scope("caller:other"));
        let got = resolve(&[caller("erp", &["b"])], &b).unwrap();
        assert_eq!(got[0].scope, scope("caller:other"));
    }
}
