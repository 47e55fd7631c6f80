//! Money as integer minor units plus an ISO 4217 currency. Never a float: a float cannot say
//! 0.10 exactly, and a ledger that is off by one kobo is a ledger nobody trusts.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why an amount or currency was refused. Each variant names what the caller got wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    #[error("amount must be a positive integer number of minor units")]
    NotPositive,
    #[error("currency must be an ISO 4217 code such as NGN or USD")]
    UnknownCurrency,
    #[error("amount has more decimal places than {0} allows")]
    TooPrecise(Currency),
    #[error("amount is not a plain decimal number")]
    NotDecimal,
    #[error("amount is too large")]
    Overflow,
    #[error("amount is above the maximum of 10^15 minor units")]
    AboveMaximum,
}

/// The largest amount payhook accepts in one movement: 10^15 minor units (10 trillion in a
/// two-decimal currency, far above any real payment). With it, a sum of up to ~9,000 maximal
/// movements still fits an `i64`, and balance arithmetic is checked beyond that.
pub const MAX_AMOUNT_MINOR: i64 = 1_000_000_000_000_000;

/// An ISO 4217 alphabetic code, upper case, known to the table below (so its exponent is known).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Currency([u8; 3]);

/// ISO 4217 codes with their minor-unit exponent: the active ones, plus codes providers still send
/// after ISO retired them (Stripe's `std` and `sll` beside `stn` and `sle`; `xcg`, the Caribbean
/// guilder, beside `ang`). Checked against Stripe's supported-currency list by a test. Codes
/// absent here are refused: guessing an exponent would credit 100x too much or too little.
const CURRENCIES: &[(&str, u8)] = &[
    ("AED", 2),
    ("AFN", 2),
    ("ALL", 2),
    ("AMD", 2),
    ("ANG", 2),
    ("AOA", 2),
    ("ARS", 2),
    ("AUD", 2),
    ("AWG", 2),
    ("AZN", 2),
    ("BAM", 2),
    ("BBD", 2),
    ("BDT", 2),
    ("BGN", 2),
    ("BHD", 3),
    ("BIF", 0),
    ("BMD", 2),
    ("BND", 2),
    ("BOB", 2),
    ("BRL", 2),
    ("BSD", 2),
    ("BTN", 2),
    ("BWP", 2),
    ("BYN", 2),
    ("BZD", 2),
    ("CAD", 2),
    ("CDF", 2),
    ("CHF", 2),
    ("CLF", 4),
    ("CLP", 0),
    ("CNY", 2),
    ("COP", 2),
    ("CRC", 2),
    ("CUP", 2),
    ("CVE", 2),
    ("CZK", 2),
    ("DJF", 0),
    ("DKK", 2),
    ("DOP", 2),
    ("DZD", 2),
    ("EGP", 2),
    ("ERN", 2),
    ("ETB", 2),
    ("EUR", 2),
    ("FJD", 2),
    ("FKP", 2),
    ("GBP", 2),
    ("GEL", 2),
    ("GHS", 2),
    ("GIP", 2),
    ("GMD", 2),
    ("GNF", 0),
    ("GTQ", 2),
    ("GYD", 2),
    ("HKD", 2),
    ("HNL", 2),
    ("HTG", 2),
    ("HUF", 2),
    ("IDR", 2),
    ("ILS", 2),
    ("INR", 2),
    ("IQD", 3),
    ("IRR", 2),
    ("ISK", 0),
    ("JMD", 2),
    ("JOD", 3),
    ("JPY", 0),
    ("KES", 2),
    ("KGS", 2),
    ("KHR", 2),
    ("KMF", 0),
    ("KPW", 2),
    ("KRW", 0),
    ("KWD", 3),
    ("KYD", 2),
    ("KZT", 2),
    ("LAK", 2),
    ("LBP", 2),
    ("LKR", 2),
    ("LRD", 2),
    ("LSL", 2),
    ("LYD", 3),
    ("MAD", 2),
    ("MDL", 2),
    ("MGA", 2),
    ("MKD", 2),
    ("MMK", 2),
    ("MNT", 2),
    ("MOP", 2),
    ("MRU", 2),
    ("MUR", 2),
    ("MVR", 2),
    ("MWK", 2),
    ("MXN", 2),
    ("MYR", 2),
    ("MZN", 2),
    ("NAD", 2),
    ("NGN", 2),
    ("NIO", 2),
    ("NOK", 2),
    ("NPR", 2),
    ("NZD", 2),
    ("OMR", 3),
    ("PAB", 2),
    ("PEN", 2),
    ("PGK", 2),
    ("PHP", 2),
    ("PKR", 2),
    ("PLN", 2),
    ("PYG", 0),
    ("QAR", 2),
    ("RON", 2),
    ("RSD", 2),
    ("RUB", 2),
    ("RWF", 0),
    ("SAR", 2),
    ("SBD", 2),
    ("SCR", 2),
    ("SDG", 2),
    ("SEK", 2),
    ("SGD", 2),
    ("SHP", 2),
    ("SLE", 2),
    ("SLL", 2),
    ("SOS", 2),
    ("SRD", 2),
    ("SSP", 2),
    ("STD", 2),
    ("STN", 2),
    ("SVC", 2),
    ("SYP", 2),
    ("SZL", 2),
    ("THB", 2),
    ("TJS", 2),
    ("TMT", 2),
    ("TND", 3),
    ("TOP", 2),
    ("TRY", 2),
    ("TTD", 2),
    ("TWD", 2),
    ("TZS", 2),
    ("UAH", 2),
    ("UGX", 0),
    ("USD", 2),
    ("UYI", 0),
    ("UYU", 2),
    ("UYW", 4),
    ("UZS", 2),
    ("VES", 2),
    ("VND", 0),
    ("VUV", 0),
    ("WST", 2),
    ("XAF", 0),
    ("XCD", 2),
    ("XCG", 2),
    ("XOF", 0),
    ("XPF", 0),
    ("YER", 2),
    ("ZAR", 2),
    ("ZMW", 2),
    ("ZWG", 2),
];

