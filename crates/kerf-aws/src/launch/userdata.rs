//! User data per AMI family, merged with the node class's own `userData`:
//! - AL2023: a MIME multi-part archive whose first part is a nodeadm `NodeConfig` (cluster,
//!   kubelet configuration, labels, taints), followed by the user's parts (a MIME archive, a
//!   NodeConfig, or a shell script);
//! - Bottlerocket: TOML; the user's settings with kerf's `settings.kubernetes` keys set over them;
//! - AL2: a MIME archive of the user's parts followed by a script running `/etc/eks/bootstrap.sh`;
//! - Windows: one `<powershell>` block, the user's PowerShell followed by a call of the EKS
//!   image's `Start-EKSBootstrap.ps1`;
//! - Custom: the user's user data unchanged.

use std::collections::BTreeMap;

use kerf_api::Taint;
use kerf_api::ec2nodeclass::{AmiFamily, KubeletConfiguration};

/// The MIME boundary of the archives kerf writes.
pub const BOUNDARY: &str = "//";
pub const CONTENT_TYPE_NODECONFIG: &str = "application/node.eks.aws";
pub const CONTENT_TYPE_SHELL: &str = "text/x-shellscript; charset=\"us-ascii\"";

/// What a node needs to join the cluster.
#[derive(Debug, Clone, Copy)]
pub struct Bootstrap<'a> {
    pub cluster_name: &'a str,
    pub cluster_endpoint: &'a str,
    /// Base64, as EKS returns it.
    pub ca_bundle: Option<&'a str>,
    pub cluster_cidr: Option<&'a str>,
    pub kubelet: Option<&'a KubeletConfiguration>,
    pub labels: &'a BTreeMap<String, String>,
    pub taints: &'a [Taint],
    /// The node class's `userData`.
    pub custom: Option<&'a str>,
}

/// The node class's user data cannot be merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.userData: {0}")]
pub struct UserDataError(pub String);

/// One part of a MIME multi-part archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MimePart {
    pub content_type: String,
    pub content: String,
}

/// The user data (plain text, not yet base64) for an instance of `family`.
pub fn user_data(family: AmiFamily, b: &Bootstrap<'_>) -> Result<String, UserDataError> {
    match family {
        AmiFamily::AL2023 => nodeadm(b),
        AmiFamily::Bottlerocket => bottlerocket(b),
        AmiFamily::AL2 => eks_bootstrap(b),
        AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => Ok(windows_bootstrap(b)),
        AmiFamily::Custom => Ok(b.custom.unwrap_or_default().to_string()),
    }
}

/// Writes a MIME multi-part archive.
pub fn mime_archive(parts: &[MimePart]) -> String {
    let mut out = format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n");
    for p in parts {
        // The line break before each delimiter belongs to the delimiter, so parts read back exactly.
        out.push_str(&format!("--{BOUNDARY}\nContent-Type: {}\n\n{}\n", p.content_type, p.content));
    }
    out.push_str(&format!("--{BOUNDARY}--\n"));
    out
}

/// Reads a MIME multi-part archive (as written by cloud-init users): its boundary from the
/// top-level `Content-Type`, then each part's `Content-Type` and body.
pub fn parse_mime_archive(text: &str) -> Result<Vec<MimePart>, UserDataError> {
    let text = text.replace("\r\n", "\n");
    let (headers, body) = text
        .split_once("\n\n")
        .ok_or_else(|| UserDataError("MIME archive has no blank line after its headers".into()))?;
    let content_type = header(headers, "content-type")
        .ok_or_else(|| UserDataError("MIME archive has no Content-Type header".into()))?;
    if !content_type.to_ascii_lowercase().starts_with("multipart/") {
        return Err(UserDataError(format!("MIME archive is {content_type}, not multipart")));
    }
    let boundary = content_type
        .split(';')
        .filter_map(|p| p.trim().split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("boundary"))
        .map(|(_, v)| v.trim().trim_matches('"').to_string())
        .ok_or_else(|| UserDataError("MIME archive's Content-Type has no boundary".into()))?;
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    let mut closed = false;
    for (i, chunk) in body.split(&delimiter).enumerate() {
        if i == 0 {
            continue; // the preamble
        }
        if chunk.starts_with("--") {
            closed = true;
            break;
        }
        let chunk = chunk.strip_prefix('\n').unwrap_or(chunk);
        let (part_headers, content) = chunk
            .split_once("\n\n")
            .ok_or_else(|| UserDataError(format!("MIME part {i} has no blank line after its headers")))?;
        let content_type = header(part_headers, "content-type")
            .ok_or_else(|| UserDataError(format!("MIME part {i} has no Content-Type header")))?;
        let content = content.strip_suffix('\n').unwrap_or(content);
        parts.push(MimePart { content_type: content_type.to_string(), content: content.to_string() });
    }
    if !closed {
        return Err(UserDataError(format!("MIME archive does not end with {delimiter}--")));
    }
    Ok(parts)
}

