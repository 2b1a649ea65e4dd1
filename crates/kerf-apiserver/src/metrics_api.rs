//! The resource metrics API (`metrics.k8s.io/v1beta1` NodeMetrics and PodMetrics, what
//! `kubectl top` and a HorizontalPodAutoscaler read), computed from the store with a stated
//! usage model instead of measured (docs/playground.md, "The metrics API (kubectl top)"):
//!
//! - a running pod's container uses [`DEFAULT_USAGE_PERCENT`] of its CPU and memory requests,
//!   or the percentage its pod's [`USAGE_ANNOTATION`] gives;
//! - a node uses the sum over the running pods bound to it plus a system share of
//!   [`SYSTEM_CPU_MILLI`] CPU and [`SYSTEM_MEMORY_MIB`] memory.
//!
//! Pods that are not running have no metrics, as metrics-server reports none for them.

use kerf_api::quantity::Quantity;
use serde_json::{Value, json};

use crate::cluster::SimCluster;
use crate::rest::RestError;
use crate::selectors::LabelSelector;
use crate::stored::Stored;

/// The share of its requests a container uses, in percent, unless its pod says otherwise.
pub const DEFAULT_USAGE_PERCENT: f64 = 60.0;
/// The pod annotation giving the share of requests its containers use, in percent (`"90"`).
pub const USAGE_ANNOTATION: &str = "kerf.sh/usage-percent";
/// CPU each node uses besides its pods (kubelet, container runtime, system daemons).
pub const SYSTEM_CPU_MILLI: i64 = 100;
/// Memory each node uses besides its pods.
pub const SYSTEM_MEMORY_MIB: i64 = 128;
/// The window metrics are said to be averaged over.
const WINDOW: &str = "30s";
const API_VERSION: &str = "metrics.k8s.io/v1beta1";

/// CPU in nanocores and memory in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub cpu_nanos: i128,
    pub memory_bytes: i128,
}

impl Usage {
    fn add(self, o: Usage) -> Usage {
        Usage { cpu_nanos: self.cpu_nanos + o.cpu_nanos, memory_bytes: self.memory_bytes + o.memory_bytes }
    }

    /// As metrics-server writes it: CPU in nanocores, memory in Ki when whole.
    fn to_json(self) -> Value {
        let memory = if self.memory_bytes % 1024 == 0 {
            format!("{}Ki", self.memory_bytes / 1024)
        } else {
            self.memory_bytes.to_string()
        };
        json!({"cpu": format!("{}n", self.cpu_nanos), "memory": memory})
    }
}

fn quantity_nanos(v: Option<&Value>) -> i128 {
    v.and_then(Value::as_str).and_then(|s| Quantity::parse(s).ok()).map_or(0, |q| q.nanos())
}

/// The usage share of a pod, in percent.
fn usage_percent(pod: &Value) -> f64 {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(USAGE_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|p| p.is_finite() && *p >= 0.0)
        .unwrap_or(DEFAULT_USAGE_PERCENT)
}

/// Each container's usage, when the pod is running on a node.
fn containers(pod: &Value) -> Option<Vec<(String, Usage)>> {
    if pod.pointer("/status/phase").and_then(Value::as_str) != Some("Running")
        || pod.pointer("/spec/nodeName").and_then(Value::as_str).is_none_or(str::is_empty)
    {
        return None;
    }
    let share = usage_percent(pod) / 100.0;
    let scaled = |n: i128| (n as f64 * share).round() as i128;
    let list = pod.pointer("/spec/containers").and_then(Value::as_array)?;
    Some(
        list.iter()
            .map(|c| {
                let requests = c.pointer("/resources/requests");
                let cpu = quantity_nanos(requests.and_then(|r| r.get("cpu")));
                let memory = quantity_nanos(requests.and_then(|r| r.get("memory"))) / 1_000_000_000;
                let name = c.get("name").and_then(Value::as_str).unwrap_or("").to_string();
                (name, Usage { cpu_nanos: scaled(cpu), memory_bytes: scaled(memory) })
            })
            .collect(),
    )
}

fn pod_json(s: &Stored) -> Option<Value> {
    crate::kinds::by_kind("Pod").map(|k| s.to_json(k))
}

