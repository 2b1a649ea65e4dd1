//! `kerf top [--kubeconfig FILE] [--context NAME] [--resources cpu,memory,...]
//! [--node-selector SEL] [--sort FIELD] [--once] [--json]`: the fleet at a glance, live. Reads
//! any cluster (list and watch only): nodes with their NodePool, type, zone, capacity type,
//! price (the catalog's, after the cluster's NodeOverlays), requests against allocatable and
//! state; the NodePools against their limits and budgets, with their undone consolidations;
//! pending pods by owner with kerf's reason; CapacityBuffers. `--once` prints one frame
//! as text, `--json` as JSON, once every kind has been listed.
//!
//! [`fleet`] keeps what the watches ([`feed`]) deliver; [`view`] makes a frame of it; [`text`]
//! and [`draw`] render that frame; [`viewer`] is the keyboard's state.

pub mod draw;
pub mod feed;
pub mod fleet;
pub mod text;
pub mod view;
pub mod viewer;

use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use crossterm::event::{Event as TermEvent, EventStream, KeyCode, KeyEventKind, KeyModifiers};
use futures_util::StreamExt;
use kerf_apiserver::selectors::LabelSelector;
use tokio::sync::mpsc;

use fleet::{Fleet, Update};
use view::{CatalogPrices, Options, Sort};
use viewer::{Key, Outcome, Viewer};

#[derive(clap::Args)]
pub struct Args {
    /// The kubeconfig; without it, $KUBECONFIG, else the in-cluster service account.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context; without it, the current one.
    #[arg(long)]
    pub context: Option<String>,
    /// Resources with a bar, comma-separated.
    #[arg(long, default_value = "cpu,memory", value_delimiter = ',')]
    pub resources: Vec<String>,
    /// Only nodes with these labels (a label selector, as kubectl's -l).
    #[arg(long)]
    pub node_selector: Option<String>,
    /// The node list's order: name, nodepool, type, zone, capacity, price, pods, age, state, or
    /// a resource (the share of it requested).
    #[arg(long, default_value = "name")]
    pub sort: String,
    /// Print one frame as plain text and exit (colour only on a terminal).
    #[arg(long, conflicts_with = "json")]
    pub once: bool,
    /// Print one frame as JSON and exit.
    #[arg(long)]
    pub json: bool,
    /// With --once / --json: how long to wait for every kind's first list.
    #[arg(long, default_value = "60")]
    pub wait_seconds: u64,
}

/// The least time between two drawings for changes of the cluster: at most about six drawings
/// a second, and a change on screen within this plus one frame's drawing (about 10 ms for 2,000
/// nodes and 60,000 pods, see docs/performance.md). Keys and resizes draw at once.
const REDRAW_GAP: Duration = Duration::from_millis(150);

