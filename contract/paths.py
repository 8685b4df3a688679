"""Where a run may read and write. A plan names paths (dataset, local model folder, output directory); the host
decides which parts of its file system plans may touch: reads only under the data roots, writes only under the
output roots. Paths are resolved (symlinks and '..' followed) before they are compared, so neither can escape.

Defaults: both are the current directory, or for a fleet worker its --work-dir. Set them with --data-root /
--output-root, or TUNEFLEET_DATA_ROOTS / TUNEFLEET_OUTPUT_ROOTS (directories separated by ':').

A --data-root may also be an object-store prefix (s3://bucket/prefix): a plan may then name a dataset file or a
model folder under it, which the run reads through the host's cache (executor.training.inputs). Such a root adds to
the local ones (the default stays); under --team-roots it becomes <prefix>/teams/<team>, as a directory does.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from common.bounds import echo
from contract.errors import PlanError

# Under --team-roots, a team's jobs read and write only in <root>/TEAMS_DIR/<team> of each root.
TEAMS_DIR = "teams"
DATA_ROOTS_ENV = "TUNEFLEET_DATA_ROOTS"
OUTPUT_ROOTS_ENV = "TUNEFLEET_OUTPUT_ROOTS"


def is_uri(name: str) -> bool:
    """A name of object storage (s3://bucket/key, gs://, az://), not of this host's filesystem."""
    return "://" in name and not name.startswith("file://")


def _roots(value: str, default: Path) -> tuple[Path, ...]:
    named = [Path(p).expanduser().resolve() for p in value.split(os.pathsep) if p]
    return tuple(named) or (default.resolve(),)


@dataclass(frozen=True)
class Roots:
    data: tuple[Path, ...]
    output: tuple[Path, ...]
    stores: tuple[str, ...] = ()  # object-store prefixes plans may read datasets and model folders from
    output_stores: tuple[str, ...] = ()  # object-store prefixes a plan's output_uri may name

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ, default: Path | None = None) -> Roots:
        base = default or Path.cwd()
        return cls(_roots(environ.get(DATA_ROOTS_ENV, ""), base), _roots(environ.get(OUTPUT_ROOTS_ENV, ""), base))

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        """--data-root and --output-root, as `tunefleet train` and `tunefleet worker` take them."""
        p.add_argument("--data-root", action="append", default=[],
                       help=f"datasets and local model folders are read only under these (repeat; env "
                            f"{DATA_ROOTS_ENV}; default the current directory, or a worker's --work-dir); an "
                            "object-store prefix (s3://bucket/prefix) lets plans name datasets and model folders "
                            "under it")
        p.add_argument("--output-root", action="append", default=[],
                       help=f"runs write only under these (repeat; env {OUTPUT_ROOTS_ENV}; default as --data-root); "
                            "an object-store prefix (s3://bucket/prefix) lets a plan's output_uri name one under it "
                            "(its checkpoints and final export go there)")

    @classmethod
    def from_arguments(cls, args: argparse.Namespace, default: Path | None = None) -> Roots:
        """The flags of add_arguments, else the environment, else `default` (the current directory)."""
        env = cls.from_environment(default=default)
        def local(values: list[str]) -> tuple[Path, ...]:
            return tuple(Path(p).expanduser().resolve() for p in values if not is_uri(p))

        def stores(values: list[str]) -> tuple[str, ...]:
            return tuple(p.rstrip("/") for p in values if is_uri(p))

        return cls(local(args.data_root) or env.data, local(args.output_root) or env.output, stores(args.data_root),
                   stores(args.output_root))

    def arguments(self) -> list[str]:
        """These roots as the flags of add_arguments (what a worker hands its runs)."""
        return [*[f"--data-root={p}" for p in (*self.data, *self.stores)],
                *[f"--output-root={p}" for p in (*self.output, *self.output_stores)]]

    def of_team(self, team: str) -> Roots:
        """The roots a job of `team` may use: <root>/teams/<team> of each (a team name is a plain name: common.identity
        admits letters, digits and _.@- only, never a '/' or '..')."""
        return Roots(tuple(r / TEAMS_DIR / team for r in self.data), tuple(r / TEAMS_DIR / team for r in self.output),
                     tuple(f"{r}/{TEAMS_DIR}/{team}" for r in self.stores),
                     tuple(f"{r}/{TEAMS_DIR}/{team}" for r in self.output_stores))

    def readable(self, field: str, path: str | Path) -> Path:
        """`path` resolved, if it lies under a data root; else PlanError naming `field`."""
        return _inside(field, path, self.data, "data", DATA_ROOTS_ENV)

    def readable_uri(self, field: str, uri: str) -> str:
        """`uri` (no trailing '/'), if it lies under an object-store data root; else PlanError naming `field`."""
        return _under(field, uri, self.stores, "data")

    def writable_uri(self, field: str, uri: str) -> str:
        """`uri` (no trailing '/'), if it lies under an object-store output root; else PlanError naming `field`."""
        return _under(field, uri, self.output_stores, "output")

    def writable(self, field: str, path: str | Path) -> Path:
        """`path` resolved, if it lies under an output root; else PlanError naming `field`."""
        return _inside(field, path, self.output, "output", OUTPUT_ROOTS_ENV)

    def local_source(self, field: str, name: str) -> None:
        """A model or dataset name that names a local path (it exists here, or is written as a path) must be
        readable; a hub id that is not a local path passes."""
        if name.startswith(("/", ".", "~")) or Path(name).expanduser().exists():
            self.readable(field, Path(name).expanduser())


def _under(field: str, uri: str, roots: tuple[str, ...], kind: str) -> str:
    scheme, _, rest = uri.partition("://")
    if any(part in ("", ".", "..") for part in rest.rstrip("/").split("/")):
        raise PlanError(field, f"{echo(uri)} has an empty, '.' or '..' part; name the object plainly")
    named = uri.rstrip("/")
    if any(named == root or named.startswith(root + "/") for root in roots):
        return named
    raise PlanError(field, f"{echo(uri)} is outside this host's object-store {kind} roots "
                           f"({', '.join(roots) or 'none'}); use a prefix under one of them, or add one with "
                           f"--{kind}-root {scheme}://bucket/prefix")


def _inside(field: str, path: str | Path, roots: tuple[Path, ...], kind: str, env: str) -> Path:
    resolved = Path(path).resolve()
    if any(resolved == root or resolved.is_relative_to(root) for root in roots):
        return resolved
    raise PlanError(field, f"{echo(str(path))} resolves to {echo(str(resolved))}, outside this host's {kind} "
                           f"roots ({', '.join(map(str, roots))}); use a path under one of them, or add a root "
                           f"with --{kind}-root (env {env})")
