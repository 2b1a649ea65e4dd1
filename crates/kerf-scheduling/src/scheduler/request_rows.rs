//! Every pod's dense requests (one entry per resource name of the context, in
//! [`Resources`](super::resources::Resources) order), each distinct row kept once.
//!
//! The replicas of a workload ask for the same, so a context over 150,000 pods holds a few
//! rows and a row number per pod, where a vector per pod would cost a hundred bytes each;
//! several contexts are alive at once while disruption evaluates, and this was a large part of
//! each. Reading a pod's row is one more load than reading its own vector.

use std::ops::Index;

use super::ids::{Idx, PodIx};

/// The dense requests of a context's pods (see the module doc).
#[derive(Debug, Default)]
pub(super) struct RequestRows {
    /// Entries per row.
    width: usize,
    /// The distinct rows, one after another.
    rows: Vec<i64>,
    /// Each pod's row, by pod index.
    row_of: Vec<u32>,
    /// Row number by content, while rows are added.
    index: foldhash::HashMap<Box<[i64]>, u32>,
}

impl RequestRows {
    /// No rows yet, each of `width` entries.
    pub(super) fn new(width: usize) -> Self {
        RequestRows { width, ..Default::default() }
    }

    /// The number of `row`, added if no equal row is kept yet.
    pub(super) fn row(&mut self, row: &[i64]) -> u32 {
        debug_assert_eq!(row.len(), self.width);
        if let Some(&n) = self.index.get(row) {
            return n;
        }
        let n = u32::try_from(self.index.len()).unwrap_or(u32::MAX);
        self.rows.extend_from_slice(row);
        self.index.insert(row.into(), n);
        n
    }

    /// The next pod's requests are row `n` (a number [`row`](Self::row) gave).
    pub(super) fn push(&mut self, n: u32) {
        self.row_of.push(n);
    }

    /// Done adding: the lookup by content is dropped.
    pub(super) fn finish(mut self) -> Self {
        self.index = foldhash::HashMap::default();
        self.rows.shrink_to_fit();
        self.row_of.shrink_to_fit();
        self
    }

    /// The number of pods.
    pub(super) fn len(&self) -> usize {
        self.row_of.len()
    }

    /// The number of distinct rows.
    #[cfg(test)]
    pub(super) fn distinct(&self) -> usize {
        self.rows.len().checked_div(self.width).unwrap_or(0)
    }

    /// Every pod's requests, in pod order.
    #[cfg(test)]
    pub(super) fn iter(&self) -> impl Iterator<Item = &[i64]> {
        self.row_of.iter().map(|&n| self.at(n))
    }

    fn at(&self, n: u32) -> &[i64] {
        let start = n as usize * self.width;
        &self.rows[start..start + self.width]
    }
}

impl Index<PodIx> for RequestRows {
    type Output = [i64];
    #[inline]
    fn index(&self, pi: PodIx) -> &[i64] {
        self.at(self.row_of[pi.ix()])
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::SchedulingContext;
    use crate::scheduler::PodFactsCache;
    use crate::testing::*;

    #[test]
    fn a_workloads_replicas_share_one_row_however_many_there_are() {
        let mut n1 = node("n1", &[], &[("cpu", "8"), ("memory", "16Gi"), ("pods", "80")]);
        n1.pods = (0..30).map(|i| pod(&format!("web-{i}")).cpu("250m").build()).collect();
        let mut input = small_large_cluster(vec![n1]);
        input.pods = (30..60).map(|i| pod(&format!("web-{i}")).cpu("250m").build()).collect();
        input.pods.push(pod("db").cpu("1").build());
        let ctx = SchedulingContext::with_facts(Arc::new(input), &PodFactsCache::new());
        assert_eq!(ctx.pods.requests.len(), 61);
        assert_eq!(ctx.pods.requests.distinct(), 2, "one row for the web replicas, one for db");
        let cpu = ctx.res.column("cpu").unwrap_or(usize::MAX);
        assert_eq!(ctx.pods.requests[PodIx::new(0)][cpu], 250);
        assert_eq!(ctx.pods.requests[PodIx::new(30)][cpu], 1000);
        assert_eq!(ctx.pods.requests[PodIx::new(60)][cpu], 250);
    }

    #[test]
    fn equal_rows_are_kept_once_and_each_pod_reads_its_own() {
        let mut rows = RequestRows::new(3);
        for r in [[1000, 2, 1], [500, 1, 1], [1000, 2, 1], [1000, 2, 1]] {
            let n = rows.row(&r);
            rows.push(n);
        }
        let rows = rows.finish();
        assert_eq!(rows.len(), 4);
        assert_eq!(rows.distinct(), 2);
        assert_eq!(&rows[PodIx::new(1)], &[500, 1, 1]);
        assert_eq!(&rows[PodIx::new(3)], &[1000, 2, 1]);
        let all: Vec<&[i64]> = rows.iter().collect();
        assert_eq!(all, vec![&[1000, 2, 1][..], &[500, 1, 1], &[1000, 2, 1], &[1000, 2, 1]]);
    }
}
