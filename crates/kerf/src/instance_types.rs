//! `kerf instance-types`: the built-in AWS catalog's instance types with capacity, allocatable,
//! offerings and prices; with `--overlays FILE`, priced and extended as those NodeOverlays say
//! (seen from no NodePool: docs/design.md, "NodeOverlay").

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use kerf_api::manifest::{self, KarpenterObject};
use kerf_api::overlay::{NodeOverlays, Verdict};
use kerf_api::{NodeOverlay, Offering};
use kerf_cloud::aws::{Catalog, CatalogError, NodeClassSettings, catalog};
use kerf_scheduling::InstanceType;

use crate::BadInput;

#[derive(clap::Args)]
pub struct Args {
    /// AWS region whose offerings and prices to show.
    #[arg(long, default_value = "us-west-2")]
    pub region: String,
    /// Print a JSON array for tools instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Only these instance types (default: every type sold in the region).
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
    /// NodeOverlays (a YAML file of NodeOverlay documents) to price and extend the types with.
    #[arg(long, value_name = "FILE")]
    pub overlays: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let listed = select(&args)?;
    let overlays = match &args.overlays {
        Some(file) => read_overlays(file)?,
        None => NodeOverlays::default(),
    };
    for (name, verdict) in overlays.verdicts() {
        if let Verdict::Conflict { .. } = verdict {
            eprintln!("NodeOverlay/{name}: not applied: {}", verdict.condition().2);
        }
    }
    let types: Vec<Overlaid> = listed.into_iter().map(|t| Overlaid::new(t, &overlays)).collect();
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = serde_json::Value::Array(types.iter().map(to_json).collect());
        let text = serde_json::to_string_pretty(&doc).context("encoding instance types as JSON")?;
        writeln!(out, "{text}").context("writing to stdout")?;
    } else {
        out.write_all(table(&types, &args.region, args.overlays.is_some()).as_bytes()).context("writing to stdout")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The NodeOverlays of `file`: every document must be a valid NodeOverlay (bad input names the
/// file, the object, the field and the problem).
fn read_overlays(file: &std::path::Path) -> anyhow::Result<NodeOverlays> {
    let name = file.display();
    let text = std::fs::read_to_string(file)
        .map_err(|e| anyhow::Error::new(BadInput(format!("--overlays {name}: cannot read: {e}"))))?;
    let mut overlays: Vec<NodeOverlay> = Vec::new();
    let mut problems = Vec::new();
    for document in manifest::yaml_documents(&text) {
        let value = match document {
            Ok(v) => v,
            Err(e) => {
                problems.push(format!("{name}: {e}"));
                continue;
            }
        };
        match manifest::decode_karpenter(&value) {
            Ok(Some(KarpenterObject::NodeOverlay(o))) => overlays.push(o),
            Ok(other) => {
                let what = other.map_or_else(
                    || manifest::document_kind(&value).unwrap_or("a document without kind").to_string(),
                    |o| format!("{}/{}", o.kind(), o.name()),
                );
                problems.push(format!("{name}: {what}: not a NodeOverlay (karpenter.sh/v1alpha1)"));
            }
            Err(ps) => problems.extend(ps.iter().map(|p| format!("{name}: {p}"))),
        }
    }
    if !problems.is_empty() {
        return Err(anyhow::Error::new(BadInput(problems.join("\n"))));
    }
    Ok(NodeOverlays::new(&overlays))
}

/// A catalog type with the overlays applied, and what they changed.
struct Overlaid {
    /// As overlays change it (the listed type when none applies).
    t: Arc<InstanceType>,
    /// Per offering, in order: the listed price and the overlay that set the price, if one did.
    listed: Vec<(f64, Option<String>)>,
    /// Every overlay that applies to one of its offerings, in precedence order.
    overlays: Vec<String>,
}

impl Overlaid {
    fn new(listed: InstanceType, overlays: &NodeOverlays) -> Overlaid {
        let listed = Arc::new(listed);
        let context = BTreeMap::new();
        let prices = listed
            .offerings
            .iter()
            .map(|o| {
                let p = overlays.offering_price(&listed, o, &context);
                (p.list_price, p.overlay.map(str::to_string))
            })
            .collect();
        let mut names: Vec<String> = Vec::new();
        for o in &listed.offerings {
            for n in overlays.applied_to(&listed, &o.zone, &o.capacity_type, &context) {
                if !names.iter().any(|x| x == n) {
                    names.push(n.to_string());
                }
            }
        }
        Overlaid { t: overlays.apply(&listed, &context), listed: prices, overlays: names }
    }
}

/// A catalog error as bad input naming the argument it came from, or as a failure.
fn bad(arg: &str, e: CatalogError) -> anyhow::Error {
    match e {
        CatalogError::UnknownRegion { .. } | CatalogError::UnknownInstanceType { .. } => {
            anyhow::Error::new(BadInput(format!("{arg}: {e}")))
        }
        other => anyhow::Error::new(other),
    }
}

/// The requested types in catalog order (or argument order when named).
fn select(args: &Args) -> anyhow::Result<Vec<InstanceType>> {
    let cat = catalog()?;
    let settings = NodeClassSettings::default();
    let region = &args.region;
    if args.names.is_empty() {
        return cat.instance_types(region, None, &settings).map_err(|e| bad("--region", e));
    }
    // Check the region first so that a wrong region is reported as such, not as every name.
    cat.zones(region).map_err(|e| bad("--region", e))?;
    let mut types = Vec::new();
    let mut problems = Vec::new();
    for name in &args.names {
        match cat.instance_type(region, name, &settings) {
            Ok(t) => types.push(t),
            Err(CatalogError::UnknownInstanceType { .. }) => problems.push(name_problem(cat, region, name)),
            Err(e) => return Err(bad("NAME", e)),
        }
    }
    if problems.is_empty() {
        Ok(types)
    } else {
        // Every bad name at once, one per line, so a long list needs one correction round.
        Err(anyhow::Error::new(BadInput(problems.join("\n"))))
    }
}

/// Why `name` is not available in `region`: a type the catalog does not know at all, or a
/// known one sold elsewhere (with the covered regions that sell it).
fn name_problem(cat: &Catalog, region: &str, name: &str) -> String {
    if cat.type_info(name).is_none() {
        return format!("NAME {name:?}: unknown instance type (not in the built-in catalog)");
    }
    let sold_in: Vec<&str> = cat
        .regions()
        .filter(|r| cat.offers(r).is_ok_and(|o| o.binary_search_by(|x| x.instance_type.as_str().cmp(name)).is_ok()))
        .collect();
    let elsewhere = if sold_in.is_empty() {
        "not sold in any covered region".to_string()
    } else {
        format!("sold in {}", sold_in.join(", "))
    };
    format!("NAME {name:?}: instance type not sold in --region {region} ({elsewhere})")
}

fn to_json(x: &Overlaid) -> serde_json::Value {
    let t = &x.t;
    let offering = |(o, (list, overlay)): (&Offering, &(f64, Option<String>))| {
        let mut v = serde_json::json!({
            "zone": o.zone,
            "capacityType": o.capacity_type,
            "price": o.price,
            "available": o.available,
        });
        if let Some(name) = overlay {
            v["listPrice"] = serde_json::json!(list);
            v["nodeOverlay"] = serde_json::json!(name);
        }
        v
    };
    let mut v = serde_json::json!({
        "name": t.name,
        "capacity": t.capacity,
        "allocatable": t.allocatable(),
        "labels": t.labels,
        "priceEstimated": t.price_estimated,
        "offerings": t.offerings.iter().zip(&x.listed).map(offering).collect::<Vec<_>>(),
    });
    if !x.overlays.is_empty() {
        v["nodeOverlays"] = serde_json::json!(x.overlays);
    }
    v
}

/// The cheapest available offering's price, with `*` when it is an estimate.
fn cheapest(t: &InstanceType, capacity_type: &str) -> String {
    let mark = if t.price_estimated { "*" } else { "" };
    t.offerings
        .iter()
        .filter(|o| o.available && o.capacity_type == capacity_type)
        .map(|o| o.price)
        .min_by(f64::total_cmp)
        .map(|p| format!("{p:.4}{mark}"))
        .unwrap_or_else(|| "-".to_string())
}

fn table(types: &[Overlaid], region: &str, with_overlays: bool) -> String {
    let mut header = vec!["NAME", "CPU", "MEMORY", "PODS", "ALLOC-CPU", "ALLOC-MEMORY", "ON-DEMAND", "SPOT", "ZONES"];
    if with_overlays {
        header.push("OVERLAYS");
    }
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for x in types {
        let t = &*x.t;
        let alloc = t.allocatable();
        let mut zones: Vec<&str> = t.offerings.iter().map(|o| o.zone.as_str()).collect();
        zones.dedup();
        rows.push(vec![
            t.name.clone(),
            t.capacity.get("cpu").canonical(),
            t.capacity.get("memory").canonical(),
            t.capacity.get("pods").canonical(),
            alloc.get("cpu").canonical(),
            alloc.get("memory").canonical(),
            cheapest(t, "on-demand"),
            cheapest(t, "spot"),
            zones.join(","),
        ]);
        if with_overlays {
            let names = if x.overlays.is_empty() { "-".to_string() } else { x.overlays.join(",") };
            if let Some(row) = rows.last_mut() {
                row.push(names);
            }
        }
    }
    let widths: Vec<usize> = (0..header.len()).map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    let mut s = String::new();
    for r in &rows {
        let line: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        s.push_str(line.join("  ").trim_end());
        s.push('\n');
    }
    if with_overlays {
        s.push_str("prices are after the NodeOverlays named (seen from no NodePool); --json shows list prices\n");
    }
    if types.iter().any(|x| x.t.price_estimated) {
        s.push_str(&format!(
            "* estimated: no listed price for the type in {region}; the built-in catalog estimates it \
             from listed prices of the same type elsewhere or of related types\n"
        ));
    }
    s
}
