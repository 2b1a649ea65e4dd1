//! The cluster as EKS describes it: what `kerf controller --cloud aws` needs to know about the
//! cluster whose nodes it launches — the API server endpoint nodes join, the CA they trust, the
//! service CIDR AL2023's nodeadm configures and the control plane's Kubernetes version — read
//! with one DescribeCluster call when the environment does not give them.

use crate::error::AwsError;

const DESCRIBE_CLUSTER: &str = "eks:DescribeCluster";

/// What EKS says of a cluster.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EksCluster {
    pub name: String,
    /// `ACTIVE`, `CREATING`, `UPDATING`, ...
    pub status: String,
    /// The API server URL (`https://ABC.gr7.us-west-2.eks.amazonaws.com`), without a trailing
    /// slash; empty while the cluster is being created.
    pub endpoint: String,
    /// The cluster CA bundle, base64 as EKS hands it out (what node user data takes).
    pub certificate_authority: Option<String>,
    /// The service CIDR: IPv4 unless the cluster serves IPv6.
    pub service_cidr: Option<String>,
    /// The control plane's Kubernetes minor version (`1.33`).
    pub version: Option<String>,
}

impl EksCluster {
    /// The endpoint nodes can join, or why not: a cluster still being created has none.
    pub fn joinable_endpoint(&self) -> Result<&str, String> {
        if self.endpoint.is_empty() {
            return Err(format!(
                "EKS cluster {} has no API server endpoint yet (status {})",
                self.name,
                if self.status.is_empty() { "unknown" } else { &self.status }
            ));
        }
        Ok(&self.endpoint)
    }
}

/// DescribeCluster for `name`. A cluster the account does not have is an error whose code
/// says so ([`AwsError::is_not_found`]).
pub async fn describe_cluster(client: &aws_sdk_eks::Client, name: &str) -> Result<EksCluster, AwsError> {
    let out = client.describe_cluster().name(name).send().await.map_err(|e| AwsError::from_sdk(DESCRIBE_CLUSTER, e))?;
    let c = out
        .cluster
        .ok_or_else(|| AwsError::new(DESCRIBE_CLUSTER, format!("the answer for cluster {name} carries no cluster")))?;
    let net = c.kubernetes_network_config.as_ref();
    let v6 = net.and_then(|n| n.service_ipv6_cidr.clone()).filter(|s| !s.is_empty());
    let v4 = net.and_then(|n| n.service_ipv4_cidr.clone()).filter(|s| !s.is_empty());
    let ipv6 = net.and_then(|n| n.ip_family.as_ref()).is_some_and(|f| f.as_str() == "ipv6");
    Ok(EksCluster {
        name: c.name.unwrap_or_else(|| name.to_string()),
        status: c.status.map(|s| s.as_str().to_string()).unwrap_or_default(),
        endpoint: c.endpoint.unwrap_or_default().trim_end_matches('/').to_string(),
        certificate_authority: c.certificate_authority.and_then(|a| a.data).filter(|d| !d.is_empty()),
        service_cidr: if ipv6 { v6.or(v4) } else { v4.or(v6) },
        version: c.version.filter(|v| !v.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_being_created_has_no_endpoint_to_join() {
        let c = EksCluster { name: "prod".into(), status: "CREATING".into(), ..EksCluster::default() };
        assert_eq!(
            c.joinable_endpoint(),
            Err("EKS cluster prod has no API server endpoint yet (status CREATING)".to_string())
        );
        let c = EksCluster { endpoint: "https://a.eks.example".into(), ..c };
        assert_eq!(c.joinable_endpoint(), Ok("https://a.eks.example"));
    }
}
