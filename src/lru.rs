//! A least-recently-used map within a byte budget: the one home of the eviction that
//! both caches of derived content use (the capture indexes of [`crate::paging`] and the
//! renderings of [`crate::records`]).
//!
//! Guarantees: [`ByteLru::used`] is the sum of every entry's cost plus a fixed
//! bookkeeping cost per entry (its slot and its key in both maps), so a budget bounds
//! what the map really holds; [`ByteLru::evict`] drops least recently used entries
//! first until the total is within the budget. Values are handed out as clones (the
//! callers keep `Arc`s), so an evicted entry lives on for whoever still reads it.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

struct Slot<V> {
    value: V,
    tick: u64,
    cost: usize,
}

/// Least recently used first out, within a byte budget.
pub(crate) struct ByteLru<K, V> {
    slots: HashMap<K, Slot<V>>,
    /// Ticks, oldest first, to find what to evict.
    order: BTreeMap<u64, K>,
    tick: u64,
    used: usize,
}

impl<K, V> Default for ByteLru<K, V> {
    fn default() -> Self {
        Self {
            slots: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
            used: 0,
        }
    }
}

impl<K: Copy + Eq + Hash, V: Clone> ByteLru<K, V> {
    /// What an entry costs beyond its value: its slot, and its key in both maps.
    pub const ENTRY_BYTES: usize =
        std::mem::size_of::<Slot<V>>() + 2 * std::mem::size_of::<K>() + std::mem::size_of::<u64>();

    /// The value for `key`, now the most recently used.
    pub fn get(&mut self, key: K) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        let slot = self.slots.get_mut(&key)?;
        self.order.remove(&slot.tick);
        self.order.insert(tick, key);
        slot.tick = tick;
        Some(slot.value.clone())
    }

    /// The value for `key`, now the most recently used; made by `make` (costing `cost`)
    /// when there is none.
    pub fn get_or_insert_with(&mut self, key: K, cost: usize, make: impl FnOnce() -> V) -> V {
        if let Some(v) = self.get(key) {
            return v;
        }
        let value = make();
        self.insert(key, value.clone(), cost);
        value
    }

    /// The value for `key`, without making it more recently used.
    pub fn peek(&self, key: &K) -> Option<&V> {
        self.slots.get(key).map(|s| &s.value)
    }

    /// Every entry, in no order, without making any more recently used.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.slots.iter().map(|(k, s)| (k, &s.value))
    }

    /// Puts `value` under `key` (replacing what was there), the most recently used.
    pub fn insert(&mut self, key: K, value: V, cost: usize) {
        self.remove(&key);
        self.tick += 1;
        self.order.insert(self.tick, key);
        let cost = Self::ENTRY_BYTES + cost;
        self.slots.insert(
            key,
            Slot {
                value,
                tick: self.tick,
                cost,
            },
        );
        self.used += cost;
    }

    /// Records that the value under `key` costs `cost` now, if `is_it` says it is still
    /// the value the caller measured (it may have been evicted or replaced meanwhile).
    pub fn set_cost(&mut self, key: &K, is_it: impl FnOnce(&V) -> bool, cost: usize) {
        if let Some(slot) = self.slots.get_mut(key)
            && is_it(&slot.value)
        {
            let cost = Self::ENTRY_BYTES + cost;
            self.used = self.used - slot.cost + cost;
            slot.cost = cost;
        }
    }

    pub fn remove(&mut self, key: &K) {
        if let Some(slot) = self.slots.remove(key) {
            self.order.remove(&slot.tick);
            self.used -= slot.cost;
        }
    }

    /// Drops the least recently used entries until the total is within `budget`.
    pub fn evict(&mut self, budget: usize) {
        while self.used > budget {
            let Some((_, key)) = self.order.pop_first() else {
                break;
            };
            if let Some(slot) = self.slots.remove(&key) {
                self.used -= slot.cost;
            }
        }
    }

    /// The bytes held, bookkeeping included.
    pub fn used(&self) -> usize {
        self.used
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used_within_the_budget() {
        let mut lru: ByteLru<u32, &str> = ByteLru::default();
        let e = ByteLru::<u32, &str>::ENTRY_BYTES;
        lru.insert(1, "a", 10);
        lru.insert(2, "b", 10);
        lru.insert(3, "c", 10);
        assert_eq!(lru.used(), 3 * (e + 10));
        assert_eq!(lru.get(1), Some("a")); // 2 is now the oldest
        lru.evict(2 * (e + 10));
        assert_eq!((lru.len(), lru.peek(&2)), (2, None));
        assert_eq!(lru.get_or_insert_with(4, 5, || "d"), "d");
        assert_eq!(lru.get_or_insert_with(4, 5, || "x"), "d");
        lru.set_cost(&4, |v| *v == "not it", 1000);
        assert_eq!(lru.used(), 2 * (e + 10) + e + 5);
        lru.set_cost(&4, |v| *v == "d", 1000);
        assert_eq!(lru.used(), 2 * (e + 10) + e + 1000);
        lru.evict(e + 1000);
        // 3 and 1 were older than 4: both go, 4 stays.
        assert_eq!((lru.len(), lru.peek(&4)), (1, Some(&"d")));
        lru.remove(&4);
        assert_eq!((lru.len(), lru.used()), (0, 0));
        lru.evict(0);
    }
}
