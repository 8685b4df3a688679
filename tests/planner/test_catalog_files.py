"""The catalog is data (planner/data/gpus.csv, prices.csv, flavors.csv, models.csv and configs/): every row parses
with its source, every price and flavor names a class the catalog has, every model's shape is its stored config.json
read as a user's is, and a broken row or config is refused naming itself."""

from __future__ import annotations

import json
import shutil
from importlib.resources import files
from pathlib import Path

import pytest

from planner.catalog import default_catalog
from planner.data.flavors import FLAVORS, read_flavors
from planner.data.gpus import GPUS, read_gpus
from planner.data.models import ALIASES, MODELS, config_path, read_models
from planner.data.prices import PRICES, read_prices
from planner.hf_config import config_json

DATA = Path(str(files("planner.data")))


def test_every_class_and_price_has_a_source_and_every_price_a_class() -> None:
    assert GPUS and all(g.spec_source and g.memory_bytes > 0 and g.fp32_flops_per_s > 0 for g in GPUS)
    assert len({g.name for g in GPUS}) == len(GPUS), "a class is named once"
    names = {g.name for g in GPUS}
    assert PRICES and all(p.source and p.on_demand_hourly_usd > 0 for p in PRICES.values())
    assert set(PRICES) <= names, f"prices of no catalog class: {set(PRICES) - names}"
    priced = {g.name: g for g in default_catalog().gpus}
    assert all(priced[name].on_demand_hourly_usd == p.on_demand_hourly_usd for name, p in PRICES.items())


def test_a_broken_row_is_refused_naming_its_line() -> None:
    text = files("planner.data").joinpath("gpus.csv").read_text().splitlines()
    broken = [text[0], text[1], text[2].replace(",pcie,", ",pcie5,", 1)]
    with pytest.raises(ValueError, match="gpus.csv line 3"):
        read_gpus("\n".join(broken))
    with pytest.raises(ValueError, match="the header must be"):
        read_gpus("name,memory\nx,1")
    with pytest.raises(ValueError, match="prices.csv line 2"):
        read_prices("gpu,on_demand_hourly_usd,spot_hourly_usd,source\nl4-24gb,cheap,0.1,a quote")


def test_every_model_is_its_stored_config_and_every_stored_config_a_model() -> None:
    names = {m.name for m in MODELS}
    assert len(names) == len(MODELS), "a model is listed once"
    stored = {str(p.relative_to(DATA / "configs").with_suffix("")) for p in (DATA / "configs").rglob("*.json")}
    assert stored == names, f"configs no row lists: {stored - names}; rows without a config: {names - stored}"
    for m in MODELS:
        # each file is exactly the config.json its architecture stands for: nothing in it that the reader drops
        assert json.loads(config_path(m.name).read_text()) == config_json(m.architecture), m.name
        assert m.source == f"huggingface.co/{m.name}/config.json"
    assert set(ALIASES.values()) <= names and not set(ALIASES) & names


def test_a_broken_model_row_or_config_is_refused_naming_it(tmp_path: Path) -> None:
    shutil.copytree(DATA, tmp_path / "data")
    data = tmp_path / "data"
    name = "Qwen/Qwen3-8B"
    line = 1 + next(i for i, m in enumerate(MODELS, 1) if m.name == name)
    config = json.loads((data / "configs" / f"{name}.json").read_text())
    (data / "configs" / f"{name}.json").write_text(json.dumps({**config, "num_hidden_layers": "many"}))
    with pytest.raises(ValueError, match=f"models.csv line {line}: configs/{name}.json: .*num_hidden_layers"):
        read_models(data)  # type: ignore[arg-type]
    (data / "configs" / f"{name}.json").unlink()
    with pytest.raises(ValueError, match=f"models.csv line {line}: configs/{name}.json"):
        read_models(data)  # type: ignore[arg-type]
    (data / "models.csv").write_text("name,source\nx,y\n")
    with pytest.raises(ValueError, match="the header must be"):
        read_models(data)  # type: ignore[arg-type]


def test_every_gpu_flavor_names_a_catalog_class_and_a_broken_flavor_row_names_its_line() -> None:
    names = {g.name for g in GPUS}
    gpu_flavors = [f for f in FLAVORS if f.accelerator == "gpu"]
    assert gpu_flavors and all(f.gpu in names and f.gpu_count > 0 and f.hourly_usd > 0 for f in gpu_flavors)
    assert all(f.price_source for f in FLAVORS)
    text = files("planner.data").joinpath("flavors.csv").read_text().splitlines()
    with pytest.raises(ValueError, match="flavors.csv line 3: accelerator must be one of gpu, cpu, tpu"):
        read_flavors("\n".join([text[0], text[1], text[2].replace(",cpu,", ",npu,", 1)]))
    with pytest.raises(ValueError, match="flavors.csv line 2"):
        read_flavors("\n".join([text[0], text[3].replace(",1,", ",one,", 1)]))
