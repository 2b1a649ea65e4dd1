//! `kerf controller --cloud aws` (feature `aws`): the EC2 provider's settings from what the
//! process is given — the cluster's name, endpoint and interruption queue from the environment
//! the Helm chart sets (`CLUSTER_NAME` or `--cluster-name`, `CLUSTER_ENDPOINT`,
//! `INTERRUPTION_QUEUE`), its Kubernetes version from the API server's `/version` (it picks the
//! AMIs of an alias), its CA from the client configuration — and the SDK clients from the SDK's
//! standard sources (`AWS_REGION`, `AWS_ENDPOINT_URL`, the credential chain).

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::version::Info;
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

/// The provider's settings; a missing or unusable one is an error naming its variable.
pub fn settings(
    cluster_name: Option<&str>,
    env: &EnvSettings,
    version: &Info,
    root_certs: Option<&[Vec<u8>]>,
) -> Result<AwsSettings, String> {
    let name = cluster_name.map(str::trim).filter(|n| !n.is_empty()).ok_or(
        "--cloud aws needs the cluster's name: set CLUSTER_NAME (or --cluster-name); it tags every instance kerf launches",
    )?;
    let endpoint = env.cluster_endpoint.as_deref().ok_or(
        "--cloud aws needs CLUSTER_ENDPOINT: the API server URL nodes join (e.g. https://ABC.gr7.us-west-2.eks.amazonaws.com)",
    )?;
    let host = endpoint.strip_prefix("https://").or_else(|| endpoint.strip_prefix("http://"));
    if host.is_none_or(|h| h.split(['/', ':']).next().is_none_or(str::is_empty)) {
        return Err(format!("CLUSTER_ENDPOINT={endpoint}: not an http(s) URL with a host"));
    }
    let mut s = AwsSettings::new(name, endpoint, kubernetes_version(version)?);
    s.interruption_queue = env.interruption_queue.clone();
    s.cluster_ca_bundle = root_certs.and_then(ca_bundle);
    Ok(s)
}

/// The EC2 provider for `settings`, its clients from the SDK's standard sources.
pub async fn provider(settings: AwsSettings) -> Result<AwsProvider, String> {
    let clients = AwsClients::from_env().await.map_err(|e| e.to_string())?;
    Ok(AwsProvider::new(clients, settings, Arc::new(SystemClock)))
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

    #[test]
    fn settings_take_the_cluster_name_endpoint_queue_version_and_ca() {
        let s =
            settings(Some("prod"), &env(Some("https://prod.example:443")), &info("1", "33"), Some(&[vec![1, 2, 3]]))
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.cluster_name, "prod");
        assert_eq!(s.cluster_endpoint, "https://prod.example:443");
        assert_eq!(s.kubernetes_version, "1.33");
        assert_eq!(s.interruption_queue.as_deref(), Some("prod-interruptions"));
        let pem = s.cluster_ca_bundle.as_deref().and_then(kerf_aws::base64::decode).unwrap_or_default();
        assert_eq!(
            String::from_utf8_lossy(&pem),
            "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n",
            "the CA as base64 of its PEM"
        );
    }

    #[test]
    fn a_missing_or_unusable_setting_names_its_variable() {
        let e = settings(None, &env(Some("https://x")), &info("1", "33"), None).err().unwrap_or_default();
        assert!(e.contains("CLUSTER_NAME"), "{e}");
        let e = settings(Some("prod"), &env(None), &info("1", "33"), None).err().unwrap_or_default();
        assert!(e.contains("needs CLUSTER_ENDPOINT"), "{e}");
        for bad in ["prod.example", "https://", "ftp://prod.example", "https://:443"] {
            let e = settings(Some("prod"), &env(Some(bad)), &info("1", "33"), None).err().unwrap_or_default();
            assert!(e.starts_with(&format!("CLUSTER_ENDPOINT={bad}: not an http(s) URL")), "{bad}: {e}");
        }
    }
}
