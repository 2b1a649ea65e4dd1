//! The scenario file (docs/design.md, "Scenario file"): loaded and checked completely before
//! anything runs, so every mistake is reported with its file, field and problem.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Pod, PodSpec};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use kerf_api::{EC2NodeClass, GoDuration, NodePool, Quantity, ResourceList, Taint};
use serde::de::DeserializeOwned;
use serde_yaml_ng::{Mapping, Value};

/// A problem with a scenario or a manifest it applies: which file, which field, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ScenarioError {
    pub file: PathBuf,
    /// The field path, e.g. `steps[2].wait` or `document 1 (Deployment/inflate): spec.replicas`.
    pub field: String,
    pub problem: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.file.display(), self.problem)
        } else {
            write!(f, "{}: {}: {}", self.file.display(), self.field, self.problem)
        }
    }
}

/// A loaded scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub file: PathBuf,
    /// The wall-clock instant of t=0 (cron disruption budgets run on it); the simulator's epoch
    /// when unset.
    pub start: Option<kerf_cloud::Timestamp>,
    pub settings: Settings,
    pub cloud: kerf_cloud::sim::SimConfig,
    pub nodes: Vec<ScenarioNode>,
    pub steps: Vec<Step>,
    /// Objects of Karpenter's older APIs the scenario applies, converted to v1 on loading:
    /// `FILE: KIND/NAME` of each original object.
    pub converted: Vec<String>,
}

/// Controller settings, under Karpenter's names; unset ones keep the controllers' defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    pub batch_idle_duration: Option<Duration>,
    pub batch_max_duration: Option<Duration>,
    /// `featureGates.spotToSpotConsolidation`.
    pub spot_to_spot_consolidation: bool,
    /// Every gate `featureGates` sets (under Karpenter's Helm value names).
    pub feature_gates: kerf_controller::feature_gates::GateSettings,
    /// `kubeScheduler.nominatedNodeName`: whether the simulated kube-scheduler honours pods'
    /// `status.nominatedNodeName` (Kubernetes >= 1.35); unset means it does.
    pub nominated_node_name: Option<bool>,
    /// `preferencePolicy`: how pods' preferences shape kerf's plans; unset keeps the default.
    pub preference_policy: Option<kerf_scheduling::PreferencePolicy>,
}

/// A node present at t=0: one kerf does not manage, or (with `nodeClaim`) one a NodePool
/// launched, whose instance the simulated cloud takes over as it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioNode {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub capacity: ResourceList,
    /// What pods can use; `capacity` when not given.
    pub allocatable: Option<ResourceList>,
    /// `spec.providerID`: required with `nodeClaim`.
    pub provider_id: Option<String>,
    /// The NodeClaim the node belongs to (metadata and spec), when kerf manages it.
    pub node_claim: Option<Box<kerf_api::NodeClaim>>,
}

impl ScenarioNode {
    /// What pods can use.
    pub fn allocatable(&self) -> &ResourceList {
        self.allocatable.as_ref().unwrap_or(&self.capacity)
    }
}

/// What a workload step names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    pub kind: String,
    pub name: String,
    pub namespace: String,
}

#[derive(Debug, Clone)]
pub enum Step {
    Apply(Vec<Manifest>),
    Wait(Duration),
    Scale {
        target: ObjectRef,
        replicas: i32,
    },
    Rollout(ObjectRef),
    Delete(ObjectRef),
    /// A JSON merge patch (RFC 7386) on an object (metadata and spec; status is the owner's).
    Patch {
        target: ObjectRef,
        merge: serde_json::Value,
    },
    Interrupt {
        node: String,
    },
    /// Sets a condition of a Node, as the kubelet or a node agent reports it (its
    /// lastTransitionTime is now when its status changes). A reboot of the node reports it
    /// healthy again unless `persistent`.
    Condition {
        node: String,
        type_: String,
        status: String,
        reason: Option<String>,
        message: Option<String>,
        persistent: bool,
    },
    /// The node's kubelet stops reporting: its Ready condition turns Unknown; its pods stay bound.
    /// A reboot of the node brings its kubelet back unless `persistent`.
    Fail {
        node: String,
        persistent: bool,
    },
    /// The spot market moves: every spot price becomes its model price times a factor within
    /// ±`change`, drawn from `seed` (see `kerf_cloud::sim::spot_market`).
    SpotPrices {
        seed: u64,
        change: f64,
    },
}

/// One object to apply, with where it came from (for messages).
#[derive(Debug, Clone)]
pub struct Manifest {
    pub source: String,
    pub object: ManifestObject,
}

#[derive(Debug, Clone)]
pub enum ManifestObject {
    NodePool(Box<NodePool>),
    EC2NodeClass(Box<EC2NodeClass>),
    Deployment(Box<Deployment>),
    DaemonSet(Box<DaemonSet>),
    Pod(Box<Pod>),
    PodDisruptionBudget(Box<PodDisruptionBudget>),
    PersistentVolumeClaim(Box<PersistentVolumeClaim>),
    PersistentVolume(Box<PersistentVolume>),
    StorageClass(Box<StorageClass>),
    Namespace(Box<Namespace>),
    PriorityClass(Box<PriorityClass>),
    RuntimeClass(Box<RuntimeClass>),
    PodTemplate(Box<k8s_openapi::api::core::v1::PodTemplate>),
    CapacityBuffer(Box<kerf_api::CapacityBuffer>),
    NodeOverlay(Box<kerf_api::NodeOverlay>),
    ProvisioningRequest(Box<kerf_api::ProvisioningRequest>),
    CapacityQuota(Box<kerf_api::CapacityQuota>),
}

