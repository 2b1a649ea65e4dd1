//! Interning: label values (topology domains) as integer ids, requirement sets as ids with
//! cached intersections and narrowings, and instance-type sets as bitsets.

use std::collections::HashMap;

use crate::requirements::{Requirement, Requirements};

/// Interned label values and requirement sets, with the intersections and narrowings of
/// requirement sets cached by id.
#[derive(Default)]
pub(super) struct Interned {
    pub(super) values: Interner,
    pub(super) reqs: Vec<Requirements>,
    /// Whether each interned requirements has a key no node can satisfy.
    pub(super) unsat: Vec<bool>,
    pub(super) req_ids: HashMap<Requirements, u32>,
    pub(super) intersect_cache: HashMap<(u32, u32), u32>,
    pub(super) narrow_cache: HashMap<(u32, u32, u32), u32>,
}

/// Interned strings (label values, used as topology domain ids).
#[derive(Default)]
pub(super) struct Interner {
    pub(super) ids: HashMap<Box<str>, u32>,
    pub(super) names: Vec<Box<str>>,
}

impl Interner {
    pub(super) fn id(&mut self, s: &str) -> u32 {
        if let Some(id) = self.ids.get(s) {
            return *id;
        }
        let id = self.names.len() as u32;
        self.names.push(s.into());
        self.ids.insert(s.into(), id);
        id
    }
    pub(super) fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }
}

/// A set of instance types (indexes into a pool's type list).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Bits(pub(super) Vec<u64>);

impl Bits {
    pub(super) fn empty(n: usize) -> Self {
        Bits(vec![0; n.div_ceil(64)])
    }
    pub(super) fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    pub(super) fn and(&self, other: &Bits) -> Bits {
        Bits(self.0.iter().zip(&other.0).map(|(a, b)| a & b).collect())
    }
    pub(super) fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
    pub(super) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(wi, w)| {
            let mut w = *w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(wi * 64 + b)
            })
        })
    }
    pub(super) fn first(&self) -> Option<usize> {
        self.0.iter().enumerate().find(|(_, w)| **w != 0).map(|(wi, w)| wi * 64 + w.trailing_zeros() as usize)
    }
    pub(super) fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
    pub(super) fn contains(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
}

impl Interned {
    /// The id of `r`, interning it (and its values) when new.
    pub(super) fn intern_req(&mut self, r: Requirements) -> u32 {
        if let Some(id) = self.req_ids.get(&r) {
            return *id;
        }
        let id = self.reqs.len() as u32;
        for (_, x) in r.iter() {
            if let Some(vals) = x.values() {
                for v in vals {
                    self.values.id(v);
                }
            }
        }
        self.unsat.push(r.unsatisfiable_key().is_some());
        self.reqs.push(r.clone());
        self.req_ids.insert(r, id);
        id
    }

    /// The id of the intersection of `a` and `b`.
    pub(super) fn intersect(&mut self, a: u32, b: u32) -> u32 {
        if a == b {
            return a;
        }
        let key = if a < b { (a, b) } else { (b, a) };
        if let Some(id) = self.intersect_cache.get(&key) {
            return *id;
        }
        let r = self.reqs[a as usize].intersect(&self.reqs[b as usize]);
        let id = self.intern_req(r);
        self.intersect_cache.insert(key, id);
        id
    }

    /// `req` with `key In [value]`.
    pub(super) fn narrow(&mut self, req: u32, key: &str, value: u32) -> u32 {
        let kid = self.values.id(key);
        if let Some(id) = self.narrow_cache.get(&(req, kid, value)) {
            return *id;
        }
        let mut r = self.reqs[req as usize].clone();
        r.add(key, Requirement::single(self.values.name(value).to_string()));
        let id = self.intern_req(r);
        self.narrow_cache.insert((req, kid, value), id);
        id
    }
}
