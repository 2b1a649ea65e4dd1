//! `kerf controller [--kubeconfig FILE] [--cloud aws|kwok] [--cluster-name NAME]
//! [--metrics-addr ADDR] [--health-addr ADDR] [--leader-elect]`: kerf's controllers in a cluster,
//! over kube-rs. Only wiring: the runtime is `kerf_kube::runtime`; `--cloud aws` needs a build
//! with the `aws` feature (`controller_aws`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kerf_cloud::CloudProvider;
use kerf_kube::endpoints::{self, Health};
use kerf_kube::kwok::KwokProvider;
use kerf_kube::metrics::Metrics;
use kerf_kube::runtime::{self, Election, Settings};
use kube::Config;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Cloud {
    /// EC2 (the kerf-aws provider).
    Aws,
    /// Instances are Node objects created through the API, for clusters whose kubelets are simulated.
    Kwok,
}

#[derive(clap::Args)]
pub struct Args {
    /// The cluster to run against; without it, $KUBECONFIG, else the in-cluster service account.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "aws")]
    pub cloud: Cloud,
    /// The cluster's name (tags and discovery of the cloud's resources); default $CLUSTER_NAME.
    #[arg(long)]
    pub cluster_name: Option<String>,
    /// Where `/metrics` is served.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: String,
    /// Where `/healthz` and `/readyz` are served.
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub health_addr: String,
    /// Only the holder of the Lease acts (`karpenter-leader-election`, or $LEADER_ELECTION_LEASE,
    /// in $SYSTEM_NAMESPACE); the others stand by.
    #[arg(long)]
    pub leader_elect: bool,
}

pub(crate) fn bad(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(crate::BadInput(e.to_string()))
}

/// How long to wait for the API server to answer at start.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The client configuration: `kubeconfig` (else $KUBECONFIG) with its `context` (else the
/// current one), or the in-cluster service account when there is no kubeconfig. Shared by
/// `kerf controller`, `kerf snapshot` and `kerf simulate --from-cluster`.
pub async fn client_config(kubeconfig: Option<&PathBuf>, context: Option<&str>) -> anyhow::Result<Config> {
    let path = kubeconfig.cloned().or_else(|| std::env::var_os("KUBECONFIG").map(PathBuf::from));
    match path {
        Some(path) => {
            if !path.is_file() {
                return Err(bad(format!("--kubeconfig {}: no such file", path.display())));
            }
            let kc = kube::config::Kubeconfig::read_from(&path)
                .map_err(|e| bad(format!("--kubeconfig {}: {e}", path.display())))?;
            let options =
                kube::config::KubeConfigOptions { context: context.map(str::to_string), ..Default::default() };
            Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| bad(format!("--kubeconfig {}: {e}", path.display())))
        }
        None if context.is_some() => Err(bad("--context needs a kubeconfig (--kubeconfig or $KUBECONFIG)")),
        None => Config::incluster().map_err(|e| {
            bad(format!("no --kubeconfig given and not running in a cluster (in-cluster configuration: {e})"))
        }),
    }
}

/// This process's name as a lease holder: host name and process id.
fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok().map(|s| s.trim().to_string()))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "kerf".to_string());
    format!("{host}_{}", std::process::id())
}

/// A seed that differs between processes: the wall clock's nanoseconds and the process id.
fn seed() -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32)
}

async fn bind(flag: &str, addr: &str) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| bad(format!("{flag} {addr}: {e}")))
}

/// What `--cloud aws` says in a build without the `aws` feature.
const NO_AWS_PROVIDER: &str = "--cloud aws: this build of kerf has no AWS provider; build it with `cargo build --features aws` (the container image is), or use --cloud kwok";

