//! Between payhook's money (ISO 4217 minor units) and the unit each provider's API writes
//! amounts in. One [`Units`] table per provider, used both ways: every amount a provider sends
//! in (a webhook, an answer to a transfer, a lookup) is read through [`Units::from_api`], and
//! every amount payhook sends out is written through [`Units::to_api`]. Reading one way and
//! writing the other with a different rule is how a payout of 1,000 MGA asks Stripe for
//! 100,000: so there is no other path.
//!
//! # Layout
//!
//! A table lists only where the provider departs from ISO 4217: the currencies whose exponent
//! in its API differs, the steps its API refuses amounts between, the closed list of currencies
//! it pays out in (when it documents one), and the largest amount its wire format carries
//! exactly. docs/payouts.md has each table with its sources.
//!
//! | provider    | API unit                         | departs from ISO                                         |
//! |-------------|----------------------------------|----------------------------------------------------------|
//! | Stripe      | integer, its "minor unit"        | ISK, UGX 2 decimals; MGA 0; out: HUF, TWD whole units, 3-decimal currencies end in 0, its currency list only |
//! | Paystack    | integer subunit (kobo, pesewas)  | out: NGN, GHS, KES, ZAR only                             |
//! | Flutterwave | major-unit JSON number           | out: at most 15 significant digits (an IEEE double)      |
//! | Adyen       | integer minor unit, its table    | CLP, ISK 2 decimals; CVE, IDR 0                          |
//! | Razorpay    | integer subunit (paise)          | none documented                                          |
//! | generic     | ISO minor units (payhook's own)  | none                                                     |
//!
//! Refusing out is only ever *before* anything is written: the API answers 422
//! `unrepresentable_amount` and debits nothing (rounding someone's payout is not ours to do).
//! Reading in, an amount that does not convert exactly (Stripe ISK `500050`) is a payload
//! error: payhook never rounds a provider's word either.

use crate::domain::{decimal_units, Currency, Money, MoneyError};

/// Where one provider's API unit departs from ISO 4217's minor unit.
#[derive(Debug, Clone, Copy)]
pub struct Units {
    /// Currencies whose exponent in the provider's API is not ISO's, with the provider's.
    pub exponents: &'static [(&'static str, u8)],
    /// Amounts out must be a whole multiple of this many API units (Stripe: HUF payouts in
    /// whole forints, `100`); others are refused before a debit.
    pub steps: &'static [(&'static str, i64)],
    /// The only currencies the provider pays out in, when it documents a closed list.
    pub out_currencies: Option<&'static [&'static str]>,
    /// The largest amount out, in API units, that its wire format carries exactly.
    pub max_out_units: i64,
}

/// An amount as a provider's API writes it: `units` of `10^-exponent` of the major unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiAmount {
    pub units: i64,
    pub exponent: u8,
}

impl ApiAmount {
    /// The amount as a major-unit decimal: `12.50` for 1250 units of exponent 2.
    pub fn decimal(self) -> String {
        let exp = u32::from(self.exponent);
        if exp == 0 {
            return self.units.to_string();
        }
        let scale = 10_i64.pow(exp);
        format!(
            "{}.{:0width$}",
            self.units / scale,
            self.units % scale,
            width = exp as usize
        )
    }
}

/// Why an amount cannot be sent to a provider as it is. The payout is refused (422) before
/// anything is written; the message says what the provider would take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unrepresentable {
    #[error("the provider pays out only in {allowed}, not {currency}")]
    Currency { currency: Currency, allowed: String },
    #[error(
        "the provider's API takes {currency} in whole multiples of {step_minor} minor units; \
         {amount_minor} is not one"
    )]
    Step {
        currency: Currency,
        amount_minor: i64,
        step_minor: i64,
    },
    #[error("the amount is above the largest the provider's API carries exactly ({max_minor} minor units of {currency})")]
    TooLarge { currency: Currency, max_minor: i64 },
}

