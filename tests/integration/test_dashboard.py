"""Issue 27: the dashboard in a real browser (Playwright driving Debian's Chromium, no browser download) against a
real fleet on loopback: a real executor service with an identities file over the test's redis-server, a real
worker training the tiny model, the planner service, and `python -m dashboard` serving under a path prefix.

Screenshots of every page are saved under $TUNEFLEET_SCREENSHOTS when it is set (the README's come from here),
else under the test's temporary directory, and each is checked to be a real PNG of the page."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import json_format
from playwright.sync_api import sync_playwright
from tunefleet.v1 import executor_pb2, progress_pb2

from clients.executor_client import ExecutorClient
from common.identity import Identities, token_sha256
from fleet import connection, queues
from fleet.jobs import NewJob
from fleet.lifecycle import Lifecycle
from tests.integration.conftest import serve_process
from tests.integration.fleet_helpers import fleet_plan, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
ROOT = "/tunefleet"  # the dashboard is served under an ingress-style prefix throughout
PEOPLE = {"alice": ("vision", "submitter"), "vic": ("vision", "viewer")}
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PAGE_LOAD_GOAL_S = 1.0
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _token(principal: str) -> str:
    return f"{principal}-dashboard-token"


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: run 'make chromium' (apt-get install chromium)")
    with sync_playwright() as p:
        # --no-sandbox: CI runs the suite as root in a container, where Chromium's sandbox cannot start
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture()
def shots(tmp_path: Path) -> Path:
    target = Path(os.environ.get("TUNEFLEET_SCREENSHOTS") or tmp_path / "screenshots")
    target.mkdir(parents=True, exist_ok=True)
    return target


def _screenshot(page: object, shots: Path, name: str) -> None:
    path = shots / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    assert path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 5_000, f"{path} is not a page's screenshot"


@pytest.fixture()
def fleet(start_service, tmp_path: Path, planner_address: str) -> Iterator[dict[str, str]]:
    """An executor service with two identities of team vision, and the dashboard in front of it and the planner."""
    ids = tmp_path / "identities.toml"
    ids.write_text("".join(f'[[identity]]\nprincipal = "{p}"\nteam = "{t}"\nrole = "{r}"\n'
                           f'token_sha256 = "{token_sha256(_token(p))}"\n\n' for p, (t, r) in PEOPLE.items()))
    service = start_service(identities=Identities.from_file(ids), max_queued_per_caller=0, max_queued_per_team=0)
    proc, address = serve_process("dashboard", "--executor", service.address, "--planner", planner_address,
                                  "--root-path", ROOT)
    yield {"executor": service.address, "url": f"http://{address}{ROOT}"}
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, "the dashboard did not stop cleanly on SIGTERM"


def _login(browser: object, url: str, principal: str, shots: Path | None = None) -> object:
    # bypass_csp: Playwright evaluates its waiting conditions as strings, which the page's CSP forbids (as it should)
    page = browser.new_context(viewport={"width": 1400, "height": 900}, bypass_csp=True).new_page()  # type: ignore[attr-defined]
    page.goto(f"{url}/jobs")
    assert page.url.endswith(f"{ROOT}/login"), "a page without a session must send people to the login page"
    if shots:
        _screenshot(page, shots, "login")
    page.fill("#token", _token(principal))
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/jobs")
    return page


def _cli(*args: str, principal: str = "alice", executor: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "launch", *args, "--executor", executor,
                             "--token", _token(principal)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _points(page: object, chart: str) -> int:
    return int(page.get_attribute(f"#{chart}", "data-points") or 0)  # type: ignore[attr-defined]


def test_a_job_from_the_cli_trains_live_on_its_page_and_a_cancel_from_the_page_reaches_the_cli(
        browser, fleet, start_worker, tiny_model, counting_data, tmp_path, shots):
    url, executor = fleet["url"], fleet["executor"]
    start_worker()
    alice = _login(browser, url, "alice", shots)

    steps = 40
    plan_file = tmp_path / "dash-1.json"
    plan_file.write_text(json_format.MessageToJson(fleet_plan(tiny_model, counting_data, "dash-1", max_steps=steps,
                                                              checkpoint_every=20)))
    submitted = _cli("submit", str(plan_file), executor=executor)
    assert submitted.wait(timeout=60) == 0, submitted.stdout.read() if submitted.stdout else ""

    alice.goto(f"{url}/jobs")
    assert alice.locator('tr[data-job="dash-1"]').count() == 1, "the job the CLI submitted is not on Jobs"
    alice.click('tr[data-job="dash-1"] a')
    alice.wait_for_url(f"{url}/jobs/dash-1")
    alice.evaluate("window.__sameDocument = true")  # gone if the page reloads
    alice.wait_for_function("document.getElementById('phase').textContent === 'training'", timeout=240_000)
    alice.wait_for_function("document.getElementById('host').textContent === 'host-a'", timeout=30_000)
    assert alice.locator("#waiting").is_hidden(), "a running job's header still says why it waits"
    while_training = _points(alice, "chart-loss")
    alice.wait_for_function("document.getElementById('phase').textContent === 'done'", timeout=240_000)
    assert alice.evaluate("window.__sameDocument === true"), "the page reloaded to show the job's end"
    assert _points(alice, "chart-loss") == steps > while_training, "the loss chart did not gain a point per step"
    assert _points(alice, "chart-memory") == steps
    assert float(alice.get_attribute("#chart-loss", "data-min-y")) > 0, "a checkpoint or done event drew loss 0"
    assert alice.locator("#checkpoints li").count() >= 1 and "step 20" in alice.inner_text("#checkpoints")
    assert alice.locator("#cancel").count() == 0, "a finished job offers Cancel"
    _screenshot(alice, shots, "job")
    # a browser reconnecting with Last-Event-ID gets the events after it, once each, then the end
    events = alice.request.get(f"{url}/jobs/dash-1/events", headers={"last-event-id": "10"}).text()
    ids = [int(line[4:]) for line in events.splitlines() if line.startswith("id: ")]
    assert ids[0] == 11 and ids == list(range(11, ids[-1] + 1))
    assert events.rstrip().endswith(f'event: end\ndata: {{"sequence":{ids[-1]}}}'), events[-300:]
    alice.goto(f"{url}/jobs")
    _screenshot(alice, shots, "jobs")

    # a second, long job: Cancel from the page; the CLI's watch sees CANCELLED
    plan_file.write_text(json_format.MessageToJson(fleet_plan(tiny_model, counting_data, "dash-2", max_steps=100_000)))
    assert _cli("submit", str(plan_file), executor=executor).wait(timeout=60) == 0
    watch = _cli("watch", "dash-2", executor=executor)
    alice.goto(f"{url}/jobs/dash-2")
    alice.wait_for_function("document.getElementById('phase').textContent === 'training'", timeout=240_000)
    alice.click("#cancel")
    alice.wait_for_url(f"{url}/jobs/dash-2")
    out, _ = watch.communicate(timeout=120)
    assert watch.returncode == 5 and "cancelled" in out.lower(), out[-2000:]
    alice.wait_for_function("document.getElementById('phase').textContent === 'cancelled'", timeout=60_000)

    alice.goto(f"{url}/fleet")
    assert "host-a" in alice.inner_text("table.hosts")
    assert _points(alice, "chart-utilisation") >= 1
    assert float(alice.get_attribute("#chart-utilisation", "data-x-span")) <= 3600, "a six-hour axis for a few dots"
    icon = alice.request.get(f"{url}/favicon.ico")
    assert icon.status == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    _screenshot(alice, shots, "fleet")


def test_a_viewer_gets_no_cancel_and_forged_posts_are_refused(browser, fleet, tiny_model, counting_data):
    url, executor = fleet["url"], fleet["executor"]
    with ExecutorClient(executor, token=_token("alice")) as client:
        client.submit(fleet_plan(tiny_model, counting_data, "queued-1"))  # no worker: it stays queued
    alice, vic = _login(browser, url, "alice"), _login(browser, url, "vic")
    shown = alice.goto(f"{url}/jobs/queued-1")
    assert alice.locator("#cancel").count() == 1, "a submitter of the job's team is offered Cancel"
    assert "script-src 'self'" in shown.headers["content-security-policy"]  # type: ignore[union-attr]
    for _ in range(30):  # Cancel is reachable from the keyboard alone
        alice.keyboard.press("Tab")
        if alice.evaluate("document.activeElement.id") == "cancel":
            break
    else:
        pytest.fail("Tab never reaches the Cancel button")
    vic.goto(f"{url}/jobs/queued-1")
    assert vic.locator("#cancel").count() == 0, "a viewer is offered Cancel"

    cancel = f"{url}/jobs/queued-1/cancel"
    vic_csrf = vic.get_attribute('meta[name="csrf-token"]', "content")
    forged = vic.request.post(cancel, form={"csrf": vic_csrf}, max_redirects=0)
    assert forged.status == 403 and "needs the submitter role" in forged.text()
    no_token = alice.request.post(cancel, form={}, max_redirects=0)
    assert no_token.status == 403 and "CSRF" in no_token.text()
    alice_csrf = alice.get_attribute('meta[name="csrf-token"]', "content")
    cross_site = alice.request.post(cancel, form={"csrf": alice_csrf}, headers={"origin": "https://evil.example"},
                                    max_redirects=0)
    assert cross_site.status == 403
    with ExecutorClient(executor, token=_token("alice")) as client:
        assert client.get("queued-1").phase == progress_pb2.PHASE_QUEUED, "a refused POST cancelled the job"

    logged_out = browser.new_context().request.get(f"{url}/jobs/queued-1", max_redirects=0)
    assert logged_out.status == 303 and logged_out.headers["location"].endswith(f"{ROOT}/login")
    assert browser.new_context().request.get(f"{url}/healthz").text() == "ok"


def test_the_plan_page_draws_what_tunefleet_fit_prints_recommends_and_submits(browser, fleet, shots, planner_address,
                                                                             counting_data):
    alice = _login(browser, fleet["url"], "alice")
    alice.goto(f"{fleet['url']}/plan")
    alice.fill("#model", "meta-llama/Llama-3.1-8B")
    alice.select_option("#method", "qlora")
    alice.select_option("#gpu", "rtx-4090-24gb")
    alice.fill("#micro_batch", "2")
    alice.fill("#seq_len", "1024")
    alice.click("#do-fit")
    alice.wait_for_selector("#breakdown")
    shown = {row.get_attribute("data-term"): int(row.get_attribute("data-bytes"))
             for row in alice.query_selector_all("#breakdown tr[data-term]")}
    cli = subprocess.run([sys.executable, "-m", "launch", "fit", "--model", "meta-llama/Llama-3.1-8B", "--method",
                          "qlora", "--gpu", "rtx-4090-24gb", "--micro-batch", "2", "--seq-len", "1024", "--json",
                          "--address", planner_address], capture_output=True, text=True, timeout=60)
    per_gpu = json.loads(cli.stdout)["per_gpu"]
    assert shown["total"] == int(per_gpu["total_bytes"])
    assert shown["capacity"] == int(json.loads(cli.stdout)["capacity_bytes"])
    assert shown["weights"] == int(per_gpu["weights_bytes"])
    assert shown["optimizer states"] == int(per_gpu["optimizer_bytes"])
    assert sum(v for k, v in shown.items() if k not in ("total", "capacity")) == shown["total"], \
        "the bar's segments do not add up to the total"
    _screenshot(alice, shots, "plan-fit")

    alice.fill("#tokens", "5M")
    alice.click("#do-recommend")
    alice.wait_for_selector("#candidates")
    alice.wait_for_load_state("load")  # the chart's script has run
    assert alice.locator("#candidates tbody tr").count() >= 1
    assert _points(alice, "chart-pareto") == alice.locator("#candidates tbody tr").count()
    _screenshot(alice, shots, "plan-recommend")

    alice.fill("#micro_batch", "zero")
    alice.click("#do-fit")
    assert "--micro-batch" in alice.inner_text("#plan-error"), "a bad field must be named"
    alice.fill("#micro_batch", "2")

    # the recommended plan, with a dataset on the fleet's storage, submitted from the page: queued on the fleet
    alice.fill("#dataset", str(counting_data))
    alice.click("#do-recommend")
    alice.wait_for_selector("#candidates")
    alice.click(".submit-plan button")
    alice.wait_for_url(re.compile(rf"{re.escape(fleet['url'])}/jobs/[^/]+$"))
    job_id = alice.url.rsplit("/", 1)[1]
    assert alice.inner_text("#phase") == "queued"
    with ExecutorClient(fleet["executor"], token=_token("alice")) as client:
        queued = client.get(job_id)
    assert (queued.submitter, queued.plan.dataset.local_path) == ("alice", str(counting_data))



def test_jobs_loads_in_under_a_second_with_2000_jobs_in_redis(browser, fleet, redis_url):
    lifecycle = Lifecycle(connection.connect(redis_url))
    template = fleet_plan(Path("/srv/models/tiny"), Path("/srv/data/train.jsonl"), "fill-0")
    for i in range(2_000):
        template.plan_id = f"fill-{i}"
        lifecycle.submit(NewJob(plan=template, queue=queues.QueueRef("cpu", executor_pb2.PRIORITY_NORMAL), gpus=1,
                                timeout_s=3600, submitter="alice", team="vision"))
    alice = _login(browser, fleet["url"], "alice")
    timings = []
    for _ in range(3):
        started = time.monotonic()
        alice.goto(f"{fleet['url']}/jobs", wait_until="load")
        timings.append(time.monotonic() - started)
    assert alice.locator("#jobs tbody tr").count() == 50
    assert min(timings) < PAGE_LOAD_GOAL_S, f"Jobs took {timings} s with 2,000 jobs"
    alice.click('a[rel="next"]')
    # the address changes as the next page is asked for; its rows come once it has loaded
    wait_for(lambda: "page=" in alice.url and alice.locator("#jobs tbody tr").count() == 50, "the next page's 50 rows")
