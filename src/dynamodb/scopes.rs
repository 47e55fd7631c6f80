//! Payout callers' scopes in the payments table: one item per bearer token, `pk` =
//! `scope#{token id}` (the token's public digest id, never the token), `scope` (what that
//! caller's payout ids are derived from) and `bound_at_ms`. Written once
//! (`attribute_not_exists(pk)`) and never changed, so what a retry's key names is recorded, not
//! recomputed from the configuration of whichever process serves it (`crate::payouts::callers`).
//! Only `payhook serve` reads and writes these, at start.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;

use super::item::{condition_failed, n, s, unavailable, Item, Reader};
use super::DynamoStore;
use crate::payouts::callers::{Scope, Scopes, TokenId};
use crate::store::StoreError;

const PREFIX: &str = "scope#";

fn scope_pk(token: &TokenId) -> String {
    format!("{PREFIX}{token}")
}

/// The binding an item holds: its token and scope.
fn to_binding(item: &Item, table: &str) -> Result<(TokenId, Scope), StoreError> {
    let r = Reader::new(item, table);
    let token = r
        .str("pk")?
        .strip_prefix(PREFIX)
        .ok_or_else(|| r.corrupt("pk is not a scope binding"))?;
    Ok((
        TokenId(token.to_owned()),
        Scope::from_stored(r.str("scope")?.to_owned()),
    ))
}

impl DynamoStore {
    /// The binding of `token`, read consistently (after a lost write, on servers that give no
    /// `ALL_OLD`).
    async fn scope_of(&self, token: &TokenId) -> Result<Option<Scope>, StoreError> {
        let table = &self.tables.payments;
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key("pk", s(scope_pk(token)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("GetItem", table, e))?;
        out.item
            .map(|i| to_binding(&i, table).map(|(_, scope)| scope))
            .transpose()
    }
}

impl Scopes for DynamoStore {
    async fn bound_scopes(
        &self,
        tokens: &[TokenId],
    ) -> Result<BTreeMap<TokenId, Scope>, StoreError> {
        let table = self.tables.payments.clone();
        let keys = tokens
            .iter()
            .map(|t| HashMap::from([("pk".to_owned(), s(scope_pk(t)))]))
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
        items.iter().map(|i| to_binding(i, &table)).collect()
    }

    async fn bind_scope(
        &self,
        token: &TokenId,
        scope: &Scope,
    ) -> Result<Option<Scope>, StoreError> {
        let table = &self.tables.payments;
        let put = self
            .client
            .put_item()
            .table_name(table)
            .item("pk", s(scope_pk(token)))
            .item("scope", s(scope.as_str()))
            .item("bound_at_ms", n(self.clock.now_ms()))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let held = match put {
            Ok(_) => return Ok(None),
            Err(e) => match condition_failed(e, "PutItem", table)? {
                Some(old) => Some(to_binding(&old, table)?.1),
                None => match self.scope_of(token).await? {
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
