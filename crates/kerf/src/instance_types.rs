//! `kerf instance-types`: the built-in AWS catalog's instance types with capacity, allocatable,
//! offerings and prices.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
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
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let types = select(&args)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = serde_json::Value::Array(types.iter().map(to_json).collect());
        let text = serde_json::to_string_pretty(&doc).context("encoding instance types as JSON")?;
        writeln!(out, "{text}").context("writing to stdout")?;
    } else {
        out.write_all(table(&types, &args.region).as_bytes()).context("writing to stdout")?;
    }
    Ok(ExitCode::SUCCESS)
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

fn to_json(t: &InstanceType) -> serde_json::Value {
    serde_json::json!({
        "name": t.name,
        "capacity": t.capacity,
        "allocatable": t.allocatable(),
        "labels": t.labels,
        "priceEstimated": t.price_estimated,
        "offerings": t.offerings.iter().map(|o| serde_json::json!({
            "zone": o.zone,
            "capacityType": o.capacity_type,
            "price": o.price,
            "available": o.available,
        })).collect::<Vec<_>>(),
    })
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

fn table(types: &[InstanceType], region: &str) -> String {
    let header = ["NAME", "CPU", "MEMORY", "PODS", "ALLOC-CPU", "ALLOC-MEMORY", "ON-DEMAND", "SPOT", "ZONES"];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for t in types {
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
    }
    let widths: Vec<usize> = (0..header.len()).map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    let mut s = String::new();
    for r in &rows {
        let line: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        s.push_str(line.join("  ").trim_end());
        s.push('\n');
    }
    if types.iter().any(|t| t.price_estimated) {
        s.push_str(&format!(
            "* estimated: no listed price for the type in {region}; the built-in catalog estimates it \
             from listed prices of the same type elsewhere or of related types\n"
        ));
    }
    s
}
