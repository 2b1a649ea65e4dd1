//! AMIs from a node class's `amiSelectorTerms`: aliases (`al2023@latest`, `bottlerocket@…`,
//! `al2@…`, `windows2019|2022|2025@latest`) through the public SSM parameters for the cluster's
//! Kubernetes version, and images by
//! ID, name, owner and tags through DescribeImages. Each image carries the requirements an
//! instance type must meet to boot it (its architecture, and for an alias's variants whether the
//! type has GPUs or accelerators).

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;
use kerf_api::ec2nodeclass::{AmiFamily, AmiSelectorTerm, AmiStatus};
use kerf_api::{NodeSelectorRequirementWithMinValues, Operator, labels};

use super::network::tag_filters;
use crate::AwsClients;
use crate::error::AwsError;

/// An image the node class may launch.
#[derive(Debug, Clone, PartialEq)]
pub struct Ami {
    pub id: String,
    pub name: Option<String>,
    /// RFC 3339, as EC2 reports it; newest images are preferred.
    pub creation_date: String,
    pub deprecated: bool,
    /// What an instance type must satisfy to boot it, sorted by key length then key.
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
}

impl Ami {
    pub fn status(&self) -> AmiStatus {
        AmiStatus {
            id: self.id.clone(),
            name: self.name.clone(),
            requirements: self.requirements.clone(),
            deprecated: self.deprecated.then_some(true),
        }
    }

    /// Whether an instance type with `type_labels` can boot this image.
    pub fn fits(&self, type_labels: &BTreeMap<String, String>) -> bool {
        kerf_api::ec2nodeclass::image_fits(&self.requirements, type_labels)
    }
}

/// A parsed `family@version` alias.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alias {
    pub family: AmiFamily,
    /// `latest` or a release (`v20250101`, Bottlerocket `1.30.0`).
    pub version: String,
}

/// Parses an alias such as `al2023@latest`; the families with public SSM parameters are
/// AL2023, AL2, Bottlerocket and Windows 2019, 2022 and 2025 (`latest` only, as Karpenter).
pub fn parse_alias(alias: &str) -> Result<Alias, String> {
    let (family, version) =
        alias.split_once('@').ok_or_else(|| format!("alias {alias:?} is not of the form family@version"))?;
    let family = match family.to_ascii_lowercase().as_str() {
        "al2023" => AmiFamily::AL2023,
        "al2" => AmiFamily::AL2,
        "bottlerocket" => AmiFamily::Bottlerocket,
        "windows2019" => AmiFamily::Windows2019,
        "windows2022" => AmiFamily::Windows2022,
        "windows2025" => AmiFamily::Windows2025,
        other => {
            return Err(format!(
                "alias family {other:?} is not supported (al2023, al2, bottlerocket, windows2019, windows2022, windows2025)"
            ));
        }
    };
    if version.is_empty() {
        return Err(format!("alias {alias:?} has no version"));
    }
    if windows_year(family).is_some() && version != "latest" {
        return Err(format!("alias {alias:?}: Windows aliases take only the version latest"));
    }
    Ok(Alias { family, version: version.to_string() })
}

/// The Windows Server release of a Windows family.
fn windows_year(family: AmiFamily) -> Option<&'static str> {
    match family {
        AmiFamily::Windows2019 => Some("2019"),
        AmiFamily::Windows2022 => Some("2022"),
        AmiFamily::Windows2025 => Some("2025"),
        _ => None,
    }
}

/// The variant of an alias image: which instance types it is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Standard,
    Nvidia,
    Neuron,
    /// A Windows Server image of this build (`node.kubernetes.io/windows-build`).
    Windows(&'static str),
}

