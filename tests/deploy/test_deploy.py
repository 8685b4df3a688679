"""deploy/ checked offline (no Docker engine or cluster here): the kustomize overlays render and validate against
the Kubernetes OpenAPI schemas, checkov passes with its reviewed skip list, the compose file validates against
the compose specification, and every image, manifest and compose service agrees with what the code reads —
commands and flags that exist, ports, probes, environment variables, secrets, grace periods and versions."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from clients import cli
from dashboard import serve as dashboard_main
from executor.service import __main__ as executor_main
from executor.worker import main as worker
from executor.worker.runtime import DEFAULT_DRAIN_GRACE_S
from executor.worker.supervision import STOP_GRACE_S
from planner import serve as planner_main

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ("dev", "prod", "object-store", "redis-sentinel")  # object-store: prod with checkpoints in S3, no
# shared volume; redis-sentinel: prod with Redis as a primary, two replicas and three sentinels
KUBERNETES_VERSION = "1.32.0"  # the oldest release the manifests promise (native gRPC probes are GA since 1.27)
TOOLS = ROOT / ".venv-deploy"
# Secrets the prod overlay expects to exist (created outside git, as the README says), with their keys.
SECRETS = {"tunefleet-token": {"token"}, "tunefleet-redis": {"password", "url"},
           "tunefleet-checkpoint-key": {"key"}, "tunefleet-s3": {"access-key-id", "secret-access-key"},
           "tunefleet-tls": {"tls.crt", "tls.key", "ca.crt"}}
# Environment variables read by other programs than tunefleet, each with its reader.
FOREIGN_ENV = {"DS_ACCELERATOR": "DeepSpeed's accelerator choice", "REDISCLI_AUTH": "redis-cli's password",
               "AWS_ENDPOINT_URL": "botocore's S3 endpoint", "AWS_ACCESS_KEY_ID": "botocore's credentials",
               "AWS_SECRET_ACCESS_KEY": "botocore's credentials",
               "AWS_SHARED_CREDENTIALS_FILE": "botocore's credentials file",
               "MINIO_ROOT_USER_FILE": "MinIO's root user", "MINIO_ROOT_PASSWORD_FILE": "MinIO's root password",
               "POD_NAMESPACE": "the Sentinel set's start scripts (deploy/k8s/overlays/redis-sentinel/*.sh)"}


def _tool(name: str, path: Path | None = None) -> str:
    found = str(path) if path is not None and path.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is missing: run 'make deploy-tools' (make test does)")
    return found


def _render(overlay: str) -> list[dict[str, Any]]:
    out = subprocess.run([_tool("kubectl"), "kustomize", str(DEPLOY / "k8s" / "overlays" / overlay)],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {overlay: _render(overlay) for overlay in OVERLAYS}


def _pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(workload name, pod spec, pod template metadata) of every workload."""
    for obj in objects:
        template = obj.get("spec", {}).get("template")
        if template:
            yield obj["metadata"]["name"], template["spec"], template.get("metadata", {})


