"""`python -m devtools.injected_gpu_health READINGS.json worker ARGS...`: a real `tunefleet worker` whose GPU health
readings come from a JSON file instead of NVML — how tests on CPU hosts drive a quarantine.

The one function that reads NVML, `executor.worker.gpu_health.source`, is replaced; everything after it (the
judgement, the quarantine in Redis, the paused claim loop, the requeue of a running job) is the worker's own.
The file holds `{"devices": [{"index": 0, "xids": [79], "ecc_uncorrected": 0, "retired_pages_pending": false,
"remap_failed": false, "lost": false}, ...]}`; its XIDs count as new once per write, as NVML's event queue hands
each XID over once.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from executor.worker import gpu_health
from executor.worker.gpu_health import DeviceHealth, Reading


class FileReadings:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen_ns = -1

    def read(self) -> Reading:
        written_ns = self.path.stat().st_mtime_ns
        fresh, self._seen_ns = written_ns != self._seen_ns, written_ns
        devices = json.loads(self.path.read_text())["devices"]
        return Reading(tuple(DeviceHealth(
            index=int(d["index"]), xids=tuple(int(x) for x in d.get("xids", ())) if fresh else (),
            ecc_uncorrected=int(d.get("ecc_uncorrected", 0)),
            retired_pages_pending=bool(d.get("retired_pages_pending", False)),
            remap_failed=bool(d.get("remap_failed", False)), lost=bool(d.get("lost", False))) for d in devices))

    def close(self) -> None:
        pass


def write_readings(path: Path, *devices: dict[str, object]) -> None:
    """What the injected NVML will read next (written whole, then renamed: a reader never sees half a file)."""
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps({"devices": list(devices)}))
    partial.replace(path)


def main(argv: list[str]) -> int:
    readings = Path(argv[0])
    gpu_health.source = lambda: FileReadings(readings)
    from launch.command import main as tunefleet

    return tunefleet(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
