//! An item's size as DynamoDB counts it against the 400 KB limit, by the rules dynalite applies
//! (`db/index.js` `itemSize`): attribute names plus values; a string its UTF-8 bytes, a number
//! 1 + half its significant digits (rounded up, one more when their count and exponent are both
//! even), a map or list 3 bytes plus one per element. Tests that sit an item at the limit use it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

/// DynamoDB's largest item, in bytes.
pub const MAX_ITEM_BYTES: usize = 409_600;

pub fn item_bytes(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter()
        .map(|(name, v)| name.len() + value_bytes(v))
        .sum()
}

pub fn value_bytes(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number_bytes(n),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Ss(ss) => ss.iter().map(String::len).sum(),
        AttributeValue::Ns(ns) => ns.iter().map(|n| number_bytes(n)).sum(),
        AttributeValue::Bs(bs) => bs.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::Null(_) | AttributeValue::Bool(_) => 1,
        AttributeValue::L(l) => 3 + l.iter().map(|v| 1 + value_bytes(v)).sum::<usize>(),
        AttributeValue::M(m) => 3 + m.len() + item_bytes(m),
        other => panic!("no size rule for {other:?}"),
    }
}

/// An integer's size (payhook writes integers only).
pub fn number_bytes(n: &str) -> usize {
    let negative = n.starts_with('-');
    let digits = n.trim_start_matches('-').trim_start_matches('0');
    if digits.is_empty() {
        return 1;
    }
    let exponent = digits.len() - 1;
    let significant = digits.trim_end_matches('0').len();
    let even = significant % 2 == 0 && exponent % 2 == 0;
    1 + significant.div_ceil(2) + usize::from(even) + usize::from(negative)
}

#[test]
fn numbers_are_sized_as_dynalite_sizes_them() {
    // Big.js: 200 has c=[2], e=2 -> 1 + 1 + 0; 10 has c=[1], e=1 -> 2; 12 has c=[1,2], e=1 -> 2;
    // 1234 c=[1,2,3,4] e=3 -> 3; 123 -> 1 + 2 = 3; 0 -> 1; -5 -> 3.
    assert_eq!(number_bytes("200"), 2);
    assert_eq!(number_bytes("10"), 2);
    assert_eq!(number_bytes("12"), 2);
    assert_eq!(number_bytes("1234"), 3);
    assert_eq!(number_bytes("123"), 3);
    assert_eq!(number_bytes("0"), 1);
    assert_eq!(number_bytes("-5"), 3);
    // 12000: c=[1,2], e=4, both even -> 1 + 1 + 1
    assert_eq!(number_bytes("12000"), 3);
}
