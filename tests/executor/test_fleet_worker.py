"""fleet.queues.FleetWorker on a real redis-server and rq's own worker loop: the dequeue takes from the queues the
fleet names, in its order, and takes nothing while paused or while no queue may give a job. These pin the rq
behaviour FleetWorker relies on (a dequeue takes from the worker's ordered queue list, as rq's own dequeue strategies
set it): an rq release that changes it fails here, not in a fleet."""

from __future__ import annotations

import redis
from rq import Queue, get_current_job
from rq.serializers import JSONSerializer

from fleet.queues import FleetWorker

RAN = "test:ran"


def record(name: str) -> None:
    """The rq job: note which job ran, in order."""
    job = get_current_job()
    assert job is not None
    job.connection.rpush(RAN, name)


def _queues(connection: redis.Redis) -> list[Queue]:
    queues = [Queue(name, connection=connection, serializer=JSONSerializer) for name in ("t.high", "t.normal", "t.low")]
    for q in queues:
        q.enqueue_call(f"{__name__}.record", args=[q.name], job_id=f"job-{q.name.removeprefix('t.')}")
    return queues


def _run(connection: redis.Redis, queues: list[Queue], paused: bool = False,
         order: list[str] | None = None) -> list[str]:
    asked: list[bool] = []
    worker = FleetWorker(queues, "test-worker", connection, on_shutdown=lambda: None, paused=lambda: paused,
                         before_dequeue=lambda: asked.append(True) or order, burst=True)
    worker.work(burst=True, logging_level="WARNING")
    assert asked or paused, "the fleet is asked before every dequeue"
    return [x.decode() for x in connection.lrange(RAN, 0, -1)]


def test_a_dequeue_takes_from_the_queues_the_fleet_names_in_its_order(redis_url: str) -> None:
    connection = redis.Redis.from_url(redis_url)
    queues = _queues(connection)
    assert _run(connection, queues) == ["t.high", "t.normal", "t.low"], "None: every queue, in the worker's order"
    connection.delete(RAN)
    queues = _queues(connection)
    assert _run(connection, queues, order=["t.low", "t.high"]) == ["t.low", "t.high"], \
        "only the queues named, in the order named"
    assert [q.count for q in queues] == [0, 1, 0], "the queue the fleet left out keeps its job"


def test_a_paused_worker_or_one_with_no_takeable_queue_takes_nothing(redis_url: str) -> None:
    connection = redis.Redis.from_url(redis_url)
    queues = _queues(connection)
    assert _run(connection, queues, paused=True) == []
    assert _run(connection, queues, order=[]) == []
    assert [q.count for q in queues] == [1, 1, 1], "every job still waits"
