//! Looking up a map keyed by `(String, String)` (a namespaced object's `(namespace, name)`)
//! with two borrowed strings, without building a key of owned strings for each lookup.
//!
//! `map.get(&(ns, name) as &dyn StrPair)` finds the entry `(ns.to_string(), name.to_string())`
//! would, in a `BTreeMap` or a `HashMap`: the borrowed form orders, compares and hashes exactly
//! as the owned tuple does.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

/// Two strings read as one key, ordered as the tuple of the two.
pub trait StrPair {
    fn first(&self) -> &str;
    fn second(&self) -> &str;
}

impl StrPair for (String, String) {
    fn first(&self) -> &str {
        &self.0
    }
    fn second(&self) -> &str {
        &self.1
    }
}

impl StrPair for (&str, &str) {
    fn first(&self) -> &str {
        self.0
    }
    fn second(&self) -> &str {
        self.1
    }
}

impl<'a> Borrow<dyn StrPair + 'a> for (String, String) {
    fn borrow(&self) -> &(dyn StrPair + 'a) {
        self
    }
}

impl PartialEq for dyn StrPair + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.first() == other.first() && self.second() == other.second()
    }
}

impl Eq for dyn StrPair + '_ {}

impl PartialOrd for dyn StrPair + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn StrPair + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.first().cmp(other.first()).then_with(|| self.second().cmp(other.second()))
    }
}

/// As a tuple of two `String`s hashes: each string in turn.
impl Hash for dyn StrPair + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.first().hash(state);
        self.second().hash(state);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use super::*;

    #[test]
    fn borrowed_pairs_find_what_owned_pairs_find_in_ordered_and_hashed_maps_in_tuple_order() {
        // Pairs whose concatenations are equal ("ab" + "c", "a" + "bc") must still be told apart.
        let keys = [("a", "b"), ("a", "ba"), ("ab", ""), ("", "z"), ("b", "a"), ("ab", "c"), ("a", "bc"), ("", "abc")];
        let owned = |(x, y): (&str, &str)| (x.to_string(), y.to_string());
        let entries = || keys.iter().enumerate().map(|(i, k)| (owned(*k), i));
        let ordered: BTreeMap<(String, String), usize> = entries().collect();
        let hashed: HashMap<(String, String), usize> = entries().collect();
        for (i, k) in keys.iter().enumerate() {
            let k = k as &dyn StrPair;
            assert_eq!((ordered.get(k), hashed.get(k)), (Some(&i), Some(&i)), "{:?}", keys[i]);
        }
        for missing in [("a", ""), ("ab", "a"), ("", ""), ("c", "a"), ("abc", "")] {
            let k = &missing as &dyn StrPair;
            assert_eq!((ordered.get(k), hashed.get(k)), (None, None), "{missing:?}");
        }
        for (x, y) in keys.iter().flat_map(|a| keys.iter().map(move |b| (*a, *b))) {
            let borrowed = (&x as &dyn StrPair).cmp(&y as &dyn StrPair);
            assert_eq!(borrowed, owned(x).cmp(&owned(y)), "{x:?} against {y:?}");
        }
    }
}
