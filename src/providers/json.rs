//! Strict JSON for webhook payloads: duplicate keys are refused (two parsers could otherwise
//! disagree on which `amount` was signed), and field accessors name the path that was wrong.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::units::Units;
use super::PayloadError;
use crate::domain::{AccountId, Currency, Money, Reference};

/// Parses `body` as JSON, refusing duplicate object keys and trailing garbage.
pub fn parse_strict(body: &[u8]) -> Result<Value, PayloadError> {
    let text = std::str::from_utf8(body).map_err(|_| PayloadError::NotUtf8)?;
    let mut de = serde_json::Deserializer::from_str(text);
    let value = StrictSeed
        .deserialize(&mut de)
        .map_err(|e| PayloadError::Malformed(e.to_string()))?;
    de.end()
        .map_err(|e| PayloadError::Malformed(e.to_string()))?;
    Ok(value)
}

/// [`parse_strict`], and the top level must be an object: every provider's payload is one.
pub fn parse_object(body: &[u8]) -> Result<Value, PayloadError> {
    let root = parse_strict(body)?;
    if !root.is_object() {
        return Err(PayloadError::invalid("body", "must be a JSON object"));
    }
    Ok(root)
}

struct StrictSeed;

impl<'de> DeserializeSeed<'de> for StrictSeed {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(StrictSeed)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(StrictSeed)?;
            if out.insert(key.clone(), value).is_some() {
                return Err(serde::de::Error::custom(format!("duplicate key `{key}`")));
            }
        }
        Ok(Value::Object(out))
    }
}

/// Typed access to a parsed payload by dotted path, with errors that name the path.
pub struct Fields<'a> {
    root: &'a Value,
}

impl<'a> Fields<'a> {
    pub fn new(root: &'a Value) -> Self {
        Fields { root }
    }

    /// The value at `path` (`"data.amount"`), `None` if absent or null.
    pub fn get(&self, path: &str) -> Option<&'a Value> {
        path.split('.')
            .try_fold(self.root, |v, part| v.get(part))
            .filter(|v| !v.is_null())
    }

    pub fn opt_str(&self, path: &str) -> Result<Option<&'a str>, PayloadError> {
        match self.get(path) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(PayloadError::invalid(path, "must be a string")),
        }
    }

    pub fn str(&self, path: &str) -> Result<&'a str, PayloadError> {
        self.opt_str(path)?
            .ok_or_else(|| PayloadError::invalid(path, "is required"))
    }

    /// An integer that fits i64; fractions, exponents and bigger numbers are refused.
    pub fn opt_int(&self, path: &str) -> Result<Option<i64>, PayloadError> {
        match self.get(path) {
            None => Ok(None),
            Some(Value::Number(n)) => n.as_i64().map(Some).ok_or_else(|| {
                PayloadError::invalid(path, "must be an integer that fits in 64 bits")
            }),
            Some(_) => Err(PayloadError::invalid(path, "must be an integer")),
        }
    }

    pub fn int(&self, path: &str) -> Result<i64, PayloadError> {
        self.opt_int(path)?
            .ok_or_else(|| PayloadError::invalid(path, "is required"))
    }

    pub fn reference(&self, path: &str) -> Result<Reference, PayloadError> {
        Reference::parse(self.str(path)?).map_err(|e| PayloadError::invalid(path, e.to_string()))
    }

    pub fn account(&self, path: &str) -> Result<AccountId, PayloadError> {
        AccountId::parse(self.str(path)?).map_err(|e| PayloadError::invalid(path, e.to_string()))
    }

    pub fn opt_account(&self, path: &str) -> Result<Option<AccountId>, PayloadError> {
        self.opt_str(path)?
            .map(|a| AccountId::parse(a).map_err(|e| PayloadError::invalid(path, e.to_string())))
            .transpose()
    }

    pub fn currency(&self, path: &str) -> Result<Currency, PayloadError> {
        Currency::parse(self.str(path)?).map_err(|e| PayloadError::invalid(path, e.to_string()))
    }

    /// The integer at `amount_path`, in the provider's API unit (`units`, its table) of the
    /// currency at `currency_path`, as payhook's money: the one way a provider's amount is read.
    pub fn money(
        &self,
        units: &Units,
        amount_path: &str,
        currency_path: &str,
    ) -> Result<Money, PayloadError> {
        let amount = self.int(amount_path)?;
        let currency = self.currency(currency_path)?;
        units
            .from_api(amount, currency)
            .map_err(|e| PayloadError::invalid(amount_path, e.to_string()))
    }

    /// Money when the amount is present, for state-only events where it is optional.
    pub fn opt_money(
        &self,
        units: &Units,
        amount_path: &str,
        currency_path: &str,
    ) -> Result<Option<Money>, PayloadError> {
        if self.get(amount_path).is_none() && self.get(currency_path).is_none() {
            return Ok(None);
        }
        self.money(units, amount_path, currency_path).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_and_trailing_data_are_refused() {
        assert!(matches!(
            parse_strict(br#"{"a":1,"a":2}"#),
            Err(PayloadError::Malformed(_))
        ));
        assert!(matches!(
            parse_strict(br#"{"a":{"b":1,"b":1}}"#),
            Err(PayloadError::Malformed(_))
        ));
        assert!(matches!(
            parse_strict(br#"{"a":1} x"#),
            Err(PayloadError::Malformed(_))
        ));
        assert!(matches!(
            parse_strict(b"\xff\xfe"),
            Err(PayloadError::NotUtf8)
        ));
        assert!(parse_strict(br#"{"a":[1,{"b":2}]}"#).is_ok());
    }

    #[test]
    fn integers_must_be_exact_i64() -> Result<(), PayloadError> {
        let v = parse_strict(br#"{"a":1.5,"b":1e3,"c":99999999999999999999,"d":"7","e":42}"#)?;
        let f = Fields::new(&v);
        for path in ["a", "b", "c", "d"] {
            assert!(f.int(path).is_err(), "{path} should be refused");
        }
        assert_eq!(f.int("e")?, 42);
        assert!(
            matches!(f.int("missing"), Err(PayloadError::Invalid { ref field, .. }) if field == "missing")
        );
        Ok(())
    }
}
