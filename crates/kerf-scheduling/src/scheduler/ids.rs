//! Typed indexes: what each number in the Scheduler counts — a pod, a pod group, one of a
//! group's relaxation levels, an existing node, a new claim, a NodePool, a topology counter, an
//! anti-affinity term — so a pod's index cannot be passed where a node's is expected, and the
//! tables they index ([`IxVec`]) take only their own kind.
//!
//! Each index is a `usize` behind `#[repr(transparent)]`: indexing with one compiles to what
//! indexing with the bare number did.

use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

/// A typed index: a `usize` that says what it counts.
pub(super) trait Idx: Copy {
    fn new(i: usize) -> Self;
    fn ix(self) -> usize;
}

macro_rules! index_type {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
        pub(super) struct $name(usize);

        impl Idx for $name {
            #[inline(always)]
            fn new(i: usize) -> Self {
                $name(i)
            }
            #[inline(always)]
            fn ix(self) -> usize {
                self.0
            }
        }
    )*};
}

index_type! {
    /// A pod of the context: the pending pods (`input.pods`) first, then the pods on existing
    /// nodes.
    PodIx;
    /// A group of pods with identical constraints.
    GroupIx;
    /// One of a group's relaxation levels (0: nothing relaxed).
    LevelIx;
    /// An existing node or in-flight claim (initialized nodes first).
    NodeIx;
    /// A new claim of the running query, in creation order.
    ClaimIx;
    /// A NodePool, by weight then name.
    PoolIx;
    /// A counter of matching pods per topology domain (spread and pod (anti-)affinity).
    CounterIx;
    /// A required anti-affinity term, as the domains it blocks.
    InverseIx;
}

/// One attempt to place a pod: the pod, its group, and the group's relaxation level tried. The
/// checks that depend only on the group's constraints at that level (taints, requirements,
/// topology) read `group` and `level`; the resource checks read `pod`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Attempt {
    pub(super) pod: PodIx,
    pub(super) group: GroupIx,
    pub(super) level: LevelIx,
}

/// A vector indexed by one kind of index only.
pub(super) struct IxVec<I, T> {
    items: Vec<T>,
    kind: PhantomData<fn(I) -> I>,
}

impl<I, T> Default for IxVec<I, T> {
    fn default() -> Self {
        IxVec { items: Vec::new(), kind: PhantomData }
    }
}

impl<I: Idx, T> IxVec<I, T> {
    pub(super) fn len(&self) -> usize {
        self.items.len()
    }
    pub(super) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// Appends `item`; its index.
    pub(super) fn push(&mut self, item: T) -> I {
        self.items.push(item);
        I::new(self.items.len() - 1)
    }
    pub(super) fn pop(&mut self) -> Option<T> {
        self.items.pop()
    }
    pub(super) fn clear(&mut self) {
        self.items.clear();
    }
    pub(super) fn get(&self, i: I) -> Option<&T> {
        self.items.get(i.ix())
    }
    pub(super) fn last(&self) -> Option<&T> {
        self.items.last()
    }
    pub(super) fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }
    pub(super) fn iter_mut(&mut self) -> std::slice::IterMut<'_, T> {
        self.items.iter_mut()
    }
    /// Grows (or shrinks) to `len` entries, new ones `value`.
    pub(super) fn resize(&mut self, len: usize, value: T)
    where
        T: Clone,
    {
        self.items.resize(len, value);
    }
    /// Grows (or shrinks) to `len` entries, new ones made by `f`.
    pub(super) fn resize_with(&mut self, len: usize, f: impl FnMut() -> T) {
        self.items.resize_with(len, f);
    }
    /// Every index, in order.
    pub(super) fn indices(&self) -> impl Iterator<Item = I> + use<I, T> {
        (0..self.items.len()).map(I::new)
    }
    /// Every entry with its index.
    pub(super) fn iter_enumerated(&self) -> impl Iterator<Item = (I, &T)> {
        self.items.iter().enumerate().map(|(i, t)| (I::new(i), t))
    }
    /// Finds the first entry for which `f` holds.
    pub(super) fn position(&self, f: impl FnMut(&T) -> bool) -> Option<I> {
        self.items.iter().position(f).map(I::new)
    }
}

impl<I, T> From<Vec<T>> for IxVec<I, T> {
    fn from(items: Vec<T>) -> Self {
        IxVec { items, kind: PhantomData }
    }
}

impl<I: Idx, T> FromIterator<T> for IxVec<I, T> {
    fn from_iter<It: IntoIterator<Item = T>>(iter: It) -> Self {
        IxVec::from(iter.into_iter().collect::<Vec<T>>())
    }
}

impl<I: Idx, T> Index<I> for IxVec<I, T> {
    type Output = T;
    #[inline(always)]
    fn index(&self, i: I) -> &T {
        &self.items[i.ix()]
    }
}

impl<I: Idx, T> IndexMut<I> for IxVec<I, T> {
    #[inline(always)]
    fn index_mut(&mut self, i: I) -> &mut T {
        &mut self.items[i.ix()]
    }
}

impl<'a, I, T> IntoIterator for &'a IxVec<I, T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

impl<'a, I, T> IntoIterator for &'a mut IxVec<I, T> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter_mut()
    }
}
