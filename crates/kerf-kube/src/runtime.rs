//! The runtime behind `kerf controller`: watches feed the controllers' state in order; once
//! every kind has synced, and while this process leads, the controllers reconcile when events
//! arrive (debounced: 100 ms without a new event, at most 1 s after the first) or when the time
//! they asked to be woken at comes, on the wall clock. A reconciler that fails is retried with
//! backoff by the controllers' own runtime (`kerf_controller::runtime`) while the others go on.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kerf_cloud::{Clock, CloudProvider, SystemClock, Timestamp};
use kerf_controller::{Manager, Options};
use kube::Client;
use tokio::sync::{mpsc, watch};

use crate::api::KubeApi;
use crate::endpoints::Health;
use crate::lease::{self, Elector};
use crate::metrics::Metrics;
use crate::watch::{self as watches, Feed};

/// Quiet time after the last event before a pass.
const DEBOUNCE: Duration = Duration::from_millis(100);
/// Longest a pass waits for events to settle.
const MAX_DEBOUNCE: Duration = Duration::from_secs(1);

/// Where the lease lives.
#[derive(Debug, Clone)]
pub struct Election {
    pub namespace: String,
    pub name: String,
}

#[derive(Debug, Clone)]
pub struct Settings {
    /// This process's identity (lease holder, event reporting instance).
    pub identity: String,
    /// `None`: act without leader election.
    pub election: Option<Election>,
    pub options: Options,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    LostLeadership(String),
    #[error("the watches stopped")]
    WatchesEnded,
}

