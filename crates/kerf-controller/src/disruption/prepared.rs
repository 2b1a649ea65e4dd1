//! An evaluation's scheduling inputs, kept for the next evaluation while nothing they are built
//! from changed. Building them (the input from the informer cache, the running commands' moves,
//! the scheduling context with its kube-scheduler view) is most of an evaluation's cost on a
//! large cluster, and the evaluations that follow one closely often see the same cluster: a
//! single-node sweep goes on every few seconds through candidates it has not tried yet, and a
//! decision is validated a few seconds after it was taken. [`Prepared`] holds the inputs with
//! what they were built from ([`Basis`]: the informer cache's generation, the buffers' room,
//! the nominations, the instance types and the running commands), and the answers already given
//! to consolidation questions on them; a new evaluation reuses them only when its basis is
//! equal, so it decides exactly what it would decide on freshly built inputs.
//!
//! Disruption keeps them only while another evaluation is due soon (a sweep that goes on, a
//! decision waiting for validation); otherwise they are dropped so a settled controller does
//! not hold a cluster-sized context.
//!
//! When inputs are dropped while commands still run (each one's pods about to move, the next
//! evaluation soon after), or replaced by the next evaluation's, their context and the
//! kube-scheduler views they built are kept ([`KeptViews`]): the next context takes over the
//! facts and dense requests of the pods of every node that kept its very pods
//! ([`SchedulingContext::with_facts_from`]), and the next inputs edit the views to their own
//! cluster ([`KeptKubeView`]) instead of building them from every pod again, with the same
//! answers. They are dropped once no command runs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kerf_cloud::CloudProvider;
use kerf_scheduling::{KeptKubeView, PodFactsCache, SchedulingContext, SchedulingInput};

use super::candidates::Candidate;
use super::consolidation::{Decision, consolidate};
use super::in_flight::Landing;
use super::{Disruption, Running};
use crate::ctx::Ctx;
use crate::input::TypesByPool;

/// Everything an evaluation's scheduling inputs are built from: equal bases give equal inputs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Basis {
    /// The informer cache's generation (bumped on every object added, updated or removed).
    state: u64,
    /// The capacity buffers' room held on nodes (not an object of the cache).
    buffer_room: (u64, u64),
    /// The provisioner's nominations.
    nominations: u64,
    /// NodePools whose instance types could not be listed.
    pool_errors: BTreeMap<String, String>,
    /// Each pool's instance types with their offerings.
    types: TypesByPool,
    /// The commands running, with their phases and moves.
    running: Vec<Running>,
    /// The spot-to-spot consolidation gate.
    spot_to_spot: bool,
}

/// What a consolidation decision reads of a candidate: equal keys, equal answers (on equal
/// inputs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CandidateKey {
    claim: String,
    node: String,
    instance_type: String,
    capacity_type: String,
    price: u64,
    replace_hold: Option<String>,
}

impl CandidateKey {
    fn of(c: &Candidate) -> Self {
        CandidateKey {
            claim: c.claim.clone(),
            node: c.node.clone(),
            instance_type: c.instance_type.clone(),
            capacity_type: c.capacity_type.clone(),
            price: c.price.to_bits(),
            replace_hold: c.replace_hold.clone(),
        }
    }
}

/// What is kept of dropped inputs: their context (the cluster as the running commands leave
/// it; the next context takes over its pods' facts, and edits its kube-scheduler view) and the
/// landing check's kube-scheduler view (the cluster as it is).
#[derive(Default)]
pub(crate) struct KeptViews {
    ctx: Option<SchedulingContext>,
    landing: KeptKubeView,
}

impl std::fmt::Debug for KeptViews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptViews").field("ctx", &self.ctx.is_some()).field("landing", &self.landing).finish()
    }
}

/// One consolidation answer: the decision and the pods it moves, or why not.
type Answer = Result<(Decision, usize), String>;

/// The scheduling inputs of an evaluation (see the module doc).
pub(crate) struct Prepared {
    basis: Basis,
    /// The cluster as the running commands leave it.
    pub base: Arc<SchedulingInput>,
    /// The context built from `base` for every consolidation what-if.
    pub ctx: SchedulingContext,
    /// The running commands to check decisions against, when some still have pods to move.
    landing: Option<Landing>,
    /// Consolidation answers given on these inputs, by candidate set.
    answers: HashMap<Vec<CandidateKey>, Answer>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("basis", &self.basis)
            .field("answers", &self.answers.len())
            .finish_non_exhaustive()
    }
}

