#!/usr/bin/env python3
"""Generate kerf's built-in AWS instance catalog (data/aws-instance-types.jsonl).

Sources (both Apache-2.0, pinned in tools/requirements-catalog.txt):
  - moto: ec2/resources/instance_types.json.gz (DescribeInstanceTypes records) and
    ec2/resources/instance_type_offerings/availability-zone/<region>.json.gz (type -> zones).
  - apache-libcloud: data/pricing.json, compute.ec2_linux[type][region] (on-demand Linux $/h).
    A price of 0.0 means "unknown", never free.

Every (type, region) pair moto offers is in the catalog. Where libcloud has no price for it,
the price is estimated by the rules of data/README.md ("Estimated prices") and the type's
`priceEstimated` names the rule per region; a pair no rule can price is left out and listed
on stderr.

Usage:
  python3 -m venv /tmp/catvenv && /tmp/catvenv/bin/pip install -r tools/requirements-catalog.txt
  /tmp/catvenv/bin/python tools/gen-catalog.py          # rewrite data/aws-instance-types.jsonl
  /tmp/catvenv/bin/python tools/gen-catalog.py --check  # exit 1 if the committed file differs

The output is deterministic: sorted, no timestamps, floats as the sources give them.
"""

import argparse
import gzip
import json
import os
import re
import sys
from importlib import metadata

# The catalog covers every region moto has offerings data for (data/README.md says which).

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "data", "aws-instance-types.jsonl")

ARCHES = {"x86_64": "amd64", "arm64": "arm64"}


