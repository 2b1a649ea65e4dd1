//! Server-side printing: `meta.k8s.io/v1` Tables with each kind's printer columns, as kubectl
//! asks for with `Accept: application/json;as=Table;g=meta.k8s.io;v=v1`. kerf's CRDs show the
//! printer columns of their CustomResourceDefinitions (`kerf_api::crd`, Karpenter's columns);
//! the built-in kinds show kubectl's.

use kerf_api::clock::Timestamp;
use kerf_api::crd::{ColumnSource, PrinterColumn};
use serde_json::{Value, json};

use crate::kinds::ResourceKind;

/// How a cell is read from an object.
#[derive(Clone, Copy)]
enum Cell {
    Name,
    Age,
    /// A JSON pointer; missing reads as empty.
    Path(&'static str),
    /// A JSON pointer; missing or empty reads as `<none>`, as kubectl's pod columns print it.
    OrNone(&'static str),
    /// A pod's readiness gates: `ready/all`, `<none>` without any.
    ReadinessGates,
    /// A label's value.
    Label(&'static str),
    /// The status of the condition of this type.
    Condition(&'static str),
    /// A JSON pointer to a number, 0 when missing.
    Count(&'static str),
    /// `ready/desired` from two pointers.
    Ratio(&'static str, &'static str),
    PodReady,
    PodStatus,
    NodeStatus,
    NodeRoles,
    /// A Node's address of this type, `<none>` when it has none.
    NodeAddress(&'static str),
    EventObject,
    LastSeen,
    /// A CRD printer column's JSONPath, read as the column's type (`date`: an age).
    JsonPath(&'static str, &'static str),
    /// How many keys the objects at these pointers hold together (a ConfigMap's data).
    Keys(&'static [&'static str]),
    /// A Service's external IPs (`<none>`, `<pending>` for a LoadBalancer without one).
    ExternalIp,
    /// A Service's ports as kubectl prints them (`80/TCP`, `53:30000/UDP`).
    ServicePorts,
    /// A field of each container of a workload's pod template, joined by commas.
    Containers(&'static str),
    /// A workload's label selector, as `key=value,...`.
    Selector,
}

/// (header, type, priority: 0 shown by default, 1 only with `-o wide`, cell).
type Column = (&'static str, &'static str, u8, Cell);

fn columns(kind: &ResourceKind) -> Vec<Column> {
    use Cell::*;
    let name = ("Name", "string", 0, Name);
    let age = ("Age", "date", 0, Age);
    // A CRD a client created: its printer columns, or the age when it declares none.
    if let Some(custom) = kind.custom {
        if custom.columns.is_empty() {
            return vec![name, age];
        }
        let declared = custom
            .columns
            .iter()
            .map(|c| (c.name.as_str(), c.type_.as_str(), c.priority, JsonPath(c.json_path.as_str(), c.type_.as_str())));
        return std::iter::once(name).chain(declared).collect();
    }
    // kerf's CRDs: the printer columns their CustomResourceDefinitions declare.
    if let Some(def) = kerf_api::crd::definition(kind.kind) {
        return std::iter::once(name).chain(def.columns.iter().map(crd_column)).collect();
    }
    match kind.kind {
        "ConfigMap" => vec![name, ("Data", "integer", 0, Keys(&["/data", "/binaryData"])), age],
        "Secret" => vec![name, ("Type", "string", 0, Path("/type")), ("Data", "integer", 0, Keys(&["/data"])), age],
        "Service" => vec![
            name,
            ("Type", "string", 0, Path("/spec/type")),
            ("Cluster-IP", "string", 0, Path("/spec/clusterIP")),
            ("External-IP", "string", 0, ExternalIp),
            ("Port(s)", "string", 0, ServicePorts),
            age,
            ("Selector", "string", 1, Path("/spec/selector")),
        ],
        "StatefulSet" => vec![name, ("Ready", "string", 0, Ratio("/status/readyReplicas", "/spec/replicas")), age],
        "Job" => vec![name, ("Completions", "string", 0, Ratio("/status/succeeded", "/spec/completions")), age],
        "CronJob" => vec![
            name,
            ("Schedule", "string", 0, Path("/spec/schedule")),
            ("Suspend", "boolean", 0, Path("/spec/suspend")),
            ("Last Schedule", "date", 0, JsonPath(".status.lastScheduleTime", "date")),
            age,
        ],
        "RoleBinding" | "ClusterRoleBinding" => vec![name, ("Role", "string", 0, Path("/roleRef/name")), age],
        "CustomResourceDefinition" => vec![name, ("Created At", "date", 0, Path("/metadata/creationTimestamp"))],
        "Pod" => vec![
            name,
            ("Ready", "string", 0, PodReady),
            ("Status", "string", 0, PodStatus),
            ("Restarts", "string", 0, Count("/status/containerStatuses/0/restartCount")),
            age,
            ("IP", "string", 1, OrNone("/status/podIP")),
            ("Node", "string", 1, OrNone("/spec/nodeName")),
            ("Nominated Node", "string", 1, OrNone("/status/nominatedNodeName")),
            ("Readiness Gates", "string", 1, ReadinessGates),
        ],
        "Node" => vec![
            name,
            ("Status", "string", 0, NodeStatus),
            ("Roles", "string", 0, NodeRoles),
            age,
            ("Version", "string", 0, Path("/status/nodeInfo/kubeletVersion")),
            ("Internal-IP", "string", 1, NodeAddress("InternalIP")),
            ("External-IP", "string", 1, NodeAddress("ExternalIP")),
            ("Instance-Type", "string", 1, Label("node.kubernetes.io/instance-type")),
            ("Zone", "string", 1, Label("topology.kubernetes.io/zone")),
        ],
        "Namespace" => vec![name, ("Status", "string", 0, Path("/status/phase")), age],
        "Deployment" => vec![
            name,
            ("Ready", "string", 0, Ratio("/status/readyReplicas", "/spec/replicas")),
            ("Up-to-date", "integer", 0, Count("/status/updatedReplicas")),
            ("Available", "integer", 0, Count("/status/availableReplicas")),
            age,
            ("Containers", "string", 1, Containers("name")),
            ("Images", "string", 1, Containers("image")),
            ("Selector", "string", 1, Selector),
        ],
        "ReplicaSet" => vec![
            name,
            ("Desired", "integer", 0, Count("/spec/replicas")),
            ("Current", "integer", 0, Count("/status/replicas")),
            ("Ready", "integer", 0, Count("/status/readyReplicas")),
            age,
            ("Containers", "string", 1, Containers("name")),
            ("Images", "string", 1, Containers("image")),
            ("Selector", "string", 1, Selector),
        ],
        "DaemonSet" => vec![
            name,
            ("Desired", "integer", 0, Count("/status/desiredNumberScheduled")),
            ("Current", "integer", 0, Count("/status/currentNumberScheduled")),
            ("Ready", "integer", 0, Count("/status/numberReady")),
            ("Available", "integer", 0, Count("/status/numberAvailable")),
            age,
        ],
        "PodDisruptionBudget" => vec![
            name,
            ("Min Available", "string", 0, Path("/spec/minAvailable")),
            ("Max Unavailable", "string", 0, Path("/spec/maxUnavailable")),
            ("Allowed Disruptions", "integer", 0, Count("/status/disruptionsAllowed")),
            age,
        ],
        "PersistentVolumeClaim" => vec![
            name,
            ("Status", "string", 0, Path("/status/phase")),
            ("Volume", "string", 0, Path("/spec/volumeName")),
            ("StorageClass", "string", 0, Path("/spec/storageClassName")),
            age,
        ],
        "PersistentVolume" => vec![
            name,
            ("Capacity", "string", 0, Path("/spec/capacity/storage")),
            ("Status", "string", 0, Path("/status/phase")),
            ("StorageClass", "string", 0, Path("/spec/storageClassName")),
            age,
        ],
        "StorageClass" => vec![
            name,
            ("Provisioner", "string", 0, Path("/provisioner")),
            ("VolumeBindingMode", "string", 0, Path("/volumeBindingMode")),
            age,
        ],
        "PriorityClass" => vec![name, ("Value", "integer", 0, Count("/value")), age],
        "Lease" => vec![name, ("Holder", "string", 0, Path("/spec/holderIdentity")), age],
        "Event" => vec![
            ("Last Seen", "string", 0, LastSeen),
            ("Type", "string", 0, Path("/type")),
            ("Reason", "string", 0, Path("/reason")),
            ("Object", "string", 0, EventObject),
            ("Message", "string", 0, Path("/message")),
            ("Name", "string", 1, Name),
        ],
        _ => vec![name, age],
    }
}

/// A CRD printer column as a table column.
fn crd_column(c: &PrinterColumn) -> Column {
    let cell = match c.source {
        ColumnSource::Field(pointer) => Cell::Path(pointer),
        ColumnSource::Label(key) => Cell::Label(key),
        ColumnSource::Condition(type_) => Cell::Condition(type_),
        ColumnSource::CreationTimestamp => Cell::Age,
    };
    (c.name, c.type_, c.priority, cell)
}

fn since(now: Timestamp, stamp: Option<&str>) -> String {
    match stamp.and_then(|s| s.parse::<Timestamp>().ok()) {
        Some(t) => kerf_api::duration::human((now.as_millisecond() - t.as_millisecond()) / 1000),
        None => "<unknown>".to_string(),
    }
}

fn text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")?.as_array()?.iter().find(|c| c["type"] == type_)
}

fn cell(obj: &Value, c: Cell, now: Timestamp) -> Value {
    let s = match c {
        Cell::Name => text(obj.pointer("/metadata/name")),
        Cell::Age => since(now, obj.pointer("/metadata/creationTimestamp").and_then(Value::as_str)),
        Cell::Path(p) => text(obj.pointer(p)),
        Cell::OrNone(p) => match text(obj.pointer(p)) {
            t if t.is_empty() => "<none>".to_string(),
            t => t,
        },
        Cell::ReadinessGates => {
            let gates = obj.pointer("/spec/readinessGates").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
            if gates.is_empty() {
                "<none>".to_string()
            } else {
                let ready = gates
                    .iter()
                    .filter(|g| {
                        g["conditionType"]
                            .as_str()
                            .and_then(|t| condition(obj, t))
                            .is_some_and(|c| c["status"] == "True")
                    })
                    .count();
                format!("{ready}/{}", gates.len())
            }
        }
        Cell::Label(l) => text(obj.pointer("/metadata/labels").and_then(|m| m.get(l))),
        Cell::Condition(t) => text(condition(obj, t).map(|c| &c["status"])),
        Cell::Count(p) => return obj.pointer(p).and_then(Value::as_i64).map_or(json!(0), |n| json!(n)),
        Cell::Ratio(a, b) => format!(
            "{}/{}",
            obj.pointer(a).and_then(Value::as_i64).unwrap_or(0),
            obj.pointer(b).and_then(Value::as_i64).unwrap_or(1)
        ),
        Cell::PodReady => {
            let total = obj.pointer("/spec/containers").and_then(Value::as_array).map_or(0, Vec::len);
            let ready = condition(obj, "Ready").is_some_and(|c| c["status"] == "True");
            format!("{}/{total}", if ready { total } else { 0 })
        }
        Cell::PodStatus => {
            if obj.pointer("/metadata/deletionTimestamp").is_some() {
                "Terminating".to_string()
            } else {
                obj.pointer("/status/phase").and_then(Value::as_str).unwrap_or("Pending").to_string()
            }
        }
        Cell::NodeStatus => {
            let ready = condition(obj, "Ready").is_some_and(|c| c["status"] == "True");
            let mut s = if ready { "Ready" } else { "NotReady" }.to_string();
            if obj.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
                s.push_str(",SchedulingDisabled");
            }
            s
        }
        Cell::NodeRoles => {
            let roles: Vec<&str> = obj
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .map(|l| l.keys().filter_map(|k| k.strip_prefix("node-role.kubernetes.io/")).collect())
                .unwrap_or_default();
            if roles.is_empty() { "<none>".to_string() } else { roles.join(",") }
        }
        Cell::NodeAddress(type_) => obj
            .pointer("/status/addresses")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|x| x["type"] == type_))
            .and_then(|x| x["address"].as_str())
            .map_or_else(|| "<none>".to_string(), str::to_string),
        Cell::EventObject => format!(
            "{}/{}",
            obj.pointer("/involvedObject/kind").and_then(Value::as_str).unwrap_or("").to_lowercase(),
            obj.pointer("/involvedObject/name").and_then(Value::as_str).unwrap_or("")
        ),
        Cell::LastSeen => since(now, obj.pointer("/lastTimestamp").and_then(Value::as_str)),
        Cell::JsonPath(path, type_) => {
            let Some(v) = crate::jsonpath::select(obj, path).into_iter().next() else { return Value::Null };
            match (type_, v) {
                ("date", Value::String(s)) => since(now, Some(s)),
                ("integer" | "number" | "boolean", v) if !v.is_string() => return v.clone(),
                (_, v) => text(Some(v)),
            }
        }
        Cell::ExternalIp => {
            let ingress = obj.pointer("/status/loadBalancer/ingress").and_then(Value::as_array);
            let mut ips: Vec<String> = ingress
                .into_iter()
                .flatten()
                .filter_map(|i| i.get("ip").or_else(|| i.get("hostname")).and_then(Value::as_str).map(str::to_string))
                .collect();
            let external = obj.pointer("/spec/externalIPs").and_then(Value::as_array);
            ips.extend(external.into_iter().flatten().filter_map(Value::as_str).map(str::to_string));
            match (ips.is_empty(), obj.pointer("/spec/type").and_then(Value::as_str)) {
                (false, _) => ips.join(","),
                (true, Some("LoadBalancer")) => "<pending>".to_string(),
                (true, Some("ExternalName")) => text(obj.pointer("/spec/externalName")),
                (true, _) => "<none>".to_string(),
            }
        }
        Cell::ServicePorts => {
            let ports = obj.pointer("/spec/ports").and_then(Value::as_array);
            let shown: Vec<String> = ports
                .into_iter()
                .flatten()
                .map(|p| {
                    let node = p.get("nodePort").map(|n| format!(":{n}")).unwrap_or_default();
                    format!(
                        "{}{node}/{}",
                        text(p.get("port")),
                        p.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
                    )
                })
                .collect();
            if shown.is_empty() { "<none>".to_string() } else { shown.join(",") }
        }
        Cell::Keys(pointers) => {
            let n: usize = pointers.iter().filter_map(|p| obj.pointer(p)?.as_object().map(|m| m.len())).sum();
            return json!(n);
        }
        Cell::Containers(field) => obj
            .pointer("/spec/template/spec/containers")
            .and_then(Value::as_array)
            .map(|cs| cs.iter().map(|c| c[field].as_str().unwrap_or("")).collect::<Vec<_>>().join(","))
            .unwrap_or_default(),
        Cell::Selector => obj
            .pointer("/spec/selector/matchLabels")
            .and_then(Value::as_object)
            .map(|l| l.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect::<Vec<_>>().join(","))
            .unwrap_or_default(),
    };
    Value::String(s)
}

/// The row object as requested: the whole object (`includeObject=Object`), or its metadata.
fn row_object(obj: &Value, include_object: bool) -> Value {
    if include_object {
        return obj.clone();
    }
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
    })
}

