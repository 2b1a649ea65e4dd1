//! `kerf crds`: the NodePool, NodeClaim and EC2NodeClass CustomResourceDefinitions as YAML, for
//! `kubectl apply -f -`, the Helm chart's `crds/` and the kustomize base.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use kerf_api::crd;

use crate::BadInput;

#[derive(clap::Args)]
pub struct Args {
    /// Write one file per CRD into this directory (named as Karpenter's chart names them,
    /// `karpenter.sh_nodepools.yaml`) instead of printing all three on stdout.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.dir {
        None => {
            let text = crd::all_yaml().context("encoding the CRDs as YAML")?;
            match std::io::stdout().lock().write_all(text.as_bytes()) {
                // `kerf crds | head`: the reader has what it wanted.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                other => other.context("writing to stdout")?,
            }
        }
        Some(dir) => {
            if !dir.is_dir() {
                return Err(BadInput(format!("--dir {}: not a directory", dir.display())).into());
            }
            for def in crd::ALL {
                let path = dir.join(def.file_name());
                let text = def.yaml().with_context(|| format!("encoding {} as YAML", def.name()))?;
                std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