impl Variant {
    fn requirements(self) -> Vec<NodeSelectorRequirementWithMinValues> {
        let req = |key: &str, operator: Operator, values: &[&str]| NodeSelectorRequirementWithMinValues {
            key: key.to_string(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
            min_values: None,
        };
        match self {
            Variant::Standard => vec![
                req(labels::INSTANCE_GPU_COUNT, Operator::DoesNotExist, &[]),
                req(labels::INSTANCE_ACCELERATOR_COUNT, Operator::DoesNotExist, &[]),
            ],
            Variant::Nvidia => vec![req(labels::INSTANCE_GPU_MANUFACTURER, Operator::In, &["nvidia"])],
            Variant::Neuron => vec![req(labels::INSTANCE_ACCELERATOR_MANUFACTURER, Operator::In, &["aws"])],
            Variant::Windows(build) => {
                vec![req(labels::OS, Operator::In, &["windows"]), req(labels::WINDOWS_BUILD, Operator::In, &[build])]
            }
        }
    }
}

/// The SSM parameters an alias reads for Kubernetes `k8s`, each with the variant it names.
fn alias_parameters(alias: &Alias, k8s: &str) -> Vec<(String, Variant)> {
    let latest = alias.version == "latest";
    let v = &alias.version;
    let eks = format!("/aws/service/eks/optimized-ami/{k8s}");
    match alias.family {
        AmiFamily::AL2023 => {
            let mut out = Vec::new();
            for (arch, variants) in [
                (
                    "x86_64",
                    &[(Variant::Standard, "standard"), (Variant::Nvidia, "nvidia"), (Variant::Neuron, "neuron")][..],
                ),
                ("arm64", &[(Variant::Standard, "standard"), (Variant::Nvidia, "nvidia")][..]),
            ] {
                for (variant, name) in variants {
                    let leaf = if latest {
                        "recommended".to_string()
                    } else {
                        format!("amazon-eks-node-al2023-{arch}-{name}-{k8s}-{v}")
                    };
                    out.push((format!("{eks}/amazon-linux-2023/{arch}/{name}/{leaf}/image_id"), *variant));
                }
            }
            out
        }
        AmiFamily::AL2 => {
            [("", "", Variant::Standard), ("-gpu", "-gpu", Variant::Nvidia), ("-arm64", "-arm64", Variant::Standard)]
                .into_iter()
                .map(|(path_suffix, name_part, variant)| {
                    let leaf = if latest {
                        "recommended".to_string()
                    } else {
                        format!("amazon-eks{name_part}-node-{k8s}-{v}")
                    };
                    (format!("{eks}/amazon-linux-2{path_suffix}/{leaf}/image_id"), variant)
                })
                .collect()
        }
        AmiFamily::Bottlerocket => {
            let version = if latest { "latest".to_string() } else { v.trim_start_matches('v').to_string() };
            let mut out = Vec::new();
            for arch in ["x86_64", "arm64"] {
                out.push((
                    format!("/aws/service/bottlerocket/aws-k8s-{k8s}/{arch}/{version}/image_id"),
                    Variant::Standard,
                ));
                out.push((
                    format!("/aws/service/bottlerocket/aws-k8s-{k8s}-nvidia/{arch}/{version}/image_id"),
                    Variant::Nvidia,
                ));
            }
            out
        }
        AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => {
            let (Some(year), Some(build)) =
                (windows_year(alias.family), kerf_cloud::aws::windows::windows_build(Some(alias.family)))
            else {
                return Vec::new();
            };
            vec![(
                format!(
                    "/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}/image_id"
                ),
                Variant::Windows(build),
            )]
        }
        AmiFamily::Custom => Vec::new(),
    }
}

/// What went wrong resolving AMIs.
#[derive(Debug, Clone, PartialEq)]
pub enum AmiError {
    /// The selector terms themselves are wrong (a bad alias): not retried.
    Invalid(String),
    Aws(AwsError),
}

impl From<AwsError> for AmiError {
    fn from(e: AwsError) -> Self {
        AmiError::Aws(e)
    }
}

/// The images the terms select, newest first (then by ID).
pub async fn amis(clients: &AwsClients, terms: &[AmiSelectorTerm], k8s: &str, now: &str) -> Result<Vec<Ami>, AmiError> {
    // Image ID → variant requirements known from the alias that named it.
    let mut known: BTreeMap<String, Vec<NodeSelectorRequirementWithMinValues>> = BTreeMap::new();
    let mut queries: Vec<(Vec<Filter>, Vec<String>)> = Vec::new();
    for term in terms {
        if let Some(alias) = &term.alias {
            let alias = parse_alias(alias).map_err(AmiError::Invalid)?;
            let mut ids = Vec::new();
            for (name, variant) in alias_parameters(&alias, k8s) {
                match clients.ssm.get_parameter().name(&name).send().await {
                    Ok(out) => {
                        if let Some(id) = out.parameter().and_then(|p| p.value()) {
                            known.entry(id.to_string()).or_insert_with(|| variant.requirements());
                            ids.push(id.to_string());
                        }
                    }
                    Err(e) => {
                        let e = AwsError::from_sdk("ssm:GetParameter", e);
                        // A variant not published for this version is simply absent.
                        if !e.is_not_found() {
                            return Err(e.into());
                        }
                    }
                }
            }
            if !ids.is_empty() {
                ids.sort();
                ids.dedup();
                queries.push((vec![Filter::builder().name("image-id").set_values(Some(ids)).build()], Vec::new()));
            }
            continue;
        }
        let mut filters = tag_filters(&term.tags);
        if let Some(id) = &term.id {
            filters.push(Filter::builder().name("image-id").values(id).build());
        }
        if let Some(name) = &term.name {
            filters.push(Filter::builder().name("name").values(name).build());
        }
        let owners = match &term.owner {
            Some(o) => vec![o.clone()],
            // A name alone could match anyone's image: only trust our own and Amazon's.
            None if term.name.is_some() && term.id.is_none() => vec!["self".to_string(), "amazon".to_string()],
            None => Vec::new(),
        };
        if filters.is_empty() && owners.is_empty() {
            continue;
        }
        queries.push((filters, owners));
    }

    let mut found: BTreeMap<String, Ami> = BTreeMap::new();
    for (filters, owners) in queries {
        let mut token = None;
        loop {
            let out = clients
                .ec2
                .describe_images()
                .set_filters(Some(filters.clone()))
                .set_owners((!owners.is_empty()).then(|| owners.clone()))
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| AwsError::from_sdk("ec2:DescribeImages", e))?;
            for image in out.images() {
                let Some(id) = image.image_id() else { continue };
                let arch = match image.architecture().map(|a| a.as_str()) {
                    Some("x86_64") => "amd64",
                    Some("arm64") => "arm64",
                    // i386, 32-bit ARM and Macs cannot run Kubernetes nodes kerf launches.
                    _ => continue,
                };
                let mut requirements = vec![NodeSelectorRequirementWithMinValues {
                    key: labels::ARCH.to_string(),
                    operator: Operator::In,
                    values: vec![arch.to_string()],
                    min_values: None,
                }];
                if let Some(extra) = known.get(id) {
                    requirements.extend(extra.iter().cloned());
                }
                requirements.sort_by(|a, b| a.key.len().cmp(&b.key.len()).then_with(|| a.key.cmp(&b.key)));
                let deprecated = image.deprecation_time().is_some_and(|t| t <= now);
                found.insert(
                    id.to_string(),
                    Ami {
                        id: id.to_string(),
                        name: image.name().map(str::to_string),
                        creation_date: image.creation_date().unwrap_or_default().to_string(),
                        deprecated,
                        requirements,
                    },
                );
            }
            token = out.next_token().map(str::to_string);
            if token.is_none() {
                break;
            }
        }
    }
    let mut list: Vec<Ami> = found.into_values().collect();
    list.sort_by(|a, b| b.creation_date.cmp(&a.creation_date).then_with(|| a.id.cmp(&b.id)));
    Ok(list)
}