const APPLY_KINDS: &str = "NodePool, EC2NodeClass, Deployment, DaemonSet, Pod, PodDisruptionBudget, \
                           PersistentVolumeClaim, PersistentVolume, StorageClass, Namespace, PriorityClass, \
                           RuntimeClass, PodTemplate, CapacityBuffer, NodeOverlay, ProvisioningRequest, \
                           CapacityQuota";

/// Kinds a `delete` or `patch` step may name besides the applied ones: the objects kerf and the
/// kubelet create.
const OWNED_KINDS: &[&str] = &["Node", "NodeClaim"];

struct Ctx<'a> {
    file: &'a Path,
    /// Objects converted from older Karpenter APIs so far (`FILE: KIND/NAME`).
    converted: &'a std::cell::RefCell<Vec<String>>,
}

impl Ctx<'_> {
    fn err(&self, field: impl Into<String>, problem: impl Into<String>) -> ScenarioError {
        ScenarioError { file: self.file.to_path_buf(), field: field.into(), problem: problem.into() }
    }
}

use kerf_api::manifest::value_kind as type_name;

/// Checks a mapping has only `allowed` keys (all strings), and returns it as (key, value) pairs.
fn fields<'v>(
    ctx: &Ctx<'_>,
    path: &str,
    v: &'v Value,
    allowed: &[&str],
) -> Result<BTreeMap<String, &'v Value>, ScenarioError> {
    let Value::Mapping(m) = v else {
        return Err(ctx.err(path, format!("expected a mapping, found {}", type_name(v))));
    };
    let mut out = BTreeMap::new();
    for (k, val) in m {
        let Value::String(k) = k else {
            return Err(ctx.err(path, format!("keys must be strings, found {}", type_name(k))));
        };
        if !allowed.contains(&k.as_str()) {
            return Err(
                ctx.err(join(path, k), format!("unknown field `{k}` (expected one of: {})", allowed.join(", ")))
            );
        }
        out.insert(k.clone(), val);
    }
    Ok(out)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

fn string(ctx: &Ctx<'_>, path: &str, v: &Value) -> Result<String, ScenarioError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        other => Err(ctx.err(path, format!("expected a string, found {}", type_name(other)))),
    }
}

fn required<'v>(
    ctx: &Ctx<'_>,
    path: &str,
    f: &BTreeMap<String, &'v Value>,
    key: &str,
) -> Result<&'v Value, ScenarioError> {
    f.get(key).copied().ok_or_else(|| ctx.err(join(path, key), "required field is missing"))
}

fn string_map(ctx: &Ctx<'_>, path: &str, v: &Value) -> Result<BTreeMap<String, String>, ScenarioError> {
    let Value::Mapping(m) = v else {
        if v.is_null() {
            return Ok(BTreeMap::new());
        }
        return Err(ctx.err(path, format!("expected a mapping, found {}", type_name(v))));
    };
    let mut out = BTreeMap::new();
    for (k, val) in m {
        let k = string(ctx, path, k)?;
        let val = string(ctx, &join(path, &k), val)?;
        out.insert(k, val);
    }
    Ok(out)
}

fn duration(ctx: &Ctx<'_>, path: &str, v: &Value) -> Result<Duration, ScenarioError> {
    let s = match v {
        Value::String(s) => s.clone(),
        other => {
            return Err(ctx
                .err(path, format!("expected a duration such as `90s`, `2m` or `1h30m`, found {}", type_name(other))));
        }
    };
    GoDuration::parse(&s).map(|d| d.as_duration()).map_err(|e| ctx.err(path, e.to_string()))
}

/// Loads and checks a scenario file and every manifest it applies.
pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
        file: path.to_path_buf(),
        field: String::new(),
        problem: format!("cannot read scenario: {e}"),
    })?;
    parse(path, &text)
}

/// Loads the manifests of one file as an `apply` step would (`kerf simulate --apply FILE`):
/// every object checked, objects of Karpenter's older APIs converted to v1.
pub fn load_manifests(path: &Path) -> Result<Vec<Manifest>, ScenarioError> {
    let converted = std::cell::RefCell::new(Vec::new());
    let ctx = Ctx { file: path, converted: &converted };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    parse_apply(&ctx, "--apply", &Value::String(name))
}

