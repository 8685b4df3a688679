"""Where a job's output may go, as the executor service checks it at Submit and Move (the worker checks again, on
its own disk: contract.ownership)."""

from __future__ import annotations

from pathlib import PurePosixPath

from tunefleet.v1 import executor_pb2

from contract.errors import PlanError
from contract.paths import is_uri


def check_shared_output(output_uri: str, hosts: list[executor_pb2.Host], nodes: int = 1) -> None:
    """With several workers in the class, a job may resume on any of them: its checkpoints must reach every one of
    them, through storage they all mount (a worker started with --work-dir-shared) or the object store each keeps
    checkpoints in (--checkpoint-store), not stay on one host's disk. A multi-node run's nodes write one checkpoint
    together: they need the shared mount."""
    if len(hosts) < 2 or (nodes <= 1 and all(h.checkpoint_store for h in hosts)) or is_uri(output_uri):
        return  # (an object-store output of a multi-node plan is refused with the plan: contract.run_config)
    path = output_uri.removeprefix("file://")
    shared = sorted({h.work_dir for h in hosts if h.work_dir_shared})
    unshared = sorted(h.host_id for h in hosts if not h.work_dir_shared)
    if path.startswith("/"):
        if any(PurePosixPath(path).is_relative_to(root) for root in shared):
            return
        where = f"under the shared work dir ({', '.join(shared)})" if shared else \
            "on storage every worker mounts (start the workers with --work-dir-shared on it), or start every " \
            "worker with --checkpoint-store"
        raise PlanError("output_uri", f"{path} is a path only one host may see, and {len(hosts)} hosts serve this "
                                      f"class (a lost host's job resumes on another); put it {where}")
    if unshared:
        raise PlanError("output_uri", f"is relative ({path or 'the plan id'}), so it lands in each worker's "
                                      f"--work-dir, and host(s) {', '.join(unshared[:5])} of this class do not share "
                                      "theirs; start them with --work-dir-shared on shared storage (or, for a "
                                      "one-node plan, with --checkpoint-store), or give an absolute path on shared "
                                      "storage")