fn meta(obj: &Value, namespaced: bool, now: &str) -> Value {
    let m = &obj["metadata"];
    let mut out = json!({"name": m["name"], "creationTimestamp": now});
    if namespaced {
        out["namespace"] = m["namespace"].clone();
    }
    if let Some(labels) = m.get("labels") {
        out["labels"] = labels.clone();
    }
    out
}

fn selector(q: Option<&str>) -> Result<LabelSelector, RestError> {
    LabelSelector::parse(q.unwrap_or("")).map_err(RestError::BadRequest)
}

fn labels(obj: &Value) -> std::collections::BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default()
}

fn not_found(kind: &'static str, name: &str) -> RestError {
    RestError::Api(kerf_api::cluster::ApiError::NotFound { kind, name: name.to_string() })
}

/// PodMetrics of the running pods in `namespace` (all when `None`), or of the one `name`.
pub fn pods(
    cluster: &SimCluster,
    namespace: Option<&str>,
    name: Option<&str>,
    label_selector: Option<&str>,
) -> Result<Value, RestError> {
    let sel = selector(label_selector)?;
    let now = cluster_now(cluster);
    let (stored, _) = cluster.list_stored("Pod", namespace);
    let mut items = Vec::new();
    for pod in stored.iter().filter_map(pod_json) {
        if name.is_some_and(|n| pod.pointer("/metadata/name").and_then(Value::as_str) != Some(n))
            || !sel.matches(Some(&labels(&pod)))
        {
            continue;
        }
        let Some(cs) = containers(&pod) else { continue };
        let cs: Vec<Value> = cs.into_iter().map(|(n, u)| json!({"name": n, "usage": u.to_json()})).collect();
        items.push(json!({
            "kind": "PodMetrics", "apiVersion": API_VERSION, "metadata": meta(&pod, true, &now),
            "timestamp": now, "window": WINDOW, "containers": cs,
        }));
    }
    match name {
        Some(n) => items.pop().ok_or_else(|| not_found("PodMetrics", n)),
        None => Ok(json!({"kind": "PodMetricsList", "apiVersion": API_VERSION, "metadata": {}, "items": items})),
    }
}

/// NodeMetrics of every node, or of the one `name`.
pub fn nodes(cluster: &SimCluster, name: Option<&str>, label_selector: Option<&str>) -> Result<Value, RestError> {
    let sel = selector(label_selector)?;
    let now = cluster_now(cluster);
    let node_kind = crate::kinds::by_kind("Node").ok_or(RestError::NoSuchPath)?;
    let (nodes, _) = cluster.list_stored("Node", None);
    let (pods, _) = cluster.list_stored("Pod", None);
    let system = Usage {
        cpu_nanos: i128::from(SYSTEM_CPU_MILLI) * 1_000_000,
        memory_bytes: i128::from(SYSTEM_MEMORY_MIB) << 20,
    };
    let mut per_node: std::collections::HashMap<String, Usage> = std::collections::HashMap::new();
    for pod in pods.iter().filter_map(pod_json) {
        let Some(cs) = containers(&pod) else { continue };
        let node = pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("").to_string();
        let total = cs.into_iter().fold(Usage::default(), |a, (_, u)| a.add(u));
        let e = per_node.entry(node).or_default();
        *e = e.add(total);
    }
    let mut items = Vec::new();
    for node in nodes.iter().map(|n| n.to_json(node_kind)) {
        let node_name = node.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        if name.is_some_and(|n| n != node_name) || !sel.matches(Some(&labels(&node))) {
            continue;
        }
        let usage = per_node.get(node_name).copied().unwrap_or_default().add(system);
        items.push(json!({
            "kind": "NodeMetrics", "apiVersion": API_VERSION, "metadata": meta(&node, false, &now),
            "timestamp": now, "window": WINDOW, "usage": usage.to_json(),
        }));
    }
    match name {
        Some(n) => items.pop().ok_or_else(|| not_found("NodeMetrics", n)),
        None => Ok(json!({"kind": "NodeMetricsList", "apiVersion": API_VERSION, "metadata": {}, "items": items})),
    }
}

fn cluster_now(cluster: &SimCluster) -> String {
    use kerf_api::clock::Clock;
    cluster.clock().now().to_string()
}
