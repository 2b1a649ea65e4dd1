//! `kerf top`'s watches: one kube-rs watcher per kind it shows (nodes, NodeClaims, NodePools,
//! pods, CapacityBuffers, NodeOverlays, and three event watches: events about nodes, pods'
//! `FailedScheduling`, NodePools' `ConsolidationReversed`),
//! list then watch as the controller's (`kerf_kube::watch`), restarted with a backoff
//! when they fail. Each object is turned into the few facts the fleet keeps as soon as it
//! arrives, so a page of full objects is the most held at once. Read-only: list and watch.

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node};
use kerf_api::{CapacityBuffer, NodeClaim, NodeOverlay, NodePool, SlimPod};
use kerf_controller::disruption::reversals::CONSOLIDATION_REVERSED;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher::{self, Event as Watched};
use tokio::sync::mpsc;

use super::fleet::{BufferFacts, ClaimFacts, EventFacts, Item, Kind, NodeFacts, PodFacts, Update};

/// Objects per page of a list: client-go's pager's. (The controller lists 100 a page to keep its
/// long-lived heap compact; `kerf top` keeps a few facts per object and lists faster in larger
/// pages.)
const LIST_PAGE: u32 = 500;

/// What to watch: the node selector narrows the node watch on the server.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub node_selector: Option<String>,
}

fn resource(kind: Kind) -> Result<ApiResource, String> {
    let name = match kind {
        Kind::Node => return Ok(ApiResource::erase::<Node>(&())),
        Kind::NodeEvent | Kind::PodEvent | Kind::PoolEvent => return Ok(ApiResource::erase::<Event>(&())),
        Kind::Pod => "Pod",
        Kind::NodeClaim => kerf_api::nodeclaim::KIND,
        Kind::NodePool => kerf_api::nodepool::KIND,
        Kind::CapacityBuffer => kerf_api::capacitybuffer::KIND,
        Kind::NodeOverlay => kerf_api::nodeoverlay::KIND,
    };
    kerf_kube::kinds::by_name(name).map(|k| k.resource.clone()).ok_or_else(|| format!("no API place for {name}"))
}

fn config(kind: Kind, sel: &Selection) -> watcher::Config {
    let c = watcher::Config::default().page_size(LIST_PAGE);
    match kind {
        Kind::Node => match &sel.node_selector {
            Some(s) => c.labels(s),
            None => c,
        },
        Kind::NodeEvent => c.fields("involvedObject.kind=Node"),
        Kind::PodEvent => c.fields("involvedObject.kind=Pod,reason=FailedScheduling"),
        Kind::PoolEvent => c.fields(&format!("involvedObject.kind=NodePool,reason={CONSOLIDATION_REVERSED}")),
        _ => c,
    }
}

/// The facts of one object of `kind`; `None` (and a log line) when it cannot be read.
pub fn decode(kind: Kind, obj: DynamicObject) -> Option<Item> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let decoded: Result<Item, String> = (|| {
        Ok(match kind {
            Kind::Pod => {
                let DynamicObject { metadata, mut data, .. } = obj;
                let mut part = |k: &str| data.get_mut(k).map(serde_json::Value::take);
                let (spec, status) = (part("spec"), part("status"));
                let pod = SlimPod::from_parts(metadata, spec, status).map_err(|e| e.to_string())?;
                Item::Pod(PodFacts::of(&pod))
            }
            Kind::Node => Item::Node(NodeFacts::of(&typed::<Node>(obj)?)),
            Kind::NodeEvent => Item::NodeEvent(EventFacts::of(&typed::<Event>(obj)?)),
            Kind::PodEvent => Item::PodEvent(EventFacts::of(&typed::<Event>(obj)?)),
            Kind::PoolEvent => Item::PoolEvent(EventFacts::of(&typed::<Event>(obj)?)),
            Kind::NodeOverlay => Item::Overlay(std::sync::Arc::new(tolerant::<NodeOverlay>(obj)?)),
            Kind::NodeClaim => Item::Claim(ClaimFacts::of(&tolerant::<NodeClaim>(obj)?)),
            Kind::NodePool => Item::Pool(std::sync::Arc::new(tolerant::<NodePool>(obj)?)),
            Kind::CapacityBuffer => Item::Buffer(BufferFacts::of(&tolerant::<CapacityBuffer>(obj)?)),
        })
    })();
    match decoded {
        Ok(item) => Some(item),
        Err(e) => {
            tracing::warn!(kind = kind.name(), name = %name, error = %e, "cannot read object; not shown");
            None
        }
    }
}

