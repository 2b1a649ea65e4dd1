//! A [`Frame`] as text: the cells of its tables (shared with the terminal drawing, so both show
//! the same words and numbers) and the whole frame as plain lines for `kerf top --once`, with
//! ANSI colour on the states only when asked (stdout a terminal).

use std::fmt::Write as _;

use super::view::{BufferRow, ClusterLine, Frame, NodeRow, PendingGroup, PoolRow, State, Use};

/// Columns a `--once` frame fills when stdout is not a terminal.
pub const DEFAULT_WIDTH: usize = 160;

/// Characters of a bar's inside.
pub const BAR: usize = 10;

/// An amount of a resource, in the unit people read it in: cores, GiB, a count.
pub fn amount(resource: &str, v: f64) -> String {
    match resource {
        "memory" | "ephemeral-storage" => format!("{:.1}Gi", v / 1024f64.powi(3)),
        "cpu" => {
            if v >= 100.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        }
        _ if v.fract() == 0.0 => format!("{v:.0}"),
        _ => format!("{v:.1}"),
    }
}

/// `[#####.....]` for a share of 0..=1 (full beyond).
pub fn bar(fraction: f64, width: usize) -> String {
    let filled = ((fraction.clamp(0.0, 1.0) * width as f64).round() as usize).min(width);
    format!("[{}{}]", "#".repeat(filled), ".".repeat(width - filled))
}

fn percent(f: f64) -> String {
    format!("{:>3.0}%", (f * 100.0).round())
}

/// A node's use of one resource: a bar and the share, or `-` without allocatable.
pub fn use_cell(u: &Use) -> String {
    match u.fraction() {
        Some(f) => format!("{} {}", bar(f, BAR), percent(f)),
        None => "-".to_string(),
    }
}

/// A pool's use against its limit: `used/limit`, with the share when limited.
pub fn limit_cell(u: &Use) -> String {
    match (u.of, u.fraction()) {
        (Some(of), Some(f)) => {
            format!("{}/{} {}", amount(&u.resource, u.used), amount(&u.resource, of), percent(f).trim())
        }
        _ => format!("{} (no limit)", amount(&u.resource, u.used)),
    }
}

pub fn price(p: Option<f64>) -> String {
    p.map_or_else(|| "-".to_string(), |p| format!("{p:.4}"))
}

/// Marks a price a NodeOverlay set (as the HTML report does).
pub const OVERLAY_MARK: &str = "°";

/// A node's price, marked when a NodeOverlay set it.
pub fn node_price(r: &NodeRow) -> String {
    let mark = if r.node_overlay.is_some() { OVERLAY_MARK } else { "" };
    format!("{}{mark}", price(r.price_per_hour))
}

/// What a node's price is: the catalog's, or a NodeOverlay's with the list price.
pub fn price_detail(r: &NodeRow) -> String {
    match (r.price_per_hour, &r.node_overlay, r.list_price_per_hour) {
        (None, _, _) => "price: not in kerf's catalog".to_string(),
        (Some(p), Some(o), Some(list)) => {
            format!("price: ${p:.4}/hour, set by NodeOverlay {o} (list price ${list:.4}/hour)")
        }
        (Some(p), _, _) => format!("price: ${p:.4}/hour, the catalog's list price"),
    }
}

