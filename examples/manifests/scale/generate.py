# Generates examples/manifests/scale/deployments.yaml: 50 Deployments, 30,000 pods, mixed constraints.
# Usage: python3 generate.py [SCALE] > deployments.yaml (0.1: deployments-tenth.yaml, 2,995 pods)
#        python3 generate.py --preferred [SCALE] > deployments-preferred.yaml
# --preferred: the same Deployments, each also preferring (weight 100) not to share a node with
# its own pods (preferred pod anti-affinity on hostname, as most Helm charts ship), and five of
# the plain ones spreading over zones with ScheduleAnyway instead of DoNotSchedule.
import sys
args = [a for a in sys.argv[1:] if a != "--preferred"]
preferred = len(args) != len(sys.argv) - 1
scale = float(args[0]) if args else 1.0
out = []
cpus = ["100m", "250m", "250m", "500m", "150m"]
mems = ["128Mi", "256Mi", "512Mi", "1Gi", "256Mi", "384Mi"]
total = 0
def preferred_anti(name):
    """A preferred anti-affinity term against the Deployment's own pods on one node."""
    return [
        "          preferredDuringSchedulingIgnoredDuringExecution:",
        "            - weight: 100",
        "              podAffinityTerm:",
        "                topologyKey: kubernetes.io/hostname",
        "                labelSelector:",
        "                  matchLabels:",
        f"                    app: {name}",
    ]
def dep(i, kind, replicas):
    global total
    replicas = max(1, int(replicas * scale))
    total += replicas
    name = f"svc-{i:02d}-{kind}"
    cpu = cpus[i % len(cpus)]
    mem = mems[i % len(mems)]
    lines = [
        "---",
        "apiVersion: apps/v1",
        "kind: Deployment",
        "metadata:",
        f"  name: {name}",
        "spec:",
        f"  replicas: {replicas}",
        "  selector:",
        "    matchLabels:",
        f"      app: {name}",
        "  template:",
        "    metadata:",
        "      labels:",
        f"        app: {name}",
        "    spec:",
    ]
    if kind in ("zone-spread", "soft-zone-spread"):
        when = "DoNotSchedule" if kind == "zone-spread" else "ScheduleAnyway"
        lines += [
            "      topologySpreadConstraints:",
            "        - maxSkew: 1",
            "          topologyKey: topology.kubernetes.io/zone",
            f"          whenUnsatisfiable: {when}",
            "          labelSelector:",
            "            matchLabels:",
            f"              app: {name}",
        ]
    elif kind == "on-demand":
        lines += ["      nodeSelector:", "        karpenter.sh/capacity-type: on-demand"]
    elif kind == "arm64":
        lines += ["      nodeSelector:", "        kubernetes.io/arch: arm64"]
    elif kind == "zone-pinned":
        zone = ["us-west-2a", "us-west-2b", "us-west-2c"][i % 3]
        lines += [
            "      affinity:",
            "        nodeAffinity:",
            "          requiredDuringSchedulingIgnoredDuringExecution:",
            "            nodeSelectorTerms:",
            "              - matchExpressions:",
            "                  - key: topology.kubernetes.io/zone",
            "                    operator: In",
            f"                    values: [{zone}]",
        ]
        if preferred:
            lines += ["        podAntiAffinity:"] + preferred_anti(name)
    elif kind == "one-per-node":
        lines += [
            "      affinity:",
            "        podAntiAffinity:",
            "          requiredDuringSchedulingIgnoredDuringExecution:",
            "            - topologyKey: kubernetes.io/hostname",
            "              labelSelector:",
            "                matchLabels:",
            f"                  app: {name}",
        ]
        if preferred:
            lines += preferred_anti(name)
    elif kind == "tolerates-batch":
        lines += [
            "      nodeSelector:",
            "        workload: batch",
            "      tolerations:",
            "        - key: workload",
            "          value: batch",
            "          effect: NoSchedule",
        ]
    if preferred and kind not in ("zone-pinned", "one-per-node"):
        lines += ["      affinity:", "        podAntiAffinity:"] + preferred_anti(name)
    lines += [
        "      containers:",
        "        - name: app",
        "          image: registry.example.com/app:1",
        "          resources:",
        "            requests:",
        f"              cpu: {cpu}",
        f"              memory: {mem}",
    ]
    out.append("\n".join(lines))

plan = (["zone-spread"] * 8 + ["one-per-node"] * 2 + ["zone-pinned"] * 3 + ["on-demand"] * 5 + ["arm64"] * 4
        + ["tolerates-batch"] * 2 + ["plain"] * 26)
assert len(plan) == 50
if preferred:
    # Five plain Deployments spread over zones when they can (ScheduleAnyway).
    plain = [i for i, k in enumerate(plan) if k == "plain"]
    for i in plain[1:6]:
        plan[i] = "soft-zone-spread"
sizes = {"plain": 632, "soft-zone-spread": 632, "zone-spread": 600, "on-demand": 600, "arm64": 600, "zone-pinned": 600, "tolerates-batch": 700, "one-per-node": 80}
# Adjust so the total is exactly 30,000 at scale 1.
base = sum(sizes[k] for k in plan)
extra = 30000 - base
first_plain = plan.index("plain")
for i, k in enumerate(plan):
    dep(i, k, sizes[k] + (extra if i == first_plain else 0))
print("# Generated: 50 Deployments, mixed constraints (plain, zone spread, on-demand only, arm64,")
print("# zone-pinned, tainted batch pool, one pod per node).")
if preferred:
    print("# Every Deployment prefers one pod per node (preferred pod anti-affinity on hostname);")
    print("# five spread over zones with ScheduleAnyway (python3 generate.py --preferred).")
print("\n".join(out))
print(f"# total replicas: {total}", file=sys.stderr)
