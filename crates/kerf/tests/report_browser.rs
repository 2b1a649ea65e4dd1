//! The HTML report rendered by a real headless browser (Debian's `chromium`): what an operator
//! sees after the page's script ran. Fails when no browser is installed, unless
//! KERF_SKIP_BROWSER=1 says to skip it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn browser() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KERF_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).flat_map(|d| ["chromium", "chromium-browser"].map(|n| d.join(n))).find(|p| p.is_file())
}

struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// The DOM of `file` (with `#fragment`) after its scripts ran.
fn dump_dom(chromium: &Path, file: &Path, fragment: &str, tmp: &Path) -> String {
    let profile = tmp.join(format!("profile-{}", fragment.replace(['=', '-'], "_")));
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}#{fragment}", file.display()))
        .output()
        .expect("run chromium");
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn simulate(scenario: &Path, report: &str, out: &Path) {
    let status = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .arg("simulate")
        .arg(scenario)
        .args(["--report", report, "--out"])
        .arg(out)
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
}

/// Text of the first cell of each row of the table with `id`, in DOM order.
fn first_cells(dom: &str, id: &str) -> Vec<String> {
    let start = dom.find(&format!("<table id=\"{id}\"")).unwrap_or_else(|| panic!("table {id}"));
    let table = &dom[start..start + dom[start..].find("</table>").unwrap()];
    let body = &table[table.find("<tbody>").unwrap()..];
    body.split("<tr>")
        .skip(1)
        .map(|row| {
            let cell = &row[row.find('>').unwrap() + 1..];
            cell[..cell.find("</td>").unwrap()].to_string()
        })
        .collect()
}

fn text_of(dom: &str, id: &str) -> String {
    let marker = format!("id=\"{id}\">");
    let at = dom.find(&marker).unwrap_or_else(|| panic!("#{id}")) + marker.len();
    dom[at..at + dom[at..].find('<').unwrap()].to_string()
}

/// Digit runs compare as numbers: `ip-10-0-0-4` < `ip-10-0-0-11`.
fn natural_key(s: &str) -> Vec<(u8, u64, String)> {
    let mut out = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            out.push((0, rest[..digits].parse().unwrap_or(u64::MAX), String::new()));
            rest = &rest[digits..];
        } else {
            let n = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
            out.push((1, 0, rest[..n].to_lowercase()));
            rest = &rest[n..];
        }
    }
    out
}

/// The browser, or `None` (the test skipped) when there is none and KERF_SKIP_BROWSER=1.
fn browser_or_skip() -> Option<PathBuf> {
    let Some(chromium) = browser() else {
        if std::env::var("KERF_SKIP_BROWSER").as_deref() == Ok("1") {
            eprintln!("skipped: no chromium and KERF_SKIP_BROWSER=1");
            return None;
        }
        panic!("chromium is not installed (apt-get install -y chromium), or set KERF_SKIP_BROWSER=1 to skip");
    };
    Some(chromium)
}

#[test]
fn html_report_in_chromium_sorts_nodes_naturally_and_shows_the_summary_and_pending_reasons() {
    let Some(chromium) = browser_or_skip() else { return };
    let tmp = Tmp(std::env::temp_dir().join(format!("kerf-browser-{}", std::process::id())));
    std::fs::create_dir_all(&tmp.0).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));

    // Ten nodes whose names sort differently as text and naturally.
    let scenario = root.join("tests/fixtures/convert/provisioner-consolidation-v1alpha5-scenario.yaml");
    let html = tmp.0.join("spread.html");
    let json = tmp.0.join("spread.json");
    simulate(&scenario, "html", &html);
    simulate(&scenario, "json", &json);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();

    let dom = dump_dom(&chromium, &html, "sort=name", &tmp.0);
    let shown = first_cells(&dom, "nodes");
    let mut names: Vec<String> =
        report["nodes"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(shown.len(), names.len());
    let mut textual = names.clone();
    textual.sort();
    names.sort_by_key(|n| natural_key(n));
    assert_ne!(textual, names, "the fixture must tell natural from text order");
    assert_eq!(shown, names, "nodes sorted naturally by name after the scripted sort");
    assert!(dom.contains("data-col=\"name\" aria-sort=\"ascending\""), "the sorted header is marked");

    let dom = dump_dom(&chromium, &html, "sort=-name", &tmp.0);
    names.reverse();
    assert_eq!(first_cells(&dom, "nodes"), names, "descending");

    let s = &report["summary"];
    assert_eq!(text_of(&dom, "summary-nodes"), s["nodes"].to_string());
    assert_eq!(text_of(&dom, "summary-pods"), s["pods"].to_string());
    assert_eq!(text_of(&dom, "summary-running"), s["podsRunning"].to_string());
    assert_eq!(text_of(&dom, "summary-pending"), s["podsPending"].to_string());
    assert_eq!(text_of(&dom, "summary-cost-per-hour"), format!("{:.4}", s["costPerHour"].as_f64().unwrap()));
    // Capacity by zone adds up to every node.
    let zones = first_cells(&dom, "by-zone");
    assert_eq!(zones.len(), 3, "{zones:?}");
    assert!(dom.contains("id=\"chart-nodes\"") && dom.contains("class=\"xtick\""), "charts with time ticks");
    assert!(dom.contains("No node was disrupted."));

    // Pending pods grouped by their reason.
    let pod_eni = root.join("../../examples/pod-eni.yaml");
    let html = tmp.0.join("pod-eni.html");
    let json = tmp.0.join("pod-eni.json");
    simulate(&pod_eni, "html", &html);
    simulate(&pod_eni, "json", &json);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let pending = report["summary"]["podsPending"].as_u64().unwrap();
    assert!(pending > 0, "the example leaves pods pending");
    let dom = dump_dom(&chromium, &html, "", &tmp.0);
    let counts: u64 = first_cells(&dom, "pending").iter().map(|c| c.parse::<u64>().unwrap()).sum();
    assert_eq!(counts, pending, "every pending pod is counted under one reason");
    assert!(dom.contains("vpc.amazonaws.com/pod-eni"), "the reason names the missing resource");
}

#[test]
fn html_report_in_chromium_charts_each_quotas_use_over_the_run() {
    let Some(chromium) = browser_or_skip() else { return };
    let tmp = Tmp(std::env::temp_dir().join(format!("kerf-browser-quota-{}", std::process::id())));
    std::fs::create_dir_all(&tmp.0).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let quota = root.join("../../examples/capacity-quota.yaml");
    let html = tmp.0.join("quota.html");
    let json = tmp.0.join("quota.json");
    simulate(&quota, "html", &html);
    simulate(&quota, "json", &json);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let dom = dump_dom(&chromium, &html, "", &tmp.0);
    assert_eq!(first_cells(&dom, "capacity-quotas"), ["batch-cpu"]);
    let start = dom.find("<figure id=\"chart-quota-batch-cpu\">").expect("the quota's chart");
    let figure = &dom[start..start + dom[start..].find("</figure>").unwrap()];
    assert!(figure.contains("CapacityQuota batch-cpu: % of limit used"), "{figure}");
    let path = figure.split("<path d=\"").nth(1).expect("a line for cpu");
    let path = &path[..path.find('"').unwrap()];
    // One vertical move per entry after the first: the chart draws the report's timeline.
    let entries = report["quotas"][0]["timeline"].as_array().unwrap().len();
    assert!(entries >= 2, "{}", report["quotas"]);
    assert_eq!(path.matches(" V").count(), entries - 1, "{path}");
    assert!(figure.contains(">100</text>"), "the value axis reaches the limit: {figure}");
}
