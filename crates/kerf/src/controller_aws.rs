//! `kerf controller --cloud aws` (feature `aws`): the EC2 provider's settings from what the
//! process is given — the cluster's name and interruption queue from the environment the Helm
//! chart sets (`CLUSTER_NAME` or `--cluster-name`, `INTERRUPTION_QUEUE`), the endpoint nodes join
//! from `CLUSTER_ENDPOINT` or else EKS (DescribeCluster, which also gives the CA and the service
//! CIDR), its Kubernetes version from the API server's `/version` (it picks the AMIs of an
//! alias), its CA from EKS or the client configuration — and the SDK clients from the SDK's
//! standard sources (`AWS_REGION`, `AWS_ENDPOINT_URL`, the credential chain).

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::version::Info;
use kerf_aws::eks::EksCluster;
use kerf_aws::{AwsClients, AwsProvider, AwsSettings};
use kerf_cloud::SystemClock;

use crate::controller_env::EnvSettings;

/// The cluster's Kubernetes minor version (`1.33`) from its `/version`. Managed control planes
/// report minors such as `33+`; the digits are what counts.
pub fn kubernetes_version(info: &Info) -> Result<String, String> {
    let digits = |s: &str| s.chars().take_while(char::is_ascii_digit).collect::<String>();
    let (major, minor) = (digits(&info.major), digits(&info.minor));
    if major.is_empty() || minor.is_empty() {
        return Err(format!(
            "the API server's /version reports major {:?}, minor {:?}: not a Kubernetes version",
            info.major, info.minor
        ));
    }
    Ok(format!("{major}.{minor}"))
}