/// ISO 4217 as it is: payhook's own unit (the generic provider) and any provider that documents
/// nothing else.
pub const ISO: Units = Units {
    exponents: &[],
    steps: &[],
    out_currencies: None,
    max_out_units: i64::MAX,
};

impl Units {
    /// The exponent of `currency` in the provider's API.
    pub fn exponent(&self, currency: Currency) -> u8 {
        lookup(self.exponents, currency).unwrap_or_else(|| currency.exponent())
    }

    /// `money` in the provider's unit, or why the provider cannot be asked for exactly it.
    pub fn to_api(&self, money: Money) -> Result<ApiAmount, Unrepresentable> {
        let currency = money.currency;
        if let Some(list) = self.out_currencies {
            if !list.contains(&currency.as_str()) {
                return Err(Unrepresentable::Currency {
                    currency,
                    allowed: list.join(", "),
                });
            }
        }
        let iso = currency.exponent();
        let api = self.exponent(currency);
        let step_units = lookup(self.steps, currency).unwrap_or(1);
        // The step in ISO minor units: every amount out must be a multiple of it (an API
        // unit finer than ISO's minor unit makes a step of API units a smaller one of ours).
        let amount_minor = money.amount.get();
        let (units, step_minor) = if api >= iso {
            let factor = pow10(api - iso);
            (
                amount_minor.checked_mul(factor),
                step_units / gcd(step_units, factor),
            )
        } else {
            let factor = pow10(iso - api);
            (
                Some(amount_minor / factor),
                step_units.saturating_mul(factor),
            )
        };
        if amount_minor % step_minor != 0 {
            return Err(Unrepresentable::Step {
                currency,
                amount_minor,
                step_minor,
            });
        }
        match units {
            Some(units) if units <= self.max_out_units => Ok(ApiAmount {
                units,
                exponent: api,
            }),
            _ => Err(Unrepresentable::TooLarge {
                currency,
                max_minor: self.max_minor(currency),
            }),
        }
    }

    /// An integer amount in the provider's unit as payhook's money, exactly.
    pub fn from_api(&self, units: i64, currency: Currency) -> Result<Money, MoneyError> {
        let iso = currency.exponent();
        let api = self.exponent(currency);
        if units <= 0 {
            return Err(MoneyError::NotPositive);
        }
        let minor = if api > iso {
            let factor = pow10(api - iso);
            if units % factor != 0 {
                return Err(MoneyError::TooPrecise(currency));
            }
            units / factor
        } else {
            units
                .checked_mul(pow10(iso - api))
                .ok_or(MoneyError::Overflow)?
        };
        Money::new(minor, currency)
    }

    /// A major-unit decimal in the provider's API (Flutterwave's `1250.5`) as payhook's money:
    /// read at the provider's exponent, then as [`Units::from_api`].
    pub fn from_api_decimal(&self, text: &str, currency: Currency) -> Result<Money, MoneyError> {
        let units = decimal_units(text, self.exponent(currency), currency)?;
        self.from_api(units, currency)
    }

    fn max_minor(&self, currency: Currency) -> i64 {
        let iso = currency.exponent();
        let api = self.exponent(currency);
        if api >= iso {
            self.max_out_units / pow10(api - iso)
        } else {
            self.max_out_units.saturating_mul(pow10(iso - api))
        }
    }
}

fn lookup<T: Copy>(table: &[(&str, T)], currency: Currency) -> Option<T> {
    table
        .iter()
        .find(|(c, _)| *c == currency.as_str())
        .map(|(_, v)| *v)
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.max(1)
    } else {
        gcd(b, a % b)
    }
}

