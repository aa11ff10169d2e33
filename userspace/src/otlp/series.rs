//! Instruments bound to one attribute set, cached per series under a compact key: the
//! SDK's attribute lookup (which hashes every attribute's key and value) runs once per
//! series, not once per measurement, and the attribute set is built once.

use std::{collections::HashMap, hash::Hash};

use foldhash::fast::RandomState;

/// Series one cache holds before it starts over (each series then binds again, once).
pub const SERIES_CACHE: usize = 4096;

/// Bound instruments (or anything made once per series) by key, at most `SERIES_CACHE`;
/// hashed with foldhash: the keys are our own labels, already bounded, and SipHash over
/// them per record was a large part of the recorder's time.
pub(super) struct Cache<K, B> {
    map: HashMap<K, B, RandomState>,
}

impl<K: Hash + Eq, B> Cache<K, B> {
    pub(super) fn new() -> Self {
        Cache {
            map: HashMap::default(),
        }
    }

    /// The entry of `key`, made by `bind` if there is none.
    pub(super) fn get(&mut self, key: K, bind: impl FnOnce() -> B) -> &B {
        if self.map.len() >= SERIES_CACHE && !self.map.contains_key(&key) {
            self.map.clear();
        }
        self.map.entry(key).or_insert_with(bind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_once_per_key_and_stays_bounded() {
        let mut c = Cache::new();
        let mut binds = 0;
        for i in 0..3 * SERIES_CACHE {
            let key = i % (SERIES_CACHE + 1);
            c.get(key, || {
                binds += 1;
                key * 2
            });
            assert!(c.map.len() <= SERIES_CACHE);
        }
        assert!(binds > SERIES_CACHE);
        // a key seen again while cached is not bound again
        c.get(7, || 14);
        let mut again = 0;
        let v = *c.get(7, || {
            again += 1;
            0
        });
        assert_eq!((v, again), (14, 0));
    }
}
