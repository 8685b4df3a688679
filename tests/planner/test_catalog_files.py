"""The GPU and price catalog is data (planner/data/gpus.csv, prices.csv): every row parses with its source, every
price names a class the catalog has, and a broken row is refused naming its line."""

from __future__ import annotations

from importlib.resources import files

import pytest

from planner.catalog import default_catalog
from planner.data.gpus import GPUS, read_gpus
from planner.data.prices import PRICES, read_prices


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
