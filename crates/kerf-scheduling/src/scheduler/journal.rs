//! The running query's state ([`Query`]: its new claims, the room index over them, the nodes it
//! places against) and the journal that makes it reversible: every change to the context's
//! shared state is recorded as an [`Undo`] and put back when the query ends (the context's
//! `rollback`), so one context answers many queries.

use super::claims::Claim;
use super::ids::{ClaimIx, CounterIx, GroupIx, InverseIx, IxVec, NodeIx, PodIx};
use super::pools::Limits;
use super::room::RoomIndex;

/// The running query's state: its new claims, what it changed (undone when it ends), and what
/// it placed against.
#[derive(Default)]
pub(super) struct Query {
    /// The new claims, in creation order.
    pub(super) claims: IxVec<ClaimIx, Claim>,
    /// Which of them could take a pod of given requests (see `room`).
    pub(super) room: RoomIndex,
    /// The groups some claim refuses (see `GroupState::refused`).
    pub(super) refusing: Vec<GroupIx>,
    /// A reusable buffer for a claim's requests plus a pod's.
    pub(super) scratch: Vec<i64>,
    /// Componentwise minimum request over the pods being placed (a claim that cannot fit it is
    /// closed).
    pub(super) min_request: Vec<i64>,
    /// The nodes with room for the smallest pod, in node order.
    pub(super) roomy: Vec<NodeIx>,
    /// What the query changed.
    pub(super) journal: Vec<Undo>,
    /// Pool limits and node counts before the query.
    pub(super) pool_limits: Vec<Limits>,
    /// Nodes taken away by a what-if.
    pub(super) removed: Vec<NodeIx>,
}

/// One reversible change to the mutable scheduling state (see [`SchedulingContext`](super::SchedulingContext)): every
/// query records what it changes and puts it back when it ends, so the context serves the next
/// query without being rebuilt.
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
