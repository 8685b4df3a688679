"""Every image's package set installs and starts — the image test that needs no container engine.

Each image of deploy/docker installs one package set: the planner image the base install (`pip install .`), the
dashboard image `.[dashboard]`, the executor-service image `.[queue]`, the worker image `.[train,queue,store]`.
For each, the test installs that set from what the Dockerfile copies into a virtualenv of its own (pip, under
constraints.txt, as the Dockerfile does), runs the image's ENTRYPOINT with --help, starts it as its CMD says
(ports made free) and runs its HEALTHCHECK command against it. The suite's own venv has every extra, which would
hide an import only an extra provides; this one has only what the image has.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.net import free_port
from common.wait import wait_until
from tests.deploy.test_deploy import IMAGES

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"
INSTALL_TIMEOUT_S = 900
START_TIMEOUT_S = 60
pytestmark = pytest.mark.install


def _pip(venv: Path, *args: str) -> None:
    # --no-compile: byte-compiling torch and transformers is most of an install's time, and proves nothing here
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-compile", "-c", str(CONSTRAINTS), *args],
                          capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    assert done.returncode == 0, f"pip install {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the images' build stage copies (the Dockerfile's own COPY lines), and nothing else: a file the install
    needs and the Dockerfile forgets fails here; pip builds in this copy, not in the checkout."""
    tree = tmp_path_factory.mktemp("source")
    copies = [line.split()[1:] for line in (ROOT / "deploy" / "docker" / "service.Dockerfile").read_text().splitlines()
              if line.startswith("COPY ") and "--from" not in line]
    for *sources, destination in copies:
        for name in sources:
            if (ROOT / name).is_dir():
                shutil.copytree(ROOT / name, tree / destination, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(ROOT / name, tree / name)
    return tree


def _venv(tmp_path_factory: pytest.TempPathFactory, source: Path, extras: str) -> Path:
    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    _pip(venv, "--upgrade", "pip", "setuptools", "wheel")
    _pip(venv, f"{source}{extras}")
    return venv


def _run(venv: Path, command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    program = str(venv / "bin" / command[0])
    return subprocess.run([program, *command[1:]], capture_output=True, text=True, timeout=120, cwd=venv.parent,
                          **kwargs)  # type: ignore[call-overload]


def _freed(command: list[str]) -> tuple[list[str], dict[str, str]]:
    """The CMD with every host:port flag given a free loopback port; and the new address of each flag."""
    freed, addresses = list(command), {}
    for i, arg in enumerate(command[:-1]):
        if arg.endswith("-address"):
            addresses[arg] = freed[i + 1] = f"127.0.0.1:{free_port()}"
    return freed, addresses


# One virtualenv grows through the package sets, in the order of the tests below: installing an extra on top of a
# set yields exactly the larger set, so each check still sees only what its image installs — but for the
# dashboard's web packages (Starlette, Jinja2, uvicorn), which the executor and worker checks then also have and
# import nowhere.
@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory, source: Path) -> Path:
    return _venv(tmp_path_factory, source, "")


@pytest.fixture(scope="module")
def dashboard_venv(core_venv: Path, source: Path) -> Path:
    _pip(core_venv, f"{source}[dashboard]")
    return core_venv


@pytest.fixture(scope="module")
def queue_venv(dashboard_venv: Path, source: Path) -> Path:
    _pip(dashboard_venv, f"{source}[queue]")
    return dashboard_venv


@pytest.fixture(scope="module")
def worker_venv(queue_venv: Path, source: Path) -> Path:
    _pip(queue_venv, "torch==2.13.0")  # as the worker image and `make install` do: torch, then DeepSpeed against it
    _pip(queue_venv, "--no-build-isolation", "deepspeed")
    _pip(queue_venv, f"{source}[train,queue,store]")
    return queue_venv


@pytest.fixture()
def started() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _serves(venv: Path, image: str, started: list[subprocess.Popen[str]], *extra: str) -> None:
    stage = IMAGES[image]
    helped = _run(venv, [*stage["ENTRYPOINT"], "--help"])
    assert helped.returncode == 0 and "usage:" in helped.stdout, helped.stderr
    cmd, addresses = _freed(stage["CMD"])
    started.append(subprocess.Popen([str(venv / "bin" / stage["ENTRYPOINT"][0]), *stage["ENTRYPOINT"][1:], *cmd,
                                     *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    cwd=venv.parent))
    health = [*stage["HEALTHCHECK"][:-1], addresses["--health-address"]]
    assert stage["HEALTHCHECK"][-1].startswith("127.0.0.1:"), "the check names the health port the CMD binds"
    checks: list[subprocess.CompletedProcess[str]] = []

    def healthy() -> bool:
        assert started[-1].poll() is None, f"{image} exited: {started[-1].stdout.read() if started[-1].stdout else ''}"
        checks.append(_run(venv, health))
        return checks[-1].returncode == 0

    wait_until(healthy, START_TIMEOUT_S, poll_s=0.5)
    assert "Traceback" not in checks[-1].stderr


def test_the_base_install_plans_and_the_planner_image_serves_and_answers_its_healthcheck(core_venv: Path,
                                                                                         started: list) -> None:
    fit = _run(core_venv, ["tunefleet", "fit", "--model", "meta-llama/Llama-3.1-8B", "--method", "qlora",
                           "--gpu", "rtx-4090"])
    assert fit.returncode == 0 and fit.stdout.startswith("FITS: meta-llama/Llama-3.1-8B"), fit.stderr
    imported = _run(core_venv, ["python", "-c", "import torch"])
    assert imported.returncode != 0, "the base install must not carry the training stack"
    _serves(core_venv, "tunefleet-planner", started)


def test_the_base_install_says_which_extra_the_dashboard_needs(core_venv: Path) -> None:
    ran = _run(core_venv, ["tunefleet", "serve", "dashboard", "--executor", "127.0.0.1:1"])
    assert ran.returncode == 2 and "pip install 'tunefleet[dashboard]'" in ran.stderr, ran.stderr
    assert "Traceback" not in ran.stderr


def test_the_dashboard_image_serves_without_torch_or_redis_and_answers_its_healthcheck(dashboard_venv: Path,
                                                                                       started: list) -> None:
    stage = IMAGES["tunefleet-dashboard"]
    helped = _run(dashboard_venv, [*stage["ENTRYPOINT"], "--help"])
    assert helped.returncode == 0 and "usage:" in helped.stdout, helped.stderr
    for absent in ("torch", "redis", "rq"):
        assert _run(dashboard_venv, ["python", "-c", f"import {absent}"]).returncode != 0, f"{absent} is installed"
    cmd, _ = _freed(stage["CMD"])
    port = free_port()
    cmd[cmd.index("--address") + 1] = f"127.0.0.1:{port}"
    started.append(subprocess.Popen([str(dashboard_venv / "bin" / stage["ENTRYPOINT"][0]), *stage["ENTRYPOINT"][1:],
                                     *cmd, "--executor", "127.0.0.1:1"], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, cwd=dashboard_venv.parent))
    assert stage["HEALTHCHECK"][-1] == "http://127.0.0.1:8080/healthz", "the check names the port the CMD binds"
    health = [*stage["HEALTHCHECK"][:-1], f"http://127.0.0.1:{port}/healthz"]
    checks: list[subprocess.CompletedProcess[str]] = []

    def healthy() -> bool:
        assert started[-1].poll() is None, f"the dashboard exited: {started[-1].stdout.read()}"  # type: ignore[union-attr]
        checks.append(_run(dashboard_venv, health))
        return checks[-1].returncode == 0

    wait_until(healthy, START_TIMEOUT_S, poll_s=0.5)
    assert "SERVING" in checks[-1].stdout and "Traceback" not in checks[-1].stderr


def test_the_executor_image_serves_against_redis_and_answers_its_healthcheck(queue_venv: Path, redis_url: str,
                                                                             started: list) -> None:
    _serves(queue_venv, "tunefleet-executor", started, "--redis", redis_url)
    trained = _run(queue_venv, ["tunefleet", "train", "plan.json"])
    assert trained.returncode == 2 and "Traceback" not in trained.stderr, trained.stderr


def test_the_worker_image_starts_registers_and_drains(worker_venv: Path, redis_url: str, tmp_path: Path) -> None:
    stage = IMAGES["tunefleet-worker"]
    helped = _run(worker_venv, [*stage["ENTRYPOINT"], "--help"])
    assert helped.returncode == 0 and "usage:" in helped.stdout, helped.stderr
    # The image has no HEALTHCHECK (no port: its liveness is its heartbeat in Redis); it starts, registers, finds
    # its queues empty and stops (--burst), with its work dir where the test says.
    ran = _run(worker_venv, [*stage["ENTRYPOINT"], "--work-dir", str(tmp_path), "--redis", redis_url,
                             "--gpu-class", "cpu", "--burst"])
    assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
    assert "worker.started" in ran.stdout + ran.stderr and "worker.stopped" in ran.stdout + ran.stderr
    checked = _run(worker_venv, ["tunefleet", "train", "--help"])
    assert checked.returncode == 0 and "usage: tunefleet train" in checked.stdout
