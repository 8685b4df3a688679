"""Datasets and model folders in object storage, read through this host's cache.

A plan may name its dataset (dataset.local_path) or its model folder (model.weights) as s3://bucket/key, under one
of the host's object-store data roots (contract.paths: a worker's --data-root s3://…, under --team-roots its team's
part of it). Before anything else, the launcher downloads each into the cache and gives the ranks a plan naming the
local copy. The cache is keyed by the object's URI and by every file's ETag and size: a second job on the host that
reads the same, unchanged objects downloads nothing; a changed object is a new version, downloaded beside the old.
A copy appears only once complete (downloaded under a temporary name, then renamed).

The cache: TUNEFLEET_STORE_CACHE, else .tunefleet-cache/store under the run's working directory (a worker's
--work-dir, its team's part under --team-roots).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path, PurePosixPath

from tunefleet.v1 import plan_pb2

from common.units import MiB
from contract.errors import PlanError
from contract.paths import Roots, is_uri
from contract.store import filesystem

CACHE_ENV = "TUNEFLEET_STORE_CACHE"
DEFAULT_CACHE = Path(".tunefleet-cache") / "store"
COMPLETE = ".complete"  # written last into a cached copy's folder


def cache_dir(environ: dict[str, str] | None = None) -> Path:
    value = (os.environ if environ is None else environ).get(CACHE_ENV, "")
    return Path(value or DEFAULT_CACHE).resolve()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached(uri: str, cache: Path, field: str) -> tuple[Path, int]:
    """The local copy of a file or folder of object storage, and the bytes downloaded for it (0: from the cache)."""
    fs, root = filesystem(uri, field)
    try:
        folder = fs.isdir(root)
        listing = {str(p)[len(root) + 1:]: info for p, info in fs.find(root, detail=True).items()} if folder \
            else {PurePosixPath(root).name: fs.info(root)}
    except FileNotFoundError as e:
        raise PlanError(field, f"{uri} is not in the store; check the bucket and the key") from e
    except PermissionError as e:
        raise PlanError(field, f"{uri} cannot be read with this host's credentials ({e})") from e
    if not listing:
        raise PlanError(field, f"{uri} is an empty folder of the store")
    version = _digest(json.dumps(sorted((name, str(info.get("ETag", "")), int(info["size"]))
                                        for name, info in listing.items())))
    target = cache / _digest(uri) / version
    local = target / ("tree" if folder else next(iter(listing)))
    if (target / COMPLETE).is_file():
        return local, 0
    partial = target.with_name(f"{version}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    for name in listing:
        destination = partial / ("tree" if folder else "") / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(f"{root}/{name}" if folder else root, str(destination))
    (partial / COMPLETE).write_text(uri)
    try:
        os.rename(partial, target)
    except OSError:  # another run on this host cached the same version meanwhile
        shutil.rmtree(partial, ignore_errors=True)
    return local, sum(int(info["size"]) for info in listing.values())


def localise(plan: plan_pb2.Plan, roots: Roots, cache: Path,
             notice: Callable[[str], None]) -> tuple[plan_pb2.Plan, Roots]:
    """The plan with its object-store dataset and model folder replaced by their cached copies, and the roots with
    the cache readable; the same plan and roots when it names none. PlanError naming the field for a URI outside
    the host's object-store roots."""
    named = [("dataset.local_path", plan.dataset.local_path), ("model.weights", plan.model.weights)]
    uris = [(field, roots.readable_uri(field, value)) for field, value in named if is_uri(value)]
    if not uris:
        return plan, roots
    local = plan_pb2.Plan()
    local.CopyFrom(plan)
    for field, uri in uris:
        path, fetched = cached(uri, cache, field)
        notice(f"{field} {uri}: " + (f"downloaded {fetched / MiB:.1f} MiB into {path}" if fetched
                                     else f"unchanged in the store; read from this host's cache ({path})"))
        if field == "dataset.local_path":
            local.dataset.local_path = str(path)
        else:
            local.model.weights = str(path)
    return local, replace(roots, data=(*roots.data, cache))