pub fn age(seconds: Option<i64>) -> String {
    let Some(s) = seconds else { return "-".to_string() };
    match s {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn capacity(c: Option<&str>) -> String {
    match c {
        Some("on-demand") => "od".to_string(),
        Some(c) => c.to_string(),
        None => "-".to_string(),
    }
}

fn or_dash(s: Option<&String>) -> String {
    s.cloned().unwrap_or_else(|| "-".to_string())
}

/// The cluster line's first row: nodes, cost, pods.
pub fn cluster_summary(c: &ClusterLine) -> String {
    let mut s = format!("{} nodes", c.nodes);
    if c.launching > 0 {
        let _ = write!(s, " ({} launching)", c.launching);
    }
    let _ = write!(s, "  ${:.4}/hour  ${:.2}/month", c.cost_per_hour, c.cost_per_month);
    if c.unpriced > 0 {
        let _ = write!(s, " ({} not priced)", c.unpriced);
    }
    if c.overlay_priced > 0 {
        let _ = write!(s, " ({} at NodeOverlay prices, marked {OVERLAY_MARK})", c.overlay_priced);
    }
    let _ = write!(
        s,
        "  pods: {} running, {} pending, {} bound not started",
        c.pods_running, c.pods_pending, c.pods_bound_not_started
    );
    s
}

/// One cluster resource: `cpu  [####......]  41%  123.5 of 300.0`.
pub fn cluster_resource(u: &Use) -> String {
    let name = format!("{:<8}", u.resource);
    match (u.of, u.fraction()) {
        (Some(of), Some(f)) => format!(
            "{name}{} {}  {} of {} requested",
            bar(f, 30),
            percent(f),
            amount(&u.resource, u.used),
            amount(&u.resource, of)
        ),
        _ => format!("{name}{} requested, none allocatable", amount(&u.resource, u.used)),
    }
}

pub fn pool_header(resources: &[String]) -> Vec<String> {
    let mut h = vec!["NODEPOOL".to_string(), "NODES".to_string()];
    h.extend(resources.iter().map(|r| format!("{} (OF LIMIT)", r.to_uppercase())));
    h.extend(["$/HOUR", "DISRUPTING", "ALLOWED NOW", "REVERSED (1H)"].map(String::from));
    h
}

pub fn pool_cells(p: &PoolRow, resources: usize) -> Vec<String> {
    let mut c = vec![p.name.clone(), p.nodes.to_string()];
    // Pools list the viewer's resources first, then their other limits: only the shared columns.
    c.extend(p.limits.iter().take(resources).map(limit_cell));
    while c.len() < 2 + resources {
        c.push("-".to_string());
    }
    c.push(format!("{:.4}", p.cost_per_hour));
    c.push(p.disrupting.to_string());
    c.push(p.allowed_disruptions.map_or_else(|| "-".to_string(), |a| a.to_string()));
    c.push(p.reversals.to_string());
    c
}

pub fn node_header(resources: &[String]) -> Vec<String> {
    let mut h: Vec<String> = ["NODE", "NODEPOOL", "TYPE", "ZONE", "CAP", "$/HOUR"].map(String::from).to_vec();
    h.extend(resources.iter().map(|r| r.to_uppercase()));
    h.extend(["PODS", "AGE", "STATE"].map(String::from));
    h
}

pub fn node_cells(r: &NodeRow) -> Vec<String> {
    let mut c = vec![
        r.name.clone(),
        or_dash(r.node_pool.as_ref()),
        or_dash(r.instance_type.as_ref()),
        or_dash(r.zone.as_ref()),
        capacity(r.capacity_type.as_deref()),
        node_price(r),
    ];
    c.extend(r.resources.iter().map(use_cell));
    c.extend([r.pods.to_string(), age(r.age_seconds), r.state.as_str().to_string()]);
    c
}

pub fn pending_line(g: &PendingGroup) -> String {
    format!("{:>5}  {}/{}: {}", g.pods, g.namespace, g.owner, g.reason)
}

pub fn buffer_line(b: &BufferRow) -> String {
    let mut s = format!(
        "{}/{}: {} wanted, {} chunks",
        b.namespace,
        b.name,
        b.wanted,
        b.chunks.map_or_else(|| "-".to_string(), |c| c.to_string())
    );
    match b.provisioning.as_deref() {
        Some("True") => s.push_str(", all room in place"),
        Some(m) => {
            let _ = write!(s, ", {m}");
        }
        None => s.push_str(", not provisioned yet"),
    }
    if let Some(d) = &b.detail {
        let _ = write!(s, " ({d})");
    }
    s
}

/// Whether a column holds numbers (right-aligned).
fn numeric(header: &str) -> bool {
    matches!(header, "NODES" | "$/HOUR" | "PODS" | "AGE" | "DISRUPTING" | "ALLOWED NOW" | "REVERSED (1H)")
}

/// Lays `rows` out under `header` in columns two spaces apart, each line cut at `width`.
fn table(out: &mut String, header: &[String], rows: &[Vec<String>], width: usize) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            let pad = w.saturating_sub(c.chars().count());
            let last = i + 1 == cells.len();
            if numeric(&header[i]) {
                l.push_str(&" ".repeat(pad));
                l.push_str(c);
            } else {
                l.push_str(c);
                if !last {
                    l.push_str(&" ".repeat(pad));
                }
            }
        }
        cut(l.trim_end(), width)
    };
    let _ = writeln!(out, "{}", line(header));
    for r in rows {
        let _ = writeln!(out, "{}", line(r));
    }
}