def dumps(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def type_record(info):
    """The fields kerf needs from one DescribeInstanceTypes record, or None to skip the type."""
    proc = info.get("ProcessorInfo", {})
    arches = [ARCHES[a] for a in proc.get("SupportedArchitectures", []) if a in ARCHES]
    if not arches:
        # macOS-only (x86_64_mac, arm64_mac) or 32-bit-only types cannot run Linux nodes.
        return None
    net = info["NetworkInfo"]
    cards = net.get("NetworkCards", [])
    default_card = net.get("DefaultNetworkCardIndex", 0)
    # Pod density follows the default network card's interfaces, as the VPC CNI uses it.
    enis = net["MaximumNetworkInterfaces"]
    for card in cards:
        if card.get("NetworkCardIndex") == default_card:
            enis = card["MaximumNetworkInterfaces"]
    bandwidth = sum(card.get("BaselineBandwidthInGbps", 0) for card in cards)
    rec = {
        "name": info["InstanceType"],
        "arch": arches[0],
        "vcpu": info["VCpuInfo"]["DefaultVCpus"],
        "memoryMiB": info["MemoryInfo"]["SizeInMiB"],
        "enis": enis,
        "ipv4PerEni": net["Ipv4AddressesPerInterface"],
        "hypervisor": info.get("Hypervisor", ""),
        "bareMetal": bool(info.get("BareMetal", False)),
        "cpuManufacturer": proc.get("Manufacturer", "").lower(),
        "encryptionInTransit": bool(net.get("EncryptionInTransitSupported", False)),
        "spot": "spot" in info.get("SupportedUsageClasses", []),
    }
    if bandwidth:
        rec["networkBandwidthMbps"] = int(round(bandwidth * 1000))
    ebs = info.get("EbsInfo", {}).get("EbsOptimizedInfo", {})
    if ebs.get("MaximumBandwidthInMbps"):
        rec["ebsBandwidthMbps"] = ebs["MaximumBandwidthInMbps"]
    if proc.get("SustainedClockSpeedInGhz"):
        rec["clockMhz"] = int(round(proc["SustainedClockSpeedInGhz"] * 1000))
    gpus = info.get("GpuInfo", {}).get("Gpus", [])
    if len(gpus) == 1:
        g = gpus[0]
        rec["gpu"] = {
            "name": g["Name"].lower(),
            "manufacturer": g["Manufacturer"].lower(),
            "count": g["Count"],
            "memoryMiB": g.get("MemoryInfo", {}).get("SizeInMiB", 0),
        }
    devices = info.get("NeuronInfo", {}).get("NeuronDevices", [])
    if len(devices) == 1:
        d = devices[0]
        rec["neuron"] = {
            "name": d["Name"].lower(),
            "count": d["Count"],
            "cores": d["Count"] * d.get("CoreInfo", {}).get("Count", 0),
        }
    storage = info.get("InstanceStorageInfo")
    if storage and storage.get("NvmeSupport", "unsupported") != "unsupported":
        rec["localNvmeGB"] = storage["TotalSizeInGB"]
    # EBS volume attachments: the most the type takes, root volume included (for a limit shared
    # with network interfaces and NVMe instance stores, what the primary ENI and the stores
    # leave of it).
    attach = info.get("EbsInfo", {}).get("MaximumEbsAttachments")
    if attach:
        rec["maxEbsAttachments"] = attach
    efa = net.get("EfaInfo", {}).get("MaximumEfaInterfaces")
    if net.get("EfaSupported") and efa:
        rec["efa"] = efa
    return rec


def package_dir(dist, top):
    files = metadata.files(dist) or []
    for f in files:
        parts = str(f).split("/")
        if parts[0] == top:
            return os.path.join(str(f.locate()).split(os.sep + top + os.sep)[0], top)
    raise SystemExit(f"gen-catalog: cannot locate package {dist}")


def check_pins():
    """Fail clearly unless the pinned source packages are the ones installed."""
    req = os.path.join(ROOT, "tools", "requirements-catalog.txt")
    with open(req) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            dist, _, want = line.partition("==")
            try:
                have = metadata.version(dist)
            except metadata.PackageNotFoundError:
                raise SystemExit(f"gen-catalog: {dist} is not installed; run it in a venv with "
                                 f"`pip install -r tools/requirements-catalog.txt`")
            if have != want:
                raise SystemExit(f"gen-catalog: {dist} {have} is installed but the catalog is pinned to {want}")


# Estimated prices (data/README.md, "Estimated prices").
# Two regions are compared on the types both price; fewer common types than this and the
# regions are not compared at all.
MIN_COMMON = 20
# Two regions are of one price tier when their median price ratio is 1 within this tolerance
# and at least TIER_SHARE of their common types cost the same within it.
TIER_TOLERANCE = 0.005
TIER_SHARE = 0.5
# Decimal places an estimate is rounded to.
ESTIMATE_DECIMALS = 5
# The generation premium is measured on families of this generation and later.
PREMIUM_FROM_GENERATION = 6
# A family name: category, generation, attributes (`c7gd` = c, 7, gd; `m7i-flex` = m, 7, i-flex).
FAMILY_NAME = re.compile(r"^([a-z]+)([0-9]+)([a-z0-9-]*)$")


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def family(name):
    return name.split(".", 1)[0]


def accelerated(info):
    """GPUs, Neuron devices, FPGAs, inference or media accelerators: the price follows them more
    than the type's vCPUs or memory."""
    return any([
        info.get("GpuInfo", {}).get("Gpus"),
        info.get("NeuronInfo", {}).get("NeuronDevices"),
        info.get("FpgaInfo", {}).get("Fpgas"),
        info.get("InferenceAcceleratorInfo", {}).get("Accelerators"),
        info.get("MediaAcceleratorInfo", {}).get("Accelerators"),
    ])


class Estimator:
    """Prices a (type, region) pair the price source leaves unpriced, from listed prices only
    (an estimate is never the base of another)."""

    def __init__(self, listed, infos):
        self.listed = listed  # region -> type -> listed $/h
        self.infos = infos
        self.regions = sorted(listed)
        # (a, b) -> median of price in a / price in b over the types both list.
        self.ratio = {}
        self.tier = {r: [] for r in self.regions}
        for a in self.regions:
            for b in self.regions:
                if a == b:
                    continue
                common = sorted(t for t in listed[a] if t in listed[b])
                if len(common) < MIN_COMMON:
                    continue
                ratios = [listed[a][t] / listed[b][t] for t in common]
                self.ratio[(a, b)] = median(ratios)
                same = sum(1 for x in ratios if abs(x - 1) < TIER_TOLERANCE)
                if abs(self.ratio[(a, b)] - 1) < TIER_TOLERANCE and same >= TIER_SHARE * len(ratios):
                    self.tier[a].append(b)
        # region -> family -> median listed $/h per MiB of memory.
        self.per_mib = {}
        for r in self.regions:
            by_family = {}
            for t in sorted(listed[r]):
                by_family.setdefault(family(t), []).append(listed[r][t] / self.mib(t))
            self.per_mib[r] = {f: median(v) for f, v in by_family.items()}
        # Families with a listed price somewhere, by name part.
        self.named = {}
        for f in sorted({f for r in self.regions for f in self.per_mib[r]}):
            m = FAMILY_NAME.match(f)
            if m:
                self.named[f] = (m.group(1), int(m.group(2)), m.group(3))
        # Median ratio of a family's $/MiB to that of the previous generation with the same
        # category and attributes, in the same region (c7i over c6i, m8g over m7g, ...).
        steps = []
        for f, (cat, gen, attrs) in self.named.items():
            if gen < PREMIUM_FROM_GENERATION:
                continue
            older = [(g, o) for o, (c, g, a) in self.named.items() if c == cat and a == attrs and g < gen]
            if not older:
                continue
            prev = max(older)[1]
            for r in self.regions:
                if f in self.per_mib[r] and prev in self.per_mib[r]:
                    steps.append(self.per_mib[r][f] / self.per_mib[r][prev])
        self.premium = median(steps) if steps else 1.0

    def mib(self, name):
        return self.infos[name]["MemoryInfo"]["SizeInMiB"]

    def by_family(self, region, name):
        rate = self.per_mib.get(region, {}).get(family(name))
        return None if rate is None else rate * self.mib(name)

    def by_tier(self, region, name):
        prices = [self.listed[b][name] for b in self.tier.get(region, []) if name in self.listed[b]]
        return median(prices) if prices else None

    def by_region(self, region, name):
        prices = [self.listed[b][name] * self.ratio[(region, b)] for b in self.regions
                  if (region, b) in self.ratio and name in self.listed[b]]
        return median(prices) if prices else None

    def by_family_elsewhere(self, region, name):
        prices = []
        for b in self.regions:
            if (region, b) not in self.ratio:
                continue
            p = self.by_family(b, name)
            if p is not None:
                prices.append(p * self.ratio[(region, b)])
        return median(prices) if prices else None

    def related_families(self, name):
        """Listed families to price an unlisted family from, nearest first, each with whether it
        is of an older generation: the same category with the family's attributes, then with
        fewer and fewer of them (dropped from the end), each time the newest generation not
        newer than the family's (`c8gn`: c7gn; `i8ge`: i?ge, then i?g = i8g; `t8i`: t?i, then
        t? = t3)."""
        m = FAMILY_NAME.match(family(name))
        if not m:
            return []
        cat, gen, attrs = m.group(1), int(m.group(2)), m.group(3)
        out = []
        for keep in range(len(attrs), -1, -1):
            want = attrs[:keep]
            found = sorted(((g, f) for f, (c, g, a) in self.named.items()
                            if c == cat and a == want and g <= gen and f != family(name)), reverse=True)
            out.extend((f, g < gen) for g, f in found)
        return out

    def by_related_family(self, region, name):
        for related, older in self.related_families(name):
            factor = (self.premium if older else 1.0) * self.mib(name)
            rate = self.per_mib.get(region, {}).get(related)
            if rate is not None:
                return rate * factor
            rates = [self.per_mib[b][related] * self.ratio[(region, b)] for b in self.regions
                     if (region, b) in self.ratio and related in self.per_mib[b]]
            if rates:
                return median(rates) * factor
        return None

    def estimate(self, region, name):
        """(price, rule) or None when no rule applies."""
        rules = [("family", self.by_family), ("tier", self.by_tier), ("region", self.by_region),
                 ("family-region", self.by_family_elsewhere), ("related-family", self.by_related_family)]
        if accelerated(self.infos[name]):
            # Accelerators dominate the price: the same type elsewhere before its siblings.
            rules = [rules[1], rules[2], rules[0], rules[3], rules[4]]
        for rule, fn in rules:
            price = fn(region, name)
            if price is not None and price > 0:
                return round(price, ESTIMATE_DECIMALS), rule
        return None


def regions_of(resources):
    folder = os.path.join(resources, "instance_type_offerings", "availability-zone")
    return sorted(f[: -len(".json.gz")] for f in os.listdir(folder) if f.endswith(".json.gz"))


def generate():
    """The catalog's text and the (region, type) pairs left out for want of any price."""
    check_pins()
    moto_dir = package_dir("moto", "moto")
    libcloud_dir = package_dir("apache-libcloud", "libcloud")
    resources = os.path.join(moto_dir, "ec2", "resources")
    with gzip.open(os.path.join(resources, "instance_types.json.gz"), "rt") as f:
        infos = json.load(f)
    with open(os.path.join(libcloud_dir, "data", "pricing.json")) as f:
        prices = json.load(f)["compute"]["ec2_linux"]
    regions = regions_of(resources)

    # region -> type -> zones, for the types kerf can run (Linux facts in moto).
    sold = {}
    for region in regions:
        path = os.path.join(resources, "instance_type_offerings", "availability-zone", f"{region}.json.gz")
        with gzip.open(path, "rt") as f:
            offerings = json.load(f)
        zones_by_type = {}
        for o in offerings:
            name = o["InstanceType"]
            if name in infos and type_record(infos[name]) is not None:
                zones_by_type.setdefault(name, set()).add(o["Location"])
        sold[region] = zones_by_type
    # Listed prices of types kerf can run, in these regions, sold there or not.
    listed = {region: {} for region in regions}
    for name in sorted(prices):
        if name not in infos or type_record(infos[name]) is None:
            continue
        for region, price in sorted(prices[name].items()):
            if region in listed and price:
                listed[region][name] = price
    estimator = Estimator(listed, infos)

    # type -> region -> [on-demand price, zone letters]; type -> region -> estimate rule
    offers = {}
    estimated = {}
    left_out = []
    region_zones = {}
    for region in regions:
        zones_by_type = sold[region]
        region_zones[region] = sorted({z for zs in zones_by_type.values() for z in zs})
        for name in sorted(zones_by_type):
            price = listed[region].get(name)
            if price is None:
                guess = estimator.estimate(region, name)
                if guess is None:
                    left_out.append((region, name))
                    continue
                price, rule = guess
                estimated.setdefault(name, {})[region] = rule
            # Zones as their letters after the region name ("abd" for us-west-2a, -2b, -2d).
            letters = []
            for zone in sorted(zones_by_type[name]):
                if not zone.startswith(region) or len(zone) != len(region) + 1:
                    raise SystemExit(f"gen-catalog: zone {zone} is not <region><letter>")
                letters.append(zone[-1])
            offers.setdefault(name, {})[region] = [price, "".join(letters)]

    lines = [dumps({
        "kind": "header",
        "format": 3,
        "sources": [
            {"package": "moto", "version": metadata.version("moto"), "license": "Apache-2.0",
             "files": ["moto/ec2/resources/instance_types.json.gz",
                       "moto/ec2/resources/instance_type_offerings/availability-zone/<region>.json.gz"]},
            {"package": "apache-libcloud", "version": metadata.version("apache-libcloud"), "license": "Apache-2.0",
             "files": ["libcloud/data/pricing.json (compute.ec2_linux)"]},
        ],
        "regenerate": "python3 tools/gen-catalog.py (in a venv with tools/requirements-catalog.txt)",
    })]
    for region in regions:
        lines.append(dumps({"kind": "region", "name": region, "zones": region_zones[region]}))
    for name in sorted(offers):
        rec = type_record(infos[name])
        rec["kind"] = "type"
        rec["offers"] = offers[name]
        if name in estimated:
            rec["priceEstimated"] = estimated[name]
        lines.append(dumps(rec))
    rules = {}
    for by_region in estimated.values():
        for rule in by_region.values():
            rules[rule] = rules.get(rule, 0) + 1
    pairs = sum(len(o) for o in offers.values())
    print(f"gen-catalog: {len(regions)} regions, {pairs} (type, region) pairs: {pairs - sum(rules.values())} listed, "
          f"{sum(rules.values())} estimated ({', '.join(f'{r} {n}' for r, n in sorted(rules.items()))}), "
          f"{len(left_out)} left out")
    return "\n".join(lines) + "\n", left_out


def report_left_out(left_out):
    if not left_out:
        return
    by_region = {}
    for region, name in left_out:
        by_region.setdefault(region, []).append(name)
    print(f"gen-catalog: {len(left_out)} (type, region) pairs have no listed price and no rule to estimate one; "
          f"left out:", file=sys.stderr)
    for region in sorted(by_region):
        print(f"  {region}: {' '.join(sorted(by_region[region]))}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the committed file instead of writing")
    args = parser.parse_args()
    text, left_out = generate()
    report_left_out(left_out)
    if args.check:
        try:
            with open(OUT) as f:
                committed = f.read()
        except FileNotFoundError:
            print(f"gen-catalog: {OUT} is missing", file=sys.stderr)
            return 1
        if committed != text:
            print(f"gen-catalog: {OUT} differs from what the pinned sources produce; rerun tools/gen-catalog.py",
                  file=sys.stderr)
            return 1
        print(f"gen-catalog: {OUT} is up to date")
        return 0
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write(text)
    print(f"gen-catalog: wrote {OUT} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
