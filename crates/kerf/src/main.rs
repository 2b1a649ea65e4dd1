//! `kerf`: a Kubernetes node autoscaler compatible with Karpenter's v1 API.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kerf_cloud::{Clock, ManualClock};

mod bench;
mod bench_process;
mod chaos_bench;
mod consolidation_bench;
mod controller;
#[cfg(feature = "aws")]
mod controller_aws;
mod controller_bench;
mod controller_env;
mod convert;
mod crds;
mod instance_types;
mod packing_bench;
mod serve;
mod simulate;
mod snapshot;
mod snapshot_bench;
mod validate;

/// mimalloc instead of the system allocator (see the workspace manifest for why).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// mimalloc's option setter, linked through the `mimalloc` crate's static library (its Rust
// binding declares it only with a feature that brings another crate, and names no constant for
// the option set here).
unsafe extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_purge_delay` in mimalloc's `mi_option_t` (v2 and v3 alike).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

/// Makes the allocator give memory that is no longer used back to the system at once instead
/// of after its default 10 ms (scaled up for whole arenas). For the long-running controller,
/// whose peak is what a memory limit has to fit: `kerf bench controller --nodes 100 --pods 3000`
/// peaked at 84.8 MB with it against 92.7 MB without. The simulator keeps the default: it frees
/// and allocates scheduling contexts all the time, and each purge is a system call.
pub fn return_freed_memory_at_once() {
    // SAFETY: sets one integer option of the allocator, which mimalloc allows at any time;
    // called before the controller starts its runtime, while no other thread allocates.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
}

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
    /// Serve a simulated cluster as a Kubernetes API for kubectl and other clients.
    Serve(serve::Args),
    /// Run kerf's controllers against a Kubernetes cluster.
    Controller(controller::Args),
    /// Check NodePool, NodeClaim and EC2NodeClass manifests the way the API server would.
    Validate(validate::Args),
    /// Convert manifests of Karpenter's older APIs (v1alpha5, v1alpha1, v1beta1) to v1.
    Convert(convert::Args),
    /// List the built-in AWS catalog's instance types.
    InstanceTypes(instance_types::Args),
    /// Run a benchmark.
    Bench(bench::Args),
    /// Print the NodePool, NodeClaim and EC2NodeClass CustomResourceDefinitions.
    Crds(crds::Args),
    /// Read a live cluster (list calls only) and write a scenario that reproduces it.
    Snapshot(snapshot::Args),
}

/// Log timestamps from the simulation's virtual clock, so a simulated run's log reads as the
/// cluster would have seen it.
struct VirtualTime(ManualClock);

impl tracing_subscriber::fmt::time::FormatTime for VirtualTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(w, "{}", self.0.now())
    }
}

/// JSON logs on stderr, filtered by KERF_LOG (an env-filter directive such as `info`); without
/// it, `default` (off for the one-shot commands, info for `kerf controller`). With `clock`,
/// timestamps are that clock's (virtual) time.
fn init_logging(clock: Option<ManualClock>, default: &str) {
    let filter = tracing_subscriber::EnvFilter::new(std::env::var("KERF_LOG").unwrap_or_else(|_| default.to_string()));
    let logs = tracing_subscriber::fmt().json().with_writer(std::io::stderr).with_env_filter(filter);
    let _ = match clock {
        Some(clock) => logs.with_timer(VirtualTime(clock)).try_init(),
        None => logs.try_init(),
    };
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A simulation's logs carry its virtual time.
    let clock = matches!(cli.command, Command::Simulate(_) | Command::Serve(_)).then(ManualClock::new);
    let default_log = if matches!(cli.command, Command::Controller(_)) { "info" } else { "off" };
    init_logging(clock.clone(), default_log);
    let result = match cli.command {
        Command::Simulate(args) => simulate::run(args, clock.unwrap_or_default()),
        Command::Serve(args) => serve::run(args, clock.unwrap_or_default()),
        Command::Controller(args) => controller::run(args),
        Command::Validate(args) => validate::run(args),
        Command::Convert(args) => convert::run(args),
        Command::InstanceTypes(args) => instance_types::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Crds(args) => crds::run(args),
        Command::Snapshot(args) => snapshot::run(args),
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