/// Parses scenario text; `path` names it in errors and anchors relative manifest paths.
pub fn parse(path: &Path, text: &str) -> Result<Scenario, ScenarioError> {
    let converted = std::cell::RefCell::new(Vec::new());
    let ctx = Ctx { file: path, converted: &converted };
    let text = kerf_api::manifest::strip_bom(text);
    if text.trim().is_empty() {
        return Err(ctx.err("", "the scenario file is empty (expected at least `name` and `steps`)"));
    }
    let root: Value = serde_yaml_ng::from_str(text).map_err(|e| ctx.err("", format!("not valid YAML: {e}")))?;
    let top = fields(&ctx, "", &root, &["name", "start", "settings", "cloud", "nodes", "steps"])?;
    let name = string(&ctx, "name", required(&ctx, "", &top, "name")?)?;
    if name.is_empty() {
        return Err(ctx.err("name", "must not be empty"));
    }
    let start = match top.get("start").copied().filter(|v| !v.is_null()) {
        None => None,
        Some(v) => {
            let text = string(&ctx, "start", v)?;
            Some(text.parse::<kerf_cloud::Timestamp>().map_err(|e| {
                ctx.err("start", format!("expected an RFC 3339 instant such as \"2025-01-01T00:00:00Z\": {e}"))
            })?)
        }
    };
    let settings = match top.get("settings").copied().filter(|v| !v.is_null()) {
        None => Settings::default(),
        Some(v) => parse_settings(&ctx, v)?,
    };
    let cloud = parse_cloud(&ctx, top.get("cloud").copied())?;
    let mut nodes = Vec::new();
    if let Some(v) = top.get("nodes").copied().filter(|v| !v.is_null()) {
        let Value::Sequence(items) = v else {
            return Err(ctx.err("nodes", format!("expected a list, found {}", type_name(v))));
        };
        for (i, item) in items.iter().enumerate() {
            nodes.push(parse_node(&ctx, &format!("nodes[{i}]"), item)?);
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, n) in nodes.iter().enumerate() {
            if !seen.insert(n.name.clone()) {
                return Err(ctx.err(format!("nodes[{i}].name"), format!("duplicate node name {:?}", n.name)));
            }
        }
    }
    let mut steps = Vec::new();
    if let Some(v) = top.get("steps").copied().filter(|v| !v.is_null()) {
        let Value::Sequence(items) = v else {
            return Err(ctx.err("steps", format!("expected a list, found {}", type_name(v))));
        };
        for (i, item) in items.iter().enumerate() {
            steps.push(parse_step(&ctx, &format!("steps[{i}]"), item)?);
        }
    }
    let converted = converted.into_inner();
    Ok(Scenario { name, file: path.to_path_buf(), start, settings, cloud, nodes, steps, converted })
}

fn parse_settings(ctx: &Ctx<'_>, v: &Value) -> Result<Settings, ScenarioError> {
    let f = fields(
        ctx,
        "settings",
        v,
        &["batchIdleDuration", "batchMaxDuration", "featureGates", "kubeScheduler", "preferencePolicy"],
    )?;
    let mut out = Settings::default();
    if let Some(v) = f.get("batchIdleDuration") {
        out.batch_idle_duration = Some(duration(ctx, "settings.batchIdleDuration", v)?);
    }
    if let Some(v) = f.get("batchMaxDuration") {
        out.batch_max_duration = Some(duration(ctx, "settings.batchMaxDuration", v)?);
    }
    if let Some(v) = f.get("featureGates").copied().filter(|v| !v.is_null()) {
        // Karpenter's Helm values, one per gate it defines (`spotToSpotConsolidation`, ...).
        use kerf_controller::feature_gates::{KARPENTER_GATES, helm_value};
        let names: Vec<String> = KARPENTER_GATES.iter().map(|g| helm_value(g.name)).collect();
        let allowed: Vec<&str> = names.iter().map(String::as_str).collect();
        let gates = fields(ctx, "settings.featureGates", v, &allowed)?;
        for (name, g) in &gates {
            let path = format!("settings.featureGates.{name}");
            let on =
                g.as_bool().ok_or_else(|| ctx.err(&path, format!("expected true or false, found {}", type_name(g))))?;
            if let Some(gate) = KARPENTER_GATES.iter().find(|x| helm_value(x.name) == *name) {
                out.feature_gates.0.push((gate, on));
            }
        }
        out.spot_to_spot_consolidation = out.feature_gates.get("SpotToSpotConsolidation").unwrap_or(false);
    }
    if let Some(v) = f.get("kubeScheduler").copied().filter(|v| !v.is_null()) {
        let ks = fields(ctx, "settings.kubeScheduler", v, &["nominatedNodeName"])?;
        if let Some(n) = ks.get("nominatedNodeName") {
            out.nominated_node_name = Some(n.as_bool().ok_or_else(|| {
                ctx.err(
                    "settings.kubeScheduler.nominatedNodeName",
                    format!("expected true or false, found {}", type_name(n)),
                )
            })?);
        }
    }
    if let Some(v) = f.get("preferencePolicy") {
        let names = kerf_scheduling::PreferencePolicy::NAMES.join(", ");
        let name = v.as_str().ok_or_else(|| {
            ctx.err("settings.preferencePolicy", format!("expected one of {names}, found {}", type_name(v)))
        })?;
        out.preference_policy = Some(kerf_scheduling::PreferencePolicy::parse(name).ok_or_else(|| {
            ctx.err(
                "settings.preferencePolicy",
                format!("{name:?} is not a preference policy: expected one of {names}"),
            )
        })?);
    }
    if let (Some(idle), Some(max)) = (out.batch_idle_duration, out.batch_max_duration)
        && idle > max
    {
        return Err(ctx.err("settings.batchIdleDuration", "must not be longer than settings.batchMaxDuration"));
    }
    Ok(out)
}

fn parse_cloud(ctx: &Ctx<'_>, v: Option<&Value>) -> Result<kerf_cloud::sim::SimConfig, ScenarioError> {
    let v = match v {
        None | Some(Value::Null) => Value::Mapping(Mapping::new()),
        Some(v) => v.clone(),
    };
    let config: kerf_cloud::sim::SimConfig = kerf_api::manifest::decode(&v).map_err(|e| {
        ctx.err(if e.path.is_empty() { "cloud".to_string() } else { format!("cloud.{}", e.path) }, e.message)
    })?;
    config.validate().map_err(|e| {
        ctx.err(if e.field.is_empty() { "cloud".to_string() } else { format!("cloud.{}", e.field) }, e.problem)
    })?;
    Ok(config)
}

