//! What the API server fills in on a new Service: the defaults of its spec (`type: ClusterIP`,
//! `sessionAffinity: None`, each port's `protocol: TCP` and `targetPort` its `port`), a cluster IP
//! from the service range 10.96.0.0/12 (one it asks for must be free; `None` keeps a headless
//! Service without one; an ExternalName Service gets none) and, for NodePort and LoadBalancer
//! Services, a node port from 30000-32767 for each port without one. No proxy routes to them:
//! they are what `kubectl get services` shows on a cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use kerf_api::cluster::ApiError;
use serde_json::{Value, json};

use crate::stored::Stored;

/// The service IP range: 10.96.0.0/12, as kubeadm's default.
const RANGE_START: u32 = u32::from_be_bytes([10, 96, 0, 0]);
const RANGE_SIZE: u32 = 1 << 20;
/// The node port range.
const NODE_PORTS: std::ops::RangeInclusive<u64> = 30000..=32767;

/// The cluster IPs and node ports the stored Services hold.
fn taken(services: Option<&BTreeMap<String, Stored>>) -> (BTreeSet<Ipv4Addr>, BTreeSet<u64>) {
    let mut ips = BTreeSet::new();
    let mut ports = BTreeSet::new();
    for s in services.into_iter().flat_map(BTreeMap::values) {
        let Stored::Dynamic(d) = s else { continue };
        let spec = d.body.get("spec");
        ips.extend(
            spec.and_then(|s| s.get("clusterIP")).and_then(Value::as_str).and_then(|ip| ip.parse::<Ipv4Addr>().ok()),
        );
        let listed = spec.and_then(|s| s.get("ports")).and_then(Value::as_array);
        ports.extend(listed.into_iter().flatten().filter_map(|p| p.get("nodePort").and_then(Value::as_u64)));
    }
    (ips, ports)
}

fn invalid(name: &str, message: String) -> ApiError {
    ApiError::Invalid { kind: "Service", name: name.to_string(), message }
}

/// Fills in a new Service's defaults, cluster IP and node ports.
pub fn admit(obj: &mut Stored, services: Option<&BTreeMap<String, Stored>>) -> Result<(), ApiError> {
    let Stored::Dynamic(d) = obj else { return Ok(()) };
    let d = Arc::make_mut(d);
    let name = d.metadata.name.clone().unwrap_or_default();
    let spec = d.body.entry("spec").or_insert_with(|| json!({}));
    let Some(spec) = spec.as_object_mut() else { return Ok(()) };
    let type_ = spec.entry("type").or_insert_with(|| json!("ClusterIP")).as_str().unwrap_or("").to_string();
    if type_ == "ExternalName" {
        return Ok(());
    }
    spec.entry("sessionAffinity").or_insert_with(|| json!("None"));
    spec.entry("internalTrafficPolicy").or_insert_with(|| json!("Cluster"));
    let (ips, mut node_ports) = taken(services);
    let asked = spec.get("clusterIP").and_then(Value::as_str).filter(|ip| !ip.is_empty()).map(str::to_string);
    let ip = match asked.as_deref() {
        Some("None") => None,
        Some(ip) => {
            let parsed: Ipv4Addr = ip.parse().map_err(|_| {
                invalid(&name, format!("spec.clusterIP: Invalid value: {ip:?}: must be a valid IP address"))
            })?;
            let offset = u32::from(parsed).wrapping_sub(RANGE_START);
            if offset >= RANGE_SIZE {
                return Err(invalid(
                    &name,
                    format!(
                        "spec.clusterIP: Invalid value: {ip:?}: provided IP is not in the valid range. The range of valid IPs is 10.96.0.0/12"
                    ),
                ));
            }
            if ips.contains(&parsed) {
                return Err(invalid(
                    &name,
                    format!("spec.clusterIP: Invalid value: {ip:?}: provided IP is already allocated"),
                ));
            }
            Some(parsed)
        }
        None => {
            Some((1..RANGE_SIZE - 1).map(|i| Ipv4Addr::from(RANGE_START + i)).find(|ip| !ips.contains(ip)).ok_or_else(
                || invalid(&name, "spec.clusterIP: Internal error: the service IP range is full".to_string()),
            )?)
        }
    };
    let shown = ip.map_or_else(|| "None".to_string(), |ip| ip.to_string());
    spec.insert("clusterIP".to_string(), json!(shown));
    spec.insert("clusterIPs".to_string(), json!([shown]));
    spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
    spec.entry("ipFamilyPolicy").or_insert_with(|| json!("SingleStack"));
    let wants_node_port = type_ == "NodePort" || type_ == "LoadBalancer";
    for port in spec.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten() {
        let Some(p) = port.as_object_mut() else { continue };
        p.entry("protocol").or_insert_with(|| json!("TCP"));
        if let Some(number) = p.get("port").cloned() {
            p.entry("targetPort").or_insert(number);
        }
        if wants_node_port && !p.contains_key("nodePort") {
            let free = NODE_PORTS
                .clone()
                .find(|n| !node_ports.contains(n))
                .ok_or_else(|| invalid(&name, "spec.ports: Internal error: the node port range is full".to_string()))?;
            node_ports.insert(free);
            p.insert("nodePort".to_string(), json!(free));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kerf_api::clock::ManualClock;

    use super::*;
    use crate::cluster::SimCluster;
    use crate::rest::Rest;

    fn service(name: &str, spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
    }

    #[test]
    fn new_services_get_the_next_free_cluster_ip_defaults_and_node_ports() {
        let rest = Rest::new(Arc::new(SimCluster::new(ManualClock::new(), 1)));
        let kind = crate::kinds::by_kind("Service").unwrap();
        let create = |name: &str, spec: Value| rest.create(kind, Some("default"), service(name, spec));
        let a = create("a", json!({"ports": [{"port": 80}]})).unwrap();
        assert_eq!(a["spec"]["clusterIP"], "10.96.0.1");
        assert_eq!(a["spec"]["type"], "ClusterIP");
        assert_eq!(a["spec"]["ports"][0], json!({"port": 80, "protocol": "TCP", "targetPort": 80}));
        let b = create(
            "b",
            json!({"clusterIP": "10.96.0.2", "type": "NodePort", "ports": [{"port": 53, "protocol": "UDP"}]}),
        )
        .unwrap();
        assert_eq!(
            (&b["spec"]["clusterIPs"], &b["spec"]["ports"][0]["nodePort"]),
            (&json!(["10.96.0.2"]), &json!(30000))
        );
        assert_eq!(create("c", json!({})).unwrap()["spec"]["clusterIP"], "10.96.0.3");
        let err = create("d", json!({"clusterIP": "10.96.0.2"})).unwrap_err();
        assert!(err.to_string().contains("provided IP is already allocated"), "{err}");
        assert_eq!(create("e", json!({"clusterIP": "None"})).unwrap()["spec"]["clusterIP"], "None");
        let ext = create("f", json!({"type": "ExternalName", "externalName": "example.com"})).unwrap();
        assert!(ext["spec"].get("clusterIP").is_none(), "{ext}");
    }
}
