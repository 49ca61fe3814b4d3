//! Counted places: how many of something each holder (a client address, a credential) has open
//! at once, against a cap. A place is an RAII [`Slot`], given back when it drops.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

/// Open places per holder, each holder capped at `max`.
pub struct Slots<K: Hash + Eq + Clone> {
    max: usize,
    open: Mutex<HashMap<K, usize>>,
}

/// One place of one holder in [`Slots`]; given back on drop.
pub struct Slot<K: Hash + Eq + Clone> {
    table: Arc<Slots<K>>,
    holder: K,
}

impl<K: Hash + Eq + Clone> Slots<K> {
    pub fn new(max: usize) -> Arc<Slots<K>> {
        Arc::new(Slots { max, open: Mutex::new(HashMap::new()) })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, usize>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The places `holder` has open now.
    pub fn open(&self, holder: &K) -> usize {
        self.lock().get(holder).copied().unwrap_or(0)
    }

    /// Whether `holder` may take a place now.
    pub fn has_room(&self, holder: &K) -> bool {
        self.open(holder) < self.max
    }

    /// Whether no holder has a place (no entry is kept for one with none).
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Takes a place for `holder`, or `None` when it has `max` open already.
    pub fn take(self: &Arc<Self>, holder: K) -> Option<Slot<K>> {
        let mut open = self.lock();
        let n = open.entry(holder.clone()).or_default();
        if *n >= self.max {
            if *n == 0 {
                open.remove(&holder);
            }
            return None;
        }
        *n += 1;
        Some(Slot { table: self.clone(), holder })
    }
}

impl<K: Hash + Eq + Clone> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut open = self.table.lock();
        if let Some(n) = open.get_mut(&self.holder) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.holder);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_gets_max_places_and_each_comes_back_on_drop() {
        let slots = Slots::new(2);
        let a = slots.take("a").unwrap();
        let _b = slots.take("a").unwrap();
        assert!(slots.take("a").is_none(), "the third is refused");
        assert!(!slots.has_room(&"a") && slots.has_room(&"b"));
        assert!(slots.take("b").is_some(), "another holder is not affected");
        drop(a);
        assert_eq!(slots.open(&"a"), 1);
        assert!(slots.take("a").is_some());
    }

    #[test]
    fn holders_with_nothing_open_are_forgotten() {
        let slots = Slots::new(1);
        drop(slots.take("a"));
        assert!(slots.take("z").is_some());
        assert!(slots.lock().get("a").is_none(), "no entry is kept for a holder with no place");
        drop(slots.take("z"));
        assert!(slots.is_empty());
        let none = Slots::<&str>::new(0);
        assert!(none.take("a").is_none());
        assert!(none.lock().is_empty());
    }
}