fn parse_node(ctx: &Ctx<'_>, path: &str, v: &Value) -> Result<ScenarioNode, ScenarioError> {
    let f = fields(
        ctx,
        path,
        v,
        &["name", "labels", "annotations", "taints", "capacity", "allocatable", "providerID", "nodeClaim"],
    )?;
    let name = string(ctx, &join(path, "name"), required(ctx, path, &f, "name")?)?;
    let labels = match f.get("labels") {
        Some(v) => string_map(ctx, &join(path, "labels"), v)?,
        None => BTreeMap::new(),
    };
    let annotations = match f.get("annotations") {
        Some(v) => string_map(ctx, &join(path, "annotations"), v)?,
        None => BTreeMap::new(),
    };
    let mut taints = Vec::new();
    if let Some(v) = f.get("taints").copied().filter(|v| !v.is_null()) {
        let Value::Sequence(items) = v else {
            return Err(ctx.err(join(path, "taints"), format!("expected a list, found {}", type_name(v))));
        };
        for (i, t) in items.iter().enumerate() {
            let tp = format!("{path}.taints[{i}]");
            let taint: Taint = serde_yaml_ng::from_value(t.clone()).map_err(|e| ctx.err(&tp, e.to_string()))?;
            taints.push(taint);
        }
    }
    let capacity = resource_list(ctx, &join(path, "capacity"), required(ctx, path, &f, "capacity")?)?;
    let allocatable = match f.get("allocatable").copied().filter(|v| !v.is_null()) {
        Some(v) => Some(resource_list(ctx, &join(path, "allocatable"), v)?),
        None => None,
    };
    let provider_id = match f.get("providerID").copied().filter(|v| !v.is_null()) {
        Some(v) => Some(string(ctx, &join(path, "providerID"), v)?),
        None => None,
    };
    let node_claim = match f.get("nodeClaim").copied().filter(|v| !v.is_null()) {
        Some(v) => Some(Box::new(parse_node_claim(ctx, &join(path, "nodeClaim"), v)?)),
        None => None,
    };
    if node_claim.is_some() {
        if provider_id.is_none() {
            return Err(ctx.err(join(path, "providerID"), "required for a node with a nodeClaim"));
        }
        if !labels.contains_key(kerf_api::labels::ZONE) {
            return Err(ctx.err(
                join(path, "labels"),
                format!("a node with a nodeClaim needs the {} label", kerf_api::labels::ZONE),
            ));
        }
    }
    Ok(ScenarioNode { name, labels, annotations, taints, capacity, allocatable, provider_id, node_claim })
}

/// A map of resource names to quantities.
fn resource_list(ctx: &Ctx<'_>, path: &str, v: &Value) -> Result<ResourceList, ScenarioError> {
    let mut out = ResourceList::new();
    for (k, q) in string_map(ctx, path, v)? {
        let parsed =
            Quantity::parse(&q).map_err(|e| ctx.err(join(path, &k), format!("invalid quantity {q:?}: {e}")))?;
        if parsed.is_negative() {
            return Err(ctx.err(join(path, &k), format!("{q:?} is negative")));
        }
        out.set(k, parsed);
    }
    Ok(out)
}

/// A node's NodeClaim, as `kerf validate` checks one.
fn parse_node_claim(ctx: &Ctx<'_>, path: &str, v: &Value) -> Result<kerf_api::NodeClaim, ScenarioError> {
    match kerf_api::manifest::decode_karpenter(v) {
        Ok(Some(kerf_api::manifest::KarpenterObject::NodeClaim(c))) => Ok(c),
        Ok(_) => Err(ctx.err(join(path, "kind"), "expected a NodeClaim (apiVersion karpenter.sh/v1)")),
        Err(problems) => {
            let first = problems.first();
            let field = match first.map(|p| p.path.as_str()) {
                Some(f) if !f.is_empty() => join(path, f),
                _ => path.to_string(),
            };
            Err(ctx.err(field, first.map_or_else(|| "invalid".to_string(), |p| p.message.clone())))
        }
    }
}

fn parse_ref(
    ctx: &Ctx<'_>,
    path: &str,
    v: &Value,
    extra: &[&str],
) -> Result<(ObjectRef, BTreeMap<String, Value>), ScenarioError> {
    let mut allowed = vec!["kind", "name", "namespace"];
    allowed.extend_from_slice(extra);
    let f = fields(ctx, path, v, &allowed)?;
    let kind = string(ctx, &join(path, "kind"), required(ctx, path, &f, "kind")?)?;
    let name = string(ctx, &join(path, "name"), required(ctx, path, &f, "name")?)?;
    let namespace = match f.get("namespace") {
        Some(v) => string(ctx, &join(path, "namespace"), v)?,
        None => "default".to_string(),
    };
    let rest = f.into_iter().filter(|(k, _)| extra.contains(&k.as_str())).map(|(k, v)| (k, v.clone())).collect();
    Ok((ObjectRef { kind, name, namespace }, rest))
}