/// Worker threads beside the controllers' own: watches decoding what the API server sends while a
/// pass computes.
const WATCH_THREADS: usize = 1;

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.cloud == Cloud::Aws && !cfg!(feature = "aws") {
        return Err(bad(NO_AWS_PROVIDER));
    }
    crate::keep_memory_tight();
    // The controllers' loop runs on this thread (`block_on`); the watches, the HTTP connections
    // and the servers run on the worker. A pass that plans thousands of pods computes for
    // seconds without yielding; on one thread the watches would stand still meanwhile, the state
    // of a large cluster would fall minutes behind it, and pods already bound would look pending
    // again.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WATCH_THREADS)
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: Args) -> anyhow::Result<ExitCode> {
    let env = crate::controller_env::EnvSettings::read(|k| std::env::var(k).ok()).map_err(bad)?;
    if let Some(gates) = env.feature_gates.not_acted_on() {
        tracing::warn!(gates = %gates, "feature gates kerf reads but does not act on");
    }
    let config = client_config(args.kubeconfig.as_ref(), None).await?;
    let server = config.cluster_url.to_string();
    #[cfg(feature = "aws")]
    let config_root_certs = config.root_cert.clone();
    let client = kerf_kube::api::client(config).map_err(|e| bad(format!("cannot build a client for {server}: {e}")))?;
    let version = match tokio::time::timeout(CONNECT_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(version)) => version,
        Ok(Err(e)) => return Err(bad(format!("cannot reach the API server at {server}: {e}"))),
        Err(_) => {
            return Err(bad(format!(
                "cannot reach the API server at {server}: no answer within {}s",
                CONNECT_TIMEOUT.as_secs()
            )));
        }
    };
    // Karpenter's kinds must be served (their CRDs installed) for the watches to ever sync.
    for name in ["NodePool", "NodeClaim", "EC2NodeClass"] {
        let Some(kind) = kerf_kube::kinds::by_name(name) else { continue };
        let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(client.clone(), &kind.resource);
        if let Err(e) = api.list(&kube::api::ListParams::default().limit(1)).await {
            return Err(bad(format!(
                "{server} does not serve {}/{} ({}): install Karpenter's CRDs first: {e}",
                kind.resource.api_version, kind.resource.plural, name
            )));
        }
    }
    match args.cloud {
        Cloud::Kwok => {
            let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-west-2".to_string());
            let cloud =
                KwokProvider::new(client.clone(), &region).map_err(|e| bad(format!("AWS_REGION {region}: {e}")))?;
            run_controllers(&args, &env, client, &server, cloud).await
        }
        #[cfg(feature = "aws")]
        Cloud::Aws => {
            use crate::controller_aws as aws;
            let name = aws::cluster_name(args.cluster_name.as_deref().or(env.cluster_name.as_deref())).map_err(bad)?;
            let clients = aws::clients().await.map_err(bad)?;
            let eks = aws::describe(&clients, name, &env).await.map_err(bad)?;
            let settings =
                aws::settings(name, &env, &version, config_root_certs.as_deref(), eks.as_ref()).map_err(bad)?;
            let cloud = aws::provider(clients, settings);
            run_controllers(&args, &env, client, &server, cloud).await
        }
        #[cfg(not(feature = "aws"))]
        Cloud::Aws => {
            let _ = version;
            Err(bad(NO_AWS_PROVIDER))
        }
    }
}

/// Serves metrics and probes and runs the controllers with `cloud` until SIGINT or SIGTERM.
async fn run_controllers<P: CloudProvider>(
    args: &Args,
    env: &crate::controller_env::EnvSettings,
    client: kube::Client,
    server: &str,
    cloud: P,
) -> anyhow::Result<ExitCode> {
    let cluster_name = args.cluster_name.clone().or_else(|| env.cluster_name.clone());
    let metrics_listener = bind("--metrics-addr", &args.metrics_addr).await?;
    let health_listener = bind("--health-addr", &args.health_addr).await?;
    let metrics = Metrics::new();
    let health = Arc::new(Health::default());
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let metrics_at = metrics_listener.local_addr().context("metrics address")?;
    let health_at = health_listener.local_addr().context("health address")?;
    let metrics_server =
        tokio::spawn(endpoints::serve(metrics_listener, endpoints::metrics_routes(metrics.registry()), stop.clone()));
    let health_server =
        tokio::spawn(endpoints::serve(health_listener, endpoints::health_routes(Arc::clone(&health)), stop.clone()));
    let identity = identity();
    eprintln!(
        "kerf controller: {} as {identity} against {server}; metrics on http://{metrics_at}/metrics, probes on http://{health_at}/healthz",
        if args.leader_elect { "electing a leader" } else { "acting" },
    );
    tracing::info!(server = %server, identity = %identity, cloud = cloud.name(), cluster = cluster_name.as_deref().unwrap_or(""), "starting");

    let settings = Settings {
        identity,
        election: args.leader_elect.then(|| Election {
            namespace: std::env::var("SYSTEM_NAMESPACE").unwrap_or_else(|_| "kube-system".to_string()),
            name: env.lease_name.clone().unwrap_or_else(|| kerf_kube::lease::LEASE_NAME.to_string()),
        }),
        // Seeds NodeClaim name suffixes: a restarted process must not replay its predecessor's names.
        options: env.options(kerf_controller::Options { seed: seed(), ..kerf_controller::Options::default() }),
    };
    let signals = {
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            kerf_apiserver::http::interrupted().await;
            tracing::info!("shutting down");
            let _ = stop_tx.send(true);
        })
    };
    let result = runtime::run(client, cloud, settings, metrics, health, stop).await;
    let _ = stop_tx.send(true);
    signals.abort();
    let _ = metrics_server.await;
    let _ = health_server.await;
    result.map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!("kerf controller: stopped");
    Ok(ExitCode::SUCCESS)
}
