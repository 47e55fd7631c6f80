//! HMAC helpers shared by the adapters. Comparisons are constant time with a length check first
//! (the length of a MAC is public), and secrets never appear in `Debug` output or logs.

use hmac::{Hmac, Mac};
use sha2::{Sha256, Sha512};
use subtle::ConstantTimeEq;

use super::SignatureError;

/// Secret bytes; `Debug` prints only their count.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn new(bytes: Vec<u8>) -> Result<Self, SignatureError> {
        if bytes.is_empty() {
            return Err(SignatureError::BadSecret("empty secret".into()));
        }
        Ok(Secret(bytes))
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// HMAC-SHA256 over the concatenation of `parts`.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // HMAC takes keys of any length, so `new_from_slice` cannot fail here.
    let mut mac = match <Hmac<Sha256> as Mac>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => return [0; 32],
    };
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

/// HMAC-SHA512 over `body`.
pub fn hmac_sha512(key: &[u8], body: &[u8]) -> [u8; 64] {
    let mut mac = match <Hmac<Sha512> as Mac>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => return [0; 64],
    };
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// Constant-time equality; different lengths are unequal without comparing contents.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// Checks a signed timestamp against `now_s` within `tolerance_s` either way.
pub fn check_timestamp(ts_s: i64, now_s: i64, tolerance_s: i64) -> Result<(), SignatureError> {
    if ts_s < now_s.saturating_sub(tolerance_s) {
        return Err(SignatureError::Stale);
    }
    if ts_s > now_s.saturating_add(tolerance_s) {
        return Err(SignatureError::Future);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc4231_case_2() {
        let mac = hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn constant_time_eq_checks_length() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"abcd"));
    }

    #[test]
    fn timestamps_outside_tolerance_are_refused() {
        assert_eq!(check_timestamp(1_000, 1_300, 300), Ok(()));
        assert_eq!(check_timestamp(999, 1_300, 300), Err(SignatureError::Stale));
        assert_eq!(
            check_timestamp(1_601, 1_300, 300),
            Err(SignatureError::Future)
        );
    }

    #[test]
    fn secrets_do_not_leak_through_debug() -> Result<(), SignatureError> {
        assert_eq!(
            format!("{:?}", Secret::new(b"hunter2".to_vec())?),
            "Secret(7 bytes)"
        );
        Ok(())
    }
}