fn parse_step(ctx: &Ctx<'_>, path: &str, v: &Value) -> Result<Step, ScenarioError> {
    const STEPS: &[&str] =
        &["apply", "wait", "scale", "rollout", "delete", "patch", "interrupt", "condition", "fail", "spotPrices"];
    let f = fields(ctx, path, v, STEPS)?;
    if f.len() != 1 {
        return Err(ctx.err(path, format!("a step has exactly one of: {}", STEPS.join(", "))));
    }
    let Some((key, body)) = f.into_iter().next() else {
        return Err(ctx.err(path, "empty step"));
    };
    let p = join(path, &key);
    match key.as_str() {
        "apply" => Ok(Step::Apply(parse_apply(ctx, &p, body)?)),
        "wait" => Ok(Step::Wait(duration(ctx, &p, body)?)),
        "scale" => {
            let (target, rest) = parse_ref(ctx, &p, body, &["replicas"])?;
            if target.kind != "Deployment" {
                return Err(
                    ctx.err(join(&p, "kind"), format!("cannot scale kind {:?}; only Deployment scales", target.kind))
                );
            }
            let Some(r) = rest.get("replicas") else {
                return Err(ctx.err(join(&p, "replicas"), "required field is missing"));
            };
            let replicas = r.as_i64().and_then(|r| i32::try_from(r).ok()).filter(|r| *r >= 0).ok_or_else(|| {
                ctx.err(join(&p, "replicas"), format!("expected a non-negative integer, found {}", type_name(r)))
            })?;
            Ok(Step::Scale { target, replicas })
        }
        "rollout" => {
            let (target, _) = parse_ref(ctx, &p, body, &[])?;
            if target.kind != "Deployment" {
                return Err(ctx.err(
                    join(&p, "kind"),
                    format!("cannot roll out kind {:?}; only Deployment rolls out", target.kind),
                ));
            }
            Ok(Step::Rollout(target))
        }
        "delete" => {
            let (target, _) = parse_ref(ctx, &p, body, &[])?;
            check_target_kind(ctx, &p, &target.kind)?;
            Ok(Step::Delete(target))
        }
        "patch" => {
            let (target, rest) = parse_ref(ctx, &p, body, &["merge"])?;
            check_target_kind(ctx, &p, &target.kind)?;
            if target.kind == "Deployment" {
                return Err(ctx.err(join(&p, "kind"), "a Deployment changes through apply, scale or rollout"));
            }
            let Some(merge) = rest.get("merge") else {
                return Err(ctx.err(join(&p, "merge"), "required field is missing"));
            };
            if !merge.is_mapping() {
                return Err(ctx.err(join(&p, "merge"), format!("expected a mapping, found {}", type_name(merge))));
            }
            let merge: serde_json::Value = serde_yaml_ng::from_value(merge.clone())
                .map_err(|e| ctx.err(join(&p, "merge"), format!("not a JSON merge patch: {e}")))?;
            Ok(Step::Patch { target, merge })
        }
        "interrupt" => {
            let f = fields(ctx, &p, body, &["node"])?;
            let node = string(ctx, &join(&p, "node"), required(ctx, &p, &f, "node")?)?;
            Ok(Step::Interrupt { node })
        }
        "condition" => {
            let f = fields(ctx, &p, body, &["node", "type", "status", "reason", "message", "persistent"])?;
            let node = string(ctx, &join(&p, "node"), required(ctx, &p, &f, "node")?)?;
            let type_ = string(ctx, &join(&p, "type"), required(ctx, &p, &f, "type")?)?;
            let status = string(ctx, &join(&p, "status"), required(ctx, &p, &f, "status")?)?;
            if !matches!(status.as_str(), "True" | "False" | "Unknown") {
                return Err(ctx.err(join(&p, "status"), format!("expected True, False or Unknown, found {status:?}")));
            }
            let reason = f.get("reason").map(|v| string(ctx, &join(&p, "reason"), v)).transpose()?;
            let message = f.get("message").map(|v| string(ctx, &join(&p, "message"), v)).transpose()?;
            let persistent = persistent(ctx, &p, &f)?;
            Ok(Step::Condition { node, type_, status, reason, message, persistent })
        }
        "fail" => {
            let f = fields(ctx, &p, body, &["node", "persistent"])?;
            let node = string(ctx, &join(&p, "node"), required(ctx, &p, &f, "node")?)?;
            let persistent = persistent(ctx, &p, &f)?;
            Ok(Step::Fail { node, persistent })
        }
        "spotPrices" => {
            let f = fields(ctx, &p, body, &["seed", "change"])?;
            let seed_path = join(&p, "seed");
            let seed = required(ctx, &p, &f, "seed")?;
            let seed = seed.as_u64().ok_or_else(|| {
                ctx.err(&seed_path, format!("expected a non-negative integer, found {}", type_name(seed)))
            })?;
            let change_path = join(&p, "change");
            let change = required(ctx, &p, &f, "change")?;
            let change = change
                .as_str()
                .and_then(|c| c.strip_suffix('%'))
                .and_then(|c| c.trim().parse::<f64>().ok())
                .filter(|c| (0.0..=kerf_cloud::sim::spot_market::MAX_CHANGE * 100.0).contains(c))
                .ok_or_else(|| {
                    ctx.err(
                        &change_path,
                        format!(
                            "expected a percentage from 0% to {}%, found {}",
                            kerf_cloud::sim::spot_market::MAX_CHANGE * 100.0,
                            match change {
                                Value::String(c) => format!("{c:?}"),
                                other => type_name(other).to_string(),
                            }
                        ),
                    )
                })?;
            Ok(Step::SpotPrices { seed, change: change / 100.0 })
        }
        _ => Err(ctx.err(&p, "unknown step")),
    }
}

/// A fault step's `persistent` (a reboot does not fix it): `true` or `false`, unset is `false`.
fn persistent(ctx: &Ctx<'_>, path: &str, f: &BTreeMap<String, &Value>) -> Result<bool, ScenarioError> {
    match f.get("persistent") {
        None => Ok(false),
        Some(v) => v.as_bool().ok_or_else(|| {
            ctx.err(join(path, "persistent"), format!("expected true or false, found {}", type_name(v)))
        }),
    }
}

fn check_target_kind(ctx: &Ctx<'_>, path: &str, kind: &str) -> Result<(), ScenarioError> {
    if APPLY_KINDS.split(", ").any(|k| k.trim() == kind) || OWNED_KINDS.contains(&kind) {
        return Ok(());
    }
    Err(ctx.err(
        join(path, "kind"),
        format!("unknown kind {kind:?} (expected one of: {APPLY_KINDS}, {})", OWNED_KINDS.join(", ")),
    ))
}

