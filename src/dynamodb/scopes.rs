//! Payout callers' scopes in the payments table: one item per bearer token, `pk` =
//! `scope#token:{token id}` (the token's public digest id, never the token), and one per caller
//! name, `pk` = `scope#name:{name}` (the fallback for a caller none of whose tokens is bound),
//! each with `scope` (what that caller's payout ids are derived from) and `bound_at_ms`. Written once
//! (`attribute_not_exists(pk)`) and never changed, so what a retry's key names is recorded, not
//! recomputed from the configuration of whichever process serves it (`crate::payouts::callers`).
//! Only `payhook serve` reads and writes these, at start.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;

use super::item::{condition_failed, n, s, unavailable, Item, Reader};
use super::DynamoStore;
use crate::payouts::callers::{Bindings, Holder, Scope, Scopes, TokenId};
use crate::store::StoreError;

const TOKEN: &str = "scope#token:";
const NAME: &str = "scope#name:";

fn scope_pk(holder: Holder<'_>) -> String {
    match holder {
        Holder::Token(t) => format!("{TOKEN}{t}"),
        Holder::Name(n) => format!("{NAME}{n}"),
    }
}

/// Files the binding `item` holds into `into`.
fn file_binding(item: &Item, table: &str, into: &mut Bindings) -> Result<(), StoreError> {
    let r = Reader::new(item, table);
    let pk = r.str("pk")?;
    let scope = Scope::from_stored(r.str("scope")?.to_owned());
    if let Some(token) = pk.strip_prefix(TOKEN) {
        into.tokens.insert(TokenId(token.to_owned()), scope);
    } else if let Some(name) = pk.strip_prefix(NAME) {
        into.names.insert(name.to_owned(), scope);
    } else {
        return Err(r.corrupt("pk is not a scope binding"));
    }
    Ok(())
}

fn scope_in(item: &Item, table: &str) -> Result<Scope, StoreError> {
    Ok(Scope::from_stored(
        Reader::new(item, table).str("scope")?.to_owned(),
    ))
}

impl DynamoStore {
    /// The binding of `holder`, read consistently (after a lost write, on servers that give no
    /// `ALL_OLD`).
    async fn scope_of(&self, holder: Holder<'_>) -> Result<Option<Scope>, StoreError> {
        let table = &self.tables.payments;
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key("pk", s(scope_pk(holder)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("GetItem", table, e))?;
        out.item.map(|i| scope_in(&i, table)).transpose()
    }
}

impl Scopes for DynamoStore {
    async fn bound_scopes(
        &self,
        tokens: &[TokenId],
        names: &[String],
    ) -> Result<Bindings, StoreError> {
        let table = self.tables.payments.clone();
        let mut pks: Vec<String> = tokens.iter().map(|t| scope_pk(Holder::Token(t))).collect();
        pks.extend(names.iter().map(|n| scope_pk(Holder::Name(n))));
        // BatchGetItem refuses a request naming one key twice.
        pks.sort();
        pks.dedup();
        let keys = pks
            .into_iter()
            .map(|pk| HashMap::from([("pk".to_owned(), s(pk))]))
            .collect();
        let read = super::BatchRead {
            projection: "pk, #scope",
            names: &[("#scope", "scope")],
            consistent: true,
            rounds: 8,
        };
        let (items, unread) = self.batch_get(&table, keys, read).await?;
        if !unread.is_empty() {
            // Unread is not unbound: starting on a guess could re-scope a caller's keys.
            return Err(unavailable(
                "BatchGetItem",
                &table,
                std::io::Error::other("scope bindings left unprocessed"),
            ));
        }
        let mut bound = Bindings::default();
        for item in &items {
            file_binding(item, &table, &mut bound)?;
        }
        Ok(bound)
    }

    async fn bind_scope(
        &self,
        holder: Holder<'_>,
        scope: &Scope,
    ) -> Result<Option<Scope>, StoreError> {
        let table = &self.tables.payments;
        let put = self
            .client
            .put_item()
            .table_name(table)
            .item("pk", s(scope_pk(holder)))
            .item("scope", s(scope.as_str()))
            .item("bound_at_ms", n(self.clock.now_ms()))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let held = match put {
            Ok(_) => return Ok(None),
            Err(e) => match condition_failed(e, "PutItem", table)? {
                Some(old) => Some(scope_in(&old, table)?),
                None => match self.scope_of(holder).await? {
                    Some(held) => Some(held),
                    // Bindings are never deleted: a failed condition with nothing there is
                    // the store misbehaving, and a guess could re-scope a caller's keys.
                    None => {
                        return Err(unavailable(
                            "GetItem",
                            table,
                            std::io::Error::other("a refused scope binding reads as absent"),
                        ))
                    }
                },
            },
        };
        Ok(held.filter(|h| h != scope))
    }
}