fn header<'a>(headers: &'a str, name: &str) -> Option<&'a str> {
    headers.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn is_mime(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with("MIME-Version:") || t.starts_with("Content-Type:")
}

/// The user's parts: a MIME archive as is; otherwise one part, a NodeConfig when it is a YAML
/// mapping (and `yaml_means_nodeconfig`), else a shell script.
fn custom_parts(custom: Option<&str>, yaml_means_nodeconfig: bool) -> Result<Vec<MimePart>, UserDataError> {
    let Some(text) = custom.filter(|t| !t.trim().is_empty()) else { return Ok(Vec::new()) };
    if is_mime(text) {
        return parse_mime_archive(text);
    }
    let is_mapping =
        yaml_means_nodeconfig && serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text).is_ok_and(|v| v.is_mapping());
    let content_type = if is_mapping { CONTENT_TYPE_NODECONFIG } else { CONTENT_TYPE_SHELL };
    Ok(vec![MimePart { content_type: content_type.to_string(), content: text.to_string() }])
}

fn taint_json(t: &Taint) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    m.insert("key".into(), t.key.clone().into());
    if let Some(v) = t.value.as_deref().filter(|v| !v.is_empty()) {
        m.insert("value".into(), v.into());
    }
    m.insert("effect".into(), t.effect.as_str().into());
    serde_json::Value::Object(m)
}

fn node_labels_flag(labels: &BTreeMap<String, String>) -> Option<String> {
    if labels.is_empty() {
        return None;
    }
    let joined: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Some(format!("--node-labels=\"{}\"", joined.join(",")))
}

fn nodeadm(b: &Bootstrap<'_>) -> Result<String, UserDataError> {
    let mut cluster = serde_json::Map::new();
    cluster.insert("name".into(), b.cluster_name.into());
    cluster.insert("apiServerEndpoint".into(), b.cluster_endpoint.into());
    if let Some(ca) = b.ca_bundle.filter(|c| !c.is_empty()) {
        cluster.insert("certificateAuthority".into(), ca.into());
    }
    if let Some(cidr) = b.cluster_cidr.filter(|c| !c.is_empty()) {
        cluster.insert("cidr".into(), cidr.into());
    }
    let mut config = match b.kubelet {
        Some(k) => match serde_json::to_value(k) {
            Ok(serde_json::Value::Object(m)) => m,
            Ok(_) => serde_json::Map::new(),
            Err(e) => return Err(UserDataError(format!("kubelet settings cannot be written: {e}"))),
        },
        None => serde_json::Map::new(),
    };
    if !b.taints.is_empty() {
        config.insert("registerWithTaints".into(), b.taints.iter().map(taint_json).collect());
    }
    let mut kubelet = serde_json::Map::new();
    kubelet.insert("config".into(), serde_json::Value::Object(config));
    if let Some(flag) = node_labels_flag(b.labels) {
        kubelet.insert("flags".into(), vec![serde_json::Value::from(flag)].into());
    }
    let node_config = serde_json::json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {"cluster": cluster, "kubelet": kubelet},
    });
    let yaml = serde_yaml_ng::to_string(&node_config)
        .map_err(|e| UserDataError(format!("NodeConfig cannot be written: {e}")))?;
    let mut parts = vec![MimePart {
        content_type: CONTENT_TYPE_NODECONFIG.to_string(),
        content: format!("# kerf NodeConfig\n{yaml}"),
    }];
    parts.extend(custom_parts(b.custom, true)?);
    Ok(mime_archive(&parts))
}