def _containers(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, spec, _ in _pod_specs(objects):
        for container in spec["containers"]:
            yield name, container


class Dockerfile:
    """The final stages of one Dockerfile: their ENTRYPOINT, CMD and HEALTHCHECK."""

    def __init__(self, path: Path) -> None:
        self.text = path.read_text()
        self.stages: dict[str, dict[str, list[str]]] = {}
        stage: dict[str, list[str]] = {}
        for line in re.sub(r"\\\n\s*", " ", self.text).splitlines():
            if m := re.match(r"FROM \S+ AS (\S+)", line):
                stage = self.stages.setdefault(m.group(1), {})
            elif m := re.match(r"(ENTRYPOINT|CMD) (\[.*\])", line):
                stage[m.group(1)] = json.loads(m.group(2))
            elif m := re.match(r"HEALTHCHECK .*CMD (\[.*\])", line):
                stage["HEALTHCHECK"] = json.loads(m.group(1))


DOCKERFILES = {"service": Dockerfile(DEPLOY / "docker" / "service.Dockerfile"),
               "worker": Dockerfile(DEPLOY / "docker" / "worker.Dockerfile")}
IMAGES = {"tunefleet-planner": DOCKERFILES["service"].stages["planner"],
          "tunefleet-executor": DOCKERFILES["service"].stages["executor"],
          "tunefleet-dashboard": DOCKERFILES["service"].stages["dashboard"],
          "tunefleet-worker": DOCKERFILES["worker"].stages["worker"]}


def _image(container: dict[str, Any]) -> str:
    return container["image"].rsplit("/", 1)[-1].split(":")[0].split("@")[0]


def _accepts(command: list[str]) -> None:
    """The tunefleet command line parses with the program's own parser: the command exists and knows every
    flag and value (argparse exits 2 on an unknown flag or a bad value)."""
    assert command[0] == "tunefleet", command
    if command[1] == "worker":
        parser = worker.build_parser()
        rest = command[2:]
    elif command[1:3] == ["serve", "planner"]:
        parser, rest = planner_main.build_parser(), command[3:]
    elif command[1:3] == ["serve", "executor"]:
        parser, rest = executor_main.build_parser(), command[3:]
    elif command[1:3] == ["serve", "dashboard"]:
        parser, rest = dashboard_main.build_parser(), command[3:]
    else:
        parser, rest = cli.build_parser(), command[1:]
    try:
        parser.parse_args(rest)
    except SystemExit as e:
        pytest.fail(f"{shlex.join(command)} does not parse (exit {e.code})")


def _flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


# --- Kubernetes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_object_validates_against_the_kubernetes_schemas(rendered, overlay: str) -> None:
    kinds = {obj["kind"] for obj in rendered[overlay]}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "StatefulSet",
            "NetworkPolicy"} <= kinds
    assert ("PersistentVolumeClaim" in kinds) == (overlay != "object-store"), "a shared volume only where it is used"
    for obj in rendered[overlay]:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)  # raises naming the bad field


def test_the_validator_would_catch_a_bad_manifest(rendered) -> None:
    planner = next(o for o in rendered["dev"] if o["kind"] == "Deployment" and o["metadata"]["name"] == "planner")
    broken = json.loads(json.dumps(planner))
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "fifty"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_checkov_passes_on_the_manifests_and_dockerfiles_with_the_reviewed_skip_list(rendered, tmp_path) -> None:
    for overlay, objects in rendered.items():
        (tmp_path / f"{overlay}.yaml").write_text(yaml.safe_dump_all(objects))
    checkov = _tool("checkov", TOOLS / "bin" / "checkov")
    config = str(DEPLOY / ".checkov.yaml")
    for args in (["-d", str(tmp_path), "--framework", "kubernetes"],
                 ["-d", str(DEPLOY / "docker"), "--framework", "dockerfile"]):
        done = subprocess.run([checkov, "--config-file", config, *args, "--output", "json"], capture_output=True,
                              text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                                           "BC_SKIP_MAPPING": "TRUE"})
        report = json.loads(done.stdout)
        summary = report["summary"]
        failed = [f"{c['check_id']} {c['resource']}" for c in report["results"]["failed_checks"]]
        assert summary["passed"] > 100 and summary["failed"] == 0 and done.returncode == 0, failed


def test_every_tunefleet_container_command_and_probe_is_one_the_code_accepts(rendered) -> None:
    seen = set()
    for objects in rendered.values():
        for _, container in _containers(objects):
            image = _image(container)
            if image not in IMAGES:
                continue
            seen.add(image)
            _accepts(IMAGES[image]["ENTRYPOINT"] + container.get("args", IMAGES[image]["CMD"]))
            for probe in ("readinessProbe", "livenessProbe"):
                command = container.get(probe, {}).get("exec", {}).get("command")
                if command:
                    _accepts(command)
    assert seen == set(IMAGES)


def test_ports_probes_services_and_metrics_match_the_flags(rendered) -> None:
    for objects in rendered.values():
        services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
        for name, spec, meta in _pod_specs(objects):
            for container in spec["containers"]:
                if _image(container) not in ("tunefleet-planner", "tunefleet-executor"):
                    continue
                args = container["args"]
                ports = {p["name"]: p["containerPort"] for p in container["ports"]}
                grpc_port = int(_flag(args, "--address").rsplit(":", 1)[1])  # type: ignore[union-attr]
                metrics_port = int(_flag(args, "--metrics-address").rsplit(":", 1)[1])  # type: ignore[union-attr]
                health_port = int(_flag(args, "--health-address").rsplit(":", 1)[1])  # type: ignore[union-attr]
                assert ports == {"grpc": grpc_port, "metrics": metrics_port, "health": health_port}, name
                assert meta["annotations"]["prometheus.io/port"] == str(metrics_port)
                for probe in ("readinessProbe", "livenessProbe"):
                    p = container[probe]
                    assert p.get("grpc", {}).get("port") == health_port or \
                        f"127.0.0.1:{health_port}" in p["exec"]["command"], (name, probe)
                    if _flag(args, "--tls-cert"):
                        assert "grpc" not in p, "Kubernetes' gRPC probe cannot speak TLS"
                for port in services[name]["spec"]["ports"]:
                    assert port["targetPort"] in ports and port["port"] == ports[port["targetPort"]]