fn parse_apply(ctx: &Ctx<'_>, path: &str, v: &Value) -> Result<Vec<Manifest>, ScenarioError> {
    match v {
        Value::String(rel) => {
            let base = ctx.file.parent().unwrap_or(Path::new("."));
            let file = base.join(rel);
            let text = std::fs::read_to_string(&file)
                .map_err(|e| ctx.err(path, format!("cannot read manifest file {}: {e}", file.display())))?;
            let mctx = Ctx { file: &file, converted: ctx.converted };
            let mut docs = Vec::new();
            for (i, doc) in serde_yaml_ng::Deserializer::from_str(kerf_api::manifest::strip_bom(&text)).enumerate() {
                let value = <Value as serde::Deserialize>::deserialize(doc)
                    .map_err(|e| mctx.err(format!("document {}", i + 1), format!("not valid YAML: {e}")))?;
                if value.is_null() {
                    continue;
                }
                docs.push((format!("document {}", i + 1), value));
            }
            if docs.is_empty() {
                return Err(ctx.err(path, format!("manifest file {} has no objects", file.display())));
            }
            decode_all(&mctx, docs)
        }
        Value::Sequence(items) => {
            decode_all(ctx, items.iter().enumerate().map(|(i, item)| (format!("{path}[{i}]"), item.clone())).collect())
        }
        other => Err(ctx.err(path, format!("expected a file path or a list of objects, found {}", type_name(other)))),
    }
}

/// Decodes the objects of one apply, after converting those of Karpenter's older APIs to v1
/// (together, so that a pool's kubelet settings reach its node class).
fn decode_all(ctx: &Ctx<'_>, docs: Vec<(String, Value)>) -> Result<Vec<Manifest>, ScenarioError> {
    let mut out: Vec<Manifest> = Vec::new();
    // By identity: a snapshot applies tens of thousands of objects at once.
    let mut seen: std::collections::HashMap<(String, String, String), String> = std::collections::HashMap::new();
    for (at, value) in convert_older(ctx, docs)? {
        if let Some(id) = identity(&value) {
            if let Some(first) = seen.get(&id) {
                let (kind, namespace, name) = &id;
                let what =
                    if namespace.is_empty() { format!("{kind}/{name}") } else { format!("{kind} {namespace}/{name}") };
                return Err(ctx.err(
                    format!("{at} ({kind}/{name}): metadata.name"),
                    format!("duplicate: {what} is also defined at {first}; one apply may define an object once"),
                ));
            }
            seen.insert(id, at.clone());
        }
        out.extend(decode_object(ctx, &at, &value)?);
    }
    Ok(out)
}

/// `(kind, namespace, name)` of a manifest with a fixed name (cluster-scoped kinds have no
/// namespace); `None` for a `List` or a Pod named by `generateName`.
fn identity(v: &Value) -> Option<(String, String, String)> {
    const CLUSTER_SCOPED: &[&str] =
        &["NodePool", "EC2NodeClass", "StorageClass", "Namespace", "PersistentVolume", "PriorityClass", "RuntimeClass"];
    let kind = v.get("kind").and_then(Value::as_str)?;
    let meta = v.get("metadata")?;
    let name = meta.get("name").and_then(Value::as_str).filter(|n| !n.is_empty())?;
    if kind == "List" {
        return None;
    }
    let namespace = if CLUSTER_SCOPED.contains(&kind) {
        String::new()
    } else {
        meta.get("namespace").and_then(Value::as_str).unwrap_or("default").to_string()
    };
    Some((kind.to_string(), namespace, name.to_string()))
}

fn convert_older(ctx: &Ctx<'_>, docs: Vec<(String, Value)>) -> Result<Vec<(String, Value)>, ScenarioError> {
    use kerf_api::convert;
    if !docs.iter().any(|(_, d)| convert::older_api(d).is_some()) {
        return Ok(docs);
    }
    let values: Vec<Value> = docs.iter().map(|(_, v)| v.clone()).collect();
    // The simulated cloud launches no real instances: the instance profile Karpenter once took
    // from a cluster-wide setting is not needed to run the scenario.
    let opts = convert::ConvertOptions { default_instance_profile: Some(SIMULATED_INSTANCE_PROFILE.to_string()) };
    match convert::convert(&values, &opts) {
        Ok(conversion) => {
            let mut seen = std::collections::BTreeSet::new();
            for d in &conversion.documents {
                if d.converted_from.is_some() && seen.insert(d.doc) {
                    let (kind, name) = (
                        kerf_api::manifest::document_kind(&values[d.doc]).unwrap_or(""),
                        kerf_api::manifest::document_name(&values[d.doc]),
                    );
                    ctx.converted.borrow_mut().push(format!("{}: {kind}/{name}", ctx.file.display()));
                }
            }
            Ok(conversion.documents.into_iter().map(|d| (docs[d.doc].0.clone(), d.value)).collect())
        }
        Err((problems, _)) => {
            let Some(first) = problems.first() else {
                return Err(ctx.err("", "could not convert the older Karpenter objects"));
            };
            let p = &first.problem;
            let label = format!("{} ({}/{})", docs[first.doc].0, p.kind, p.name);
            let field = if p.path.is_empty() { label } else { format!("{label}: {}", p.path) };
            let mut message = p.message.clone();
            for other in problems.iter().skip(1) {
                message.push_str(&format!("; {}", other.problem));
            }
            Err(ctx.err(field, message))
        }
    }
}