/// PEM certificates, base64-encoded as EKS hands out the cluster CA (what node user data takes).
fn ca_bundle(der_certificates: &[Vec<u8>]) -> Option<String> {
    if der_certificates.is_empty() {
        return None;
    }
    let mut pem = String::new();
    for der in der_certificates {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        let body = kerf_aws::base64::encode(der);
        for line in body.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    Some(kerf_aws::base64::encode(pem.as_bytes()))
}

/// The cluster's name, which every instance kerf launches is tagged with.
pub fn cluster_name(name: Option<&str>) -> Result<&str, String> {
    name.map(str::trim).filter(|n| !n.is_empty()).ok_or_else(|| {
        "--cloud aws needs the cluster's name: set CLUSTER_NAME (or --cluster-name); it tags every instance kerf launches"
            .to_string()
    })
}

/// The SDK clients, from the SDK's standard sources.
pub async fn clients() -> Result<AwsClients, String> {
    AwsClients::from_env().await.map_err(|e| e.to_string())
}

/// The cluster as EKS describes it. Without `CLUSTER_ENDPOINT` EKS must answer (the endpoint
/// comes from it); with it, EKS is asked for the CA and service CIDR only, and a cluster EKS
/// does not know (a self-managed control plane) leaves them to the configuration.
pub async fn describe(clients: &AwsClients, name: &str, env: &EnvSettings) -> Result<Option<EksCluster>, String> {
    let region = clients.region();
    match kerf_aws::eks::describe_cluster(&clients.eks, name).await {
        Ok(cluster) => Ok(Some(cluster)),
        Err(e) if env.cluster_endpoint.is_some() => {
            tracing::info!(cluster = name, region, error = %e, "EKS does not describe the cluster; CLUSTER_ENDPOINT is used, the service CIDR stays unset");
            Ok(None)
        }
        Err(e) if e.is_not_found() => Err(format!(
            "CLUSTER_ENDPOINT is not set and EKS has no cluster named {name} in {region} ({e}): set CLUSTER_NAME to the EKS cluster's name, or CLUSTER_ENDPOINT to the API server URL nodes join"
        )),
        Err(e) => Err(format!(
            "CLUSTER_ENDPOINT is not set and EKS cluster {name} in {region} cannot be described ({e}): kerf asks DescribeCluster for the API server URL nodes join; allow eks:DescribeCluster or set CLUSTER_ENDPOINT"
        )),
    }
}

/// The provider's settings; a missing or unusable one is an error naming its variable.
/// `CLUSTER_ENDPOINT` wins over EKS's endpoint; EKS's CA over the client configuration's.
pub fn settings(
    name: &str,
    env: &EnvSettings,
    version: &Info,
    root_certs: Option<&[Vec<u8>]>,
    eks: Option<&EksCluster>,
) -> Result<AwsSettings, String> {
    let endpoint = match (env.cluster_endpoint.as_deref(), eks) {
        (Some(endpoint), _) => endpoint,
        (None, Some(cluster)) => cluster.joinable_endpoint()?,
        (None, None) => {
            return Err(
                "--cloud aws needs CLUSTER_ENDPOINT: the API server URL nodes join (e.g. https://ABC.gr7.us-west-2.eks.amazonaws.com)"
                    .to_string(),
            );
        }
    };
    let variable = if env.cluster_endpoint.is_some() { "CLUSTER_ENDPOINT" } else { "EKS's endpoint" };
    let host = endpoint.strip_prefix("https://").or_else(|| endpoint.strip_prefix("http://"));
    if host.is_none_or(|h| h.split(['/', ':']).next().is_none_or(str::is_empty)) {
        return Err(format!("{variable}={endpoint}: not an http(s) URL with a host"));
    }
    let version = kubernetes_version(version)?;
    if let Some(eks_version) = eks.and_then(|c| c.version.as_deref()).filter(|v| *v != version) {
        tracing::warn!(
            api_server = %version,
            eks = eks_version,
            "the API server's /version and EKS's cluster version differ; AMI aliases follow the API server"
        );
    }
    let mut s = AwsSettings::new(name, endpoint, version);
    s.interruption_queue = env.interruption_queue.clone();
    s.cluster_ca_bundle = eks.and_then(|c| c.certificate_authority.clone()).or_else(|| root_certs.and_then(ca_bundle));
    s.cluster_cidr = eks.and_then(|c| c.service_cidr.clone());
    Ok(s)
}

/// The EC2 provider for `settings`, talking through `clients`.
pub fn provider(clients: AwsClients, settings: AwsSettings) -> AwsProvider {
    AwsProvider::new(clients, settings, Arc::new(SystemClock))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(major: &str, minor: &str) -> Info {
        Info { major: major.to_string(), minor: minor.to_string(), ..Info::default() }
    }

    fn env(endpoint: Option<&str>) -> EnvSettings {
        EnvSettings {
            cluster_endpoint: endpoint.map(str::to_string),
            interruption_queue: Some("prod-interruptions".to_string()),
            ..EnvSettings::default()
        }
    }

    #[test]
    fn the_kubernetes_version_comes_from_the_api_servers_major_and_minor() {
        assert_eq!(kubernetes_version(&info("1", "33")), Ok("1.33".to_string()));
        assert_eq!(kubernetes_version(&info("1", "32+")), Ok("1.32".to_string()));
        let e = kubernetes_version(&info("", "")).err().unwrap_or_default();
        assert!(e.contains("not a Kubernetes version"), "{e}");
    }

    fn eks(endpoint: &str) -> EksCluster {
        EksCluster {
            name: "prod".into(),
            status: "ACTIVE".into(),
            endpoint: endpoint.into(),
            certificate_authority: Some("RUtTIENB".into()),
            service_cidr: Some("10.100.0.0/16".into()),
            version: Some("1.33".into()),
        }
    }

    #[test]
    fn settings_take_the_cluster_name_endpoint_queue_version_and_ca() {
        let s =
            settings("prod", &env(Some("https://prod.example:443")), &info("1", "33"), Some(&[vec![1, 2, 3]]), None)
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.cluster_name, "prod");
        assert_eq!(s.cluster_endpoint, "https://prod.example:443");
        assert_eq!(s.kubernetes_version, "1.33");
        assert_eq!(s.interruption_queue.as_deref(), Some("prod-interruptions"));
        assert_eq!(s.cluster_cidr, None);
        let pem = s.cluster_ca_bundle.as_deref().and_then(kerf_aws::base64::decode).unwrap_or_default();
        assert_eq!(
            String::from_utf8_lossy(&pem),
            "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n",
            "the CA as base64 of its PEM"
        );
    }

    #[test]
    fn without_cluster_endpoint_the_endpoint_ca_and_service_cidr_come_from_eks() {
        let c = eks("https://abc.gr7.us-west-2.eks.amazonaws.com");
        let s = settings("prod", &env(None), &info("1", "33"), Some(&[vec![1, 2, 3]]), Some(&c))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.cluster_endpoint, "https://abc.gr7.us-west-2.eks.amazonaws.com");
        assert_eq!(s.cluster_ca_bundle.as_deref(), Some("RUtTIENB"), "EKS's CA over the client configuration's");
        assert_eq!(s.cluster_cidr.as_deref(), Some("10.100.0.0/16"));
        // CLUSTER_ENDPOINT, when set, wins; EKS still gives the service CIDR.
        let s = settings("prod", &env(Some("https://private.example")), &info("1", "33"), None, Some(&c))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.cluster_endpoint, "https://private.example");
        assert_eq!(s.cluster_cidr.as_deref(), Some("10.100.0.0/16"));
        // A cluster still being created has no endpoint to join.
        let e = settings(
            "prod",
            &env(None),
            &info("1", "33"),
            None,
            Some(&EksCluster { status: "CREATING".into(), ..eks("") }),
        )
        .err()
        .unwrap_or_default();
        assert_eq!(e, "EKS cluster prod has no API server endpoint yet (status CREATING)");
    }

    #[test]
    fn a_missing_or_unusable_setting_names_its_variable() {
        let e = cluster_name(None).err().unwrap_or_default();
        assert!(e.contains("CLUSTER_NAME"), "{e}");
        assert!(cluster_name(Some("  ")).is_err());
        let e = settings("prod", &env(None), &info("1", "33"), None, None).err().unwrap_or_default();
        assert!(e.contains("needs CLUSTER_ENDPOINT"), "{e}");
        for bad in ["prod.example", "https://", "ftp://prod.example", "https://:443"] {
            let e = settings("prod", &env(Some(bad)), &info("1", "33"), None, None).err().unwrap_or_default();
            assert!(e.starts_with(&format!("CLUSTER_ENDPOINT={bad}: not an http(s) URL")), "{bad}: {e}");
        }
    }
}
