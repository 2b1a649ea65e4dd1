//! Leader election on a `coordination.k8s.io/v1` Lease, with Karpenter's timings: a lease lasts
//! 15 s, the leader renews it every 2 s and gives up leading when it could not renew for 10 s; a
//! candidate takes the lease over once its record has not changed for the lease's duration (as
//! observed on the candidate's own clock, so clock skew between replicas does not matter); a
//! leader that shuts down releases the lease so a standby takes over at its next try.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kerf_cloud::{Clock, SystemClock};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;

/// Karpenter's lease name.
pub const LEASE_NAME: &str = "karpenter-leader-election";
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);

/// What a candidate knows about the lease.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    lease_duration: Duration,
    /// The last record seen and when it was first seen (for expiry).
    observed: Option<(Option<String>, Option<MicroTime>, Instant)>,
    /// When this candidate last held a fresh lease.
    renewed: Option<Instant>,
}

/// One attempt's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Standby,
}

fn now() -> MicroTime {
    MicroTime(SystemClock.now())
}

impl Elector {
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str, lease_duration: Duration) -> Self {
        Elector {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            lease_duration,
            observed: None,
            renewed: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn spec(&self, transitions: i32, acquired: Option<MicroTime>) -> LeaseSpec {
        let t = now();
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.lease_duration.as_secs() as i32),
            acquire_time: Some(acquired.unwrap_or_else(|| t.clone())),
            renew_time: Some(t),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Whether the lease record has stayed unchanged for its whole duration.
    fn expired(&mut self, lease: &Lease) -> bool {
        let spec = lease.spec.clone().unwrap_or_default();
        let record = (spec.holder_identity.clone(), spec.renew_time.clone());
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.lease_duration, Duration::from_secs);
        match &self.observed {
            Some((h, r, at)) if (h, r) == (&record.0, &record.1) => at.elapsed() >= duration,
            _ => {
                self.observed = Some((record.0, record.1, Instant::now()));
                false
            }
        }
    }

    /// One try to acquire or renew the lease.
    pub async fn try_lead(&mut self) -> Result<Role, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.name.clone()), ..ObjectMeta::default() },
                spec: Some(self.spec(0, None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => {
                    self.renewed = Some(Instant::now());
                    Ok(Role::Leader)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Role::Standby),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let transitions = spec.lease_transitions.unwrap_or(0);
        let next = match holder.as_deref() {
            Some(h) if h == self.identity => self.spec(transitions, spec.acquire_time.clone()),
            Some(_) if !self.expired(&lease) => return Ok(Role::Standby),
            _ => self.spec(transitions + 1, None),
        };
        lease.spec = Some(next);
        // The read resourceVersion makes this a compare-and-swap: of two candidates, one wins.
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => {
                self.renewed = Some(Instant::now());
                Ok(Role::Leader)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Role::Standby),
            Err(e) => Err(e),
        }
    }

    /// Gives the lease up (holder cleared), if this candidate holds it.
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else { return Ok(()) };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        self.api.replace(&self.name, &PostParams::default(), &lease).await.map(|_| ())
    }

    /// Whether a leader has failed to renew for longer than the renew deadline.
    fn renewal_overdue(&self) -> bool {
        self.renewed.is_none_or(|at| at.elapsed() > RENEW_DEADLINE)
    }
}

/// Runs the election until `stop`: `leader` follows whether this process leads. Returns
/// `Err` when leadership was lost (the lease could not be renewed in time or another candidate
/// took it): the caller must stop acting, as its view may be stale. On `stop`, a leader releases
/// the lease.
pub async fn run(
    mut elector: Elector,
    leader: watch::Sender<bool>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    let mut leading = false;
    loop {
        match elector.try_lead().await {
            Ok(Role::Leader) => {
                if !leading {
                    tracing::info!(identity = %elector.identity(), lease = LEASE_NAME, "acquired the lease: leading");
                    leading = true;
                    let _ = leader.send(true);
                }
            }
            Ok(Role::Standby) if leading => {
                let _ = leader.send(false);
                return Err(format!("lost the lease {LEASE_NAME} to another candidate"));
            }
            Ok(Role::Standby) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot reach the lease");
                if leading && elector.renewal_overdue() {
                    let _ = leader.send(false);
                    return Err(format!(
                        "could not renew the lease {LEASE_NAME} within {}s: {e}",
                        RENEW_DEADLINE.as_secs()
                    ));
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(RETRY_PERIOD) => {}
            _ = stop.changed() => break,
        }
        if *stop.borrow() {
            break;
        }
    }
    if leading {
        let _ = leader.send(false);
        match elector.release().await {
            Ok(()) => tracing::info!(identity = %elector.identity(), "released the lease"),
            Err(e) => tracing::warn!(error = %e, "cannot release the lease"),
        }
    }
    Ok(())
}