/// The instance profile written into AWSNodeTemplates converted for a simulation when they name none.
pub const SIMULATED_INSTANCE_PROFILE: &str = "simulated-default-instance-profile";

fn typed<T: DeserializeOwned + serde::Serialize>(ctx: &Ctx<'_>, at: &str, v: &Value) -> Result<T, ScenarioError> {
    let object: T = kerf_api::manifest::decode(v).map_err(|e| {
        ctx.err(if e.path.is_empty() { at.to_string() } else { format!("{at}: {}", e.path) }, e.message)
    })?;
    // The Kubernetes types skip fields they do not know; the API server's strict field
    // validation refuses them. What the decoded object does not give back was not a field.
    let back = serde_json::to_value(&object).map_err(|e| ctx.err(at, format!("cannot be re-encoded: {e}")))?;
    if let Some(path) = unknown_field(v, &back, String::new()) {
        let field = path.rsplit(['.', ']']).next().unwrap_or(&path).to_string();
        return Err(ctx.err(format!("{at}: {path}"), format!("unknown field `{field}`")));
    }
    Ok(object)
}

/// The path of the first key of `input` that `decoded` (the object decoded and encoded again)
/// lacks, skipping keys whose value is empty (`null`, `{}`, `[]`), which encoders leave out.
fn unknown_field(input: &Value, decoded: &serde_json::Value, path: String) -> Option<String> {
    match (input, decoded) {
        (Value::Mapping(m), serde_json::Value::Object(o)) => {
            for (k, v) in m {
                let Some(k) = k.as_str() else { continue };
                let child = if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
                match o.get(k) {
                    Some(d) => {
                        if let Some(p) = unknown_field(v, d, child) {
                            return Some(p);
                        }
                    }
                    None => {
                        let empty = match v {
                            Value::Null => true,
                            Value::Mapping(m) => m.is_empty(),
                            Value::Sequence(s) => s.is_empty(),
                            _ => false,
                        };
                        if !empty {
                            return Some(child);
                        }
                    }
                }
            }
            None
        }
        (Value::Sequence(items), serde_json::Value::Array(out)) if items.len() == out.len() => {
            items.iter().zip(out).enumerate().find_map(|(i, (v, d))| unknown_field(v, d, format!("{path}[{i}]")))
        }
        _ => None,
    }
}

/// `spec.replicas` of a workload: a whole number a Kubernetes int32 holds, not negative.
fn check_replicas(ctx: &Ctx<'_>, label: &str, v: &Value) -> Result<(), ScenarioError> {
    let Some(r) = v.get("spec").and_then(|s| s.get("replicas")) else { return Ok(()) };
    let ok = match r {
        Value::Null => true,
        Value::Number(n) => n.as_i64().is_some_and(|n| (0..=i64::from(i32::MAX)).contains(&n)),
        _ => return Ok(()), // a string or list is refused by the decoder with its type
    };
    if ok {
        return Ok(());
    }
    Err(ctx.err(
        format!("{label}: spec.replicas"),
        format!("must be a whole number from 0 to {}, got {}", i32::MAX, describe_number(r)),
    ))
}

fn describe_number(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        other => kerf_api::manifest::value_kind(other).to_string(),
    }
}

/// Decodes one manifest object (or each item of a `List`).
fn decode_object(ctx: &Ctx<'_>, at: &str, v: &Value) -> Result<Vec<Manifest>, ScenarioError> {
    let Value::Mapping(m) = v else {
        return Err(ctx.err(at, format!("expected an object, found {}", type_name(v))));
    };
    let kind = m.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = m.get("metadata").and_then(|md| md.get("name")).and_then(Value::as_str).unwrap_or("").to_string();
    let label = if name.is_empty() { format!("{at} ({kind})") } else { format!("{at} ({kind}/{name})") };
    if kind.is_empty() {
        return Err(ctx.err(format!("{at}: kind"), "required field is missing"));
    }
    if kind == "List" {
        let items = m.get("items").and_then(Value::as_sequence).cloned().unwrap_or_default();
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            out.extend(decode_object(ctx, &format!("{at}: items[{i}]"), item)?);
        }
        return Ok(out);
    }
    let object = match kind {
        "NodePool" | "EC2NodeClass" | "CapacityBuffer" | "NodeOverlay" | "ProvisioningRequest" | "CapacityQuota" => {
            decode_karpenter(ctx, &label, v)?
        }
        "PodTemplate" => {
            let t: k8s_openapi::api::core::v1::PodTemplate = typed(ctx, &label, v)?;
            if let Some(tmpl) = &t.template {
                check_pod_spec(ctx, &label, "template.spec", tmpl.spec.as_ref())?;
            }
            ManifestObject::PodTemplate(Box::new(t))
        }
        "Deployment" => {
            check_replicas(ctx, &label, v)?;
            let d: Deployment = typed(ctx, &label, v)?;
            check_deployment(ctx, &label, &d)?;
            ManifestObject::Deployment(Box::new(d))
        }
        "DaemonSet" => {
            let d: DaemonSet = typed(ctx, &label, v)?;
            if let Some(spec) = &d.spec {
                check_pod_spec(ctx, &label, "spec.template.spec", spec.template.spec.as_ref())?;
            }
            ManifestObject::DaemonSet(Box::new(d))
        }
        "Pod" => {
            let p: Pod = typed(ctx, &label, v)?;
            check_pod_spec(ctx, &label, "spec", p.spec.as_ref())?;
            ManifestObject::Pod(Box::new(p))
        }
        "PodDisruptionBudget" => ManifestObject::PodDisruptionBudget(Box::new(typed(ctx, &label, v)?)),
        "PersistentVolumeClaim" => ManifestObject::PersistentVolumeClaim(Box::new(typed(ctx, &label, v)?)),
        "PersistentVolume" => ManifestObject::PersistentVolume(Box::new(typed(ctx, &label, v)?)),
        "PriorityClass" => ManifestObject::PriorityClass(Box::new(typed(ctx, &label, v)?)),
        "RuntimeClass" => ManifestObject::RuntimeClass(Box::new(typed(ctx, &label, v)?)),
        "StorageClass" => ManifestObject::StorageClass(Box::new(typed(ctx, &label, v)?)),
        "Namespace" => ManifestObject::Namespace(Box::new(typed(ctx, &label, v)?)),
        other => {
            return Err(
                ctx.err(format!("{at}: kind"), format!("unknown kind {other:?} (expected one of: {APPLY_KINDS})"))
            );
        }
    };
    let needs_name = match &object {
        ManifestObject::Pod(p) => p.metadata.name.is_none() && p.metadata.generate_name.is_none(),
        _ => name.is_empty(),
    };
    if needs_name {
        return Err(ctx.err(format!("{label}: metadata.name"), "required field is missing"));
    }
    Ok(vec![Manifest { source: format!("{}: {label}", ctx.file.display()), object }])
}