impl Currency {
    /// Parses an upper-case ISO 4217 code. Lower case is refused rather than fixed up: a provider
    /// that sends `ngn` is one we map explicitly in its adapter.
    pub fn parse(code: &str) -> Result<Self, MoneyError> {
        let idx = CURRENCIES
            .binary_search_by(|(c, _)| (*c).cmp(code))
            .map_err(|_| MoneyError::UnknownCurrency)?;
        let bytes = CURRENCIES[idx].0.as_bytes();
        Ok(Currency([bytes[0], bytes[1], bytes[2]]))
    }

    pub fn as_str(&self) -> &str {
        // The three bytes were copied from a `&str` literal of ASCII letters, so this cannot fail.
        std::str::from_utf8(&self.0).unwrap_or("XXX")
    }

    /// Every currency payhook knows, in code order (what a property test walks).
    pub fn all() -> impl Iterator<Item = Currency> {
        CURRENCIES.iter().map(|(c, _)| {
            let b = c.as_bytes();
            Currency([b[0], b[1], b[2]])
        })
    }

    /// Number of decimal places of the minor unit (2 for NGN, 0 for JPY, 3 for KWD).
    pub fn exponent(&self) -> u8 {
        CURRENCIES
            .binary_search_by(|(c, _)| (*c).cmp(self.as_str()))
            .map(|i| CURRENCIES[i].1)
            .unwrap_or(2)
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Currency({})", self.as_str())
    }
}

impl Serialize for Currency {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Currency {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Currency::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A strictly positive count of minor units (kobo, cents). Direction (credit or debit) is carried
/// by the operation, never by a sign the caller could flip by accident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct MinorUnits(i64);

impl MinorUnits {
    pub fn new(value: i64) -> Result<Self, MoneyError> {
        match value {
            v if v <= 0 => Err(MoneyError::NotPositive),
            v if v > MAX_AMOUNT_MINOR => Err(MoneyError::AboveMaximum),
            v => Ok(MinorUnits(v)),
        }
    }

    pub fn get(self) -> i64 {
        self.0
    }
}

/// An amount of one currency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Money {
    pub amount: MinorUnits,
    pub currency: Currency,
}

impl Money {
    pub fn new(amount_minor: i64, currency: Currency) -> Result<Self, MoneyError> {
        Ok(Money {
            amount: MinorUnits::new(amount_minor)?,
            currency,
        })
    }

