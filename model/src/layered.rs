//! A map by string key that is cheap to copy: a shared base and a small private layer of
//! changes over it. The serving registry is copied on every write (the next version is built
//! aside while readers keep the current one); with a plain map each copy costs every entry, so
//! registering N workloads costs N^2. Here a copy costs the layer, which is folded into a new
//! base once it outgrows the square root of the base: about sqrt(N) per write, and a lookup is
//! at most two hash probes.

use std::collections::HashMap;
use std::sync::Arc;

/// The smallest layer folded into the base.
const MIN_LAYER: usize = 64;

#[derive(Debug, Clone)]
pub struct Layered<V> {
    base: Arc<HashMap<String, V>>,
    /// Changes over `base`: `Some` set, `None` removed.
    layer: HashMap<String, Option<V>>,
    len: usize,
}

impl<V> Default for Layered<V> {
    fn default() -> Layered<V> {
        Layered {
            base: Arc::default(),
            layer: HashMap::new(),
            len: 0,
        }
    }
}

impl<V: Clone> FromIterator<(String, V)> for Layered<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(items: I) -> Layered<V> {
        let base: HashMap<String, V> = items.into_iter().collect();
        Layered {
            len: base.len(),
            base: Arc::new(base),
            layer: HashMap::new(),
        }
    }
}

impl<V: Clone> Layered<V> {
    pub fn get(&self, key: &str) -> Option<&V> {
        match self.layer.get(key) {
            Some(changed) => changed.as_ref(),
            None => self.base.get(key),
        }
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn insert(&mut self, key: String, value: V) {
        if !self.contains_key(&key) {
            self.len += 1;
        }
        self.layer.insert(key, Some(value));
        self.fold_when_large();
    }

    pub fn remove(&mut self, key: &str) {
        if !self.contains_key(key) {
            return;
        }
        self.len -= 1;
        if self.base.contains_key(key) {
            self.layer.insert(key.to_string(), None);
        } else {
            self.layer.remove(key);
        }
        self.fold_when_large();
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
        let changed = self
            .layer
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)));
        let kept = self
            .base
            .iter()
            .filter(|(k, _)| !self.layer.contains_key(k.as_str()));
        changed.chain(kept)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    /// Folds the layer into a new base once it holds more than the square root of the base's
    /// entries (and at least `MIN_LAYER`).
    fn fold_when_large(&mut self) {
        let bound = self.base.len().isqrt().max(MIN_LAYER);
        if self.layer.len() <= bound {
            return;
        }
        let mut base = HashMap::clone(&self.base);
        for (key, value) in self.layer.drain() {
            match value {
                Some(value) => {
                    base.insert(key, value);
                }
                None => {
                    base.remove(&key);
                }
            }
        }
        self.base = Arc::new(base);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Any sequence of inserts and removals reads like the same on a plain map, across folds,
    /// and a copy taken midway keeps what it saw.
    #[test]
    fn reads_like_a_plain_map_and_copies_stay_apart() {
        let mut layered: Layered<u64> = Layered::default();
        let mut plain: BTreeMap<String, u64> = BTreeMap::new();
        let mut state = 7u64;
        let mut snapshot = None;
        for step in 0..20_000u64 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let key = format!("w{}", (state >> 33) % 700);
            if (state >> 20).is_multiple_of(4) {
                layered.remove(&key);
                plain.remove(&key);
            } else {
                layered.insert(key.clone(), step);
                plain.insert(key, step);
            }
            if step == 10_000 {
                snapshot = Some((layered.clone(), plain.clone()));
            }
            assert_eq!(layered.len(), plain.len());
        }
        let read = |l: &Layered<u64>| -> BTreeMap<String, u64> {
            l.iter().map(|(k, v)| (k.clone(), *v)).collect()
        };
        assert_eq!(read(&layered), plain);
        for (key, value) in &plain {
            assert_eq!(layered.get(key), Some(value));
        }
        assert_eq!(layered.get("absent"), None);
        let (then, then_plain) = snapshot.expect("a copy");
        assert_eq!(read(&then), then_plain);
        assert!(layered.layer.len() <= MIN_LAYER.max(layered.base.len().isqrt()));
    }
}
