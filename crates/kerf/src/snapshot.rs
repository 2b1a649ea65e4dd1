//! `kerf snapshot [--kubeconfig FILE] [--context NAME] --out FILE`: reads a live cluster with
//! list calls only (paged, `--chunk-size` objects a page, 500 by default, a progress line on
//! stderr) and writes a scenario
//! that reproduces it (`kerf_sim::scenario_writer`). The RBAC it needs is the chart's
//! `kerf-snapshot` ClusterRole. Secrets and ConfigMaps are never listed.

use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use kerf_api::{CapacityBuffer, CapacityQuota, EC2NodeClass, NodeClaim, NodeOverlay, NodePool, ProvisioningRequest};
use kerf_sim::scenario_writer::{ClusterObjects, Written};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use serde::de::DeserializeOwned;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The scenario file to write.
    #[arg(long)]
    pub out: PathBuf,
}

/// Which cluster to read.
#[derive(clap::Args, Debug, Clone)]
pub struct ClusterArgs {
    /// The kubeconfig; without it, $KUBECONFIG, else the in-cluster service account.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context; without it, the current one.
    #[arg(long)]
    pub context: Option<String>,
    /// Objects per list call (as kubectl's --chunk-size).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    pub chunk_size: u32,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (text, written) = snapshot_text(&args.cluster)?;
    std::fs::write(&args.out, text).with_context(|| format!("cannot write {}", args.out.display()))?;
    eprintln!("kerf snapshot: wrote {}: {}", args.out.display(), describe(&written));
    Ok(ExitCode::SUCCESS)
}

/// What a written snapshot holds, in words.
pub fn describe(w: &Written) -> String {
    format!(
        "{} nodes ({} managed by a NodePool), {} pods ({} bound), {} workloads{}",
        w.nodes,
        w.managed_nodes,
        w.pods,
        w.bound_pods,
        w.workloads,
        if w.skipped_pods > 0 {
            format!("; {} finished or terminating pods left out", w.skipped_pods)
        } else {
            String::new()
        }
    )
}

/// Reads the cluster and writes its scenario text (on a runtime of its own).
pub fn snapshot_text(cluster: &ClusterArgs) -> anyhow::Result<(String, Written)> {
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the runtime")?;
    let (name, taken_at, objects) = runtime.block_on(read(cluster))?;
    kerf_sim::scenario_writer::write(&name, taken_at, &objects).context("cannot write the scenario")
}

/// The scenario's name: the kubeconfig context, else `cluster`.
fn scenario_name(cluster: &ClusterArgs) -> String {
    if let Some(c) = &cluster.context {
        return c.clone();
    }
    let path = cluster.kubeconfig.clone().or_else(|| std::env::var_os("KUBECONFIG").map(PathBuf::from));
    path.and_then(|p| kube::config::Kubeconfig::read_from(p).ok())
        .and_then(|k| k.current_context)
        .unwrap_or_else(|| "cluster".to_string())
}

/// The API server's time (its `Date` header on `/version`); this machine's when it sends none.
async fn server_time(client: &kube::Client) -> kerf_cloud::Timestamp {
    let Ok(request) = http::Request::get("/version").body(kube::client::Body::empty()) else {
        return kerf_cloud::Timestamp::now();
    };
    let date = match client.send(request).await {
        Ok(response) => response.headers().get(http::header::DATE).and_then(|d| d.to_str().ok()).map(str::to_string),
        Err(_) => None,
    };
    date.and_then(|d| k8s_openapi::jiff::fmt::rfc2822::parse(&d).ok())
        .map_or_else(kerf_cloud::Timestamp::now, |z| z.timestamp())
}

/// Lists everything the scenario needs; the scenario's name and the instant it is of.
async fn read(cluster: &ClusterArgs) -> anyhow::Result<(String, kerf_cloud::Timestamp, ClusterObjects)> {
    let config = crate::controller::client_config(cluster.kubeconfig.as_ref(), cluster.context.as_deref()).await?;
    let client = kerf_kube::api::client(config).context("cannot build the Kubernetes client")?;
    let taken_at = server_time(&client).await;
    let mut lister = Lister { client, page: cluster.chunk_size, progress: Progress::new(), ignored: Vec::new() };
    let objects = ClusterObjects {
        namespaces: lister.list::<Namespace>(&ApiResource::erase::<Namespace>(&()), "namespaces", true).await?,
        priority_classes: lister
            .list::<PriorityClass>(&ApiResource::erase::<PriorityClass>(&()), "priorityclasses", true)
            .await?,
        storage_classes: lister
            .list::<StorageClass>(&ApiResource::erase::<StorageClass>(&()), "storageclasses", true)
            .await?,
        runtime_classes: lister
            .list::<RuntimeClass>(&ApiResource::erase::<RuntimeClass>(&()), "runtimeclasses", false)
            .await?,
        persistent_volumes: lister
            .list::<PersistentVolume>(&ApiResource::erase::<PersistentVolume>(&()), "persistentvolumes", true)
            .await?,
        persistent_volume_claims: lister
            .list::<PersistentVolumeClaim>(
                &ApiResource::erase::<PersistentVolumeClaim>(&()),
                "persistentvolumeclaims",
                true,
            )
            .await?,
        node_classes: lister.list::<EC2NodeClass>(&kind_resource("EC2NodeClass")?, "ec2nodeclasses", false).await?,
        node_pools: lister.list::<NodePool>(&kind_resource("NodePool")?, "nodepools", false).await?,
        node_claims: lister.list::<NodeClaim>(&kind_resource("NodeClaim")?, "nodeclaims", false).await?,
        nodes: lister.list::<Node>(&ApiResource::erase::<Node>(&()), "nodes", true).await?,
        pod_disruption_budgets: lister
            .list::<PodDisruptionBudget>(&ApiResource::erase::<PodDisruptionBudget>(&()), "poddisruptionbudgets", true)
            .await?,
        daemon_sets: lister.list::<DaemonSet>(&ApiResource::erase::<DaemonSet>(&()), "daemonsets", true).await?,
        deployments: lister.list::<Deployment>(&ApiResource::erase::<Deployment>(&()), "deployments", true).await?,
        replica_sets: lister.list::<ReplicaSet>(&ApiResource::erase::<ReplicaSet>(&()), "replicasets", true).await?,
        pods: lister.list::<Pod>(&ApiResource::erase::<Pod>(&()), "pods", true).await?,
        pod_templates: lister
            .list::<PodTemplate>(&ApiResource::erase::<PodTemplate>(&()), "podtemplates", true)
            .await?,
        capacity_buffers: lister
            .list::<CapacityBuffer>(&kind_resource(kerf_api::capacitybuffer::KIND)?, "capacitybuffers", false)
            .await?,
        node_overlays: lister
            .list::<NodeOverlay>(&kind_resource(kerf_api::nodeoverlay::KIND)?, "nodeoverlays", false)
            .await?,
        provisioning_requests: lister
            .list::<ProvisioningRequest>(
                &kind_resource(kerf_api::provisioningrequest::KIND)?,
                "provisioningrequests",
                false,
            )
            .await?,
        capacity_quotas: lister
            .list::<CapacityQuota>(&kind_resource(kerf_api::capacityquota::KIND)?, "capacityquotas", false)
            .await?,
    };
    lister.progress.done();
    if !lister.ignored.is_empty() {
        const SHOWN: usize = 20;
        let more = lister.ignored.len().saturating_sub(SHOWN);
        eprintln!(
            "kerf snapshot: fields kerf does not read, left out: {}{}",
            lister.ignored[..lister.ignored.len().min(SHOWN)].join("; "),
            if more > 0 { format!("; and {more} more") } else { String::new() }
        );
    }
    Ok((scenario_name(cluster), taken_at, objects))
}

