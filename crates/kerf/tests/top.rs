//! `kerf top` against `kerf serve` running examples/plan-is-what-runs.yaml's workload (its
//! NodePools, its 40 Deployments at a fiftieth of their replicas so that a debug build serves
//! them in seconds, its DaemonSet), a Deployment no NodePool can run and a CapacityBuffer:
//! `--once` and `--json` agree with `kerf simulate`'s report of the same scenario (nodes, types,
//! zones, capacity types, prices, cost, pending pods and kerf's reasons), and in a real terminal
//! (tmux: send-keys, capture-pane) the screen shows the cluster line, sorts the node list by
//! price, shows a selected node's reason and pods, filters, resizes, and the pending section.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Every Deployment of the plan workload at 1/50 of its replicas (at least one).
fn scaled_workload() -> String {
    let text = std::fs::read_to_string(repo_file("examples/manifests/plan/workload.yaml")).expect("plan workload");
    text.lines()
        .map(|l| match l.trim_start().strip_prefix("replicas: ").and_then(|n| n.trim().parse::<u32>().ok()) {
            Some(n) => format!("{}replicas: {}", &l[..l.len() - l.trim_start().len()], (n / 50).max(1)),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

const EXTRAS: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: too-big
spec:
  replicas: 2
  selector:
    matchLabels: {app: too-big}
  template:
    metadata:
      labels: {app: too-big}
    spec:
      containers:
        - name: app
          image: registry.example.com/app:1
          resources:
            requests: {cpu: "200"}
---
apiVersion: v1
kind: PodTemplate
metadata:
  name: room
  namespace: default
template:
  spec:
    containers:
      - name: chunk
        image: registry.example.com/pause:1
        resources:
          requests: {cpu: "1", memory: 1Gi}
---
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata:
  name: room
  namespace: default
spec:
  podTemplateRef: {name: room}
  replicas: 4
"#;

/// Writes the scenario into `dir`; its path.
fn scenario(dir: &Path) -> PathBuf {
    write(dir, "workload.yaml", &scaled_workload());
    write(dir, "extras.yaml", EXTRAS);
    let pools = repo_file("examples/manifests/scale/nodepools.yaml");
    write(
        dir,
        "top.yaml",
        &format!(
            "name: top\ncloud:\n  region: us-west-2\n  zones: [us-west-2a, us-west-2b, us-west-2c]\nsteps:\n  - apply: {}\n  - apply: workload.yaml\n  - apply: extras.yaml\n  - wait: 2m\n",
            pools.display()
        ),
    )
}

fn report(path: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["simulate", path.to_str().expect("utf-8 path"), "--report", "json"])
        .output()
        .expect("run kerf simulate");
    assert!(out.status.success(), "kerf simulate failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json report")
}

fn top(s: &Served, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kerf"))
        .arg("top")
        .arg("--kubeconfig")
        .arg(&s.kubeconfig)
        .args(args)
        .env("COLUMNS", "220")
        .stdin(Stdio::null())
        .output()
        .expect("run kerf top")
}

fn top_json(s: &Served) -> Value {
    let out = top(s, &["--json"]);
    assert!(out.status.success(), "kerf top --json failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("kerf top --json is JSON")
}

/// A reason apart from its numbers: kerf records a new `DisruptionBlocked` event only when the
/// reason changes in more than its numbers.
fn words(s: &str) -> String {
    s.chars().filter(|c| !c.is_ascii_digit()).collect()
}

/// The served scenario with its steps run and its fleet matching the report's, and the report.
fn settled(test: &str) -> (Served, Value) {
    let dir = std::env::temp_dir().join(format!("kerf-top-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scenario dir");
    let path = scenario(&dir);
    let report = report(&path);
    let s = Served::start(test, &[path.to_str().expect("utf-8 path"), "--speed", "20"]);
    let summary = &report["summary"];
    eventually(180, "the served fleet and kerf's reasons to reach the report's", || {
        let j = top_json(&s);
        let c = &j["cluster"];
        // The counts match a moment before kerf has recorded each node's latest reason (a node
        // still within consolidateAfter says so until its next pass): wait for those too.
        (c["nodes"] == summary["nodes"]
            && c["podsRunning"] == summary["podsRunning"]
            && c["podsPending"] == summary["podsPending"]
            && same_reasons(&j, &report))
        .then_some(())
    });
    (s, report)
}

/// Whether every node both show with a reason has the report's reason (apart from numbers).
fn same_reasons(top: &Value, report: &Value) -> bool {
    let shown = |name: &str| top["nodes"].as_array().and_then(|ns| ns.iter().find(|n| n["name"] == name));
    report["nodes"].as_array().is_some_and(|nodes| {
        nodes.iter().all(|r| {
            let why = r["disruptionBlocked"].as_str();
            let reason = r["name"].as_str().and_then(shown).and_then(|n| n["reason"].as_str());
            match (why, reason) {
                (Some(why), Some(reason)) => words(why) == words(reason),
                _ => true,
            }
        })
    })
}

#[test]
fn once_and_json_show_the_nodes_types_prices_cost_and_pending_pods_of_the_report() {
    let (s, report) = settled("once");
    let j = top_json(&s);
    let summary = &report["summary"];
    let c = &j["cluster"];
    let cost = summary["costPerHour"].as_f64().expect("report cost");
    assert!((c["costPerHour"].as_f64().expect("cost") - cost).abs() < 1e-6, "{c} vs {summary}");
    assert_eq!(c["podsPending"], 2, "the two too-big pods");

    let shown: BTreeMap<&str, &Value> =
        j["nodes"].as_array().expect("nodes").iter().map(|n| (n["name"].as_str().expect("name"), n)).collect();
    let reported = report["nodes"].as_array().expect("report nodes");
    assert_eq!(shown.len(), reported.len());
    let mut same_reason = 0;
    for r in reported {
        let name = r["name"].as_str().expect("name");
        let n = shown.get(name).unwrap_or_else(|| panic!("node {name} of the report not shown"));
        for (mine, theirs) in [
            ("nodePool", "nodePool"),
            ("instanceType", "instanceType"),
            ("zone", "zone"),
            ("capacityType", "capacityType"),
        ] {
            assert_eq!(n[mine], r[theirs], "{name}: {mine}");
        }
        let (p, q) = (n["pricePerHour"].as_f64().expect("priced"), r["pricePerHour"].as_f64().expect("report price"));
        assert!((p - q).abs() < 1e-9, "{name}: catalog price {p}, the run's {q}");
        assert_eq!(n["state"], "Ready");
        if let (Some(why), Some(reason)) = (r["disruptionBlocked"].as_str(), n["reason"].as_str()) {
            assert_eq!(words(reason), words(why), "{name}");
            same_reason += 1;
        }
    }
    assert!(same_reason * 2 > reported.len(), "most nodes show why kerf keeps them: {same_reason}");

    let pending = j["pending"].as_array().expect("pending");
    assert_eq!(pending.len(), 1, "{pending:?}");
    let why = report["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .find(|p| p["phase"] != "Running")
        .and_then(|p| p["reason"].as_str())
        .expect("the report's pending reason");
    assert_eq!((pending[0]["owner"].as_str(), pending[0]["pods"].as_u64()), (Some("Deployment too-big"), Some(2)));
    // kerf's reason, as the run's report gives it (the count of nodes in it may have moved on).
    assert_eq!(pending[0]["reason"].as_str().map(words), Some(words(why)));
    let buffers = j["buffers"].as_array().expect("buffers");
    assert_eq!((buffers.len(), buffers[0]["chunks"].as_i64()), (1, report["buffers"][0]["replicas"].as_i64()));

    let once = top(&s, &["--once", "--sort", "price"]);
    assert!(once.status.success(), "{}", String::from_utf8_lossy(&once.stderr));
    let text = String::from_utf8(once.stdout).expect("utf-8");
    assert!(!text.contains('\x1b'), "no colour when stdout is not a terminal");
    let first = text.lines().next().expect("the cluster line");
    for part in [
        format!("{} nodes", reported.len()),
        format!("${cost:.4}/hour"),
        format!("pods: {} running, 2 pending", summary["podsRunning"]),
    ] {
        assert!(first.contains(&part), "{part:?} not in {first:?}");
    }
    let rows: Vec<&str> = text.lines().filter(|l| l.contains(".compute.internal")).collect();
    assert_eq!(rows.len(), reported.len());
    let prices: Vec<f64> =
        rows.iter().map(|l| l.split_whitespace().nth(5).and_then(|p| p.parse().ok()).expect("price column")).collect();
    assert!(prices.windows(2).all(|w| w[0] >= w[1]), "sorted by price: {prices:?}");
    for r in reported {
        let row = rows.iter().find(|l| l.starts_with(r["name"].as_str().expect("name"))).expect("row");
        assert!(row.contains(r["instanceType"].as_str().expect("type")), "{row}");
        assert!(row.contains(&format!("{:.4}", r["pricePerHour"].as_f64().expect("price"))), "{row}");
    }
    assert!(text.contains("PENDING PODS (2, by owner)") && text.contains("default/Deployment too-big: "), "{text}");
    assert!(text.contains("CAPACITY BUFFERS") && text.contains("default/room: 4 wanted"), "{text}");
    assert!(s.stop().success());
}

#[test]
fn a_bad_sort_or_selector_and_a_screen_without_a_terminal_are_bad_input_naming_the_flag() {
    let run = |args: &[&str]| {
        let out =
            Command::new(env!("CARGO_BIN_EXE_kerf")).arg("top").args(args).stdin(Stdio::null()).output().expect("run");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run(&["--once", "--sort", "cheapest!"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--sort: \"cheapest!\" is not a sort field"), "{err}");
    let (code, err) = run(&["--json", "--node-selector", "a in (b"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--node-selector: "), "{err}");
    let (code, err) = run(&[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("stdout is not a terminal: use --once (text) or --json"), "{err}");
}

/// tmux on a server of the test's own, killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(command: &str) -> Tmux {
        let found = Command::new("tmux").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status();
        assert!(
            found.is_ok_and(|s| s.success()),
            "tmux is not installed (or not on PATH): this test drives `kerf top` in a real terminal through tmux; install it (apt-get install tmux; .ci/run does)"
        );
        let t = Tmux { socket: format!("kerf-top-{}", std::process::id()) };
        let ok = t.cmd(&["new-session", "-d", "-s", "top", "-x", "200", "-y", "50", command]);
        assert!(ok.status.success(), "tmux new-session: {}", String::from_utf8_lossy(&ok.stderr));
        t
    }

    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux").args(["-L", &self.socket]).args(args).output().expect("run tmux")
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend(keys);
        assert!(self.cmd(&args).status.success(), "tmux send-keys {keys:?}");
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    /// The screen once `check` accepts it and it holds still, or a panic showing it.
    ///
    /// A capture can land while a frame is half written (the header already
    /// says "sorted by price", the rows below are still the old order), so a
    /// screen counts only when a second capture a moment later is the same.
    fn until(&self, secs: u64, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let screen = self.screen();
            if check(&screen) {
                std::thread::sleep(Duration::from_millis(150));
                if self.screen() == screen {
                    return screen;
                }
            }
            assert!(Instant::now() < deadline, "timed out after {secs}s waiting for {what}; the screen:\n{screen}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

/// The node rows on screen: (selected, name, price).
fn node_rows(screen: &str) -> Vec<(bool, String, f64)> {
    screen
        .lines()
        .filter_map(|l| {
            let selected = l.starts_with("> ");
            let t: Vec<&str> = l.trim_start_matches("> ").split_whitespace().collect();
            let at = t.iter().position(|w| w.ends_with(".compute.internal"))?;
            Some((selected, t[at].to_string(), t.get(at + 5)?.parse().ok()?))
        })
        .collect()
}

#[test]
fn in_a_terminal_top_shows_the_fleet_sorts_selects_a_node_filters_and_quits() {
    let (s, report) = settled("tmux");
    let nodes = report["nodes"].as_array().expect("report nodes");
    let command = format!("{} top --kubeconfig {}", env!("CARGO_BIN_EXE_kerf"), s.kubeconfig.display());
    let started = Instant::now();
    let t = Tmux::start(&command);
    let running = report["summary"]["podsRunning"].as_u64().expect("running");
    let line = format!("{} nodes", nodes.len());
    let screen = t.until(20, "the cluster line", |s| {
        s.contains(&line) && s.contains(&format!("pods: {running} running, 2 pending"))
    });
    let shown_after = started.elapsed();
    eprintln!("kerf top showed the fleet {:.2}s after it started", shown_after.as_secs_f64());
    assert!(shown_after < Duration::from_secs(5), "the fleet took {shown_after:?} to show");
    assert!(screen.lines().next().is_some_and(|l| l.starts_with("kerf top")), "{screen}");
    assert!(screen.contains("pending pods: 2, by owner") && screen.contains("default/Deployment too-big"), "{screen}");
    assert!(screen.contains("capacity buffers:") && screen.contains("default/room: 4 wanted"), "{screen}");

    // `s` cycles name, nodepool, type, zone, capacity, price.
    for _ in 0..5 {
        t.keys(&["s"]);
    }
    let screen = t.until(10, "the list sorted by price", |s| s.contains("sorted by price"));
    let rows = node_rows(&screen);
    assert!(rows.len() >= 10, "a screenful of nodes: {screen}");
    assert!(rows.windows(2).all(|w| w[0].2 >= w[1].2), "sorted by price, dearest first:\n{screen}");
    let dearest = nodes.iter().filter_map(|n| n["pricePerHour"].as_f64()).fold(0.0, f64::max);
    assert!((rows[0].2 - (dearest * 1e4).round() / 1e4).abs() < 1e-9, "{} vs {dearest}", rows[0].2);

    // The second node, opened: its reason and its pods.
    t.keys(&["Home", "Down", "Enter"]);
    let screen = t.until(10, "the selected node's pane", |s| s.contains("(esc closes)"));
    let now = node_rows(&screen);
    let selected: Vec<&(bool, String, f64)> = now.iter().filter(|r| r.0).collect();
    assert_eq!(selected.len(), 1, "one selected row:\n{screen}");
    let name = &selected[0].1;
    assert_eq!(Some(name), rows.get(1).map(|r| &r.1), "the second row by price:\n{screen}");
    assert!(screen.contains(&format!("node {name} (esc closes)")), "{screen}");
    let node = nodes.iter().find(|n| n["name"] == name.as_str()).expect("the node in the report");
    let kept = screen
        .lines()
        .find_map(|l| l.trim().strip_prefix("kept: "))
        .unwrap_or_else(|| panic!("no reason shown:\n{screen}"));
    let why = node["disruptionBlocked"].as_str().expect("the report's reason");
    // The pane may cut the line at the screen's width.
    assert!(words(why).starts_with(words(kept).trim_end()), "shown {kept:?}, the report {why:?}");
    assert!(screen.contains(&format!("{} pods:", node["pods"])), "{screen}");

    // A filter narrows the list to the batch pool.
    let batch = nodes.iter().filter(|n| n["nodePool"] == "batch").count();
    t.keys(&["Escape", "/"]);
    t.keys(&["-l", "batch"]);
    t.keys(&["Enter"]);
    let screen = t.until(10, "the filtered list", |s| s.contains(&format!("nodes: {batch} shown")));
    assert_eq!(node_rows(&screen).len(), batch, "{screen}");

    // Resized, the screen is drawn again to the new size: the keys on its last row.
    let resized = t.cmd(&["resize-window", "-t", "top", "-x", "120", "-y", "30"]);
    assert!(resized.status.success(), "tmux resize-window: {}", String::from_utf8_lossy(&resized.stderr));
    let screen = t.until(10, "the screen redrawn at 120x30", |s| {
        let lines: Vec<&str> = s.lines().collect();
        lines.len() == 30 && lines[29].starts_with("q quit") && lines.iter().all(|l| l.chars().count() <= 120)
    });
    assert!(screen.starts_with("kerf top"), "{screen}");

    t.keys(&["q"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while t.cmd(&["has-session", "-t", "top"]).status.success() {
        assert!(Instant::now() < deadline, "kerf top did not quit on q:\n{}", t.screen());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(s.stop().success());
}
