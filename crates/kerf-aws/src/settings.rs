//! What the provider must know about the cluster it launches nodes for (Karpenter's settings).

/// The cluster and its interruption queue.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AwsSettings {
    /// `settings.clusterName`: tags every resource kerf creates (`kubernetes.io/cluster/<name>`).
    pub cluster_name: String,
    /// `settings.clusterEndpoint`: the API server URL nodes join.
    pub cluster_endpoint: String,
    /// The cluster's CA bundle, base64 (as EKS returns it); written into user data.
    pub cluster_ca_bundle: Option<String>,
    /// The cluster's service CIDR (nodeadm needs it), e.g. `10.100.0.0/16`.
    pub cluster_cidr: Option<String>,
    /// The cluster's Kubernetes minor version (`1.33`): picks the AMIs of an alias.
    pub kubernetes_version: String,
    /// `settings.interruptionQueue`: the SQS queue name EventBridge sends EC2 events to.
    pub interruption_queue: Option<String>,
}

impl AwsSettings {
    /// Settings for `cluster_name` at `endpoint` running Kubernetes `version`.
    pub fn new(cluster_name: impl Into<String>, endpoint: impl Into<String>, version: impl Into<String>) -> Self {
        AwsSettings {
            cluster_name: cluster_name.into(),
            cluster_endpoint: endpoint.into(),
            kubernetes_version: version.into(),
            ..AwsSettings::default()
        }
    }

    /// The tag key marking what this cluster owns.
    pub fn cluster_tag_key(&self) -> String {
        format!("kubernetes.io/cluster/{}", self.cluster_name)
    }
}