fn options(args: &Args) -> anyhow::Result<Options> {
    let resources: Vec<String> =
        args.resources.iter().map(|r| r.trim().to_string()).filter(|r| !r.is_empty()).collect();
    if resources.is_empty() {
        return Err(crate::controller::bad("--resources: name at least one resource (cpu,memory)"));
    }
    let sort: Sort = args.sort.parse().map_err(|e| crate::controller::bad(format!("--sort: {e}")))?;
    let node_selector = args
        .node_selector
        .as_deref()
        .map(LabelSelector::parse)
        .transpose()
        .map_err(|e| crate::controller::bad(format!("--node-selector: {e}")))?;
    Ok(Options { resources, sort, reverse: false, filter: String::new(), node_selector, selected: None })
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let opts = options(&args)?;
    if !args.once && !args.json && !std::io::stdout().is_terminal() {
        return Err(crate::controller::bad(
            "stdout is not a terminal: use --once (text) or --json for one frame".to_string(),
        ));
    }
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the runtime")?;
    runtime.block_on(async {
        let config = crate::controller::client_config(args.kubeconfig.as_ref(), args.context.as_deref()).await?;
        let client = kerf_kube::api::client(config).context("cannot build the Kubernetes client")?;
        let rx = feed::start(&client, &feed::Selection { node_selector: args.node_selector.clone() });
        if args.once || args.json {
            once(rx, &opts, args.json, Duration::from_secs(args.wait_seconds)).await
        } else {
            live(rx, Viewer::new(opts)).await
        }
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Names the kinds not listed yet and the watches failing.
fn waiting_for(fleet: &Fleet) -> String {
    let missing: Vec<&str> = fleet::Kind::ALL.iter().filter(|k| !fleet.synced.contains(k)).map(|k| k.name()).collect();
    let mut s = String::new();
    if !missing.is_empty() {
        s = format!("listing {}", missing.join(", "));
    }
    for (k, why) in &fleet.failing {
        if !s.is_empty() {
            s.push_str("; ");
        }
        s.push_str(&format!("watching {} failed ({why}), retrying", k.name()));
    }
    s
}

async fn once(mut rx: mpsc::Receiver<Vec<Update>>, opts: &Options, json: bool, wait: Duration) -> anyhow::Result<()> {
    let mut fleet = Fleet::default();
    let deadline = tokio::time::Instant::now() + wait;
    while !fleet.complete() {
        tokio::select! {
            batch = rx.recv() => match batch {
                Some(batch) => batch.into_iter().for_each(|u| fleet.apply(u)),
                None => break,
            },
            _ = tokio::time::sleep_until(deadline) => {
                eprintln!("kerf top: after {}s, still {}; showing what was read", wait.as_secs(), waiting_for(&fleet));
                break;
            }
        }
    }
    let frame = view::frame(&fleet, opts, &CatalogPrices, kerf_cloud::Timestamp::now());
    let out = if json {
        let mut s = serde_json::to_string_pretty(&frame).context("cannot write the frame as JSON")?;
        s.push('\n');
        s
    } else {
        let tty = std::io::stdout().is_terminal();
        let width = if tty {
            crossterm::terminal::size().map(|(w, _)| w as usize).unwrap_or(text::DEFAULT_WIDTH)
        } else {
            std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()).unwrap_or(text::DEFAULT_WIDTH)
        };
        text::render(&frame, &opts.resources, width, tty)
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes()).context("cannot write to stdout")?;
    Ok(())
}

fn key_of(code: KeyCode, modifiers: KeyModifiers) -> Option<Key> {
    Some(match code {
        KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => Key::Interrupt,
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        KeyCode::Home => Key::Home,
        KeyCode::End => Key::End,
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Backspace => Key::Backspace,
        _ => return None,
    })
}

/// Draws the fleet as the viewer looks at it (the selection following its node); the node list's
/// names, in order, for the keys that move the cursor.
pub fn paint<B: ratatui::backend::Backend>(
    terminal: &mut ratatui::Terminal<B>,
    fleet: &Fleet,
    viewer: &mut Viewer,
) -> anyhow::Result<Vec<String>>
where
    B::Error: Send + Sync + 'static,
{
    let at = kerf_cloud::Timestamp::now();
    let mut frame = view::frame(fleet, &viewer.opts, &CatalogPrices, at);
    let before = viewer.opts.selected.clone();
    {
        let list: Vec<&str> = frame.nodes.iter().map(|r| r.name.as_str()).collect();
        viewer.follow(&list);
    }
    if viewer.opts.selected != before {
        frame = view::frame(fleet, &viewer.opts, &CatalogPrices, at);
    }
    let filter = viewer.opts.filter.clone();
    let chrome = draw::Chrome {
        resources: &viewer.opts.resources,
        cursor: viewer.cursor,
        detail: viewer.detail,
        typing: viewer.typing.as_deref(),
        filter: &filter,
        status: waiting_for(fleet),
    };
    let mut page = 0;
    terminal
        .draw(|screen| {
            page = screen.area().height.saturating_sub(12) as usize;
            draw::draw(screen, &frame, &chrome);
        })
        .context("cannot draw")?;
    viewer.page = page.max(1);
    Ok(frame.nodes.into_iter().map(|r| r.name).collect())
}

/// Restores the terminal however the screen ends.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

async fn live(mut rx: mpsc::Receiver<Vec<Update>>, mut viewer: Viewer) -> anyhow::Result<()> {
    let mut terminal = ratatui::try_init().context("cannot set up the terminal")?;
    let _restore = Restore;
    let mut keys = EventStream::new();
    let mut fleet = Fleet::default();
    let mut names: Vec<String> = Vec::new();
    let mut dirty = true;
    let mut now_too = true;
    let mut drawn_at = Instant::now();
    loop {
        if dirty && (now_too || drawn_at.elapsed() >= REDRAW_GAP) {
            names = paint(&mut terminal, &fleet, &mut viewer)?;
            drawn_at = Instant::now();
            dirty = false;
            now_too = false;
        }
        let wait = if dirty { REDRAW_GAP.saturating_sub(drawn_at.elapsed()) } else { Duration::from_secs(3600) };
        tokio::select! {
            batch = rx.recv() => match batch {
                Some(batch) => {
                    batch.into_iter().for_each(|u| fleet.apply(u));
                    // Take whatever else is waiting before drawing.
                    while let Ok(more) = rx.try_recv() {
                        more.into_iter().for_each(|u| fleet.apply(u));
                    }
                    dirty = true;
                }
                None => return Ok(()),
            },
            event = keys.next() => match event {
                Some(Ok(TermEvent::Key(k))) if k.kind != KeyEventKind::Release => {
                    if let Some(key) = key_of(k.code, k.modifiers) {
                        let list: Vec<&str> = names.iter().map(String::as_str).collect();
                        match viewer.key(key, &list) {
                            Outcome::Quit => return Ok(()),
                            Outcome::Changed => { dirty = true; now_too = true; }
                            Outcome::Nothing => {}
                        }
                    }
                }
                Some(Ok(TermEvent::Resize(..))) => { dirty = true; now_too = true; }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(anyhow::Error::new(e).context("reading the terminal")),
                None => return Ok(()),
            },
            _ = tokio::time::sleep(wait), if dirty => {}
        }
    }
}