def test_the_dashboard_serves_where_its_probes_and_service_look_and_reaches_both_services(rendered) -> None:
    for overlay, objects in rendered.items():
        services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
        (name, spec, _), = [(n, s, m) for n, s, m in _pod_specs(objects) if n == "dashboard"]
        container = spec["containers"][0]
        port = int(_flag(container["args"], "--address").rsplit(":", 1)[1])  # type: ignore[union-attr]
        assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http": port}
        for probe in ("readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, (overlay, probe)
        assert services[name]["spec"]["ports"][0]["port"] == port
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["TUNEFLEET_EXECUTOR"].endswith(":50052") and env["TUNEFLEET_PLANNER"].endswith(":50051")
        assert ("--tls-ca" in container["args"]) == (overlay != "dev"), "TLS services need the dashboard's CA"


def test_environment_variables_are_ones_the_code_or_a_named_program_reads(rendered) -> None:
    source = "\n".join(p.read_text() for d in ("common", "contract", "planner", "executor", "clients", "dashboard")
                       for p in (ROOT / d).rglob("*.py"))
    names = {e["name"] for objects in rendered.values() for _, c in _containers(objects) for e in c.get("env", [])}
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    names |= {n for s in compose["services"].values() for n in (s.get("environment") or {})}
    assert "TUNEFLEET_REDIS" in names
    for name in names:
        assert f'"{name}"' in source or name in FOREIGN_ENV, f"{name} is read by nothing"


def test_secret_references_resolve_to_documented_secrets_and_keys(rendered) -> None:
    readme = (ROOT / "README.md").read_text()
    generated = {o["metadata"]["name"].rsplit("-", 1)[0]: set(o["data"]) for o in rendered["dev"]
                 if o["kind"] == "Secret"}
    for overlay, objects in rendered.items():
        for _, spec, _ in _pod_specs(objects):
            refs = [(v["secret"]["secretName"], None) for v in spec.get("volumes", []) if "secret" in v]
            refs += [(e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
                     for c in spec["containers"] for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})]
            for name, key in refs:
                base = name.rsplit("-", 1)[0] if overlay == "dev" and name not in SECRETS else name
                assert base in SECRETS and (key is None or key in SECRETS[base]), (overlay, name, key)
                assert f"kubectl -n tunefleet create secret generic {base} " in readme, f"README: create {base}"
    assert generated == {k: v for k, v in SECRETS.items() if k not in ("tunefleet-tls", "tunefleet-s3")}


