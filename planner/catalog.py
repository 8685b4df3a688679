"""The catalog: GPU classes (with prices), provider flavors and models, looked up by name or alias."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from common.bounds import echo
from common.units import GiB
from contract.model import ModelSpec
from contract.schema import Flavor, GpuSpec
from planner import calibration
from planner.calibration import ClassCalibration
from planner.data.cpus import CPU_HOSTS
from planner.data.flavors import FLAVORS
from planner.data.gpus import GPUS
from planner.data.models import ALIASES, MODELS
from planner.data.prices import PRICES
from planner.data.usable_memory import USABLE_MEMORY
from planner.errors import UnknownNameError
from planner.memo import memo

# Spellings of GPU names kept normalised: every caller names a catalog GPU (a name is at most 256 characters,
# contract.limits), so a few hundred cover the catalog's names, aliases and their capitalisations.
GPU_NAME_ENTRIES = 1024


@memo(GPU_NAME_ENTRIES)
def normalise_gpu_name(name: str) -> str:
    """'NVIDIA GeForce RTX 4090' -> 'rtx-4090'; 'A100 80GB' -> 'a100-80gb'."""
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    key = re.sub(r"^(nvidia-|amd-)", "", key)
    key = re.sub(r"^(geforce-|tesla-|instinct-)", "", key)
    return re.sub(r"-+", "-", key)


# What tells models of one GPU apart: memory size or form factor ('a100-40gb', 'h100-pcie'); not a model suffix
# such as '-ti' (an RTX 2080 Ti is another card than an RTX 2080, which 'rtx-2080' names).
_VARIANT = re.compile(r"^(\d+gb|pcie|sxm\d*|nvl)")


def _ambiguous(gpus: tuple[GpuSpec, ...]) -> dict[str, tuple[GpuSpec, ...]]:
    """Short names that several GPUs share as a family ('a100': the 40 and 80 GB models; 'h100': PCIe and SXM):
    alias -> the GPUs whose names start with it. Answering one of them silently would plan the wrong card."""
    found = {}
    for gpu in gpus:
        for alias in map(normalise_gpu_name, gpu.aliases):
            family = tuple(g for g in gpus if any(_VARIANT.match(normalise_gpu_name(k).removeprefix(alias + "-"))
                                                  and normalise_gpu_name(k).startswith(alias + "-")
                                                  for k in (g.name, *g.aliases)))
            if len(family) > 1:
                found[alias] = family
    return found


def did_you_mean(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.5)
    return f" Did you mean {', '.join(close)}?" if close else ""


@dataclass(frozen=True)
class Catalog:
    gpus: tuple[GpuSpec, ...]
    flavors: tuple[Flavor, ...]
    models: tuple[ModelSpec, ...]
    model_aliases: dict[str, str]
    # The fleet's own runs by GPU class (planner.calibration, `--calibration FILE`); none by default.
    calibrations: dict[str, ClassCalibration] = field(default_factory=dict)
    # CPU host classes (planner.data.cpus): looked up by name like a GPU, never among the GPUs recommended
    hosts: tuple[GpuSpec, ...] = ()

    def calibration(self, gpu_class: str) -> ClassCalibration | None:
        return self.calibrations.get(gpu_class)

    def __post_init__(self) -> None:
        gpu_index: dict[str, GpuSpec] = {}
        for gpu in (*self.gpus, *self.hosts):
            for key in (gpu.name, *gpu.aliases):
                gpu_index[normalise_gpu_name(key)] = gpu
        object.__setattr__(self, "_gpu_index", gpu_index)
        object.__setattr__(self, "_ambiguous_gpus", _ambiguous(self.gpus))
        object.__setattr__(self, "_flavor_index", {f.name: f for f in self.flavors})
        object.__setattr__(self, "_model_index", {m.name.lower(): m for m in self.models})
        object.__setattr__(self, "_alias_index", {k.lower(): k for k in self.model_aliases})

    def gpu(self, name: str, field: str = "hardware.gpu") -> GpuSpec:
        index: dict[str, GpuSpec] = self._gpu_index  # type: ignore[attr-defined]
        candidates: tuple[GpuSpec, ...] | None = self._ambiguous_gpus.get(normalise_gpu_name(name))  # type: ignore
        if candidates:
            listed = ", ".join(f"{g.name} ({g.display_name}, {g.marketed_memory_bytes / GiB:.0f} GB)"
                               for g in candidates)
            raise UnknownNameError(field, f"{echo(name)} names {len(candidates)} GPUs: {listed}; give one of them")
        found = index.get(normalise_gpu_name(name))
        if found is None:
            hint = did_you_mean(normalise_gpu_name(name), list(index))
            raise UnknownNameError(field, f"unknown GPU {echo(name)}.{hint} "
                                       "Run 'tunefleet hardware' for the catalog.")
        return found

    def flavor(self, name: str, field: str = "hardware.flavor") -> Flavor:
        index: dict[str, Flavor] = self._flavor_index  # type: ignore[attr-defined]
        found = index.get(name.strip().lower())
        if found is None:
            raise UnknownNameError(field, f"unknown flavor {echo(name)}.{did_you_mean(name, list(index))} "
                                       "Run 'tunefleet hardware' for the catalog.")
        return found

    def providers(self) -> set[str]:
        """Every provider a recommendation can be limited to: the flavors' providers, and "catalog" for GPU classes
        at their list price."""
        return {f.provider for f in self.flavors} | {"catalog"}

    def model(self, name: str, field: str = "model.catalog_name") -> ModelSpec:
        index: dict[str, ModelSpec] = self._model_index  # type: ignore[attr-defined]
        aliases: dict[str, str] = self._alias_index  # type: ignore[attr-defined]
        alias = aliases.get(name.strip().lower())
        canonical = self.model_aliases[alias] if alias else name
        found = index.get(canonical.strip().lower())
        if found is None:
            names = [m.name for m in self.models] + list(self.model_aliases)
            raise UnknownNameError(field, f"unknown model {echo(name)}.{did_you_mean(name, names)} Pass the model's "
                                       "config.json instead, or run 'tunefleet models' for the catalog.")
        if alias:  # answered under the name asked for, saying whose shape it has
            return replace(found, name=alias, weights=alias,
                           source=f"{found.source} (same architecture as {found.name})")
        return found


def _with_price(gpu: GpuSpec) -> GpuSpec:
    price = PRICES.get(gpu.name)
    if price is None:
        return gpu
    return replace(gpu, on_demand_hourly_usd=price.on_demand_hourly_usd, spot_hourly_usd=price.spot_hourly_usd,
                   price_source=price.source)


def _with_usable_memory(gpu: GpuSpec) -> GpuSpec:
    """The card planned against the memory its driver reports; the data sheet's size is kept for people."""
    usable = USABLE_MEMORY[gpu.name]
    source = usable.source + (f"; {usable.note}" if usable.note else "")
    return replace(gpu, memory_bytes=usable.total_bytes, marketed_memory_bytes=gpu.memory_bytes, memory_source=source)


@lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    return Catalog(gpus=tuple(_with_usable_memory(_with_price(g)) for g in GPUS), flavors=FLAVORS, models=MODELS,
                   model_aliases=dict(ALIASES), hosts=CPU_HOSTS)


def calibrated_catalog(path: Path | None) -> Catalog:
    """The default catalog with the fleet's calibration (planner.calibration) read from `path`; the plain catalog
    without one. InvalidFieldError naming a file that is not a calibration."""
    catalog = default_catalog()
    return catalog if path is None else replace(catalog, calibrations=calibration.load(path))
