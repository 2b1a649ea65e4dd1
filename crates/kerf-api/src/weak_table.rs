//! A table handing out one shared copy of each distinct value, for values that many objects
//! carry alike (the replicas of a workload share their spec's shape, their labels, their owner).
//!
//! Values are found by a fingerprint the caller computes and confirmed by the caller's
//! comparison, so a value can be matched against a borrowed form of itself without being
//! copied first. The table holds values weakly: one no object holds any more is freed, and its
//! entry swept when the table has doubled since the last sweep.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// Values by fingerprint, held weakly, behind a lock (the tables are process-wide).
pub(crate) struct WeakTable<T: ?Sized> {
    inner: Mutex<Entries<T>>,
}

struct Entries<T: ?Sized> {
    by_print: HashMap<u64, Vec<Weak<T>>>,
    entries: usize,
    /// The entry count at which the next sweep of freed values runs.
    sweep_at: usize,
}

/// Sweeps run when the table doubles since the last one, and not below this many entries.
const MIN_SWEEP: usize = 1024;

impl<T: ?Sized> WeakTable<T> {
    pub(crate) fn new() -> Self {
        WeakTable { inner: Mutex::new(Entries { by_print: HashMap::new(), entries: 0, sweep_at: 0 }) }
    }

    fn lock(&self) -> MutexGuard<'_, Entries<T>> {
        // A panic while the lock was held leaves at worst an entry unswept: keep going.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live value of fingerprint `print` that `same` accepts, else `make()`'s, shared from
    /// now on (for a value matched in a borrowed form: it is copied only when new).
    pub(crate) fn share_arc_with(
        &self,
        print: u64,
        same: impl Fn(&T) -> bool,
        make: impl FnOnce() -> Arc<T>,
    ) -> Arc<T> {
        let mut table = self.lock();
        match table.find(print, same) {
            Some(have) => have,
            None => table.insert(print, make()),
        }
    }

    /// How many values of fingerprint `print` are alive.
    #[cfg(test)]
    pub(crate) fn live(&self, print: u64) -> usize {
        self.lock().by_print.get(&print).map_or(0, |v| v.iter().filter(|s| s.strong_count() > 0).count())
    }
}

impl<T> WeakTable<T> {
    /// [`WeakTable::share_arc_with`] for a value made in place.
    pub(crate) fn share_with(&self, print: u64, same: impl Fn(&T) -> bool, make: impl FnOnce() -> T) -> Arc<T> {
        self.share_arc_with(print, same, || Arc::new(make()))
    }
}

impl<T: PartialEq> WeakTable<T> {
    /// The live value equal to `value` (of fingerprint `print`), else `value`, shared from now on.
    pub(crate) fn share(&self, print: u64, value: T) -> Arc<T> {
        let mut table = self.lock();
        match table.find(print, |v| *v == value) {
            Some(have) => have,
            None => table.insert(print, Arc::new(value)),
        }
    }
}

impl<T: ?Sized> Entries<T> {
    fn find(&self, print: u64, same: impl Fn(&T) -> bool) -> Option<Arc<T>> {
        self.by_print.get(&print)?.iter().filter_map(Weak::upgrade).find(|v| same(v))
    }

    fn insert(&mut self, print: u64, value: Arc<T>) -> Arc<T> {
        if self.entries >= self.sweep_at {
            self.by_print.retain(|_, values| {
                values.retain(|v| v.strong_count() > 0);
                !values.is_empty()
            });
            self.entries = self.by_print.values().map(Vec::len).sum();
            self.sweep_at = (2 * self.entries).max(MIN_SWEEP);
        }
        self.by_print.entry(print).or_default().push(Arc::downgrade(&value));
        self.entries += 1;
        value
    }
}