/// A Table of `objects` of `kind`.
pub fn table(
    kind: &ResourceKind,
    objects: &[Value],
    resource_version: u64,
    now: Timestamp,
    include_object: bool,
) -> Value {
    let cols = columns(kind);
    let defs: Vec<Value> = cols
        .iter()
        .map(|(name, type_, priority, c)| {
            let mut d = json!({"name": name, "type": type_, "format": "", "description": name, "priority": priority});
            if matches!(c, Cell::Name) {
                d["format"] = json!("name");
            }
            d
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            json!({
                "cells": cols.iter().map(|(_, _, _, c)| cell(o, *c, now)).collect::<Vec<_>>(),
                "object": row_object(o, include_object),
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version.to_string()},
        "columnDefinitions": defs,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_pool_table_prints_the_crd_columns_with_nodes_from_status() {
        let kind = crate::kinds::by_kind("NodePool").unwrap();
        let pool = json!({
            "metadata": {"name": "default", "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": {"weight": 10, "template": {"spec": {"nodeClassRef": {"name": "default"}}}},
            "status": {"nodes": 3, "resources": {"cpu": "6", "memory": "12Gi"},
                "conditions": [{"type": "Ready", "status": "True"}]},
        });
        let now: Timestamp = "2025-01-01T00:00:30Z".parse().unwrap();
        let t = table(kind, &[pool], 1, now, false);
        let headers: Vec<(&str, i64)> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["name"].as_str().unwrap(), c["priority"].as_i64().unwrap()))
            .collect();
        assert_eq!(
            headers,
            [
                ("Name", 0),
                ("NodeClass", 0),
                ("Nodes", 0),
                ("Ready", 0),
                ("Age", 0),
                ("Weight", 1),
                ("CPU", 1),
                ("Memory", 1)
            ]
        );
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[1], "default");
        assert_eq!(cells[2], "3");
        assert_eq!(cells[3], "True");
        assert_eq!(cells[4], "30s");
        assert_eq!((&cells[5], &cells[6], &cells[7]), (&json!("10"), &json!("6"), &json!("12Gi")));
    }

    #[test]
    fn node_claim_table_has_karpenters_printer_columns() {
        let kind = crate::kinds::by_kind("NodeClaim").unwrap();
        let claim = json!({
            "metadata": {"name": "default-abcde", "creationTimestamp": "2025-01-01T00:00:00Z", "labels": {
                "node.kubernetes.io/instance-type": "c6g.large", "karpenter.sh/capacity-type": "spot",
                "topology.kubernetes.io/zone": "us-west-2a"}},
            "status": {"nodeName": "ip-1", "conditions": [{"type": "Ready", "status": "True"}]},
        });
        let now: Timestamp = "2025-01-01T00:01:00Z".parse().unwrap();
        let t = table(kind, &[claim], 7, now, false);
        let headers: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["priority"] == 0)
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(headers, ["Name", "Type", "Capacity", "Zone", "Node", "Ready", "Age"]);
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[1], "c6g.large");
        assert_eq!(cells[5], "True");
        assert_eq!(cells[6], "60s");
    }
}
