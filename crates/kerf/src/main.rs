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
mod controller_drift;
mod controller_env;
mod convert;
mod crds;
mod instance_types;
mod packing_bench;
mod serve;
mod simulate;
mod snapshot;
mod snapshot_bench;
mod top;
mod top_bench;
mod validate;

/// mimalloc instead of the system allocator (see the workspace manifest for why). The
/// `system-allocator` feature keeps the system's, for heap profilers that hook malloc.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// mimalloc's options, set by name in src/alloc_options.c (compiled against mimalloc's header).
#[cfg(not(feature = "system-allocator"))]
unsafe extern "C" {
    fn kerf_mimalloc_keep_freed_memory();
    fn kerf_mimalloc_keep_memory_tight();
}

/// Keeps the memory the simulator frees for its next use instead of giving it back to the
/// system. Every pass of the controllers builds and drops scheduling contexts and every write
/// makes a new version of an object; with mimalloc's default (freed pages given back after a
/// few milliseconds), the next pass would fault them in again and the kernel zero them. For the
/// commands that simulate (`simulate`, `serve`, `bench`), whose memory returns to its peak
/// again and again while they run.
///
/// They take no transparent huge pages either, as the controller does not ([`keep_memory_tight`]):
/// the first touch of a 2 MiB page has the kernel zero all of it (a fifth of a cold consolidation
/// decision's time), and on a busy machine the kernel's work to find them makes run times swing.
pub fn keep_freed_memory() {
    // SAFETY: sets integer options of the allocator (mimalloc allows it at any time), before
    // the command starts any other thread.
    #[cfg(not(feature = "system-allocator"))]
    unsafe {
        kerf_mimalloc_keep_freed_memory();
    }
    no_huge_pages();
}

/// Asks the kernel for no transparent huge pages for this process (and its children).
fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    {
        let (on, unused): (libc::c_ulong, libc::c_ulong) = (1, 0);
        // SAFETY: PR_SET_THP_DISABLE takes one integer argument (the rest must be 0) and changes
        // only this process's page policy (children inherit it).
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, on, unused, unused, unused) };
    }
}

/// Keeps the long-running controller's memory close to what it uses, where a memory limit has to
/// fit its peak: mimalloc gives freed memory back at once, and the process takes no transparent
/// huge pages (mimalloc asks for them on its arenas, and a 2 MiB page is resident as soon as one
/// byte of it is used). Each lowers the controller's peak RSS (see docs/performance.md).
pub fn keep_memory_tight() {
    // SAFETY: sets integer options of the allocator, which mimalloc allows at any time; called
    // before the controller starts its runtime, while no other thread allocates.
    #[cfg(not(feature = "system-allocator"))]
    unsafe {
        kerf_mimalloc_keep_memory_tight();
    }
    no_huge_pages();
}

/// For the commands whose output is read by another program (`kerf validate ... | head`): a
/// reader that closes the pipe early ends the process as it ends any Unix filter, instead of a
/// panic on the next print. Servers keep std's default (SIGPIPE ignored, the write fails).
fn end_quietly_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: restores the default disposition of one signal before any other thread starts;
    // no handler of the process depends on SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
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
    /// Watch a cluster's fleet live: nodes, room, cost, pending pods and disruptions.
    Top(top::Args),
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
    if matches!(cli.command, Command::Simulate(_) | Command::Serve(_) | Command::Bench(_)) {
        keep_freed_memory();
    }
    if matches!(
        cli.command,
        Command::Simulate(_)
            | Command::Validate(_)
            | Command::Convert(_)
            | Command::InstanceTypes(_)
            | Command::Crds(_)
            | Command::Top(_)
    ) {
        end_quietly_on_closed_pipe();
    }
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
        Command::Top(args) => top::run(args),
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