/// `s` cut to `width` characters.
pub fn cut(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_string()
    } else {
        s.chars().take(width.saturating_sub(1)).chain(std::iter::once('~')).collect()
    }
}

fn coloured(state: State, text: &str) -> String {
    let code = match state {
        State::Ready => "32",
        State::NotReady => "31",
        State::Cordoned | State::Disrupting | State::Deleting => "33",
        State::Launching => "36",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// The whole frame as text `width` columns wide; `colour` adds ANSI colours to node states.
pub fn render(frame: &Frame, resources: &[String], width: usize, colour: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", cut(&format!("kerf top  {}", cluster_summary(&frame.cluster)), width));
    for u in &frame.cluster.resources {
        let _ = writeln!(out, "{}", cut(&cluster_resource(u), width));
    }
    for (kind, why) in &frame.absent {
        let _ = writeln!(out, "{}", cut(&format!("(no {kind}: {why})"), width));
    }
    out.push('\n');
    if !frame.node_pools.is_empty() {
        let rows: Vec<Vec<String>> = frame.node_pools.iter().map(|p| pool_cells(p, resources.len())).collect();
        table(&mut out, &pool_header(resources), &rows, width);
        out.push('\n');
    }
    let mut header = node_header(resources);
    header.push("REASON".to_string());
    let rows: Vec<Vec<String>> = frame
        .nodes
        .iter()
        .map(|r| {
            let mut c = node_cells(r);
            c.push(r.reason.clone().unwrap_or_default());
            c
        })
        .collect();
    let _ = writeln!(out, "NODES (sorted by {})", frame.sort);
    let mut body = String::new();
    table(&mut body, &header, &rows, width);
    if colour {
        // States are the words after the AGE column: colour each row's by its row.
        for (i, line) in body.lines().enumerate() {
            match i.checked_sub(1).and_then(|r| frame.nodes.get(r)) {
                Some(r) => {
                    let s = r.state.as_str();
                    let at = line.rfind(&format!("  {s}")).map(|p| p + 2);
                    match at {
                        Some(p) => {
                            let _ = writeln!(out, "{}{}{}", &line[..p], coloured(r.state, s), &line[p + s.len()..]);
                        }
                        None => {
                            let _ = writeln!(out, "{line}");
                        }
                    }
                }
                None => {
                    let _ = writeln!(out, "{line}");
                }
            }
        }
    } else {
        out.push_str(&body);
    }
    let reversed: Vec<&NodeRow> = frame.nodes.iter().filter(|r| r.reversal.is_some()).collect();
    if !reversed.is_empty() {
        out.push('\n');
        let _ = writeln!(out, "HELD AFTER A CONSOLIDATION WAS UNDONE ({})", reversed.len());
        for r in reversed {
            let _ = writeln!(out, "{}", cut(&format!("  {}: {}", r.name, r.reversal.as_deref().unwrap_or("")), width));
        }
    }
    out.push('\n');
    let pending: usize = frame.pending.iter().map(|g| g.pods).sum();
    let _ = writeln!(out, "PENDING PODS ({pending}, by owner)");
    if frame.pending.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for g in &frame.pending {
        let _ = writeln!(out, "{}", cut(&pending_line(g), width));
    }
    if !frame.buffers.is_empty() {
        out.push('\n');
        let _ = writeln!(out, "CAPACITY BUFFERS");
        for b in &frame.buffers {
            let _ = writeln!(out, "{}", cut(&format!("  {}", buffer_line(b)), width));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_read_in_cores_gibibytes_and_counts() {
        assert_eq!(amount("cpu", 3.92), "3.9");
        assert_eq!(amount("cpu", 1234.0), "1234");
        assert_eq!(amount("memory", 8.0 * 1024f64.powi(3)), "8.0Gi");
        assert_eq!(amount("pods", 110.0), "110");
        assert_eq!(bar(0.42, 10), "[####......]");
        assert_eq!(bar(1.7, 4), "[####]");
        assert_eq!(age(Some(7200)), "2h");
        assert_eq!(cut("abcdef", 4), "abc~");
    }

    #[test]
    fn a_frame_reads_as_the_cluster_line_pools_nodes_and_pending_and_only_states_are_coloured() {
        use crate::top::fleet::{Fleet, Item, NodeFacts, Update};
        use crate::top::view::{CatalogPrices, Options, frame};
        let mut fleet = Fleet::default();
        let labels = [
            ("node.kubernetes.io/instance-type", "m5.large"),
            ("topology.kubernetes.io/zone", "us-west-2a"),
            ("karpenter.sh/capacity-type", "on-demand"),
        ];
        fleet.apply(Update::apply(Item::Node(NodeFacts {
            name: "n1".into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            created: None,
            ready: Some(true),
            unschedulable: false,
            disrupted: false,
            deleting: false,
            allocatable: kerf_api::ResourceList::new().with("cpu", kerf_api::Quantity::from_milli(1930)),
            provider_id: None,
        })));
        let resources = ["cpu".to_string()];
        let opts = Options { resources: resources.to_vec(), ..Options::default() };
        let f = frame(&fleet, &opts, &CatalogPrices, kerf_cloud::Timestamp::UNIX_EPOCH);
        let plain = render(&f, &resources, 120, false);
        let lines: Vec<&str> = plain.lines().collect();
        assert!(lines[0].starts_with("kerf top  1 nodes  $0.1020/hour  $74.46/month  pods: 0 running"), "{plain}");
        assert!(lines[1].starts_with("cpu     [..............................]   0%  0.0 of 1.9 requested"), "{plain}");
        assert!(
            plain.contains("n1    -         m5.large  us-west-2a  od   0.1020  [..........]   0%     0    -  Ready"),
            "{plain}"
        );
        assert!(plain.contains("PENDING PODS (0, by owner)\n  none"), "{plain}");
        assert!(!plain.contains('\x1b'));
        let coloured = render(&f, &resources, 120, true);
        assert_eq!(coloured.matches("\x1b[32mReady\x1b[0m").count(), 1, "{coloured}");
        assert_eq!(coloured.replace("\x1b[32m", "").replace("\x1b[0m", ""), plain);
    }

    #[test]
    fn a_table_right_aligns_numbers_and_cuts_lines_at_the_width() {
        let mut out = String::new();
        let header = ["NODE", "PODS", "STATE"].map(String::from);
        table(&mut out, &header, &[["a-long-name", "7", "Ready"].map(String::from).to_vec()], 80);
        assert_eq!(out, "NODE         PODS  STATE\na-long-name     7  Ready\n");
        let mut narrow = String::new();
        table(&mut narrow, &header, &[], 8);
        assert_eq!(narrow, "NODE  P~\n");
    }
}
