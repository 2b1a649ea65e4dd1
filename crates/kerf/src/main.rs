//! `kerf`: a Kubernetes node autoscaler compatible with Karpenter's v1 API.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod instance_types;
mod simulate;
mod validate;

/// Bad input (file, field and problem): exit status 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

#[derive(Parser)]
#[command(name = "kerf", version, about = "A Kubernetes node autoscaler compatible with Karpenter's v1 API")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario against an in-memory cluster and a simulated cloud, and report what kerf does.
    Simulate(simulate::Args),
    /// Check NodePool, NodeClaim and EC2NodeClass manifests the way the API server would.
    Validate(validate::Args),
    /// List the built-in AWS catalog's instance types.
    InstanceTypes(instance_types::Args),
    /// Run a benchmark.
    Bench(bench::Args),
}

fn init_logging() {
    // JSON logs on stderr; off unless KERF_LOG (an env-filter directive such as `info`) is set.
    let filter = std::env::var("KERF_LOG").unwrap_or_else(|_| "off".to_string());
    let _ = tracing_subscriber::fmt()
        .json()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let result = match cli.command {
        Command::Simulate(args) => simulate::run(args),
        Command::Validate(args) => validate::run(args),
        Command::InstanceTypes(args) => instance_types::run(args),
        Command::Bench(args) => bench::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            if let Some(bad) = err.downcast_ref::<BadInput>() {
                eprintln!("kerf: {bad}");
                ExitCode::from(2)
            } else {
                eprintln!("kerf: {err:#}");
                ExitCode::from(1)
            }
        }
    }
}
