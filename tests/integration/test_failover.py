"""Issue 52's drill: the fleet's Redis fails over under load and nothing is lost or run twice. Real redis-server x3 (a
primary and two replicas, append-only files on) and redis-sentinel x3 on loopback, a real executor service and two
real `tunefleet worker` processes on the Sentinel URL; the workers' runs are devtools.sim_train (the worker's claim,
lease, events, checkpoints and ledger are the real ones; DeepSpeed through a Redis outage: test_resilience).

Why three servers, not two: the fleet's promise writes wait for a replica (fleet.durability), so after the primary is
lost a replica must remain for the fleet to make promises again before the lost server comes back."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tunefleet.v1 import plan_pb2, progress_pb2

from benchmarks.failover import holds
from clients.errors import Unavailable
from clients.executor_client import ExecutorClient
from contract.progress import read_events
from devtools.local_sentinel import SentinelSet, start_sentinel_set
from devtools.sim_train import SIM_STEPS
from executor.service.scoping import fleet_id
from fleet import connection
from fleet.keys import PREFIX
from fleet.ledger import Ledger
from tests.integration.fleet_helpers import assert_once_in_order, events_at_end, fleet_plan, identities, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.drill, pytest.mark.timeout(600)]
PEOPLE = [("alice", "nlp", "submitter"), ("vic", "vision", "submitter"), ("root", "ops", "admin")]
TEAMS = '[[team]]\nname = "nlp"\n\n[[team]]\nname = "vision"\n\n[prices]\n"cpu" = 1.0\n'
SIM = ("-m", "devtools.sim_worker", "1")  # a real worker whose runs are simulated (devtools.sim_worker)
LONG_S, SHORT_S = 5_000.0, 300.0  # predicted seconds; a simulated run holds its host 1/1000 of that (sim_train)
QUEUED_JOBS = 20
FAILOVER_S = 60.0  # promotion, and the fleet back, well within this on a loaded 2-core machine
LEASE_TTL_S = 10  # a hold whose charge no replica confirmed is charged by the sweep once its lease lapses


def _plan(tiny_model: Path, data: Path, job_id: str, duration_s: float) -> plan_pb2.Plan:
    plan = fleet_plan(tiny_model, data, job_id)
    e = plan.prediction.estimate
    e.duration_s = e.duration_s_low = e.duration_s_high = duration_s
    return plan


@pytest.fixture()
def sentinel_set(tmp_path: Path) -> Iterator[SentinelSet]:
    """Asked for before the service and worker fixtures, so it outlives them."""
    directory = tmp_path / "redis"
    directory.mkdir()
    started = start_sentinel_set(directory, replicas=2)
    yield started
    started.stop()


class HealthLog:
    """The executor's health as a load balancer polls it, every transition kept (a thread, until stopped)."""

    def __init__(self, address: str) -> None:
        self.seen: list[int] = []
        self._stop = threading.Event()
        self._channel = grpc.insecure_channel(address)
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        stub = health_pb2_grpc.HealthStub(self._channel)
        while not self._stop.wait(0.05):
            try:
                status = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0).status
            except grpc.RpcError:
                continue
            if not self.seen or self.seen[-1] != status:
                self.seen.append(status)

    def stop(self) -> list[int]:
        self._stop.set()
        self._thread.join(timeout=5)
        self._channel.close()
        return self.seen


def _submit_until_ok(client: ExecutorClient, plan: plan_pb2.Plan, team: str, refused: Counter[str]) -> None:
    """Submit as a client does through a failover: UNAVAILABLE is retried with the same plan (Submit is idempotent)."""
    deadline = time.monotonic() + FAILOVER_S
    while True:
        try:
            client.submit(plan, team=team)
            return
        except Unavailable:
            refused[plan.plan_id] += 1
            if time.monotonic() > deadline:
                raise


def _holds(events: list[progress_pb2.ProgressEvent]) -> list[str]:
    """The hosts that took the job, in order; failing when one took it while another still held it."""
    hosts, overlaps = holds(events)
    assert overlaps == 0, f"job {events[0].job_id} taken again while held: {hosts}"
    return hosts


