"""Issue 58 items 6 and 12: one caller, or one team, cannot hold every Watch slot of a server (per-caller and
per-team limits, RESOURCE_EXHAUSTED naming which), and a token removed from the identities file ends its open Watch
with UNAUTHENTICATED. A real executor service over a real redis-server; the watched job stays queued, so each stream
stays open on heartbeats."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tunefleet.v1 import executor_pb2

from clients.errors import ResourceExhausted, Unauthenticated
from clients.executor_client import ExecutorClient
from tests.integration.fleet_helpers import fleet_plan, identities

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
PEOPLE = [("vic", "vision", "viewer"), ("val", "vision", "viewer"), ("vera", "vision", "submitter"),
          ("nora", "nlp", "submitter")]


def _opened(client: ExecutorClient, job_id: str) -> Iterator[executor_pb2.WatchResponse]:
    """A Watch whose first answer arrived: the stream holds its slot on the server."""
    stream = client.watch(job_id)
    assert next(stream).event.sequence == 1
    return stream


def test_watch_slots_are_limited_per_caller_and_per_team(start_service, tiny_model, counting_data, tmp_path):
    auth = tmp_path / "auth.toml"
    service = start_service(identities=identities(auth, PEOPLE), max_watches_per_caller=2, max_watches_per_team=3)
    clients = {p: ExecutorClient(service.address, token=f"{p}-token", timeout_s=30) for p, _, _ in PEOPLE}
    try:
        clients["vera"].submit(fleet_plan(tiny_model, counting_data, "vision-1"))
        clients["nora"].submit(fleet_plan(tiny_model, counting_data, "nlp-1"))
        held = [_opened(clients["vic"], "vision-1"), _opened(clients["vic"], "vision-1")]
        with pytest.raises(ResourceExhausted) as caller_full:
            next(clients["vic"].watch("vision-1"))
        assert "principal vic already has 2 streams open" in str(caller_full.value)
        held.append(_opened(clients["val"], "vision-1"))
        with pytest.raises(ResourceExhausted) as team_full:
            next(clients["vera"].watch("vision-1"))
        assert "team vision already has 3 streams open" in str(team_full.value)
        held.append(_opened(clients["nora"], "nlp-1"))  # another team still finds a slot

        vics = held[0]
        identities(auth, [p for p in PEOPLE if p[0] != "vic"])  # vic's token is revoked while its streams are open
        with pytest.raises(Unauthenticated) as revoked:
            for _ in vics:
                pass
        assert "no longer in the server's identities" in str(revoked.value)
        for stream in held[1:]:
            stream.close()
        assert next(iter(_opened(clients["vera"], "vision-1"))).HasField("heartbeat"), "closed streams free slots"
    finally:
        for client in clients.values():
            client.close()
