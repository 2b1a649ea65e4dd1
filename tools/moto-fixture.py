#!/usr/bin/env python3
"""A local EC2 / SSM / IAM / SQS API for kerf-aws's tests: moto's server on 127.0.0.1.

Starts moto's ThreadedMotoServer in this process, seeds the public SSM parameters that name the
EKS-optimized and Bottlerocket AMIs of an AMI alias (moto refuses PutParameter under
/aws/service/, so they go straight into its backend), then prints one JSON line on stdout:

    {"endpoint": "http://127.0.0.1:PORT", "region": "us-west-2", "account": "123456789012",
     "images": {"/aws/service/...": "ami-..."}}

and serves until its standard input closes (the test process that started it exited) or it is
interrupted. Needs `moto[server]` (pinned in .ci/run).

moto 5.2.5 has no capacity reservations: tools/moto_reservations.py adds CreateCapacityReservation,
DescribeCapacityReservations and CancelCapacityReservation to this server and makes its CreateFleet
honour a launch template's reservation target (see that module for exactly what).

moto builds its answers to DescribeInstanceTypes (1,395 types), DescribeInstanceTypeOfferings and
DescribeSpotPriceHistory from static data, slowly (15 s, 1 s and 5 s of CPU for an unfiltered
DescribeInstanceTypes and the region's spot prices). Every provider a test makes asks them again,
so this server answers each distinct request of those three once and then from memory, and keeps
those answers in a file under $TMPDIR (one per moto version), which the next fixture (the next test
binary) starts from.

    python3 tools/moto-fixture.py [--port 0] [--region us-west-2] [--kubernetes-version 1.33 ...]
"""

import argparse
import datetime
import json
import os
import pickle
import socket
import sys
import threading

ACCOUNT = "123456789012"

# Amazon-owned images moto preloads in every region, standing in for the EKS-optimized ones.
X86_IMAGE = "ami-076f415166b04f5fe"  # al2022-ami-...-x86_64
ARM_IMAGE = "ami-0e9271c829888680e"  # al2022-ami-...-arm64
AL2_X86_IMAGE = "ami-04681a1dbd79675a5"  # amzn2-ami-hvm-...-x86_64-gp2
BOTTLEROCKET_X86_IMAGE = "ami-0b301ce3ce347599c"  # another x86_64 image, so families differ
WINDOWS_IMAGE = "ami-03cf127a"  # Windows_Server-2016-English-Nano-Base, platform windows


def alias_parameters(k8s):
    """The SSM parameter names Karpenter's aliases read for Kubernetes version `k8s`, each with
    the image it is seeded with. Only the standard (non-GPU) variants are seeded, as a cluster
    without GPU AMIs published would look."""
    eks = f"/aws/service/eks/optimized-ami/{k8s}"
    return {
        # al2023@latest
        f"{eks}/amazon-linux-2023/x86_64/standard/recommended/image_id": X86_IMAGE,
        f"{eks}/amazon-linux-2023/arm64/standard/recommended/image_id": ARM_IMAGE,
        # al2023@v20250101
        f"{eks}/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-{k8s}-v20250101/image_id": X86_IMAGE,
        f"{eks}/amazon-linux-2023/arm64/standard/amazon-eks-node-al2023-arm64-standard-{k8s}-v20250101/image_id": ARM_IMAGE,
        # al2@latest
        f"{eks}/amazon-linux-2/recommended/image_id": AL2_X86_IMAGE,
        f"{eks}/amazon-linux-2-arm64/recommended/image_id": ARM_IMAGE,
        # bottlerocket@latest
        f"/aws/service/bottlerocket/aws-k8s-{k8s}/x86_64/latest/image_id": BOTTLEROCKET_X86_IMAGE,
        f"/aws/service/bottlerocket/aws-k8s-{k8s}/arm64/latest/image_id": ARM_IMAGE,
        # windows2019@latest, windows2022@latest, windows2025@latest
        **{
            f"/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}/image_id": WINDOWS_IMAGE
            for year in ("2019", "2022", "2025")
        },
    }


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seed(region, versions):
    from moto.ssm.models import Parameter, ssm_backends

    backend = ssm_backends[ACCOUNT][region]
    seeded = {}
    now = datetime.datetime.now(datetime.timezone.utc)
    for k8s in versions:
        for name, image in alias_parameters(k8s).items():
            param = Parameter(
                account_id=ACCOUNT,
                name=name,
                value=image,
                parameter_type="String",
                description=None,
                allowed_pattern=None,
                keyid=None,
                last_modified_date=now,
                version=1,
                data_type="aws:ec2:image",
            )
            backend._parameters[name].append(param)
            seeded[name] = image
    return seeded


# Read-only EC2 actions whose answer depends only on the request (moto's static data).
STATIC_ACTIONS = {"DescribeInstanceTypes", "DescribeInstanceTypeOfferings", "DescribeSpotPriceHistory"}


def cache_file():
    import moto

    directory = os.environ.get("TMPDIR", "/tmp")
    return os.path.join(directory, f"kerf-moto-static-{moto.__version__}.pickle")


def load_cache(path):
    """The answers an earlier fixture kept; none if the file is missing or unreadable."""
    try:
        with open(path, "rb") as f:
            cache = pickle.load(f)
        return cache if isinstance(cache, dict) else {}
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ValueError):
        return {}


def save_cache(path, cache):
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            pickle.dump(cache, f)
        os.replace(tmp, path)
    except OSError:
        pass


def memoize_static_reads():
    """Answers a repeated request of STATIC_ACTIONS from memory (successful answers only)."""
    from moto.ec2.responses import EC2Response

    original = EC2Response.call_action
    path = cache_file()
    cache = load_cache(path)
    key_locks = {}
    lock = threading.Lock()

    def call_action(self):
        action = self._get_action()
        if action not in STATIC_ACTIONS:
            return original(self)
        key = (self.region, action, json.dumps(self.querystring, sort_keys=True))
        # One computation per request: concurrent askers of the same one wait for it.
        with lock:
            key_lock = key_locks.setdefault(key, threading.Lock())
        with key_lock:
            hit = cache.get(key)
            if hit is None:
                status, headers, body = original(self)
                if status != 200:
                    return status, headers, body
                hit = cache[key] = (status, dict(headers), body)
                with lock:
                    save_cache(path, dict(cache))
        status, headers, body = hit
        return status, dict(headers), body

    EC2Response.call_action = call_action


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    parser.add_argument("--region", default="us-west-2")
    parser.add_argument(
        "--kubernetes-version", action="append", dest="versions", help="seed aliases for it (repeatable; default 1.33)"
    )
    args = parser.parse_args()
    versions = args.versions or ["1.33"]

    from moto.server import ThreadedMotoServer

    memoize_static_reads()
    import moto_reservations  # beside this script

    moto_reservations.install()

    port = args.port or free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    images = seed(args.region, versions)
    print(
        json.dumps(
            {"endpoint": f"http://127.0.0.1:{port}", "region": args.region, "account": ACCOUNT, "images": images}
        ),
        flush=True,
    )
    try:
        # Serve until whoever started us goes away (its end of our stdin closes).
        while sys.stdin.read(4096):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