/// 10^n for the exponents a currency can have (0 to 4: both sides of a table are ISO-sized).
fn pow10(n: u8) -> i64 {
    10_i64.pow(u32::from(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(amount: i64, code: &str) -> Money {
        Money::new(amount, Currency::parse(code).unwrap()).unwrap()
    }

    const SAMPLE: Units = Units {
        exponents: &[("ISK", 2), ("MGA", 0)],
        steps: &[("HUF", 100), ("KWD", 10), ("ISK", 100)],
        out_currencies: None,
        max_out_units: 999_999_999_999_999,
    };

    #[test]
    fn exponents_convert_both_ways() {
        let isk = SAMPLE.to_api(m(5_000, "ISK")).unwrap();
        assert_eq!(
            isk,
            ApiAmount {
                units: 500_000,
                exponent: 2
            }
        );
        assert_eq!(SAMPLE.from_api(500_000, isk_c()), Ok(m(5_000, "ISK")));
        assert_eq!(
            SAMPLE.from_api(500_050, isk_c()),
            Err(MoneyError::TooPrecise(isk_c()))
        );
        let mga = SAMPLE.to_api(m(100_000, "MGA")).unwrap();
        assert_eq!(
            mga,
            ApiAmount {
                units: 1_000,
                exponent: 0
            }
        );
        assert_eq!(
            SAMPLE.from_api(1_000, Currency::parse("MGA").unwrap()),
            Ok(m(100_000, "MGA"))
        );
        assert_eq!(mga.decimal(), "1000");
        assert_eq!(SAMPLE.to_api(m(1250, "NGN")).unwrap().decimal(), "12.50");
        assert_eq!(SAMPLE.to_api(m(1001, "BHD")).unwrap().decimal(), "1.001");
    }

    fn isk_c() -> Currency {
        Currency::parse("ISK").unwrap()
    }

    #[test]
    fn steps_and_fractions_are_refused_out_with_the_step_in_minor_units() {
        assert!(matches!(
            SAMPLE.to_api(m(150, "MGA")),
            Err(Unrepresentable::Step {
                step_minor: 100,
                ..
            })
        ));
        assert!(matches!(
            SAMPLE.to_api(m(1045, "HUF")),
            Err(Unrepresentable::Step {
                step_minor: 100,
                ..
            })
        ));
        assert!(SAMPLE.to_api(m(1000, "HUF")).is_ok());
        assert!(matches!(
            SAMPLE.to_api(m(5124, "KWD")),
            Err(Unrepresentable::Step { step_minor: 10, .. })
        ));
        assert!(SAMPLE.to_api(m(5120, "KWD")).is_ok());
        // ISK's step of 100 Stripe units is one whole krona: every ISO amount meets it.
        assert!(SAMPLE.to_api(m(1, "ISK")).is_ok());
    }

    #[test]
    fn closed_lists_and_the_wire_limit_are_refused_out() {
        let closed = Units {
            out_currencies: Some(&["NGN", "GHS"]),
            ..ISO
        };
        assert!(closed.to_api(m(1, "NGN")).is_ok());
        let e = closed.to_api(m(1, "USD")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the provider pays out only in NGN, GHS, not USD"
        );
        assert!(SAMPLE.to_api(m(999_999_999_999_999, "NGN")).is_ok());
        assert_eq!(
            SAMPLE.to_api(m(1_000_000_000_000_000, "NGN")),
            Err(Unrepresentable::TooLarge {
                currency: Currency::parse("NGN").unwrap(),
                max_minor: 999_999_999_999_999
            })
        );
        // 10^15 minor ISK is 10^17 Stripe units: too large for the wire, said in ISO units.
        assert!(matches!(
            SAMPLE.to_api(m(10_000_000_000_000, "ISK")),
            Err(Unrepresentable::TooLarge {
                max_minor: 9_999_999_999_999,
                ..
            })
        ));
    }

    #[test]
    fn decimals_read_at_the_providers_exponent() {
        assert_eq!(
            SAMPLE.from_api_decimal("5000.00", isk_c()),
            Ok(m(5_000, "ISK"))
        );
        assert_eq!(
            SAMPLE.from_api_decimal("5000.5", isk_c()),
            Err(MoneyError::TooPrecise(isk_c()))
        );
        assert_eq!(
            ISO.from_api_decimal("12.5", Currency::parse("NGN").unwrap()),
            Ok(m(1250, "NGN"))
        );
        assert!(ISO.from_api(0, isk_c()).is_err());
    }
}
