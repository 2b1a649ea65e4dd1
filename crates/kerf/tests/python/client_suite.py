"""The official Python `kubernetes` client against `kerf serve`, each check the result a real API
server gives: list, watch (from a resourceVersion, with a timeout), create, patch (merge,
strategic merge, JSON patch, server-side apply), dry runs and delete, for built-in kinds
(Namespace, Deployment, Pod, PodDisruptionBudget) and a custom resource (NodePool, through
CustomObjectsApi).

Run by crates/kerf/tests/serve_python_client.rs with KUBECONFIG naming a fresh `kerf serve
--controllers none`; each test uses objects of its own.
"""

import json
import threading
import time
import unittest

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import DynamicApiError

NS = "default"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


def deployment(name, image="nginx", replicas=1, labels=None):
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": image,
                            "resources": {"requests": {"cpu": "100m"}},
                            "env": [{"name": "A", "value": "1"}],
                        }
                    ]
                },
            },
        },
    }


def node_pool(name, weight=10):
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "weight": weight,
            "template": {
                "spec": {
                    "requirements": [],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                }
            },
        },
    }


def error_of(call):
    """The ApiException `call` raises, its status and its Status body."""
    try:
        call()
    except (ApiException, DynamicApiError) as e:
        return e.status, json.loads(e.body)
    raise AssertionError("the call succeeded; an error was expected")