    /// Converts a major-unit decimal string (`"1250.50"`, as Flutterwave sends) to minor units
    /// exactly, by the currency's exponent. More decimals than the currency has is an error, not a
    /// rounding: a provider claiming 10.005 NGN is sending something we do not understand.
    pub fn from_major_decimal(text: &str, currency: Currency) -> Result<Self, MoneyError> {
        let minor = decimal_units(text, currency.exponent(), currency)?;
        Money::new(minor, currency)
    }
}

/// A plain decimal (`"1250.50"`) as an integer count of units of `10^-exponent`, exactly: more
/// significant decimals than `exponent` is [`MoneyError::TooPrecise`] (naming `currency`), a
/// sign, an exponent or an empty part is [`MoneyError::NotDecimal`]. Providers whose API unit
/// is not ISO's minor unit read their decimals through this with their own exponent.
pub fn decimal_units(text: &str, exponent: u8, currency: Currency) -> Result<i64, MoneyError> {
    let exp = usize::from(exponent);
    let (int_part, frac_part) = match text.split_once('.') {
        Some((i, f)) => (i, f),
        None => (text, ""),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(int_part) || !(frac_part.is_empty() || digits(frac_part)) {
        return Err(MoneyError::NotDecimal);
    }
    let significant = frac_part.trim_end_matches('0');
    if significant.len() > exp {
        return Err(MoneyError::TooPrecise(currency));
    }
    let mut units: i64 = int_part.parse().map_err(|_| MoneyError::Overflow)?;
    for _ in 0..exp {
        units = units.checked_mul(10).ok_or(MoneyError::Overflow)?;
    }
    let mut frac: i64 = 0;
    for i in 0..exp {
        let d = significant
            .as_bytes()
            .get(i)
            .map_or(0, |b| i64::from(b - b'0'));
        frac = frac * 10 + d;
    }
    units.checked_add(frac).ok_or(MoneyError::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn currency_table_is_sorted_for_binary_search() {
        assert!(CURRENCIES.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn codes_providers_still_send_are_known() {
        assert_eq!(Currency::parse("XCG").map(|c| c.exponent()), Ok(2));
        assert_eq!(Currency::parse("STD").map(|c| c.exponent()), Ok(2));
    }

    #[test]
    fn parses_known_and_refuses_unknown_currencies() {
        assert_eq!(Currency::parse("NGN").map(|c| c.exponent()), Ok(2));
        assert_eq!(Currency::parse("JPY").map(|c| c.exponent()), Ok(0));
        assert_eq!(Currency::parse("KWD").map(|c| c.exponent()), Ok(3));
        assert_eq!(Currency::parse("ngn"), Err(MoneyError::UnknownCurrency));
        assert_eq!(Currency::parse("XYZ"), Err(MoneyError::UnknownCurrency));
        assert_eq!(Currency::parse(""), Err(MoneyError::UnknownCurrency));
    }

    #[test]
    fn amounts_must_be_positive() {
        assert_eq!(MinorUnits::new(0), Err(MoneyError::NotPositive));
        assert_eq!(MinorUnits::new(-5), Err(MoneyError::NotPositive));
        assert_eq!(MinorUnits::new(1).map(MinorUnits::get), Ok(1));
        assert_eq!(
            MinorUnits::new(MAX_AMOUNT_MINOR).map(MinorUnits::get),
            Ok(MAX_AMOUNT_MINOR)
        );
        assert_eq!(
            MinorUnits::new(MAX_AMOUNT_MINOR + 1),
            Err(MoneyError::AboveMaximum)
        );
        assert_eq!(MinorUnits::new(i64::MAX), Err(MoneyError::AboveMaximum));
    }

    #[test]
    fn major_decimals_convert_exactly_per_exponent() -> Result<(), MoneyError> {
        let ngn = Currency::parse("NGN")?;
        let jpy = Currency::parse("JPY")?;
        let kwd = Currency::parse("KWD")?;
        assert_eq!(
            Money::from_major_decimal("1250.50", ngn)?.amount.get(),
            125_050
        );
        assert_eq!(
            Money::from_major_decimal("1250", ngn)?.amount.get(),
            125_000
        );
        assert_eq!(Money::from_major_decimal("0.1", ngn)?.amount.get(), 10);
        assert_eq!(Money::from_major_decimal("1.230", ngn)?.amount.get(), 123);
        assert_eq!(Money::from_major_decimal("500", jpy)?.amount.get(), 500);
        assert_eq!(Money::from_major_decimal("1.005", kwd)?.amount.get(), 1005);
        assert_eq!(
            Money::from_major_decimal("10.005", ngn),
            Err(MoneyError::TooPrecise(ngn))
        );
        assert_eq!(
            Money::from_major_decimal("1.5", jpy),
            Err(MoneyError::TooPrecise(jpy))
        );
        assert_eq!(
            Money::from_major_decimal("-1", ngn),
            Err(MoneyError::NotDecimal)
        );
        assert_eq!(
            Money::from_major_decimal("1e3", ngn),
            Err(MoneyError::NotDecimal)
        );
        assert_eq!(
            Money::from_major_decimal(".5", ngn),
            Err(MoneyError::NotDecimal)
        );
        assert_eq!(
            Money::from_major_decimal("0.00", ngn),
            Err(MoneyError::NotPositive)
        );
        assert_eq!(
            Money::from_major_decimal("99999999999999999999", ngn),
            Err(MoneyError::Overflow)
        );
        Ok(())
    }
}