fn bottlerocket(b: &Bootstrap<'_>) -> Result<String, UserDataError> {
    use toml::{Table, Value};
    let mut root: Table = match b.custom.filter(|t| !t.trim().is_empty()) {
        Some(text) => text.parse::<Table>().map_err(|e| UserDataError(format!("not valid TOML: {e}")))?,
        None => Table::new(),
    };
    let settings = root.entry("settings").or_insert_with(|| Value::Table(Table::new()));
    let Value::Table(settings) = settings else {
        return Err(UserDataError("settings is not a table".into()));
    };
    let kubernetes = settings.entry("kubernetes").or_insert_with(|| Value::Table(Table::new()));
    let Value::Table(k8s) = kubernetes else {
        return Err(UserDataError("settings.kubernetes is not a table".into()));
    };
    k8s.insert("cluster-name".into(), b.cluster_name.into());
    k8s.insert("api-server".into(), b.cluster_endpoint.into());
    if let Some(ca) = b.ca_bundle.filter(|c| !c.is_empty()) {
        k8s.insert("cluster-certificate".into(), ca.into());
    }
    if let Some(kubelet) = b.kubelet {
        if let Some(dns) = kubelet.cluster_dns.first() {
            k8s.insert("cluster-dns-ip".into(), dns.as_str().into());
        }
        if let Some(max) = kubelet.max_pods {
            k8s.insert("max-pods".into(), i64::from(max).into());
        }
        for (key, map) in [("kube-reserved", &kubelet.kube_reserved), ("system-reserved", &kubelet.system_reserved)] {
            if !map.is_empty() {
                let t: Table = map.iter().map(|(k, v)| (k.clone(), Value::from(v.canonical()))).collect();
                k8s.insert(key.into(), Value::Table(t));
            }
        }
        if !kubelet.eviction_hard.is_empty() {
            let t: Table = kubelet.eviction_hard.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
            k8s.insert("eviction-hard".into(), Value::Table(t));
        }
        if let Some(p) = kubelet.image_gc_high_threshold_percent {
            k8s.insert("image-gc-high-threshold-percent".into(), i64::from(p).into());
        }
        if let Some(p) = kubelet.image_gc_low_threshold_percent {
            k8s.insert("image-gc-low-threshold-percent".into(), i64::from(p).into());
        }
        if let Some(q) = kubelet.cpu_cfs_quota {
            k8s.insert("cpu-cfs-quota-enforced".into(), q.into());
        }
    }
    if !b.labels.is_empty() {
        let mut labels = match k8s.remove("node-labels") {
            Some(Value::Table(t)) => t,
            _ => Table::new(),
        };
        for (k, v) in b.labels {
            labels.insert(k.clone(), v.as_str().into());
        }
        k8s.insert("node-labels".into(), Value::Table(labels));
    }
    if !b.taints.is_empty() {
        let mut taints = Table::new();
        for t in b.taints {
            let entry = format!("{}:{}", t.value.as_deref().unwrap_or(""), t.effect.as_str());
            match taints.entry(t.key.clone()).or_insert_with(|| Value::Array(Vec::new())) {
                Value::Array(a) => a.push(entry.into()),
                other => *other = Value::Array(vec![entry.into()]),
            }
        }
        k8s.insert("node-taints".into(), Value::Table(taints));
    }
    toml::to_string(&root).map_err(|e| UserDataError(format!("TOML cannot be written: {e}")))
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn eks_bootstrap(b: &Bootstrap<'_>) -> Result<String, UserDataError> {
    let mut script = String::from(
        "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n",
    );
    script.push_str(&format!(
        "/etc/eks/bootstrap.sh {} --apiserver-endpoint {}",
        shell_quote(b.cluster_name),
        shell_quote(b.cluster_endpoint)
    ));
    if let Some(ca) = b.ca_bundle.filter(|c| !c.is_empty()) {
        script.push_str(&format!(" --b64-cluster-ca {}", shell_quote(ca)));
    }
    let mut kubelet_args = Vec::new();
    if let Some(kubelet) = b.kubelet {
        if let Some(dns) = kubelet.cluster_dns.first() {
            script.push_str(&format!(" \\\n--dns-cluster-ip {}", shell_quote(dns)));
        }
        if let Some(max) = kubelet.max_pods {
            script.push_str(" \\\n--use-max-pods false");
            kubelet_args.push(format!("--max-pods={max}"));
        }
    }
    if let Some(flag) = node_labels_flag(b.labels) {
        kubelet_args.push(flag);
    }
    if !b.taints.is_empty() {
        let taints: Vec<String> = b.taints.iter().map(|t| t.to_string()).collect();
        kubelet_args.push(format!("--register-with-taints=\"{}\"", taints.join(",")));
    }
    if !kubelet_args.is_empty() {
        script.push_str(&format!(" \\\n--kubelet-extra-args {}", shell_quote(&kubelet_args.join(" "))));
    }
    script.push('\n');
    let mut parts = custom_parts(b.custom, false)?;
    parts.push(MimePart { content_type: CONTENT_TYPE_SHELL.to_string(), content: script });
    Ok(mime_archive(&parts))
}

/// A PowerShell single-quoted string.
fn ps_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The user's PowerShell without its `<powershell>` tags, if it has them.
fn powershell_body(custom: &str) -> &str {
    let text = custom.trim();
    let text = text.strip_prefix("<powershell>").unwrap_or(text);
    text.strip_suffix("</powershell>").unwrap_or(text).trim()
}

fn windows_bootstrap(b: &Bootstrap<'_>) -> String {
    let mut script = String::from("<powershell>\n");
    if let Some(custom) = b.custom.map(powershell_body).filter(|c| !c.is_empty()) {
        script.push_str(custom);
        script.push('\n');
    }
    script.push_str("[string]$EKSBootstrapScriptFile = \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"\n");
    script.push_str(&format!(
        "& $EKSBootstrapScriptFile -EKSClusterName {} -APIServerEndpoint {}",
        ps_quote(b.cluster_name),
        ps_quote(b.cluster_endpoint)
    ));
    if let Some(ca) = b.ca_bundle.filter(|c| !c.is_empty()) {
        script.push_str(&format!(" -Base64ClusterCA {}", ps_quote(ca)));
    }
    let mut kubelet_args = Vec::new();
    if let Some(flag) = node_labels_flag(b.labels) {
        kubelet_args.push(flag);
    }
    if !b.taints.is_empty() {
        let taints: Vec<String> = b.taints.iter().map(|t| t.to_string()).collect();
        kubelet_args.push(format!("--register-with-taints=\"{}\"", taints.join(",")));
    }
    if let Some(max) = b.kubelet.and_then(|k| k.max_pods) {
        kubelet_args.push(format!("--max-pods={max}"));
    }
    if !kubelet_args.is_empty() {
        script.push_str(&format!(" -KubeletExtraArgs {}", ps_quote(&kubelet_args.join(" "))));
    }
    if let Some(dns) = b.kubelet.and_then(|k| k.cluster_dns.first()) {
        script.push_str(&format!(" -DNSClusterIP {}", ps_quote(dns)));
    }
    script.push_str("\n</powershell>\n");
    script
}

#[cfg(test)]
mod tests {
    use kerf_api::TaintEffect;

    use super::*;

    fn bootstrap<'a>(
        labels: &'a BTreeMap<String, String>,
        taints: &'a [Taint],
        custom: Option<&'a str>,
    ) -> Bootstrap<'a> {
        Bootstrap {
            cluster_name: "prod",
            cluster_endpoint: "https://prod.example",
            ca_bundle: Some("Q0E="),
            cluster_cidr: Some("10.100.0.0/16"),
            kubelet: None,
            labels,
            taints,
            custom,
        }
    }

    #[test]
    fn al2023_user_data_is_a_nodeconfig_followed_by_the_users_script() {
        let labels = BTreeMap::from([("karpenter.sh/nodepool".to_string(), "default".to_string())]);
        let taints = [Taint::new("karpenter.sh/unregistered", None, TaintEffect::NoExecute)];
        let text = user_data(AmiFamily::AL2023, &bootstrap(&labels, &taints, Some("#!/bin/bash\necho hi\n")))
            .unwrap_or_else(|e| panic!("{e}"));
        let parts = parse_mime_archive(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].content_type, CONTENT_TYPE_NODECONFIG);
        let config: serde_yaml_ng::Value = serde_yaml_ng::from_str(&parts[0].content).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config["kind"].as_str(), Some("NodeConfig"));
        assert_eq!(config["spec"]["cluster"]["name"].as_str(), Some("prod"));
        assert_eq!(config["spec"]["cluster"]["cidr"].as_str(), Some("10.100.0.0/16"));
        assert_eq!(
            config["spec"]["kubelet"]["config"]["registerWithTaints"][0]["key"].as_str(),
            Some("karpenter.sh/unregistered")
        );
        assert_eq!(
            config["spec"]["kubelet"]["flags"][0].as_str(),
            Some("--node-labels=\"karpenter.sh/nodepool=default\"")
        );
        assert_eq!(parts[1].content_type, CONTENT_TYPE_SHELL);
        assert_eq!(parts[1].content, "#!/bin/bash\necho hi\n");
    }

    #[test]
    fn al2023_keeps_the_parts_of_a_users_mime_archive() {
        let user = mime_archive(&[
            MimePart {
                content_type: CONTENT_TYPE_NODECONFIG.into(),
                content: "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n".into(),
            },
            MimePart { content_type: CONTENT_TYPE_SHELL.into(), content: "echo two".into() },
        ]);
        let none = BTreeMap::new();
        let text = user_data(AmiFamily::AL2023, &bootstrap(&none, &[], Some(&user))).unwrap_or_else(|e| panic!("{e}"));
        let parts = parse_mime_archive(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[2].content, "echo two");
    }

    #[test]
    fn a_broken_mime_archive_in_user_data_is_an_error() {
        let none = BTreeMap::new();
        let bad = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\nContent-Type: text/x-shellscript\n\necho\n";
        assert!(user_data(AmiFamily::AL2023, &bootstrap(&none, &[], Some(bad))).is_err());
    }

    #[test]
    fn bottlerocket_settings_merge_the_users_toml_under_kerfs_keys() {
        let labels = BTreeMap::from([("team".to_string(), "a".to_string())]);
        let taints = [Taint::new("dedicated", Some("gpu"), TaintEffect::NoSchedule)];
        let custom = "[settings.kubernetes]\ncluster-name = \"wrong\"\nallowed-unsafe-sysctls = [\"net.core.somaxconn\"]\n[settings.host-containers.admin]\nenabled = true\n";
        let text = user_data(AmiFamily::Bottlerocket, &bootstrap(&labels, &taints, Some(custom)))
            .unwrap_or_else(|e| panic!("{e}"));
        let parsed: toml::Table = text.parse().unwrap_or_else(|e| panic!("{e}"));
        let k8s = &parsed["settings"]["kubernetes"];
        assert_eq!(k8s["cluster-name"].as_str(), Some("prod"));
        assert_eq!(k8s["api-server"].as_str(), Some("https://prod.example"));
        assert_eq!(k8s["allowed-unsafe-sysctls"][0].as_str(), Some("net.core.somaxconn"));
        assert_eq!(k8s["node-labels"]["team"].as_str(), Some("a"));
        assert_eq!(k8s["node-taints"]["dedicated"][0].as_str(), Some("gpu:NoSchedule"));
        assert_eq!(parsed["settings"]["host-containers"]["admin"]["enabled"].as_bool(), Some(true));
    }

    #[test]
    fn bottlerocket_user_data_that_is_not_toml_is_an_error() {
        let none = BTreeMap::new();
        assert!(user_data(AmiFamily::Bottlerocket, &bootstrap(&none, &[], Some("not = [toml"))).is_err());
    }

    #[test]
    fn al2_runs_the_users_script_then_bootstrap_sh() {
        let labels = BTreeMap::from([("team".to_string(), "a".to_string())]);
        let kubelet =
            KubeletConfiguration { max_pods: Some(20), cluster_dns: vec!["10.100.0.10".into()], ..Default::default() };
        let mut b = bootstrap(&labels, &[], Some("#!/bin/bash\necho first"));
        b.kubelet = Some(&kubelet);
        let text = user_data(AmiFamily::AL2, &b).unwrap_or_else(|e| panic!("{e}"));
        let parts = parse_mime_archive(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].content, "#!/bin/bash\necho first");
        let script = &parts[1].content;
        assert!(
            script.contains(
                "/etc/eks/bootstrap.sh 'prod' --apiserver-endpoint 'https://prod.example' --b64-cluster-ca 'Q0E='"
            ),
            "{script}"
        );
        assert!(script.contains("--dns-cluster-ip '10.100.0.10'"), "{script}");
        assert!(script.contains("--use-max-pods false"), "{script}");
        assert!(script.contains("--kubelet-extra-args '--max-pods=20 --node-labels=\"team=a\"'"), "{script}");
    }

    #[test]
    fn windows_runs_the_users_powershell_then_start_eks_bootstrap() {
        let labels = BTreeMap::from([("karpenter.sh/nodepool".to_string(), "win".to_string())]);
        let taints = [Taint::new("os", Some("windows"), TaintEffect::NoSchedule)];
        let custom = "<powershell>\nWrite-Host 'hello'\n</powershell>";
        let text = user_data(AmiFamily::Windows2022, &bootstrap(&labels, &taints, Some(custom)))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            text,
            "<powershell>\nWrite-Host 'hello'\n\
             [string]$EKSBootstrapScriptFile = \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"\n\
             & $EKSBootstrapScriptFile -EKSClusterName 'prod' -APIServerEndpoint 'https://prod.example' \
             -Base64ClusterCA 'Q0E=' -KubeletExtraArgs '--node-labels=\"karpenter.sh/nodepool=win\" \
             --register-with-taints=\"os=windows:NoSchedule\"'\n</powershell>\n"
        );
    }

    #[test]
    fn custom_family_passes_user_data_through() {
        let none = BTreeMap::new();
        assert_eq!(user_data(AmiFamily::Custom, &bootstrap(&none, &[], Some("raw"))).as_deref(), Ok("raw"));
    }
}