def test_workers_get_a_grace_period_that_covers_the_drain_and_their_checkpoints_reach_each_other(rendered) -> None:
    """Every worker's checkpoints reach the others: a work dir all of them mount (a ReadWriteMany claim, with
    --work-dir-shared) or, in the object-store overlay, the store every one of them keeps checkpoints in."""
    for overlay, objects in rendered.items():
        workers = [(n, s) for n, s, _ in _pod_specs(objects) if _image(s["containers"][0]) == "tunefleet-worker"]
        assert workers
        claims = set()
        for name, spec in workers:
            args = spec["containers"][0]["args"]
            drain_s = float(_flag(args, "--drain-grace-s") or DEFAULT_DRAIN_GRACE_S)
            assert spec["terminationGracePeriodSeconds"] > drain_s + STOP_GRACE_S, name
            env = {e["name"]: e for e in spec["containers"][0]["env"]}
            assert env["TUNEFLEET_WORKER_ADDRESS"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}, name
            mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
            volume = next(v for v in spec["volumes"] if v["name"] == mounts[_flag(args, "--work-dir")])
            if overlay == "object-store":
                assert "--work-dir-shared" not in args and "emptyDir" in volume, name
                store = env["TUNEFLEET_CHECKPOINT_STORE"]["valueFrom"]["configMapKeyRef"]
                config = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == store["name"])
                assert config["data"][store["key"]].startswith("s3://")
                assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"} <= set(env), name
                continue
            assert "--work-dir-shared" in args
            claims.add(volume["persistentVolumeClaim"]["claimName"])
        pvcs = {o["metadata"]["name"]: o for o in objects if o["kind"] == "PersistentVolumeClaim"}
        assert all(pvcs[c]["spec"]["accessModes"] == ["ReadWriteMany"] for c in claims)
    gpu = [s for n, s, _ in _pod_specs(rendered["prod"]) if n.startswith("worker-")]
    assert {s["nodeSelector"]["tunefleet.io/gpu-class"] for s in gpu} == {"a100-80gb", "h100-sxm-80gb"}
    assert all(s["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] > 0 for s in gpu)


def test_only_the_executor_and_the_workers_reach_redis_workers_reach_each_other_and_redis_keeps_its_aof(
        rendered) -> None:
    policy = next(o for o in rendered["prod"] if o["kind"] == "NetworkPolicy"
                  and o["spec"]["podSelector"].get("matchLabels") == {"app.kubernetes.io/name": "redis"})
    allowed = {p["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for p in policy["spec"]["ingress"][0]["from"]}
    assert allowed == {"executor", "worker"}
    gang = next(o for o in rendered["prod"] if o["kind"] == "NetworkPolicy"
                and o["spec"]["podSelector"].get("matchLabels") == {"app.kubernetes.io/name": "worker"})
    workers = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "worker"}}}
    assert gang["spec"]["ingress"] == [{"from": [workers]}], "workers reach workers, any port, nothing else"
    conf = next(o for o in rendered["prod"] if o["kind"] == "ConfigMap")["data"]["redis.conf"]
    assert "appendonly yes" in conf
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    assert compose["services"]["redis"]["command"][1:3] == ["--appendonly", "yes"]


# --- compose and images -----------------------------------------------------------------------------------


def test_the_compose_file_validates_against_the_compose_specification() -> None:
    spec = TOOLS / "compose_spec.json"
    if not spec.exists():
        pytest.fail("the compose schema is missing: run 'make deploy-tools' (make test does)")
    schema = json.loads(spec.read_text())
    validator = jsonschema.Draft7Validator(schema)
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    assert [e.message for e in validator.iter_errors(compose)] == []
    compose["services"]["planner"]["helthcheck"] = {}
    assert list(validator.iter_errors(compose)), "the schema would catch a misspelt key"


def test_compose_services_run_commands_the_code_accepts_in_a_health_gated_order() -> None:
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    services = compose["services"]
    for name, service in services.items():
        image = service.get("image", "").split(":")[0]
        if image in IMAGES:
            _accepts(IMAGES[image]["ENTRYPOINT"] + service["command"])
            if "healthcheck" in service:
                _accepts(service["healthcheck"]["test"][1:])
        for dependency, condition in (service.get("depends_on") or {}).items():
            if services[dependency].get("restart") == "no":  # a one-shot step (the store's bucket): done first
                assert condition == {"condition": "service_completed_successfully"}, name
                continue
            assert condition == {"condition": "service_healthy"} and "healthcheck" in services[dependency], name
    assert services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"


def test_images_install_the_versions_the_tests_use_and_start_commands_that_exist() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    train = {re.split(r"[=<>!~ ]", r, maxsplit=1)[0]: r for r in pyproject["optional-dependencies"]["train"]}
    makefile = (ROOT / "Makefile").read_text()
    # the Makefile installs torch and DeepSpeed first (the local CPU build, then DeepSpeed against it), every
    # install under the recorded versions
    pinned = "install -q -c constraints.txt"
    assert f"{pinned} {train['torch']}" in makefile and f'"{train["deepspeed"]}"' in makefile
    assert makefile.count(pinned) == 3
    service, worker = DOCKERFILES["service"].text, DOCKERFILES["worker"].text
    assert "--no-binary=tunefleet -c constraints.txt . &&" in service, "the planner image installs the core only"
    assert '--no-binary=tunefleet -c constraints.txt ".[queue]"' in service
    assert '-c constraints.txt ".[train,queue,store]"' in worker
    assert '["optional-dependencies"]["train"]' in worker and 'd.startswith("torch")' in worker
    for text in (service, worker):
        assert all("@sha256:" in line for line in text.splitlines()
                   if line.startswith("FROM ") and not re.match(r"FROM (base|source|runtime) ", line))
    for stage in IMAGES.values():
        _accepts(stage["ENTRYPOINT"] + stage["CMD"])
        if "HEALTHCHECK" in stage:
            _accepts(stage["HEALTHCHECK"])
    assert "USER 10001:10001" in service and "USER 10001:10001" in worker
