//! Counted places: how many of something each holder (a client address, a credential) has open
//! at once, against a cap per holder and, if set, a cap over all holders. A place is an RAII
//! [`Slot`], given back when it drops. Every per-address cap of the service is one of these.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

/// Open places per holder, each holder capped at `max` and all of them at `max_total`.
pub struct Slots<K: Hash + Eq + Clone> {
    max: usize,
    max_total: usize,
    open: Mutex<Open<K>>,
}

struct Open<K> {
    per_holder: HashMap<K, usize>,
    total: usize,
}

/// Why [`Slots::try_take`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// All holders together have `max_total` places.
    Full,
    /// This holder has `max` places.
    Holder,
}

/// One place of one holder in [`Slots`]; given back on drop.
pub struct Slot<K: Hash + Eq + Clone> {
    table: Arc<Slots<K>>,
    holder: K,
}

impl<K: Hash + Eq + Clone> Slots<K> {
    /// `max` places per holder, with no cap over all of them.
    pub fn new(max: usize) -> Arc<Slots<K>> {
        Slots::capped(max, usize::MAX)
    }

    /// `max` places per holder and `max_total` over all holders.
    pub fn capped(max: usize, max_total: usize) -> Arc<Slots<K>> {
        Arc::new(Slots { max, max_total, open: Mutex::new(Open { per_holder: HashMap::new(), total: 0 }) })
    }

    fn lock(&self) -> MutexGuard<'_, Open<K>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The places `holder` has open now.
    pub fn open(&self, holder: &K) -> usize {
        self.lock().per_holder.get(holder).copied().unwrap_or(0)
    }

    /// The places open over all holders.
    pub fn total(&self) -> usize {
        self.lock().total
    }

    /// Whether `holder` may take a place now.
    pub fn has_room(&self, holder: &K) -> bool {
        let open = self.lock();
        open.total < self.max_total && open.per_holder.get(holder).copied().unwrap_or(0) < self.max
    }

    /// Whether no holder has a place (no entry is kept for one with none).
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.lock().per_holder.is_empty()
    }

    /// Takes a place for `holder`, or `None` when it or all holders are at their cap.
    pub fn take(self: &Arc<Self>, holder: K) -> Option<Slot<K>> {
        self.try_take(holder).ok()
    }

    /// Takes a place for `holder`, or says which cap refused it (the total is asked first).
    pub fn try_take(self: &Arc<Self>, holder: K) -> Result<Slot<K>, Refused> {
        let mut open = self.lock();
        if open.total >= self.max_total {
            return Err(Refused::Full);
        }
        if open.per_holder.get(&holder).copied().unwrap_or(0) >= self.max {
            return Err(Refused::Holder);
        }
        *open.per_holder.entry(holder.clone()).or_default() += 1;
        open.total += 1;
        Ok(Slot { table: self.clone(), holder })
    }
}

impl<K: Hash + Eq + Clone> Slot<K> {
    /// The holder this place is of.
    pub fn holder(&self) -> &K {
        &self.holder
    }
}

impl<K: Hash + Eq + Clone> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut open = self.table.lock();
        if let Some(n) = open.per_holder.get_mut(&self.holder) {
            *n -= 1;
            if *n == 0 {
                open.per_holder.remove(&self.holder);
            }
            open.total -= 1;
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
        assert!(!slots.lock().per_holder.contains_key("a"), "no entry is kept for a holder with no place");
        drop(slots.take("z"));
        assert!(slots.is_empty());
        let none = Slots::<&str>::new(0);
        assert!(none.take("a").is_none());
        assert!(none.is_empty());
    }

    #[test]
    fn the_total_caps_every_holder_together() {
        let slots = Slots::capped(2, 3);
        let a = slots.try_take("a").unwrap();
        let _a2 = slots.try_take("a").unwrap();
        assert_eq!(slots.try_take("a").err(), Some(Refused::Holder));
        let _b = slots.try_take("b").unwrap();
        assert_eq!(slots.total(), 3);
        assert_eq!(slots.try_take("c").err(), Some(Refused::Full), "the total is asked first");
        assert!(!slots.has_room(&"c"));
        drop(a);
        assert_eq!(slots.total(), 2);
        assert!(slots.try_take("c").is_ok(), "a place given back is free again");
    }
}