/// The AMI family that decides user data and default block devices: `amiFamily`, else the
/// alias's family, else Custom.
pub fn family(spec: &kerf_api::ec2nodeclass::EC2NodeClassSpec) -> AmiFamily {
    spec.ami_family
        .or_else(|| {
            spec.ami_selector_terms.iter().find_map(|t| parse_alias(t.alias.as_deref()?).ok()).map(|a| a.family)
        })
        .unwrap_or(AmiFamily::Custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn al2023_latest_reads_the_recommended_parameters_of_every_variant() {
        let alias = parse_alias("al2023@latest").unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<String> = alias_parameters(&alias, "1.33").into_iter().map(|(n, _)| n).collect();
        assert_eq!(names.len(), 5);
        assert!(names.contains(
            &"/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id".to_string()
        ));
        assert!(names.contains(
            &"/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/arm64/nvidia/recommended/image_id".to_string()
        ));
    }

    #[test]
    fn pinned_aliases_name_the_release_in_the_parameter() {
        let al2023 = parse_alias("al2023@v20250101").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            alias_parameters(&al2023, "1.33")[0].0,
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.33-v20250101/image_id"
        );
        let al2 = parse_alias("al2@v20250101").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            alias_parameters(&al2, "1.30")[2].0,
            "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-arm64/amazon-eks-arm64-node-1.30-v20250101/image_id"
        );
        let br = parse_alias("bottlerocket@v1.30.0").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(alias_parameters(&br, "1.33")[0].0, "/aws/service/bottlerocket/aws-k8s-1.33/x86_64/1.30.0/image_id");
    }

    #[test]
    fn windows_aliases_read_the_eks_optimized_core_parameter_and_need_windows_types() {
        let alias = parse_alias("windows2022@latest").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(alias.family, AmiFamily::Windows2022);
        let params = alias_parameters(&alias, "1.33");
        assert_eq!(
            params.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
            vec!["/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.33/image_id"]
        );
        let reqs = params[0].1.requirements();
        assert_eq!(reqs[0].key, labels::OS);
        assert_eq!(reqs[0].values, vec!["windows".to_string()]);
        assert_eq!(reqs[1].values, vec!["10.0.20348".to_string()]);
        assert!(parse_alias("windows2019@v20250101").is_err(), "Windows aliases are latest only");
    }

    #[test]
    fn unknown_alias_families_and_missing_versions_are_errors() {
        assert!(parse_alias("ubuntu@latest").is_err());
        assert!(parse_alias("al2023").is_err());
        assert!(parse_alias("al2023@").is_err());
    }
}
