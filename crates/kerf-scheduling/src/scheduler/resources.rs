//! Resources as dense integer vectors: the resource names of one context, a pod's requests
//! (parsed once, see `facts`) as a vector, and the comparisons the Scheduler makes (cpu in millicores, everything else in whole units, as kube-scheduler).

use std::collections::HashMap;

use kerf_api::resources::{CPU, MEMORY};
use kerf_api::{Quantity, ResourceList};

/// Resource names of this pass, so resource lists become dense `i64` vectors (cpu in
/// millicores, everything else in whole units, as kube-scheduler compares them).
pub(super) struct Resources {
    pub(super) names: Vec<String>,
    pub(super) index: HashMap<String, usize>,
}

impl Resources {
    pub(super) fn dense(&self, list: &ResourceList) -> Vec<i64> {
        let mut v = vec![0i64; self.names.len()];
        for (k, q) in list.iter() {
            if let Some(i) = self.index.get(k) {
                v[*i] = to_units(k, q);
            }
        }
        v
    }
    /// Requests already in the Scheduler's units (a pod's [`PodFacts`]) as a dense vector.
    pub(super) fn dense_units<K: AsRef<str>>(&self, list: &[(K, i64)]) -> Vec<i64> {
        let mut v = vec![0i64; self.names.len()];
        for (k, units) in list {
            if let Some(i) = self.index.get(k.as_ref()) {
                v[*i] = *units;
            }
        }
        v
    }
    pub(super) fn list(&self, v: &[i64]) -> ResourceList {
        let mut out = ResourceList::new();
        for (i, n) in self.names.iter().enumerate() {
            if v[i] != 0 {
                out.set(n.clone(), from_units(n, v[i]));
            }
        }
        out
    }
}

pub(super) fn to_units(name: &str, q: &Quantity) -> i64 {
    if name == CPU { q.milli_ceil() } else { q.value_ceil() }
}

pub(super) fn from_units(name: &str, v: i64) -> Quantity {
    if name == CPU {
        Quantity::from_milli(v)
    } else if name == MEMORY || name.ends_with("storage") || name.starts_with("hugepages-") {
        Quantity::from_bytes(v)
    } else {
        Quantity::from_units(v)
    }
}

pub(super) fn type_fits(requests: &[i64], alloc: &[i64]) -> bool {
    requests.iter().zip(alloc).all(|(r, a)| *r == 0 || r <= a)
}