/// Where a custom kind (Karpenter's, CapacityBuffer) lives: the table `kerf controller` watches
/// through.
fn kind_resource(kind: &str) -> anyhow::Result<ApiResource> {
    kerf_kube::kinds::by_name(kind).map(|k| k.resource.clone()).with_context(|| format!("no API place for {kind}"))
}

struct Lister {
    client: kube::Client,
    /// Objects per list call.
    page: u32,
    progress: Progress,
    /// `KIND NAME: field` of each field left out because kerf does not read it.
    ignored: Vec<String>,
}

impl Lister {
    /// Every object of a kind, page by page. A kind the cluster does not serve (404: its CRD is
    /// not installed) is empty unless `required`; a refusal (403) names the RBAC to grant.
    async fn list<K: DeserializeOwned>(
        &mut self,
        resource: &ApiResource,
        plural: &str,
        required: bool,
    ) -> anyhow::Result<Vec<K>> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), resource);
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut params = ListParams::default().limit(self.page);
            if let Some(t) = &token {
                params = params.continue_token(t);
            }
            let page = match api.list(&params).await {
                Ok(page) => page,
                Err(kube::Error::Api(s)) if s.code == 404 && !required => {
                    eprintln!("kerf snapshot: the cluster serves no {plural} ({}); none written", resource.api_version);
                    return Ok(out);
                }
                Err(kube::Error::Api(s)) if s.code == 403 => {
                    return Err(crate::controller::bad(format!(
                        "listing {plural} was refused ({}); grant list on {plural} (the chart's kerf-snapshot ClusterRole has every grant kerf snapshot needs)",
                        s.message
                    )));
                }
                Err(e) => return Err(anyhow::Error::new(e).context(format!("listing {plural}"))),
            };
            for item in page.items {
                let name = match (&item.metadata.namespace, &item.metadata.name) {
                    (Some(ns), Some(n)) => format!("{ns}/{n}"),
                    (_, n) => n.clone().unwrap_or_default(),
                };
                let value = serde_json::to_value(&item).with_context(|| format!("{} {name}", resource.kind))?;
                // A field kerf's type does not know (Karpenter's) is left out of the snapshot.
                let typed = kerf_api::from_cluster::decode::<K>(value)
                    .with_context(|| format!("{} {name}: cannot be read as {}", resource.kind, resource.api_version))?;
                for field in typed.ignored {
                    self.ignored.push(format!("{} {name}: {field}", resource.kind));
                }
                out.push(typed.object);
            }
            self.progress.show(plural, out.len());
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                return Ok(out);
            }
        }
    }
}

/// The progress line: rewritten in place on a terminal, a line per kind otherwise.
struct Progress {
    started: Instant,
    terminal: bool,
    last: Option<(String, usize)>,
}

impl Progress {
    fn new() -> Self {
        Progress { started: Instant::now(), terminal: std::io::stderr().is_terminal(), last: None }
    }

    fn show(&mut self, what: &str, count: usize) {
        let elapsed = self.started.elapsed().as_secs_f64();
        if self.terminal {
            eprint!("\r\x1b[2Kkerf snapshot: {count} {what} listed ({elapsed:.1}s)");
            let _ = std::io::stderr().flush();
        } else if let Some((prev, n)) = self.last.take()
            && prev != what
        {
            eprintln!("kerf snapshot: {n} {prev} listed ({elapsed:.1}s)");
        }
        self.last = Some((what.to_string(), count));
    }

    fn done(&mut self) {
        let elapsed = self.started.elapsed().as_secs_f64();
        if self.terminal {
            eprintln!();
        } else if let Some((what, n)) = self.last.take() {
            eprintln!("kerf snapshot: {n} {what} listed ({elapsed:.1}s)");
        }
    }
}
