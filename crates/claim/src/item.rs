//! Attribute-value plumbing: building values, reading typed fields with a `Corrupt` error that
//! names the item, and telling a failed condition from a failure. Public so a store built beside
//! the claim table (payhook's other tables) speaks DynamoDB the same way.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::error::Rejection;
use crate::StoreError;

/// One DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// A string attribute.
pub fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// A number attribute.
pub fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// Wraps any SDK failure as retryable, keeping it as the source.
pub fn unavailable<E>(operation: &'static str, table: &str, err: E) -> StoreError
where
    E: std::error::Error + Send + Sync + 'static,
{
    StoreError::Unavailable {
        operation,
        table: table.to_owned(),
        source: Box::new(err),
    }
}

/// Classifies an SDK failure by DynamoDB's error code: the refusals a retry cannot fix
/// ([`StoreError::Rejected`]: validation, an item too large, no table, no access) apart from
/// the failures it can ([`StoreError::Unavailable`]).
pub fn sdk_failure<E, R>(operation: &'static str, table: &str, err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let why = err.as_service_error().and_then(|e| {
        rejection(
            e.code().unwrap_or_default(),
            e.message().unwrap_or_default(),
        )
    });
    match why {
        Some(why) => StoreError::Rejected {
            operation,
            table: table.to_owned(),
            why,
            source: Box::new(err),
        },
        None => unavailable(operation, table, err),
    }
}

/// The refusal an error code (and, for validation, its message) names; `None`: retryable.
pub fn rejection(code: &str, message: &str) -> Option<Rejection> {
    Some(match code {
        "ValidationException" if message.contains("size") => Rejection::TooLarge,
        "ValidationException" | "SerializationException" => Rejection::Invalid,
        "ItemCollectionSizeLimitExceededException" => Rejection::TooLarge,
        "ResourceNotFoundException" => Rejection::NoTable,
        "AccessDeniedException"
        | "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "MissingAuthenticationTokenException" => Rejection::NoAccess,
        _ => return None,
    })
}

/// Service errors that can mean "your condition was false".
pub trait ConditionFailure {
    /// `Some(item)` when this is ConditionalCheckFailed; the item is the ALL_OLD image when the
    /// server honours `ReturnValuesOnConditionCheckFailure` (DynamoDB, moto) and `None` when it
    /// does not (dynalite), in which case callers read the item with a consistent GetItem.
    fn condition_item(&self) -> Option<Option<Item>>;
}

impl ConditionFailure for PutItemError {
    fn condition_item(&self) -> Option<Option<Item>> {
        match self {
            PutItemError::ConditionalCheckFailedException(e) => Some(e.item().cloned()),
            _ => None,
        }
    }
}

impl ConditionFailure for UpdateItemError {
    fn condition_item(&self) -> Option<Option<Item>> {
        match self {
            UpdateItemError::ConditionalCheckFailedException(e) => Some(e.item().cloned()),
            _ => None,
        }
    }
}

impl ConditionFailure for DeleteItemError {
    fn condition_item(&self) -> Option<Option<Item>> {
        match self {
            DeleteItemError::ConditionalCheckFailedException(e) => Some(e.item().cloned()),
            _ => None,
        }
    }
}

/// Splits a write's error: a failed condition is an answer (`Ok(old item if returned)`),
/// anything else is [`sdk_failure`]: `Rejected` when DynamoDB refused the request for good,
/// else `Unavailable`.
pub fn condition_failed<E, R>(
    err: SdkError<E, R>,
    operation: &'static str,
    table: &str,
) -> Result<Option<Item>, StoreError>
where
    E: ConditionFailure + ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    if let Some(item) = err
        .as_service_error()
        .and_then(ConditionFailure::condition_item)
    {
        return Ok(item);
    }
    Err(sdk_failure(operation, table, err))
}

/// Typed reads from one item, with errors that say which item and attribute was wrong.
pub struct Reader<'a> {
    item: &'a Item,
    table: &'a str,
}

impl<'a> Reader<'a> {
    /// Reads `item` of `table` (named in errors).
    pub fn new(item: &'a Item, table: &'a str) -> Self {
        Reader { item, table }
    }

    /// The error for this item: `reason` says what is wrong.
    pub fn corrupt(&self, reason: impl Into<String>) -> StoreError {
        let key = self.opt_str("pk").unwrap_or("?").to_owned();
        StoreError::Corrupt {
            table: self.table.to_owned(),
            key,
            reason: reason.into(),
        }
    }

    /// A string attribute, if present.
    pub fn opt_str(&self, name: &str) -> Option<&'a str> {
        match self.item.get(name) {
            Some(AttributeValue::S(v)) => Some(v.as_str()),
            _ => None,
        }
    }

    /// A string attribute that must be present.
    pub fn str(&self, name: &str) -> Result<&'a str, StoreError> {
        self.opt_str(name)
            .ok_or_else(|| self.corrupt(format!("missing string {name}")))
    }

    /// An integer attribute, if present.
    pub fn opt_num(&self, name: &str) -> Result<Option<i64>, StoreError> {
        match self.item.get(name) {
            Some(AttributeValue::N(v)) => v
                .parse()
                .map(Some)
                .map_err(|_| self.corrupt(format!("{name} is not an integer"))),
            Some(_) => Err(self.corrupt(format!("{name} is not a number"))),
            None => Ok(None),
        }
    }

    /// An integer attribute that must be present.
    pub fn num(&self, name: &str) -> Result<i64, StoreError> {
        self.opt_num(name)?
            .ok_or_else(|| self.corrupt(format!("missing number {name}")))
    }

    /// A string set attribute (empty when absent).
    pub fn str_set(&self, name: &str) -> Vec<String> {
        match self.item.get(name) {
            Some(AttributeValue::Ss(v)) => v.clone(),
            _ => Vec::new(),
        }
    }

    /// A list attribute (empty when absent).
    pub fn list(&self, name: &str) -> &'a [AttributeValue] {
        match self.item.get(name) {
            Some(AttributeValue::L(v)) => v.as_slice(),
            _ => &[],
        }
    }

    /// Parses a string attribute with `parse`, naming the attribute when it fails.
    pub fn parsed<T, E>(
        &self,
        name: &str,
        parse: impl Fn(&str) -> Result<T, E>,
    ) -> Result<T, StoreError> {
        parse(self.str(name)?).map_err(|_| self.corrupt(format!("{name} is not valid")))
    }
}
