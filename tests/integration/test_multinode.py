"""Multi-node jobs end to end: a plan with hardware.nodes = 2 is claimed by two real `tunefleet worker` processes
(two "hosts" with their own host ids) as a gang, trained by torchrun on both against the leader's rendezvous with
real DeepSpeed on CPU ranks (gloo), and kept consistent when a node is lost or the fleet lacks hosts."""

from __future__ import annotations

import json
import random
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tunefleet.v1 import plan_pb2, progress_pb2, training_pb2

from clients.executor_client import ExecutorClient
from devtools.local_redis import start_redis_server, stop_redis_server
from devtools.tiny import make_plan, write_plan
from executor.training import checkpoint
from fleet.gangs import MEMBER_TTL_S
from fleet.recovery import FleetPolicy
from tests.integration.fleet_helpers import (
    all_events,
    assert_once_in_order,
    fleet_plan,
    process_tree,
    run_processes,
    send_signal,
    wait_for,
    watch_until,
)
from tests.integration.training_helpers import exported

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
# The other node's ranks stop within this of a member's worker being killed: the member's key expires
# (MEMBER_TTL_S), plus the leader's supervision poll and its process tree's exit.
STOP_BOUND_S = MEMBER_TTL_S + 10.0


def _one_node(plan: plan_pb2.Plan, out: Path) -> dict[str, torch.Tensor]:
    """The same plan on one host with the same world size, through `tunefleet train`."""
    single = plan_pb2.Plan()
    single.CopyFrom(plan)
    single.hardware.gpus_per_node *= single.hardware.nodes
    single.hardware.nodes = 1
    single.output_uri = str(out)
    path = write_plan(single, out.parent / f"{out.name}.json")
    done = subprocess.run([sys.executable, "-m", "executor.training", str(path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return exported(out)


@pytest.mark.parametrize(("method", "zero_stage"), [(training_pb2.METHOD_LORA, 2), (training_pb2.METHOD_FULL, 3)],
                         ids=["lora-zero2", "full-zero3"])
def test_a_two_node_gang_trains_to_done_and_equals_one_node_of_the_same_world_size(
        executor_service, start_worker, tiny_model, counting_data, tmp_path, method, zero_stage):
    shared = tmp_path / "shared"
    start_worker("host-a", shared_dir=shared)
    start_worker("host-b", shared_dir=shared)
    job_id = f"gang-zero{zero_stage}"
    plan = fleet_plan(tiny_model, counting_data, job_id, nodes=2, method=method, zero_stage=zero_stage, max_steps=6,
                      checkpoint_every=3)
    with ExecutorClient(executor_service.address, timeout_s=60) as client:
        wait_for(lambda: len(client.fleet().hosts) == 2, "both workers to register")
        client.submit(plan)
        events = all_events(client, job_id)
        job = client.get(job_id)
    assert events[-1].phase == progress_pb2.PHASE_DONE and events[-1].step == 6, events[-1].message
    assert_once_in_order(events)
    forming = next(e for e in events if e.message.startswith("forming a gang of 2 cpu hosts"))
    formed = next(e for e in events if e.message.startswith("gang formed"))
    member = ({"host-a", "host-b"} - {job.host_id}).pop()
    assert f"node 0 {job.host_id}, node 1 {member};" in formed.message, formed.message
    latency_s = (formed.time.ToNanoseconds() - forming.time.ToNanoseconds()) / 1e9
    print(f"\n{job_id}: gang formed {latency_s:.2f} s after the leader asked; step time "
          f"{job.feedback.measured_step_time_s:.3f} s")
    assert job.feedback.nodes == 2 and job.feedback.world_size == 2

    out = shared / job_id
    assert (out / "logs" / "train.log").stat().st_size and (out / "logs" / "train.node-1.log").stat().st_size
    last = checkpoint.latest(out / "checkpoints")
    assert last is not None and last[0].step == 6 and last[0].world_size == 2
    sealed = set(json.loads((last[1] / checkpoint.MANIFEST).read_text())["files"])
    assert {checkpoint.rng_file(0), checkpoint.rng_file(1)} <= sealed
    assert {r for r in (0, 1) if any(f"zero_pp_rank_{r}_" in name for name in sealed)} == {0, 1}, \
        "the manifest covers both nodes' ZeRO shards"
    assert checkpoint.verify(last[1], checkpoint.signing_key()) == ""

    gang = exported(out)
    single = _one_node(plan, tmp_path / "one-node")
    assert gang.keys() == single.keys()
    for name in gang:
        torch.testing.assert_close(gang[name], single[name], rtol=1e-5, atol=1e-7, msg=name)
    initial = {} if method == training_pb2.METHOD_LORA else load_file(tiny_model / "model.safetensors")
    changed = [n for n, t in gang.items() if ("lora_B" in n and t.abs().sum() > 0)
               or (n in initial and not torch.equal(t, initial[n].to(t.dtype)))]
    assert changed, "training changed no weight: the comparison would prove nothing"


def test_a_checkpoint_missing_one_nodes_shard_is_refused_at_resume(tmp_path):
    step = tmp_path / "checkpoints" / "step-00000004"
    (step / "deepspeed").mkdir(parents=True)
    for rank in (0, 1):
        (step / "deepspeed" / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(b"x" * 8)
    (step / checkpoint.rng_file(0)).write_bytes(b"r")  # rank 1's node never wrote its RNG state
    (step / checkpoint.TRAINER_STATE).write_text(json.dumps({"plan_id": "p", "step": 4, "next_micro_batch": 4,
                                                            "world_size": 2}))
    key = b"test-key"
    checkpoint.write_manifest(step, key)
    assert checkpoint.verify(step, key) == "it lacks the shards of rank(s) 1 of its 2"
    (step / checkpoint.rng_file(1)).write_bytes(b"r")
    checkpoint.write_manifest(step, key)
    assert checkpoint.verify(step, key) == ""
    (step / "deepspeed" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    checkpoint.write_manifest(step, key)  # sealed without it: still refused
    assert checkpoint.verify(step, key) == "it lacks the shards of rank(s) 1 of its 2"


@pytest.mark.parametrize("lost", ["member", "leader"])
def test_losing_a_node_stops_every_node_and_the_job_resumes_from_its_last_checkpoint(
        start_service, start_worker, tiny_model, counting_data, tmp_path, lost):
    service = start_service(policy=FleetPolicy(retry_backoff_s=1.0), sweep_interval_s=1.0)
    shared = tmp_path / "shared"
    lease = ("--lease-ttl-s", "10")  # a lost leader's lease lapses sooner than the default 30 s
    workers = {w.host_id: w for w in (start_worker("host-a", shared_dir=shared, extra=lease),
                                      start_worker("host-b", shared_dir=shared, extra=lease))}
    total, job_id = 60, f"gang-lost-{lost}"  # a lost node stops the gang's steps
    out = shared / job_id
    with ExecutorClient(service.address, timeout_s=60) as client:
        wait_for(lambda: len(client.fleet().hosts) == 2, "both workers to register")
        client.submit(fleet_plan(tiny_model, counting_data, job_id, nodes=2, max_steps=total, checkpoint_every=10))
        before = watch_until(client, job_id, lambda e: e.phase == progress_pb2.PHASE_CHECKPOINTING)
        assert before[-1].phase == progress_pb2.PHASE_CHECKPOINTING, before[-1].message
        leader = client.get(job_id).host_id
        victim = leader if lost == "leader" else ({"host-a", "host-b"} - {leader}).pop()
        # that node's worker only: its launcher and ranks must not outlive it, nor the other node's ranks go on
        send_signal(process_tree(workers[victim].proc.pid)[:1], signal.SIGKILL)
        killed_at = time.monotonic()
        wait_for(lambda: not run_processes(out), "every node's ranks to stop", timeout_s=STOP_BOUND_S)
        print(f"\nevery node's ranks stopped {time.monotonic() - killed_at:.1f} s after the {lost}'s worker "
              "was killed")

        start_worker("host-c", shared_dir=shared, extra=lease)  # a replacement host for the next attempt's gang
        rest = watch_until(client, job_id, lambda e: False, after=before[-1].sequence)
        events = all_events(client, job_id)
        job = client.get(job_id)
    requeued = next(e for e in rest if e.phase == progress_pb2.PHASE_QUEUED)
    why = f"(host {victim}) of the gang was lost" if lost == "member" else f"host {victim} stopped renewing its lease"
    assert why in requeued.message and "retry 1 of 3" in requeued.message, requeued.message
    last_sealed = max(e.step for e in events if e.phase == progress_pb2.PHASE_CHECKPOINTING
                      and e.sequence < requeued.sequence)
    resumed = [e for e in rest if e.phase == progress_pb2.PHASE_LOADING and "resumed from" in e.message]
    assert resumed and resumed[0].step == last_sealed, "it resumes from the last complete checkpoint"
    regang = [e for e in rest if e.message.startswith("gang formed")]
    assert regang and "host-c" in regang[-1].message and victim not in regang[-1].message
    assert events[-1].phase == progress_pb2.PHASE_DONE and events[-1].step == total, events[-1].message
    assert job.infra_failures == 1
    assert_once_in_order(events)


def test_a_gang_the_fleet_cannot_form_waits_with_a_reason_and_holds_no_host_forever(
        start_service, start_worker, tiny_model, counting_data, tmp_path):
    service = start_service(policy=FleetPolicy(retry_backoff_s=0.5), sweep_interval_s=0.5)
    shared = tmp_path / "shared"
    quick = ("--gang-timeout-s", "3")
    start_worker("host-a", shared_dir=shared, extra=quick)
    with ExecutorClient(service.address, timeout_s=60) as client:
        wait_for(lambda: len(client.fleet().hosts) == 1, "the worker to register")
        client.submit(fleet_plan(tiny_model, counting_data, "big", nodes=2, max_steps=6))

        def reason() -> str:
            return next((p.reason for p in client.fleet().pending if p.job_id == "big"), "")
        why = str(wait_for(lambda: "spans 2 hosts" in reason() and reason(), "Fleet to say why the gang waits"))
        assert "1 live cpu host" in why and "start more workers of class cpu" in why, why

        # its only host is not held: a single-node job runs there while the gang waits
        client.submit(fleet_plan(tiny_model, counting_data, "small", max_steps=100_000))
        watch_until(client, "small", lambda e: e.phase == progress_pb2.PHASE_TRAINING)
        start_worker("host-b", shared_dir=shared, extra=quick)  # two live hosts now, one of them busy
        timed_out = watch_until(client, "big", lambda e: "did not form within 3 s" in e.message)[-1]
        assert client.get("small").phase == progress_pb2.PHASE_TRAINING, "the small job ran on meanwhile"
        client.cancel("small", reason="free its host")  # now the gang can form
        big = all_events(client, "big")
        job = client.get("big")
    assert timed_out.phase == progress_pb2.PHASE_QUEUED and "(1 of 2 hosts joined" in timed_out.message, \
        timed_out.message
    assert big[-1].phase == progress_pb2.PHASE_DONE and big[-1].step == 6, big[-1].message
    assert job.infra_failures == 0, "waiting for hosts is not a failure"
    assert_once_in_order(big)


def test_a_member_that_cannot_see_the_leaders_output_refuses_and_the_job_fails_with_why(
        executor_service, start_worker, tiny_model, counting_data, tmp_path):
    out = tmp_path / "work-host-a" / "private"  # an absolute path host-b may not write (its own output root)
    start_worker("host-a")
    plan = make_plan(tiny_model, counting_data, out, plan_id="private", nodes=2, max_steps=4)
    with ExecutorClient(executor_service.address, timeout_s=60) as client:
        wait_for(lambda: len(client.fleet().hosts) == 1, "the worker to register")
        client.submit(plan)  # one host registered: Submit cannot tell yet
        start_worker("host-b", extra=("--output-root", str(tmp_path / "work-host-b")))
        events = all_events(client, "private")
    assert events[-1].phase == progress_pb2.PHASE_FAILED
    assert "node 1 (host host-b) refused the job: on host host-b: output_uri" in events[-1].message, \
        events[-1].message
    assert not run_processes(out)



def test_cancel_stops_every_nodes_process_tree_and_keeps_the_checkpoints(executor_service, start_worker, tiny_model,
                                                                        counting_data, tmp_path):
    shared = tmp_path / "shared"
    start_worker("host-a", shared_dir=shared)
    start_worker("host-b", shared_dir=shared)
    out = shared / "gang-cancel"
    with ExecutorClient(executor_service.address, timeout_s=60) as client:
        wait_for(lambda: len(client.fleet().hosts) == 2, "both workers to register")
        client.submit(fleet_plan(tiny_model, counting_data, "gang-cancel", nodes=2, max_steps=100_000,
                                 checkpoint_every=5))
        seen = watch_until(client, "gang-cancel", lambda e: e.phase == progress_pb2.PHASE_CHECKPOINTING)
        assert seen[-1].phase == progress_pb2.PHASE_CHECKPOINTING, seen[-1].message
        launchers = [p.info["cmdline"] for p in run_processes(out) if "executor.training" in p.info["cmdline"]]
        assert {c[c.index("--node-rank") + 1] for c in launchers} == {"0", "1"}, "both nodes' launchers run"
        client.cancel("gang-cancel", reason="enough")
        events = all_events(client, "gang-cancel")
        wait_for(lambda: not run_processes(out), "every node's process tree to stop", timeout_s=STOP_BOUND_S)
        wait_for(lambda: all(not h.running_job_id for h in client.fleet().hosts), "both hosts to be free again")
    assert events[-1].phase == progress_pb2.PHASE_CANCELLED and "enough" in events[-1].message
    assert checkpoint.latest(out / "checkpoints") is not None


def test_a_multi_node_plan_is_refused_outside_the_fleet_with_what_to_do(tiny_model, counting_data, tmp_path):
    plan = write_plan(make_plan(tiny_model, counting_data, tmp_path / "out", nodes=2), tmp_path / "plan.json")
    done = subprocess.run([sys.executable, "-m", "executor.training", str(plan)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stderr
    assert "hardware.nodes" in done.stderr and "Submit the plan to the fleet" in done.stderr
    assert not (tmp_path / "out" / "checkpoints").exists()


@pytest.fixture()
def namespace_pair() -> Iterator[tuple[str, str, str]]:
    """A network namespace joined to this one by a veth pair, as a second host would be: (namespace, this side's
    address, the namespace's address). Skipped, visibly, where the machine forbids namespaces."""
    tag = secrets.token_hex(3)
    ns, here_dev, there_dev = f"tf-{tag}", f"tfa-{tag}", f"tfb-{tag}"
    subnet = f"10.231.{random.randint(1, 254)}"
    here, there = f"{subnet}.1", f"{subnet}.2"
    inside = ["ip", "netns", "exec", ns]
    steps = [["ip", "netns", "add", ns], ["ip", "link", "add", here_dev, "type", "veth", "peer", "name", there_dev],
             ["ip", "link", "set", there_dev, "netns", ns], ["ip", "addr", "add", f"{here}/24", "dev", here_dev],
             ["ip", "link", "set", here_dev, "up"], [*inside, "ip", "addr", "add", f"{there}/24", "dev", there_dev],
             [*inside, "ip", "link", "set", there_dev, "up"], [*inside, "ip", "link", "set", "lo", "up"]]

    def remove() -> None:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)  # takes its end of the pair
        subprocess.run(["ip", "link", "del", here_dev], capture_output=True, timeout=30)
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.CalledProcessError) as e:
        remove()
        pytest.skip(f"network namespaces are forbidden here ({getattr(e, 'stderr', '') or e}); the loopback "
                    "variants of the multi-node tests ran")
    yield ns, here, there
    remove()


@pytest.fixture()
def veth_redis(namespace_pair: tuple[str, str, str], tmp_path: Path) -> Iterator[str]:
    """A redis-server of the test's own on this side of the veth pair (both "hosts" reach it)."""
    (tmp_path / "veth-redis").mkdir()
    proc, url = start_redis_server(tmp_path / "veth-redis", host=namespace_pair[1])
    yield url
    stop_redis_server(proc)


def test_a_gang_of_two_hosts_in_separate_network_namespaces_trains_over_the_link(
        namespace_pair, veth_redis, start_service, start_worker, tiny_model, counting_data, tmp_path):
    ns, here, there = namespace_pair
    service = start_service(url=veth_redis)
    shared = tmp_path / "shared"
    start_worker("host-a", shared_dir=shared, url=veth_redis)
    start_worker("host-b", shared_dir=shared, url=veth_redis, wrap=("ip", "netns", "exec", ns))
    with ExecutorClient(service.address, timeout_s=60) as client:
        wait_for(lambda: len(client.fleet().hosts) == 2, "both workers to register")
        client.submit(fleet_plan(tiny_model, counting_data, "gang-veth", nodes=2, max_steps=6))
        events = all_events(client, "gang-veth")
        job = client.get("gang-veth")
    assert events[-1].phase == progress_pb2.PHASE_DONE and events[-1].step == 6, events[-1].message
    formed = next(e for e in events if e.message.startswith("gang formed"))
    leader_address = {"host-a": here, "host-b": there}[job.host_id]
    assert f"rendezvous at {leader_address}:" in formed.message, formed.message
    assert job.feedback.nodes == 2
