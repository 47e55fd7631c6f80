//! The optional in-process cache of finished answers: a bounded map, oldest entry out first.
//! It holds only DONE answers, which never change, so it can be stale only by holding an answer
//! the store has since expired: replaying it then is still the answer that key was given.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::protocol::{Fingerprint, StoredResponse};

#[derive(Debug)]
pub(crate) struct LocalCache {
    max_items: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    answers: HashMap<String, (Fingerprint, StoredResponse)>,
    order: VecDeque<String>,
}

impl LocalCache {
    pub(crate) fn new(max_items: usize) -> Self {
        LocalCache {
            max_items,
            inner: Mutex::default(),
        }
    }

    /// `Some(Ok(answer))` for a cached key with this payload, `Some(Err(()))` for a cached key
    /// with another payload (a conflict), `None` when the key is not cached.
    pub(crate) fn get(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
    ) -> Option<Result<StoredResponse, ()>> {
        let inner = self.inner.lock().ok()?;
        let (stored_fp, answer) = inner.answers.get(key)?;
        Some(if stored_fp == fingerprint {
            Ok(answer.clone())
        } else {
            Err(())
        })
    }

    pub(crate) fn put(&self, key: &str, fingerprint: &Fingerprint, answer: &StoredResponse) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let entry = (fingerprint.clone(), answer.clone());
        if inner.answers.insert(key.to_owned(), entry).is_none() {
            inner.order.push_back(key.to_owned());
        }
        while inner.order.len() > self.max_items {
            if let Some(old) = inner.order.pop_front() {
                inner.answers.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_holds_at_most_its_size_and_tells_a_conflict() {
        let cache = LocalCache::new(2);
        let fp = Fingerprint::new("a");
        let answer = StoredResponse {
            status: 200,
            body: "1".into(),
        };
        for key in ["k1", "k2", "k3"] {
            cache.put(key, &fp, &answer);
        }
        assert_eq!(cache.get("k1", &fp), None, "the oldest left first");
        assert_eq!(cache.get("k3", &fp), Some(Ok(answer)));
        assert_eq!(cache.get("k2", &Fingerprint::new("b")), Some(Err(())));
    }
}
