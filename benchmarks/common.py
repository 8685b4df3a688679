"""Shared helpers for benchmarks: percentile timing, tables and CSV output."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import random
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from common.net import free_port

RESULTS = Path(__file__).parent / "results"
# third-party measured runs with their configurations (benchmarks/data/README.md)
PUBLIC = Path(__file__).parent / "data" / "public_measurements.csv"


def as_single_rank() -> None:
    """Environment for torch.distributed / DeepSpeed in this process as a world of one, unless already set."""
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(free_port())


@contextlib.contextmanager
def fake_process_group(world_size: int) -> Iterator[None]:
    """This process as rank 0 of `world_size` on PyTorch's fake process group (collectives return at once and move
    no data), with the launcher's environment a rank reads; both undone as the block ends."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    launcher_env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(world_size)}
    outer_env = {name: os.environ.get(name) for name in launcher_env}
    os.environ.update(launcher_env)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()
        for name, outer in outer_env.items():
            if outer is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = outer


def time_calls(fn: Callable[[], object], n: int, warmup: int = 20) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def pct(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100)[int(q) - 1] if len(samples) > 1 else samples[0]


def print_table(title: str, header: list[str], rows: list[list[object]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True)))


def write_csv(name: str, header: list[str], rows: list[list[object]]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def filled_text(path: Path, records: int, words: int) -> Path:
    """A text dataset of the tiny models' words (devtools.tiny), each record `words` long: every sample fills a
    sequence of that many tokens (the tiny tokenizer gives a token a word)."""
    rng = random.Random(0)
    lines = (json.dumps({"text": " ".join(f"w{rng.randrange(24)}" for _ in range(words))}) for _ in range(records))
    path.write_text("\n".join(lines) + "\n")
    return path


def stop_processes(procs: list[subprocess.Popen[bytes]], timeout_s: float = 60.0) -> None:
    """SIGTERM every process (workers drain), then wait for each, killing one that outlives `timeout_s`."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