class Client(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        config.load_kube_config()
        cls.api = client.ApiClient()
        cls.core = client.CoreV1Api(cls.api)
        cls.apps = client.AppsV1Api(cls.api)
        cls.policy = client.PolicyV1Api(cls.api)
        cls.custom = client.CustomObjectsApi(cls.api)
        cls.dynamic = DynamicClient(cls.api)
        cls.deployments = cls.dynamic.resources.get(api_version="apps/v1", kind="Deployment")
        cls.pools = cls.dynamic.resources.get(api_version="karpenter.sh/v1", kind="NodePool")

    def test_namespaces_are_created_listed_by_label_and_deleted(self):
        body = client.V1Namespace(metadata=client.V1ObjectMeta(name="py-team", labels={"team": "py"}))
        created = self.core.create_namespace(body)
        self.assertEqual(created.metadata.name, "py-team")
        self.assertTrue(created.metadata.uid)
        self.assertTrue(created.metadata.resource_version)
        names = [n.metadata.name for n in self.core.list_namespace(label_selector="team=py").items]
        self.assertEqual(names, ["py-team"])
        everything = [n.metadata.name for n in self.core.list_namespace().items]
        self.assertIn("default", everything)
        status, err = error_of(lambda: self.core.create_namespace(body))
        self.assertEqual((status, err["reason"]), (409, "AlreadyExists"))
        self.core.delete_namespace("py-team")
        status, err = error_of(lambda: self.core.read_namespace("py-team"))
        self.assertEqual((status, err["reason"]), (404, "NotFound"))

    def test_a_deployment_is_created_then_patched_four_ways_and_deleted(self):
        created = self.apps.create_namespaced_deployment(NS, deployment("py-web"))
        self.assertEqual(created.metadata.generation, 1)
        self.assertEqual([m.manager for m in created.metadata.managed_fields], ["OpenAPI-Generator"])
        self.assertEqual(created.spec.template.spec.containers[0].image, "nginx")

        # JSON patch (a list body).
        ops = [{"op": "replace", "path": "/spec/replicas", "value": 3}]
        patched = self.apps.patch_namespaced_deployment("py-web", NS, ops)
        self.assertEqual(patched.spec.replicas, 3)
        self.assertEqual(patched.metadata.generation, 2)

        # Strategic merge patch (a dict body): the container merges by name, keeping the fields
        # the patch does not name; env merges by name.
        patch = {"spec": {"template": {"spec": {"containers": [
            {"name": "web", "image": "nginx:1.27", "env": [{"name": "B", "value": "2"}]}]}}}}
        patched = self.apps.patch_namespaced_deployment("py-web", NS, patch)
        c = patched.spec.template.spec.containers
        self.assertEqual(len(c), 1)
        self.assertEqual(c[0].image, "nginx:1.27")
        self.assertEqual(c[0].resources.requests, {"cpu": "100m"})
        self.assertEqual([(e.name, e.value) for e in c[0].env], [("A", "1"), ("B", "2")])

        # Merge patch: lists are replaced, null deletes.
        merge = {"metadata": {"labels": {"app": None, "tier": "front"}},
                 "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}}}
        patched = self.deployments.patch(name="py-web", namespace=NS, body=merge, content_type=MERGE)
        self.assertEqual(patched.metadata.labels.to_dict(), {"tier": "front"})
        c = patched.spec.template.spec.containers
        self.assertEqual((c[0].image, c[0].resources), ("nginx:2", None))

        # A resourceVersion in the patch pins it to that version.
        stale = {"metadata": {"resourceVersion": created.metadata.resource_version, "labels": {"x": "y"}}}
        status, err = error_of(lambda: self.deployments.patch(
            name="py-web", namespace=NS, body=stale, content_type=MERGE))
        self.assertEqual((status, err["reason"]), (409, "Conflict"))

        # Delete: a Status of success, then 404.
        gone = self.apps.delete_namespaced_deployment("py-web", NS)
        self.assertEqual(gone.status, "Success")
        self.assertEqual(gone.details.name, "py-web")
        status, _ = error_of(lambda: self.apps.read_namespaced_deployment("py-web", NS))
        self.assertEqual(status, 404)

    def test_server_side_apply_keeps_managers_reports_conflicts_and_forces(self):
        body = deployment("py-ssa", replicas=2)
        applied = self.dynamic.server_side_apply(self.deployments, body=body, namespace=NS, field_manager="py-ci")
        self.assertEqual(applied.spec.replicas, 2)
        entries = [(m["manager"], m["operation"]) for m in applied.metadata.managedFields]
        self.assertEqual(entries, [("py-ci", "Apply")])
        again = self.dynamic.server_side_apply(self.deployments, body=body, namespace=NS, field_manager="py-ci")
        # (The Deployment controller writes the status and revision meanwhile: the
        # resourceVersion moves, the generation and the managers' fields do not.)
        self.assertEqual(again.metadata.generation, 1, "nothing changed")
        self.assertEqual(again.metadata.managedFields, applied.metadata.managedFields)

        other = deployment("py-ssa", replicas=5)
        status, err = error_of(lambda: self.dynamic.server_side_apply(
            self.deployments, body=other, namespace=NS, field_manager="py-ops"))
        self.assertEqual((status, err["reason"]), (409, "Conflict"))
        self.assertEqual(err["message"], 'Apply failed with 1 conflict: conflict with "py-ci": .spec.replicas')
        self.assertEqual(err["details"]["causes"][0]["field"], ".spec.replicas")

        forced = self.dynamic.server_side_apply(
            self.deployments, body=other, namespace=NS, field_manager="py-ops", force_conflicts=True)
        self.assertEqual(forced.spec.replicas, 5)
        managers = sorted(m["manager"] for m in forced.metadata.managedFields)
        self.assertEqual(managers, ["py-ci", "py-ops"])

        # A server-side dry run works the apply out, conflicts included, and stores nothing.
        dry = deployment("py-ssa", replicas=7)
        status, _ = error_of(lambda: self.dynamic.server_side_apply(
            self.deployments, body=dry, namespace=NS, field_manager="py-ci", dry_run="All"))
        self.assertEqual(status, 409)
        would = self.dynamic.server_side_apply(
            self.deployments, body=dry, namespace=NS, field_manager="py-ci", force_conflicts=True, dry_run="All")
        self.assertEqual(would.spec.replicas, 7)
        live = self.apps.read_namespaced_deployment("py-ssa", NS)
        self.assertEqual((live.spec.replicas, live.metadata.generation), (5, forced.metadata.generation))
        self.apps.delete_namespaced_deployment("py-ssa", NS)

    def test_dry_runs_of_create_patch_and_delete_store_nothing(self):
        would = self.apps.create_namespaced_deployment(NS, deployment("py-dry"), dry_run="All")
        self.assertEqual(would.metadata.name, "py-dry")
        self.assertTrue(would.metadata.uid)
        self.assertIsNone(would.metadata.resource_version)
        self.assertEqual(error_of(lambda: self.apps.read_namespaced_deployment("py-dry", NS))[0], 404)
        live = self.apps.create_namespaced_deployment(NS, deployment("py-dry"))
        patched = self.apps.patch_namespaced_deployment(
            "py-dry", NS, [{"op": "replace", "path": "/spec/replicas", "value": 4}], dry_run="All")
        self.assertEqual(patched.spec.replicas, 4)
        self.apps.delete_namespaced_deployment("py-dry", NS, dry_run="All")
        now = self.apps.read_namespaced_deployment("py-dry", NS)
        self.assertEqual((now.spec.replicas, now.metadata.generation), (1, live.metadata.generation))
        self.assertIsNone(now.metadata.deletion_timestamp)
        status, err = error_of(lambda: self.apps.create_namespaced_deployment(NS, deployment("py-x"), dry_run="Some"))
        self.assertEqual((status, err["reason"]), (422, "Invalid"))
        self.apps.delete_namespaced_deployment("py-dry", NS)

    def test_a_watch_from_a_resource_version_sees_each_change_then_ends_at_its_timeout(self):
        start = self.core.list_namespaced_pod(NS).metadata.resource_version
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "py-pod", "labels": {"app": "py"}},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        created = self.core.create_namespaced_pod(NS, pod)
        self.assertEqual((created.status.phase, created.status.qos_class), ("Pending", "BestEffort"))
        self.core.patch_namespaced_pod("py-pod", NS, {"metadata": {"labels": {"step": "two"}}})
        self.core.delete_namespaced_pod("py-pod", NS, grace_period_seconds=0)
        seen = []
        began = time.monotonic()
        for ev in watch.Watch().stream(self.core.list_namespaced_pod, NS, label_selector="app=py",
                                       resource_version=start, timeout_seconds=2):
            seen.append((ev["type"], ev["object"].metadata.name, (ev["object"].metadata.labels or {}).get("step")))
        self.assertLess(time.monotonic() - began, 30, "the watch ended at its timeout")
        self.assertEqual(seen[0], ("ADDED", "py-pod", None))
        self.assertIn(("MODIFIED", "py-pod", "two"), seen)
        self.assertEqual(seen[-1][0], "DELETED")

    def test_a_disruption_budget_is_created_read_and_refuses_an_eviction(self):
        pdb = client.V1PodDisruptionBudget(
            metadata=client.V1ObjectMeta(name="py-pdb"),
            spec=client.V1PodDisruptionBudgetSpec(
                min_available=1, selector=client.V1LabelSelector(match_labels={"app": "guarded"})))
        created = self.policy.create_namespaced_pod_disruption_budget(NS, pdb)
        self.assertEqual(created.spec.min_available, 1)
        got = self.policy.read_namespaced_pod_disruption_budget("py-pdb", NS)
        self.assertEqual(got.spec.selector.match_labels, {"app": "guarded"})
        # A Ready node, and a pod bound to it that runs there.
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "py-node"},
                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                           "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"},
                           "capacity": {"cpu": "4", "memory": "8Gi", "pods": "10"}}}
        self.core.create_node(node)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "guarded", "labels": {"app": "guarded"}},
               "spec": {"nodeName": "py-node", "containers": [{"name": "c", "image": "busybox"}]}}
        self.core.create_namespaced_pod(NS, pod)
        deadline = time.monotonic() + 30
        while self.core.read_namespaced_pod("guarded", NS).status.phase != "Running":
            self.assertLess(time.monotonic(), deadline, "the pod runs on the Ready node")
            time.sleep(0.2)
        # Its only healthy pod: the budget allows no disruption.
        eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="guarded", namespace=NS))
        status, err = error_of(lambda: self.core.create_namespaced_pod_eviction("guarded", NS, eviction))
        self.assertEqual((status, err["reason"]), (429, "TooManyRequests"))
        self.assertIn("Cannot evict pod as it would violate the pod's disruption budget", err["message"])
        # A dry run is refused the same way; without the budget it is allowed and evicts nothing.
        dry = client.V1Eviction(metadata=client.V1ObjectMeta(name="guarded", namespace=NS),
                                delete_options=client.V1DeleteOptions(dry_run=["All"]))
        self.assertEqual(error_of(lambda: self.core.create_namespaced_pod_eviction("guarded", NS, dry))[0], 429)
        self.policy.delete_namespaced_pod_disruption_budget("py-pdb", NS)
        self.assertEqual(self.core.create_namespaced_pod_eviction("guarded", NS, dry).kind, "Status")
        self.assertEqual(self.core.read_namespaced_pod("guarded", NS).status.phase, "Running")
        evicted = self.core.create_namespaced_pod_eviction("guarded", NS, eviction)
        self.assertEqual(evicted.kind, "Status")
        self.assertEqual(error_of(lambda: self.core.read_namespaced_pod("guarded", NS))[0], 404)
        self.core.delete_node("py-node")

    def test_a_node_pool_round_trips_through_custom_objects_and_its_watch(self):
        args = ("karpenter.sh", "v1", "nodepools")
        start = self.custom.list_cluster_custom_object(*args)["metadata"]["resourceVersion"]
        created = self.custom.create_cluster_custom_object(*args, node_pool("py-pool"))
        self.assertEqual(created["spec"]["weight"], 10)
        self.assertEqual(created["spec"]["disruption"]["consolidateAfter"], "0s", "the CRD's defaults")
        got = self.custom.get_cluster_custom_object(*args, "py-pool")
        self.assertEqual(got["metadata"]["uid"], created["metadata"]["uid"])
        # CustomObjectsApi patches with a merge patch.
        patched = self.custom.patch_cluster_custom_object(*args, "py-pool", {"spec": {"weight": 20}})
        self.assertEqual(patched["spec"]["weight"], 20)
        # A custom resource takes no strategic merge patch (415), and its rules are checked (422).
        status, _ = error_of(lambda: self.pools.patch(name="py-pool", body={"spec": {"weight": 30}},
                                                      content_type=STRATEGIC))
        self.assertEqual(status, 415)
        status, err = error_of(lambda: self.custom.patch_cluster_custom_object(
            *args, "py-pool", {"spec": {"weight": 1000}}))
        self.assertEqual((status, err["reason"]), (422, "Invalid"))
        applied = self.dynamic.server_side_apply(self.pools, body=node_pool("py-pool", weight=40),
                                                 field_manager="py-ci", force_conflicts=True)
        self.assertEqual(applied.spec.weight, 40)
        events = []
        for ev in watch.Watch().stream(self.custom.list_cluster_custom_object, *args,
                                       resource_version=start, timeout_seconds=1):
            events.append((ev["type"], ev["object"]["metadata"]["name"], ev["object"]["spec"].get("weight")))
        self.assertEqual(events, [("ADDED", "py-pool", 10), ("MODIFIED", "py-pool", 20), ("MODIFIED", "py-pool", 40)])
        self.custom.delete_cluster_custom_object(*args, "py-pool")
        self.assertEqual(error_of(lambda: self.custom.get_cluster_custom_object(*args, "py-pool"))[0], 404)

    def test_a_watch_started_before_a_change_sees_it_as_it_happens(self):
        seen = []
        w = watch.Watch()

        def follow():
            for ev in w.stream(self.apps.list_namespaced_deployment, NS, label_selector="app=py-live",
                               timeout_seconds=10):
                seen.append(ev["type"])
                if ev["type"] == "DELETED":
                    w.stop()

        t = threading.Thread(target=follow)
        t.start()
        time.sleep(0.5)
        self.apps.create_namespaced_deployment(NS, deployment("py-live"))
        self.apps.delete_namespaced_deployment("py-live", NS)
        t.join(20)
        self.assertFalse(t.is_alive(), "the watch ended")
        self.assertEqual(seen[0], "ADDED")
        self.assertEqual(seen[-1], "DELETED")


if __name__ == "__main__":
    unittest.main(verbosity=2)