impl Prepared {
    /// Whether `cands` can go together on these inputs, as they will be once the running
    /// commands' pods have landed too ([`consolidate`], then [`Landing::check`]). A set asked
    /// before is answered as it was.
    pub(crate) fn consolidate(&mut self, facts: &PodFactsCache, cands: &[&Candidate]) -> Answer {
        let key: Vec<CandidateKey> = cands.iter().map(|c| CandidateKey::of(c)).collect();
        if let Some(answer) = self.answers.get(&key) {
            return answer.clone();
        }
        let answer = self.answer(facts, cands);
        self.answers.insert(key, answer.clone());
        answer
    }

    fn answer(&mut self, facts: &PodFactsCache, cands: &[&Candidate]) -> Answer {
        let (decision, pods) = consolidate(&mut self.ctx, cands, self.basis.spot_to_spot)?;
        if let Some(landing) = self.landing.as_mut() {
            landing.check(facts, cands, &decision)?;
        }
        Ok((decision, pods))
    }
}

impl Disruption {
    /// What this evaluation's scheduling inputs would be built from.
    fn basis<P: CloudProvider, C>(&self, cx: &Ctx<'_, P, C>, types: &TypesByPool) -> Basis {
        Basis {
            state: cx.state.generation(),
            buffer_room: cx.published.room_generation(),
            nominations: cx.published.nominations.generation,
            pool_errors: cx.published.pool_errors.clone(),
            types: types.clone(),
            running: self.running.clone(),
            spot_to_spot: cx.options.spot_to_spot_consolidation,
        }
    }

    /// The scheduling inputs for an evaluation now: those kept from the last one when they were
    /// built from the same basis, else built afresh. The caller hands them back with
    /// [`Disruption::keep_prepared`] or drops them.
    pub(crate) fn take_prepared<P: CloudProvider, C>(&mut self, cx: &Ctx<'_, P, C>, types: &TypesByPool) -> Prepared {
        let basis = self.basis(cx, types);
        if let Some(kept) = self.prepared.take() {
            if kept.basis == basis {
                return kept;
            }
            // Built anew right away: from what the kept inputs hold, whether commands run or not.
            self.keep_views_of(kept);
        }
        let inputs = self.decision_inputs(cx, types);
        let views = std::mem::take(&mut self.kept_views);
        let ctx = match views.ctx {
            Some(mut earlier) => {
                let view = earlier.take_kube_view();
                let mut ctx = SchedulingContext::with_facts_from(Arc::clone(&inputs.base), cx.pod_facts, earlier);
                ctx.keep_kube_view_from(view);
                ctx
            }
            None => SchedulingContext::with_facts(Arc::clone(&inputs.base), cx.pod_facts),
        };
        let mut landing = inputs.landing;
        if let Some(l) = landing.as_mut() {
            l.keep_view_from(views.landing);
        }
        Prepared { basis, base: inputs.base, ctx, landing, answers: HashMap::new() }
    }

    /// Keeps `prepared` for the next evaluation.
    pub(crate) fn keep_prepared(&mut self, prepared: Prepared) {
        self.prepared = Some(prepared);
    }

    /// Drops `prepared` (and any inputs kept), keeping its context and kube-scheduler views
    /// while commands run (see the module doc).
    pub(crate) fn drop_prepared(&mut self, prepared: Prepared) {
        if self.running.is_empty() {
            self.kept_views = KeptViews::default();
            return;
        }
        self.keep_views_of(prepared);
    }

    /// Keeps the context and kube-scheduler views of `prepared` for the next inputs.
    fn keep_views_of(&mut self, mut prepared: Prepared) {
        // The context's view, else the one kept before (the context did not use it).
        let mut view = prepared.ctx.take_kube_view();
        if !view.is_some()
            && let Some(earlier) = self.kept_views.ctx.as_mut()
        {
            view = earlier.take_kube_view();
        }
        prepared.ctx.keep_kube_view_from(view);
        self.kept_views.ctx = Some(prepared.ctx);
        if let Some(landing) = prepared.landing.as_mut().map(Landing::take_view)
            && landing.is_some()
        {
            self.kept_views.landing = landing;
        }
    }
}
