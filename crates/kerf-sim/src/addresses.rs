//! The addresses the simulated cluster hands out, as the kubelet reports them and a CNI assigns
//! them: a Node's `InternalIP`, `InternalDNS` and `Hostname`, and each pod's IP once it starts.
//!
//! A Node named as EC2 names instances (`ip-10-1-2-3.ec2.internal`, which is how the simulated
//! cloud names them) has that address; any other Node (kwok's, a scenario's `node-1`) the next
//! of 172.16.0.0/12. A pod's address is in 100.64.0.0/10, as on EKS with a secondary CIDR for
//! pods (custom networking), so it never clashes with a node's; it follows from the pod's uid,
//! which the cluster numbers in order, so no two pods share one while a run has made fewer than
//! four million objects, a run's addresses are the same every time, and whoever starts the pod
//! (the kubelet, or kube-scheduler binding it to a Ready node) needs nothing kept. A pod on the
//! host's network has its node's address.

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::NodeAddress;

/// Where the addresses of nodes not named after theirs start (172.16.0.0/12).
const NODE_BASE: u32 = u32::from_be_bytes([172, 16, 0, 1]);
const NODE_COUNT: u32 = (1 << 20) - 2;
/// Where pods' addresses start (100.64.0.0/10).
const POD_BASE: u32 = u32::from_be_bytes([100, 64, 0, 1]);
const POD_COUNT: u32 = (1 << 22) - 2;

/// The addresses handed out to nodes not named after theirs.
#[derive(Debug, Default)]
pub struct Addresses {
    nodes: u32,
}

/// The address an EC2-style name (`ip-10-1-2-3` then, optionally, a dot and a domain) carries.
pub fn address_in_name(name: &str) -> Option<Ipv4Addr> {
    let host = name.split('.').next()?.strip_prefix("ip-")?;
    let mut octets = [0u8; 4];
    let mut parts = host.split('-');
    for o in &mut octets {
        *o = parts.next()?.parse().ok()?;
    }
    parts.next().is_none().then_some(Ipv4Addr::from(octets))
}

/// A Node's `InternalIP` among its addresses, if it has one.
pub fn internal_ip(addresses: Option<&[NodeAddress]>) -> Option<&str> {
    addresses?.iter().find(|a| a.type_ == "InternalIP").map(|a| a.address.as_str())
}

impl Addresses {
    /// The addresses the kubelet reports for the Node named `name`.
    pub fn node(&mut self, name: &str) -> Vec<NodeAddress> {
        let ip = address_in_name(name).unwrap_or_else(|| {
            let ip = Ipv4Addr::from(NODE_BASE + self.nodes % NODE_COUNT);
            self.nodes += 1;
            ip
        });
        let address = |type_: &str, address: String| NodeAddress { type_: type_.to_string(), address };
        vec![
            address("InternalIP", ip.to_string()),
            address("InternalDNS", name.to_string()),
            address("Hostname", name.to_string()),
        ]
    }
}

/// The address of the pod whose uid is `uid`: the uid's number (the cluster's uids end in it,
/// in hexadecimal), or for a uid of another form a hash of it, within the pods' range.
pub fn pod_ip(uid: &str) -> String {
    let number = uid.rsplit('-').next().and_then(|n| u64::from_str_radix(n, 16).ok()).unwrap_or_else(|| {
        // FNV-1a: stable across runs and builds.
        uid.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
    });
    Ipv4Addr::from(POD_BASE + (number % u64::from(POD_COUNT)) as u32).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ec2_style_names_carry_their_address_and_others_do_not() {
        assert_eq!(address_in_name("ip-10-0-32-7.ec2.internal"), Some(Ipv4Addr::new(10, 0, 32, 7)));
        assert_eq!(address_in_name("ip-10-1-2-3"), Some(Ipv4Addr::new(10, 1, 2, 3)));
        for name in ["node-1", "ip-10-1-2.ec2.internal", "ip-10-1-2-3-4", "ip-300-1-2-3", "kwok-ip-10-1-2-3"] {
            assert_eq!(address_in_name(name), None, "{name}");
        }
    }

    #[test]
    fn nodes_and_pods_get_distinct_addresses_in_their_own_ranges() {
        let mut a = Addresses::default();
        let named = a.node("ip-10-0-0-9.ec2.internal");
        assert_eq!(internal_ip(Some(&named)), Some("10.0.0.9"));
        assert_eq!(named[1].address, "ip-10-0-0-9.ec2.internal");
        let first = a.node("kwok-a");
        let second = a.node("kwok-b");
        assert_eq!(internal_ip(Some(&first)), Some("172.16.0.1"));
        assert_eq!(internal_ip(Some(&second)), Some("172.16.0.2"));
        let uid = |n: u64| format!("00000000-0000-4000-8000-{n:012x}");
        let pods: Vec<String> = (0..300).map(|n| pod_ip(&uid(n))).collect();
        assert_eq!(pods[0], "100.64.0.1");
        assert_eq!(pods[299], "100.64.1.44");
        let distinct: std::collections::BTreeSet<&String> = pods.iter().collect();
        assert_eq!(distinct.len(), 300);
        // A uid of another form still has an address in the range, the same each time.
        let other = pod_ip("d9a4c6b2-6e0f-4a57-9b1e-zzz");
        assert!(other.starts_with("100."), "{other}");
        assert_eq!(other, pod_ip("d9a4c6b2-6e0f-4a57-9b1e-zzz"));
    }
}
