//! Resources as dense integer vectors: the resource names of one context, a pod's requests
//! (parsed once, see `facts`) as a vector, tables of such vectors ([`Matrix`]: one row per
//! instance type), and the comparisons the Scheduler makes (cpu in millicores, everything else
//! in whole units, as kube-scheduler).

use kerf_api::resources::{CPU, MEMORY};
use kerf_api::{Quantity, ResourceList};

use crate::volume_limits::{ATTACHABLE_VOLUMES_EBS, NO_LIMIT};

/// Resource names of this pass, so resource lists become dense `i64` vectors (cpu in
/// millicores, everything else in whole units, as kube-scheduler compares them).
pub(super) struct Resources {
    pub(super) names: Vec<String>,
    pub(super) index: foldhash::HashMap<String, usize>,
}

impl Resources {
    /// The position of resource `name` (names are few and sorted: a search of the names costs
    /// less than hashing the name).
    fn position(&self, name: &str) -> Option<usize> {
        self.names.binary_search_by(|n| n.as_str().cmp(name)).ok()
    }

    pub(super) fn dense(&self, list: &ResourceList) -> Vec<i64> {
        let mut v = vec![0i64; self.names.len()];
        for (k, q) in list.iter() {
            if let Some(i) = self.position(k) {
                v[i] = to_units(k, q);
            }
        }
        v
    }
    /// An allocatable list as a dense vector: [`dense`](Self::dense), with no attach limit
    /// ([`NO_LIMIT`]) where the list sets none.
    pub(super) fn dense_allocatable(&self, list: &ResourceList) -> Vec<i64> {
        let mut v = self.dense(list);
        if let Some(i) = self.position(ATTACHABLE_VOLUMES_EBS)
            && !list.0.contains_key(ATTACHABLE_VOLUMES_EBS)
        {
            v[i] = NO_LIMIT;
        }
        v
    }
    /// The column of resource `name`, if the pass has it.
    pub(super) fn column(&self, name: &str) -> Option<usize> {
        self.position(name)
    }
    /// Requests already in the Scheduler's units (a pod's [`PodFacts`]) as a dense vector.
    pub(super) fn dense_units<K: AsRef<str>>(&self, list: &[(K, i64)]) -> Vec<i64> {
        let mut v = vec![0i64; self.names.len()];
        for (k, units) in list {
            if let Some(i) = self.position(k.as_ref()) {
                v[i] = *units;
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

/// A table of `i64` rows of one length (per instance type, per resource): one home for the
/// stride arithmetic of a flat matrix.
#[derive(Clone, Debug, Default)]
pub(super) struct Matrix {
    cells: Vec<i64>,
    cols: usize,
}

impl Matrix {
    /// An empty table of rows `cols` long.
    pub(super) fn new(cols: usize) -> Self {
        Matrix { cells: Vec::new(), cols }
    }
    /// `rows` rows of `cols` cells, each `fill`.
    pub(super) fn filled(rows: usize, cols: usize, fill: i64) -> Self {
        Matrix { cells: vec![fill; rows * cols], cols }
    }
    /// Row `i`.
    #[inline(always)]
    pub(super) fn row(&self, i: usize) -> &[i64] {
        let start = i * self.cols;
        &self.cells[start..start + self.cols]
    }
    #[inline(always)]
    pub(super) fn row_mut(&mut self, i: usize) -> &mut [i64] {
        let start = i * self.cols;
        &mut self.cells[start..start + self.cols]
    }
    /// Cell `r` of row `i`.
    #[inline(always)]
    pub(super) fn get(&self, i: usize, r: usize) -> i64 {
        self.cells[i * self.cols + r]
    }
    /// Empties the table, then gives it `rows` rows of `cols` cells, each `fill` (keeping its
    /// allocation).
    pub(super) fn reset(&mut self, rows: usize, cols: usize, fill: i64) {
        self.cols = cols;
        self.cells.clear();
        self.cells.resize(rows * cols, fill);
    }
    pub(super) fn cols(&self) -> usize {
        self.cols
    }
    /// Row `k` becomes the cellwise maximum of the two rows from `first` (`first` and
    /// `first + 1`).
    #[inline]
    pub(super) fn set_max_of_pair(&mut self, k: usize, first: usize) {
        let c = self.cols;
        for j in 0..c {
            self.cells[k * c + j] = self.cells[first * c + j].max(self.cells[(first + 1) * c + j]);
        }
    }
    pub(super) fn push_row(&mut self, row: &[i64]) {
        debug_assert_eq!(row.len(), self.cols);
        self.cells.extend_from_slice(row);
    }
    /// The rows, in order.
    pub(super) fn rows(&self) -> std::slice::ChunksExact<'_, i64> {
        self.cells.chunks_exact(self.cols.max(1))
    }
    pub(super) fn rows_mut(&mut self) -> std::slice::ChunksExactMut<'_, i64> {
        self.cells.chunks_exact_mut(self.cols.max(1))
    }
    /// Cellwise `self - other` (tables of one shape).
    pub(super) fn minus(&self, other: &Matrix) -> Matrix {
        Matrix { cells: self.cells.iter().zip(&other.cells).map(|(a, b)| a - b).collect(), cols: self.cols }
    }
    /// The componentwise largest row (zeros for no rows).
    pub(super) fn max_row(&self) -> Vec<i64> {
        let mut out = vec![0i64; self.cols];
        for row in self.rows() {
            for (m, v) in out.iter_mut().zip(row) {
                *m = (*m).max(*v);
            }
        }
        out
    }
}