fn typed<K: serde::de::DeserializeOwned>(obj: DynamicObject) -> Result<K, String> {
    serde_json::to_value(obj).and_then(serde_json::from_value).map_err(|e| e.to_string())
}

/// Karpenter's and the buffer's kinds: fields kerf does not know are left out, not a refusal.
fn tolerant<K: serde::de::DeserializeOwned>(obj: DynamicObject) -> Result<K, String> {
    let value = serde_json::to_value(obj).map_err(|e| e.to_string())?;
    kerf_api::from_cluster::decode::<K>(value).map(|d| d.object).map_err(|e| e.to_string())
}

/// How long a failed watch waits before it lists again: doubling from 100 ms up to 10 s.
fn backoff(failures: u32) -> std::time::Duration {
    std::time::Duration::from_millis(100u64.saturating_mul(1 << failures.min(7)))
        .min(std::time::Duration::from_secs(10))
}

/// A Pod as `kerf top` lists and watches it: its metadata (which the watcher reads), and its
/// spec and status decoded straight into what a slim pod keeps, the rest of the JSON skipped as
/// it is read (no generic JSON tree of each pod first: listing 60,000 pods is mostly decoding).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct ListedPod {
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    #[serde(default)]
    pub spec: Option<kerf_api::SlimPodSpec>,
    #[serde(default)]
    pub status: Option<kerf_api::SlimPodStatus>,
}

impl kube::Resource for ListedPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;
    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &mut self.metadata
    }
}

fn pod_item(p: ListedPod) -> Option<Item> {
    let pod = SlimPod { metadata: kerf_api::SlimMeta::from(p.metadata), spec: p.spec, status: p.status };
    Some(Item::Pod(PodFacts::of(&pod)))
}

/// Watches one kind until the receiver is gone, each object turned into its facts by `facts`.
async fn watch<K>(
    api: Api<K>,
    kind: Kind,
    config: watcher::Config,
    tx: mpsc::Sender<Vec<Update>>,
    facts: impl Fn(K) -> Option<Item>,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut failures = 0u32;
    loop {
        let mut stream = watcher::watcher(api.clone(), config.clone()).boxed();
        let mut failed = false;
        while let Some(item) = stream.next().await {
            let out = match item {
                Ok(Watched::Apply(o)) | Ok(Watched::InitApply(o)) => facts(o).map(Update::apply).into_iter().collect(),
                Ok(Watched::Delete(o)) => {
                    let m = o.meta();
                    let key = match (&m.namespace, &m.name) {
                        (Some(ns), Some(n)) => format!("{ns}/{n}"),
                        (_, n) => n.clone().unwrap_or_default(),
                    };
                    vec![Update::Delete(kind, key)]
                }
                Ok(Watched::Init) => vec![Update::Listing(kind)],
                Ok(Watched::InitDone) => {
                    failures = 0;
                    vec![Update::Listed(kind)]
                }
                Err(watcher::Error::InitialListFailed(kube::Error::Api(s))) if s.code == 404 || s.code == 403 => {
                    // Not served (no CRD) or not allowed: shown as absent, not retried forever.
                    let why = if s.code == 404 { "not served by this cluster" } else { "reading it is forbidden" };
                    let _ = tx.send(vec![Update::Absent(kind, why.to_string())]).await;
                    return;
                }
                Err(e) => {
                    failed = true;
                    vec![Update::Failed(kind, e.to_string())]
                }
            };
            if !out.is_empty() && tx.send(out).await.is_err() {
                return;
            }
            if failed {
                break;
            }
        }
        failures = failures.saturating_add(1);
        tokio::time::sleep(backoff(failures)).await;
    }
}

/// Watches one kind: pods typed, the others as dynamic objects.
async fn watch_kind(client: kube::Client, kind: Kind, sel: Selection, tx: mpsc::Sender<Vec<Update>>) {
    let config = config(kind, &sel);
    if kind == Kind::Pod {
        return watch(Api::<ListedPod>::all(client), kind, config, tx, pod_item).await;
    }
    match resource(kind) {
        Ok(r) => watch(Api::<DynamicObject>::all_with(client, &r), kind, config, tx, move |o| decode(kind, o)).await,
        Err(e) => {
            let _ = tx.send(vec![Update::Absent(kind, e)]).await;
        }
    }
}

/// Starts a watch per kind on the current runtime; updates arrive on the returned channel.
pub fn start(client: &kube::Client, sel: &Selection) -> mpsc::Receiver<Vec<Update>> {
    let (tx, rx) = mpsc::channel(1024);
    for kind in Kind::ALL {
        tokio::spawn(watch_kind(client.clone(), kind, sel.clone(), tx.clone()));
    }
    rx
}