fn decode_karpenter(ctx: &Ctx<'_>, label: &str, v: &Value) -> Result<ManifestObject, ScenarioError> {
    match kerf_api::manifest::decode_karpenter(v) {
        Ok(Some(kerf_api::manifest::KarpenterObject::NodePool(p))) => Ok(ManifestObject::NodePool(Box::new(p))),
        Ok(Some(kerf_api::manifest::KarpenterObject::EC2NodeClass(c))) => Ok(ManifestObject::EC2NodeClass(Box::new(c))),
        Ok(Some(kerf_api::manifest::KarpenterObject::CapacityBuffer(b))) => {
            Ok(ManifestObject::CapacityBuffer(Box::new(b)))
        }
        Ok(Some(kerf_api::manifest::KarpenterObject::NodeOverlay(o))) => Ok(ManifestObject::NodeOverlay(Box::new(o))),
        Ok(Some(kerf_api::manifest::KarpenterObject::ProvisioningRequest(r))) => {
            Ok(ManifestObject::ProvisioningRequest(Box::new(r)))
        }
        Ok(Some(kerf_api::manifest::KarpenterObject::CapacityQuota(q))) => {
            Ok(ManifestObject::CapacityQuota(Box::new(q)))
        }
        Ok(_) => Err(ctx.err(
            label,
            "expected a NodePool, EC2NodeClass, CapacityBuffer, NodeOverlay, ProvisioningRequest or CapacityQuota",
        )),
        Err(problems) => {
            let first = problems.first();
            let field = match first.map(|p| p.path.as_str()) {
                Some(f) if !f.is_empty() => format!("{label}: {f}"),
                _ => label.to_string(),
            };
            let mut message = first.map(|p| p.message.clone()).unwrap_or_else(|| "invalid".to_string());
            for p in problems.iter().skip(1) {
                message.push_str(&format!("; {}: {}", if p.path.is_empty() { "(object)" } else { &p.path }, p.message));
            }
            Err(ctx.err(field, message))
        }
    }
}

fn check_deployment(ctx: &Ctx<'_>, label: &str, d: &Deployment) -> Result<(), ScenarioError> {
    let Some(spec) = d.spec.as_ref() else {
        return Err(ctx.err(format!("{label}: spec"), "required field is missing"));
    };
    let template_labels = spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    if !kerf_scheduling::pod::selector_matches(Some(&spec.selector), &template_labels)
        || (spec.selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
            && spec.selector.match_expressions.as_ref().is_none_or(Vec::is_empty))
    {
        return Err(ctx.err(
            format!("{label}: spec.selector"),
            "selector does not match template labels (the selector must be non-empty and select spec.template.metadata.labels)",
        ));
    }
    if spec.replicas.is_some_and(|r| r < 0) {
        return Err(ctx.err(format!("{label}: spec.replicas"), "must be greater than or equal to 0"));
    }
    check_pod_spec(ctx, label, "spec.template.spec", spec.template.spec.as_ref())
}

fn check_pod_spec(ctx: &Ctx<'_>, label: &str, at: &str, spec: Option<&PodSpec>) -> Result<(), ScenarioError> {
    let Some(spec) = spec else {
        return Err(ctx.err(format!("{label}: {at}"), "required field is missing"));
    };
    if spec.containers.is_empty() {
        return Err(ctx.err(format!("{label}: {at}.containers"), "at least one container is required"));
    }
    let groups = [("initContainers", spec.init_containers.as_deref().unwrap_or(&[])), ("containers", &spec.containers)];
    for (group, containers) in groups {
        for (i, c) in containers.iter().enumerate() {
            let Some(res) = c.resources.as_ref() else { continue };
            for (what, list) in [("requests", &res.requests), ("limits", &res.limits)] {
                for (k, q) in list.iter().flatten() {
                    let field = format!("{label}: {at}.{group}[{i}].resources.{what}.{k}");
                    let parsed = Quantity::parse(&q.0)
                        .map_err(|e| ctx.err(&field, format!("invalid quantity {:?}: {e}", q.0)))?;
                    if parsed.is_negative() {
                        return Err(ctx.err(&field, format!("{:?} is negative: {what} must be 0 or more", q.0)));
                    }
                }
            }
        }
    }
    Ok(())
}
