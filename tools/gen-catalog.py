#!/usr/bin/env python3
"""Generate kerf's built-in AWS instance catalog (data/aws-instance-types.jsonl).

Sources (both Apache-2.0, pinned in tools/requirements-catalog.txt):
  - moto: ec2/resources/instance_types.json.gz (DescribeInstanceTypes records) and
    ec2/resources/instance_type_offerings/availability-zone/<region>.json.gz (type -> zones).
  - apache-libcloud: data/pricing.json, compute.ec2_linux[type][region] (on-demand Linux $/h).
    A price of 0.0 means "unknown": such offerings are dropped, never treated as free.

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
import sys
from importlib import metadata

# Regions the catalog covers. Keep in sync with data/README.md.
REGIONS = ["ap-northeast-2", "eu-central-1", "eu-west-1", "us-east-1", "us-east-2", "us-west-2"]

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


def generate():
    check_pins()
    moto_dir = package_dir("moto", "moto")
    libcloud_dir = package_dir("apache-libcloud", "libcloud")
    resources = os.path.join(moto_dir, "ec2", "resources")
    with gzip.open(os.path.join(resources, "instance_types.json.gz"), "rt") as f:
        infos = json.load(f)
    with open(os.path.join(libcloud_dir, "data", "pricing.json")) as f:
        prices = json.load(f)["compute"]["ec2_linux"]

    # type -> region -> [on-demand price, zone letters]
    offers = {}
    region_zones = {}
    for region in REGIONS:
        path = os.path.join(resources, "instance_type_offerings", "availability-zone", f"{region}.json.gz")
        with gzip.open(path, "rt") as f:
            offerings = json.load(f)
        zones_by_type = {}
        for o in offerings:
            zones_by_type.setdefault(o["InstanceType"], set()).add(o["Location"])
        region_zones[region] = sorted({z for zs in zones_by_type.values() for z in zs})
        for name in sorted(zones_by_type):
            price = prices.get(name, {}).get(region, 0.0)
            if not price or name not in infos:
                continue  # unknown price (0.0) or no facts: not offered by the catalog
            if type_record(infos[name]) is None:
                continue
            # Zones as their letters after the region name ("abd" for us-west-2a, -2b, -2d).
            letters = []
            for zone in sorted(zones_by_type[name]):
                if not zone.startswith(region) or len(zone) != len(region) + 1:
                    raise SystemExit(f"gen-catalog: zone {zone} is not <region><letter>")
                letters.append(zone[-1])
            offers.setdefault(name, {})[region] = [price, "".join(letters)]

    lines = [dumps({
        "kind": "header",
        "format": 2,
        "sources": [
            {"package": "moto", "version": metadata.version("moto"), "license": "Apache-2.0",
             "files": ["moto/ec2/resources/instance_types.json.gz",
                       "moto/ec2/resources/instance_type_offerings/availability-zone/<region>.json.gz"]},
            {"package": "apache-libcloud", "version": metadata.version("apache-libcloud"), "license": "Apache-2.0",
             "files": ["libcloud/data/pricing.json (compute.ec2_linux)"]},
        ],
        "regenerate": "python3 tools/gen-catalog.py (in a venv with tools/requirements-catalog.txt)",
    })]
    for region in REGIONS:
        lines.append(dumps({"kind": "region", "name": region, "zones": region_zones[region]}))
    for name in sorted(offers):
        rec = type_record(infos[name])
        rec["kind"] = "type"
        rec["offers"] = offers[name]
        lines.append(dumps(rec))
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the committed file instead of writing")
    args = parser.parse_args()
    text = generate()
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
