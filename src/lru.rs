//! A least-recently-used map within a byte budget: the one home of the eviction that
//! both caches of derived content use (the capture indexes of [`crate::paging`] and the
//! renderings of [`crate::records`]).
//!
//! Guarantees: [`ByteLru::used`] is the sum of every entry's cost plus a fixed
//! bookkeeping cost per entry (its slot and its key), so a budget bounds what the map
//! really holds; [`ByteLru::evict`] drops least recently used entries first until the
//! total is within the budget, and when it has to drop any it drops down to
//! [`LOW_WATER`] of the budget (the entry just used stays if it alone fits). Recency is a tick in each entry's slot, not a second
//! ordered map: a large workspace's caches hold an entry per step listed, and the
//! order's map cost more than most entries' values. So finding the oldest is a sort of
//! the ticks, paid once per eighth of the budget rather than once per insert. Values
//! are handed out as clones (the callers keep `Arc`s), so an evicted entry lives on for
//! whoever still reads it.

use std::hash::Hash;

use crate::FastMap;

/// Where an eviction leaves the total, as a fraction of the budget (numerator,
/// denominator): room for an eighth of it before the next eviction.
pub(crate) const LOW_WATER: (usize, usize) = (7, 8);

struct Slot<V> {
    value: V,
    tick: u64,
    cost: usize,
}

/// Least recently used first out, within a byte budget.
pub(crate) struct ByteLru<K, V> {
    slots: FastMap<K, Slot<V>>,
    tick: u64,
    used: usize,
}

impl<K, V> Default for ByteLru<K, V> {
    fn default() -> Self {
        Self {
            slots: FastMap::default(),
            tick: 0,
            used: 0,
        }
    }
}

impl<K: Copy + Eq + Hash, V: Clone> ByteLru<K, V> {
    /// What an entry costs beyond its value: its slot and its key.
    pub(crate) const ENTRY_BYTES: usize = std::mem::size_of::<Slot<V>>() + std::mem::size_of::<K>();

    /// The value for `key`, now the most recently used.
    pub(crate) fn get(&mut self, key: K) -> Option<V> {
        self.tick += 1;
        let slot = self.slots.get_mut(&key)?;
        slot.tick = self.tick;
        Some(slot.value.clone())
    }

    /// The value for `key`, now the most recently used; made by `make` (costing `cost`)
    /// when there is none.
    pub(crate) fn get_or_insert_with(
        &mut self,
        key: K,
        cost: usize,
        make: impl FnOnce() -> V,
    ) -> V {
        if let Some(v) = self.get(key) {
            return v;
        }
        let value = make();
        self.insert(key, value.clone(), cost);
        value
    }

    /// The value for `key`, without making it more recently used.
    pub(crate) fn peek(&self, key: &K) -> Option<&V> {
        self.slots.get(key).map(|s| &s.value)
    }

    /// Every entry, in no order, without making any more recently used.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.slots.iter().map(|(k, s)| (k, &s.value))
    }

    /// Puts `value` under `key` (replacing what was there), the most recently used.
    pub(crate) fn insert(&mut self, key: K, value: V, cost: usize) {
        self.remove(&key);
        self.tick += 1;
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
    pub(crate) fn set_cost(&mut self, key: &K, is_it: impl FnOnce(&V) -> bool, cost: usize) {
        if let Some(slot) = self.slots.get_mut(key)
            && is_it(&slot.value)
        {
            let cost = Self::ENTRY_BYTES + cost;
            self.used = self.used - slot.cost + cost;
            slot.cost = cost;
        }
    }

    pub(crate) fn remove(&mut self, key: &K) {
        if let Some(slot) = self.slots.remove(key) {
            self.used -= slot.cost;
        }
    }

    /// Nothing while the total is within `budget`; past it, drops the least recently
    /// used entries until the total is within [`LOW_WATER`] of `budget`, sparing the
    /// most recently used one unless it alone is over `budget`.
    pub(crate) fn evict(&mut self, budget: usize) {
        if self.used <= budget {
            return;
        }
        let target = budget / LOW_WATER.1 * LOW_WATER.0;
        let mut ages: Vec<(u64, usize)> = self.slots.values().map(|s| (s.tick, s.cost)).collect();
        ages.sort_unstable();
        // The newest tick to drop: the oldest entries, until what is left is in bounds.
        // The most recently used entry goes only if it alone is over the budget.
        let newest = ages.pop();
        let mut left = self.used;
        let mut newest_dropped = None;
        for (tick, cost) in ages {
            if left <= target {
                break;
            }
            left -= cost;
            newest_dropped = Some(tick);
        }
        if let Some((tick, cost)) = newest
            && left > budget
        {
            left -= cost;
            newest_dropped = Some(tick);
        }
        if let Some(newest) = newest_dropped {
            self.slots.retain(|_, s| s.tick > newest);
            self.used = left;
        }
    }

    /// The bytes held, bookkeeping included.
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used_down_to_the_low_water_mark() {
        let mut lru: ByteLru<u32, &str> = ByteLru::default();
        let e = ByteLru::<u32, &str>::ENTRY_BYTES;
        let each = e + 10;
        for k in 1..=8 {
            lru.insert(k, "v", 10);
        }
        assert_eq!(lru.used(), 8 * each);
        lru.evict(8 * each);
        assert_eq!(lru.len(), 8, "within the budget: nothing goes");
        assert_eq!(lru.get(1), Some("v")); // 2 is now the oldest
        // One byte over a budget of 8 entries: down to 7/8 of it, the two oldest go.
        lru.insert(9, "w", 10);
        lru.evict(8 * each);
        assert_eq!(lru.len(), 7);
        assert_eq!((lru.peek(&2), lru.peek(&3)), (None, None));
        assert_eq!((lru.peek(&1), lru.peek(&4)), (Some(&"v"), Some(&"v")));
        assert_eq!(lru.used(), 7 * each);
        assert_eq!(lru.get_or_insert_with(10, 5, || "d"), "d");
        assert_eq!(lru.get_or_insert_with(10, 5, || "x"), "d");
        lru.set_cost(&10, |v| *v == "not it", 1000);
        assert_eq!(lru.used(), 7 * each + e + 5);
        lru.set_cost(&10, |v| *v == "d", 1000);
        assert_eq!(lru.used(), 7 * each + e + 1000);
        // Recency, not insertion: 10 was used last, so it outlives all the others.
        lru.evict(e + 1000);
        assert_eq!((lru.len(), lru.peek(&10)), (1, Some(&"d")));
        assert_eq!(lru.used(), e + 1000);
        // Alone over the budget: it goes too.
        lru.evict(e + 999);
        assert_eq!((lru.len(), lru.used()), (0, 0));
        lru.insert(10, "d", 1000);
        lru.remove(&10);
        assert_eq!((lru.len(), lru.used()), (0, 0));
        lru.evict(0);
    }
}
