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

/// Orders a type that implements [`StrPair`] by its two strings, and lets an ordered set of it be
/// searched with a borrowed pair (`set.get(&(ns, name) as &dyn StrPair)`): `Borrow<dyn StrPair>`,
/// `PartialEq`, `Eq`, `PartialOrd` and `Ord`, each read through the pair. For sets that key a
/// shared object by its own metadata instead of a key of owned strings.
#[macro_export]
macro_rules! ordered_by_str_pair {
    ($t:ty) => {
        impl<'a> ::std::borrow::Borrow<dyn $crate::str_pair::StrPair + 'a> for $t {
            fn borrow(&self) -> &(dyn $crate::str_pair::StrPair + 'a) {
                self
            }
        }

        impl ::std::cmp::PartialEq for $t {
            fn eq(&self, other: &Self) -> bool {
                ::std::cmp::Ord::cmp(self, other) == ::std::cmp::Ordering::Equal
            }
        }

        impl ::std::cmp::Eq for $t {}

        impl ::std::cmp::PartialOrd for $t {
            fn partial_cmp(&self, other: &Self) -> ::std::option::Option<::std::cmp::Ordering> {
                ::std::option::Option::Some(::std::cmp::Ord::cmp(self, other))
            }
        }

        impl ::std::cmp::Ord for $t {
            fn cmp(&self, other: &Self) -> ::std::cmp::Ordering {
                (self as &dyn $crate::str_pair::StrPair).cmp(other as &dyn $crate::str_pair::StrPair)
            }
        }
    };
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
    use std::collections::{BTreeMap, BTreeSet, HashMap};

    use super::*;

    /// An object keyed by its own two strings.
    struct Named {
        namespace: String,
        name: String,
        size: usize,
    }

    impl StrPair for Named {
        fn first(&self) -> &str {
            &self.namespace
        }
        fn second(&self) -> &str {
            &self.name
        }
    }

    crate::ordered_by_str_pair!(Named);

    #[test]
    fn a_set_of_objects_ordered_by_their_own_pair_is_searched_with_a_borrowed_pair() {
        let named = |ns: &str, n: &str, size| Named { namespace: ns.into(), name: n.into(), size };
        let set: BTreeSet<Named> = [named("b", "a", 1), named("a", "bc", 2), named("ab", "c", 3)].into_iter().collect();
        let order: Vec<usize> = set.iter().map(|n| n.size).collect();
        assert_eq!(order, [2, 3, 1], "in (namespace, name) order");
        assert_eq!(set.get(&("ab", "c") as &dyn StrPair).map(|n| n.size), Some(3));
        assert!(!set.contains(&("a", "b") as &dyn StrPair));
        assert!(named("x", "y", 1) == named("x", "y", 2), "equal by the pair alone");
    }

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