def _drill(sentinel_set: SentinelSet, start_service: Callable[..., object], start_worker: Callable[..., object],
           tiny_model: Path, data: Path, tmp_path: Path, fail: Callable[[SentinelSet], None]) -> None:
    url = sentinel_set.url
    service = start_service(url=url, identities=identities(tmp_path / "auth.toml", PEOPLE, TEAMS),
                            sweep_interval_s=0.5)
    shared = tmp_path / "shared"
    shared.mkdir()
    for host in ("host-a", "host-b"):
        start_worker(host, shared_dir=shared, url=url, entry=SIM, extra=("--lease-ttl-s", str(LEASE_TTL_S)))
    address = service.address  # type: ignore[attr-defined]
    health = HealthLog(address)
    refused: Counter[str] = Counter()
    queued = {f"q-{i:02d}": ("nlp", "vision")[i % 2] for i in range(QUEUED_JOBS)}
    with ExecutorClient(address, token="alice-token", timeout_s=30) as alice, \
            ExecutorClient(address, token="vic-token", timeout_s=30) as vic, \
            ExecutorClient(address, token="root-token", timeout_s=30) as root:
        as_team = {"nlp": alice, "vision": vic}
        wait_for(lambda: len(root.fleet().hosts) == 2, "both workers to register")
        for job_id, team in (("long-a", "nlp"), ("long-b", "vision")):
            as_team[team].submit(_plan(tiny_model, data, job_id, LONG_S))
        wait_for(lambda: alice.get("long-a").phase == vic.get("long-b").phase == progress_pb2.PHASE_TRAINING,
                 "both long jobs to train")
        for job_id, team in list(queued.items())[:QUEUED_JOBS // 2]:
            as_team[team].submit(_plan(tiny_model, data, job_id, SHORT_S))
        old = sentinel_set.primary()
        failed: list[BaseException] = []

        def submit_rest() -> None:  # the other half arrives while the primary fails
            try:
                for job_id, team in list(queued.items())[QUEUED_JOBS // 2:]:
                    _submit_until_ok(as_team[team], _plan(tiny_model, data, job_id, SHORT_S), team, refused)
            except BaseException as e:  # the test fails with it below
                failed.append(e)
        submitting = threading.Thread(target=submit_rest)
        submitting.start()
        fail(sentinel_set)
        new = sentinel_set.wait_for_promotion(old, FAILOVER_S)
        submitting.join(timeout=FAILOVER_S * 2)
        assert not submitting.is_alive() and not failed, f"Submits did not get through after the failover: {failed}"
        owners = {"long-a": alice, "long-b": vic, **{j: as_team[t] for j, t in queued.items()}}
        events = {j: events_at_end(client, j, timeout_s=120) for j, client in owners.items()}
        records = {j: client.get(j) for j, client in owners.items()}
    statuses = health.stop()
    for job_id, job in records.items():
        assert job.phase == progress_pb2.PHASE_DONE and events[job_id][-1].step == SIM_STEPS, \
            (job_id, job.phase, job.error)
        assert_once_in_order(events[job_id])
        in_file = read_events(Path(job.output_uri) / "progress.jsonl")
        assert [e.sequence for e in events[job_id]] == [e.sequence for e in in_file], \
            f"{job_id}: the stream and the run's own record disagree"
        assert _holds(events[job_id]), f"{job_id} never ran"
    fleet_redis = connection.connect(url)
    fleet_ids = {j: fleet_id(j, "nlp" if j == "long-a" else "vision" if j == "long-b" else queued[j]) for j in records}
    holds_of = {j: len(_holds(events[j])) for j in records}

    def charged_once() -> bool:  # a charge no replica confirmed is made by the sweep once its lease lapses
        charged = Counter(h["job"] for h in Ledger(fleet_redis).holds(0, 10_000))
        assert all(charged[fleet_ids[j]] <= n for j, n in holds_of.items()), f"a hold charged twice: {charged}"
        return all(charged[fleet_ids[j]] == n for j, n in holds_of.items())
    wait_for(charged_once, "every hold to be charged once", timeout_s=LEASE_TTL_S * 4)
    for job_id in records:
        assert float(fleet_redis.hget(f"{PREFIX}job:{fleet_ids[job_id]}", "gpu_seconds") or 0) > 0, job_id
    assert health_pb2.HealthCheckResponse.NOT_SERVING in statuses, f"the gap was not reported: {statuses}"
    assert statuses[-1] == health_pb2.HealthCheckResponse.SERVING, statuses
    # the old primary, restarted (or woken) with what it held, follows the new one and holds what it holds
    if old.proc.poll() is not None:
        old.restart()
    sentinel_set.wait_until_replica(old, new, FAILOVER_S)
    with old.client() as o, new.client() as n:
        wait_for(lambda: o.info("replication")["master_repl_offset"] >= n.info("replication")["master_repl_offset"],
                 "the old primary to catch up")
        assert sorted(o.scan_iter(f"{PREFIX}job:*")) == sorted(n.scan_iter(f"{PREFIX}job:*"))
        assert o.dbsize() == n.dbsize()


def test_killing_the_primary_loses_no_job_and_runs_none_twice(sentinel_set, start_service, start_worker, tiny_model,
                                                              counting_data, tmp_path):
    _drill(sentinel_set, start_service, start_worker, tiny_model, counting_data, tmp_path,
           lambda s: s.kill(s.primary()))


def test_a_paused_primary_that_wakes_believing_it_leads_loses_nothing(sentinel_set, start_service, start_worker,
                                                                      tiny_model, counting_data, tmp_path):
    paused: list[object] = []

    def pause_then_wake(s: SentinelSet) -> None:
        old = s.primary()
        s.pause(old)
        paused.append(old)
        s.wait_for_promotion(old, FAILOVER_S)
        s.resume(old)  # it still believes it is the primary, until the sentinels tell it otherwise

    _drill(sentinel_set, start_service, start_worker, tiny_model, counting_data, tmp_path, pause_then_wake)
    assert paused


def test_a_fence_the_old_primary_granted_and_no_replica_holds_never_runs(sentinel_set, start_service, start_worker,
                                                                       tiny_model, counting_data, tmp_path):
    """Item 3: the replicas stop taking the primary's writes; a worker claims a job there (a new fence no replica
    holds), then the primary dies. Without a confirmed claim the worker never starts the run, so when the promoted
    replica (which still has the job queued under its old fence) hands it to a host, it runs there once."""
    url = sentinel_set.url
    service = start_service(url=url, sweep_interval_s=0.5)
    shared = tmp_path / "shared"
    shared.mkdir()
    with ExecutorClient(service.address, timeout_s=30) as client:
        client.submit(_plan(tiny_model, counting_data, "fenced", SHORT_S))  # confirmed on both replicas
        old = sentinel_set.primary()
        replicas = [n for n in sentinel_set.nodes if n is not old]
        for replica in replicas:
            sentinel_set.pause(replica)  # alive, but taking nothing more from the primary
        first = start_worker("host-a", shared_dir=shared, url=url, entry=SIM)
        with old.client() as primary:  # the primary grants host-a a fence, and holds it alone
            wait_for(lambda: int(primary.hget(f"{PREFIX}job:fenced", "fence") or 0) >= 1, "host-a's claim", 60)
            # the run would be starting now if the claim counted (with wait_replicas=0 it does, and this test fails)
            wait_for(lambda: int(primary.hget(f"{PREFIX}job:fenced", "fence") or 0) >= 2,
                     "host-a's claim to be given back, unconfirmed", 60)
        sentinel_set.kill(old)
        for replica in replicas:
            sentinel_set.resume(replica)
        sentinel_set.wait_for_promotion(old, FAILOVER_S)
        start_worker("host-b", shared_dir=shared, url=url, entry=SIM)
        events = events_at_end(client, "fenced", timeout_s=120)
        job = client.get("fenced")
    assert job.phase == progress_pb2.PHASE_DONE and events[-1].step == SIM_STEPS
    assert len(_holds(events)) == 1, f"the job ran more than once: {_holds(events)}"
    assert_once_in_order(events)
    in_file = read_events(Path(job.output_uri) / "progress.jsonl")
    assert [e.sequence for e in events] == [e.sequence for e in in_file], "a run that never held the job wrote"
    assert [e.step for e in in_file if e.phase == progress_pb2.PHASE_TRAINING] == \
        [s for s in range(1, SIM_STEPS + 1) if s % 5], "one run, each step once"
    assert '"what": "claim"' in first.log.read_text(), "host-a's claim was not refused for want of a replica"


def test_a_sentinel_connection_whose_read_was_interrupted_is_not_reused(sentinel_set):
    """redis-py's Sentinel connection keeps a connection whose reply was never read (redis/redis-py#4292); the
    fleet's drops it, so the next command gets its own reply."""
    client = connection.connect(sentinel_set.url)
    client.set("probe", "value")

    class ReadInterruptedError(Exception):
        pass

    def interrupt(*_: object) -> None:
        raise ReadInterruptedError

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(ReadInterruptedError):
            client.blpop(["never-pushed"], timeout=5)  # blocks until the signal interrupts the read
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert client.ping() is True
    assert client.get("probe") == b"value"


def test_a_command_in_flight_when_the_primary_dies_completes_on_the_promoted_replica(sentinel_set):
    """A blocking read (the service's event hub) in flight when the primary is killed is retried on the primary the
    sentinels name after the failover, not on the dead one's address until its retries run out
    (redis/redis-py#3874)."""
    client = connection.connect(sentinel_set.url)
    first = client.xadd("stream", {"n": 1})
    result: list[object] = []
    reading = threading.Thread(target=lambda: result.append(client.xread({"stream": first}, block=10_000)))
    reading.start()
    wait_for(lambda: any(c.get("cmd") == "xread" for c in sentinel_set.primary().client().client_list()),
             "the read to be in flight")
    old = sentinel_set.primary()
    sentinel_set.kill(old)
    sentinel_set.wait_for_promotion(old, FAILOVER_S)
    client.xadd("stream", {"n": 2})  # on the new primary: what the read, retried there, wakes up to
    reading.join(timeout=FAILOVER_S)
    assert not reading.is_alive() and result, "the read did not complete"
    assert result[0][0][1][0][1] == {b"n": b"2"}  # type: ignore[index]
