//! `kerf convert FILE...`: manifests of Karpenter's older APIs to v1 YAML on stdout.

use std::path::PathBuf;
use std::process::ExitCode;

use kerf_api::convert::{self, ConvertOptions};
use kerf_api::manifest;

#[derive(clap::Args)]
#[command(after_help = "\
Converts karpenter.sh/v1alpha5 Provisioners, karpenter.k8s.aws/v1alpha1 AWSNodeTemplates,
karpenter.sh/v1beta1 NodePools and NodeClaims and karpenter.k8s.aws/v1beta1 EC2NodeClasses to
karpenter.sh/v1 and karpenter.k8s.aws/v1, field by field as Karpenter's migration guides map them:
  providerRef -> nodeClassRef; ttlSecondsUntilExpired -> expireAfter (Never when unset);
  ttlSecondsAfterEmpty -> consolidationPolicy WhenEmpty + consolidateAfter;
  consolidation.enabled -> WhenEmptyOrUnderutilized; kubeletConfiguration / kubelet -> the
  EC2NodeClass's kubelet; subnetSelector / securityGroupSelector / amiSelector -> selector terms;
  amiFamily without AMI selectors -> alias family@latest; the older IMDS hop limit 2 kept.
Other documents (Deployments, v1 objects, ...) are written out unchanged, in order. All files are
converted together, so a pool's kubelet settings reach its node class in another file.

Every converted object is checked as `kerf validate` checks v1 objects. On stderr, one line per
remark, as
  FILE: KIND/NAME: FIELD.PATH: what has no v1 equivalent or was written out
Exit status: 0 when everything converted (remarks do not change it); 2 on bad input (unreadable
file, YAML error, a field the older API does not have, something v1 cannot express without a
decision, a converted object that would not validate) -- then the problems are listed on stderr
and nothing is written to stdout.")]
pub struct Args {
    /// Manifest files (multi-document YAML).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The instance profile for AWSNodeTemplates without one (the value of Karpenter's former
    /// aws.defaultInstanceProfile setting).
    #[arg(long, value_name = "NAME")]
    pub default_instance_profile: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut docs = Vec::new();
    let mut doc_file = Vec::new();
    let mut bad = false;
    for (fi, file) in args.files.iter().enumerate() {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{}: cannot read: {e}", file.display());
                bad = true;
                continue;
            }
        };
        for d in manifest::yaml_documents(&text) {
            match d {
                Ok(v) => {
                    docs.push(v);
                    doc_file.push(fi);
                }
                Err(e) => {
                    eprintln!("{}: {e}", file.display());
                    bad = true;
                }
            }
        }
    }
    let name_of = |doc: usize| args.files[doc_file[doc]].display().to_string();
    let opts = ConvertOptions { default_instance_profile: args.default_instance_profile.clone() };
    match convert::convert(&docs, &opts) {
        Ok(conversion) => {
            for n in &conversion.notes {
                eprintln!("{}: {}", name_of(n.doc), n.problem);
            }
            if bad {
                return Ok(ExitCode::from(2));
            }
            print!("{}", conversion.to_yaml());
            Ok(ExitCode::SUCCESS)
        }
        Err((problems, notes)) => {
            // The remarks would only hide the problems; they come again once those are fixed.
            let _ = notes;
            for n in &problems {
                eprintln!("{}: {}", name_of(n.doc), n.problem);
            }
            Ok(ExitCode::from(2))
        }
    }
}
