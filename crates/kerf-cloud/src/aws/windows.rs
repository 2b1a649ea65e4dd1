//! Windows nodes: which AMI families are Windows, the build each runs (the
//! `node.kubernetes.io/windows-build` label), and the licence-included on-demand price AWS adds
//! to a type's Linux price (data/README.md, "Windows prices").
//!
//! The catalog's price source has no usable Windows list, so a Windows price is the Linux price
//! plus the licence fee of this module and is always marked estimated.

use kerf_api::ec2nodeclass::AmiFamily;

use super::catalog::TypeInfo;

/// Licence-included fee per vCPU-hour for Windows Server on non-burstable types.
pub const LICENCE_PER_VCPU_HOUR: f64 = 0.046;

/// Root device of the Windows AMIs.
pub const ROOT_DEVICE: &str = "/dev/sda1";

/// Root volume size (GiB) when the node class maps none, as Karpenter's Windows families default it.
pub const DEFAULT_ROOT_VOLUME_GIB: i64 = 50;

/// Whether `family` boots Windows.
pub fn is_windows(family: Option<AmiFamily>) -> bool {
    windows_build(family).is_some()
}

/// The Windows build a family's nodes run, as kubelet labels the node.
pub fn windows_build(family: Option<AmiFamily>) -> Option<&'static str> {
    match family? {
        AmiFamily::Windows2019 => Some("10.0.17763"),
        AmiFamily::Windows2022 => Some("10.0.20348"),
        AmiFamily::Windows2025 => Some("10.0.26100"),
        _ => None,
    }
}

/// The Windows build of an AMI alias family (`windows2022` of `windows2022@latest`).
pub fn alias_build(alias_family: &str) -> Option<&'static str> {
    windows_build(Some(match alias_family {
        "windows2019" => AmiFamily::Windows2019,
        "windows2022" => AmiFamily::Windows2022,
        "windows2025" => AmiFamily::Windows2025,
        _ => return None,
    }))
}

/// The hourly Windows licence fee AWS adds to `info`'s Linux price: per size for the burstable
/// families, whose fee follows their baseline rather than their vCPUs, else
/// [`LICENCE_PER_VCPU_HOUR`] per vCPU.
pub fn licence_per_hour(info: &TypeInfo) -> f64 {
    let (family, size) = info.name.split_once('.').unwrap_or((info.name.as_str(), ""));
    let burstable = match family {
        "t3" | "t3a" => Some([0.0046, 0.0092, 0.0184, 0.0184, 0.0276, 0.0736, 0.1472]),
        "t2" => Some([0.0023, 0.0046, 0.0092, 0.018, 0.028, 0.041, 0.062]),
        _ => None,
    };
    let sizes = ["nano", "micro", "small", "medium", "large", "xlarge", "2xlarge"];
    if let Some(fees) = burstable
        && let Some(i) = sizes.iter().position(|s| *s == size)
    {
        return fees[i];
    }
    LICENCE_PER_VCPU_HOUR * info.vcpu as f64
}

/// `linux` plus the licence fee, rounded to 1/100000 $ as the catalog's prices are.
pub fn windows_price(info: &TypeInfo, linux: f64) -> f64 {
    ((linux + licence_per_hour(info)) * 100_000.0).round() / 100_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, vcpu: i64) -> TypeInfo {
        TypeInfo {
            name: name.to_string(),
            arch: "amd64".to_string(),
            vcpu,
            memory_mib: 8192,
            enis: 3,
            ipv4_per_eni: 12,
            hypervisor: "nitro".to_string(),
            bare_metal: false,
            cpu_manufacturer: "intel".to_string(),
            encryption_in_transit: false,
            spot: true,
            network_bandwidth_mbps: None,
            ebs_bandwidth_mbps: None,
            clock_mhz: None,
            gpu: None,
            neuron: None,
            local_nvme_gb: None,
            efa: None,
            max_ebs_attachments: None,
            offers: Default::default(),
            price_estimated: Default::default(),
        }
    }

    #[test]
    fn windows_adds_the_licence_per_vcpu_except_on_burstable_types_which_pay_per_size() {
        // m5.large: 0.096 Linux, 0.188 Windows (us-east-1 list prices).
        assert_eq!(windows_price(&info("m5.large", 2), 0.096), 0.188);
        // t3.large: 0.0832 Linux, 0.1108 Windows.
        assert_eq!(windows_price(&info("t3.large", 2), 0.0832), 0.1108);
        assert_eq!(windows_price(&info("t3a.xlarge", 4), 0.1504), 0.224);
        // A burstable size without a listed fee falls back to the per-vCPU rule.
        assert_eq!(licence_per_hour(&info("t3.8xlarge", 32)), 32.0 * LICENCE_PER_VCPU_HOUR);
    }

    #[test]
    fn each_windows_family_has_its_build_and_linux_families_have_none() {
        assert_eq!(windows_build(Some(AmiFamily::Windows2019)), Some("10.0.17763"));
        assert_eq!(windows_build(Some(AmiFamily::Windows2022)), Some("10.0.20348"));
        assert_eq!(windows_build(Some(AmiFamily::Windows2025)), Some("10.0.26100"));
        assert!(!is_windows(Some(AmiFamily::AL2023)));
        assert!(!is_windows(None));
    }
}