fn instant_of(t: Timestamp) -> Instant {
    let ms = t.as_millisecond().saturating_sub(SystemClock.now().as_millisecond());
    Instant::now() + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

struct Loop<P: CloudProvider> {
    manager: Manager<P>,
    api: KubeApi,
    metrics: Metrics,
    health: Arc<Health>,
    unsynced: BTreeSet<&'static str>,
    /// Kinds whose watch failed and has not listed again.
    relisting: BTreeSet<&'static str>,
    leading: bool,
    /// Events arrived since the last pass: (first, last).
    pending: Option<(Instant, Instant)>,
    /// When the controllers asked to run again.
    wake: Option<Timestamp>,
    /// NodePools and NodeOverlays (name, resourceVersion) the price gauges were computed for.
    priced: Vec<(String, Option<String>)>,
}

impl<P: CloudProvider> Loop<P> {
    fn synced(&self) -> bool {
        self.unsynced.is_empty()
    }

    fn feed(&mut self, batch: Vec<Feed>) {
        for item in batch {
            match item {
                Feed::Event(ev) => {
                    let counting = self.synced() && self.leading;
                    let manager = &self.manager;
                    self.metrics.observe(&ev, counting, |claim| {
                        manager.disruptions().iter().any(|r| r.replacements.iter().any(|c| c == claim))
                    });
                    self.manager.observe(&ev);
                    let now = Instant::now();
                    self.pending = Some(self.pending.map_or((now, now), |(first, _)| (first, now)));
                }
                Feed::Synced(kind) => {
                    if self.unsynced.remove(kind) && self.unsynced.is_empty() {
                        tracing::info!("caches synced");
                        self.health.set_synced(true);
                    }
                    if self.relisting.remove(kind) && self.relisting.is_empty() {
                        tracing::info!("every failed watch has listed again");
                        self.manager.watches_resynced();
                        let now = Instant::now();
                        self.pending = Some(self.pending.map_or((now, now), |(first, _)| (first, now)));
                    }
                }
                Feed::Error(kind, e) => {
                    tracing::warn!(kind, error = %e, "watch failed; listing again");
                    self.relisting.insert(kind);
                    self.manager.watches_interrupted();
                }
            }
        }
    }

    /// When the next pass is due, if any.
    fn due(&self) -> Option<Instant> {
        if !self.synced() || !self.leading {
            return None;
        }
        let events = self.pending.map(|(first, last)| (last + DEBOUNCE).min(first + MAX_DEBOUNCE));
        [events, self.wake.map(instant_of)].into_iter().flatten().min()
    }

    async fn pass(&mut self) {
        self.pending = None;
        let now = SystemClock.now();
        let had_pending_pods = self.manager.state().unbound_pods().next().is_some();
        let started = Instant::now();
        self.wake = self.manager.reconcile(&self.api, now).await;
        // Failed reconcilers were logged and will be retried with backoff.
        self.manager.take_errors();
        if had_pending_pods {
            self.metrics.scheduling_pass(started.elapsed().as_secs_f64());
        }
        self.metrics.after_pass(&self.manager);
        self.update_prices().await;
    }

    async fn update_prices(&mut self) {
        let state = self.manager.state();
        // Pools and NodeOverlays (which price the pools' types) as last seen.
        let pools: Vec<(String, Option<String>)> = state
            .node_pools()
            .iter()
            .map(|(n, p)| (n.clone(), p.metadata.resource_version.clone()))
            .chain(
                state
                    .node_overlays()
                    .iter()
                    .map(|(n, o)| (format!("overlay/{n}"), o.metadata.resource_version.clone())),
            )
            .collect();
        if pools == self.priced {
            return;
        }
        let mut types = Vec::new();
        let mut seen = BTreeSet::new();
        for pool in state.node_pools().values() {
            match self.manager.cloud().instance_types(pool, state.node_class_for(pool)).await {
                Ok(list) => types.extend(list.into_iter().filter(|t| seen.insert(t.name.clone()))),
                Err(e) => {
                    tracing::warn!(NodePool = %pool.name(), error = %e, "cannot list instance types for price metrics")
                }
            }
        }
        self.metrics.set_prices(&types);
        self.priced = pools;
    }
}

/// Runs the controllers against the cluster `client` talks to until `stop` turns true.
pub async fn run<P: CloudProvider>(
    client: Client,
    cloud: P,
    settings: Settings,
    metrics: Metrics,
    health: Arc<Health>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), RunError> {
    let api = KubeApi::new(client.clone(), &settings.identity, metrics.events());
    let (mut feed, kinds): (mpsc::Receiver<Vec<Feed>>, _) = watches::start(&client);
    let (leader_tx, mut leader_rx) = watch::channel(settings.election.is_none());
    let mut election = settings.election.as_ref().map(|e| {
        let elector = Elector::new(client.clone(), &e.namespace, &e.name, &settings.identity, lease::LEASE_DURATION);
        tokio::spawn(lease::run(elector, leader_tx, stop.clone()))
    });
    let leading = *leader_rx.borrow();
    health.set_leader(leading);
    let mut lp = Loop {
        manager: Manager::new(cloud, settings.options.clone()),
        api,
        metrics,
        health: Arc::clone(&health),
        unsynced: kinds.into_iter().collect(),
        relisting: BTreeSet::new(),
        leading,
        pending: None,
        wake: Some(SystemClock.now()),
        priced: Vec::new(),
    };
    if !leading {
        tracing::info!(identity = %settings.identity, "waiting for the lease");
    }
    let mut election_open = election.is_some();
    loop {
        let due = lp.due();
        let sleep = async move {
            match due {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            batch = feed.recv() => match batch {
                Some(batch) => lp.feed(batch),
                None => return Err(RunError::WatchesEnded),
            },
            _ = sleep => {
                // Everything already delivered goes in before the pass.
                while let Ok(batch) = feed.try_recv() {
                    lp.feed(batch);
                }
                lp.pass().await;
            }
            changed = leader_rx.changed(), if election_open => {
                if changed.is_err() {
                    // No election (or it ended): leadership does not change any more.
                    election_open = false;
                    continue;
                }
                let now_leading = *leader_rx.borrow_and_update();
                lp.leading = now_leading;
                health.set_leader(now_leading);
                if now_leading {
                    lp.wake = Some(SystemClock.now());
                }
            }
            ended = async { match election.as_mut() { Some(h) => h.await, None => std::future::pending().await } } => {
                election = None;
                if let Ok(Err(lost)) = ended {
                    return Err(RunError::LostLeadership(lost));
                }
            }
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    if let Some(h) = election {
        // It sees the same stop and releases the lease before ending.
        let _ = h.await;
    }
    Ok(())
}
