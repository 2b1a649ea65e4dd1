//! The journal that makes a query reversible: every change a query makes to the context's
//! shared state (existing nodes, topology counts, removed nodes) is recorded as an [`Undo`] and
//! put back when the query ends (the context's `rollback`), so one context answers many
//! queries.

use super::ids::{CounterIx, InverseIx, NodeIx, PodIx};

/// One reversible change to the mutable scheduling state (see
/// [`SchedulingContext`](crate::SchedulingContext)): every query records what it changes and
/// puts it back when it ends, so the context serves the next query without being rebuilt.
pub(super) enum Undo {
    /// Pod `pod`'s requests were added to node `node`.
    NodeUsed { node: NodeIx, pod: PodIx },
    /// Node `node`'s host ports were extended from `len` entries.
    NodePorts { node: NodeIx, len: usize },
    /// `delta` pods were counted in counter `counter`, domain `domain`.
    Count { counter: CounterIx, domain: u32, delta: i64 },
    /// `delta` pods holding inverse term `inverse` were counted in domain `domain`.
    Block { inverse: InverseIx, domain: u32, delta: i64 },
    /// Node `node` was taken out of the cluster for a what-if.
    Removed { node: NodeIx, old: bool },
}
