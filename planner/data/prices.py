"""Dated per-GPU-hour prices, each with its source: the data file prices.csv (one row a class). A class without a row
has no price on record: the planner says so and asks for hardware.hourly_usd_per_gpu instead of guessing."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib.resources import files

COLUMNS = ("gpu", "on_demand_hourly_usd", "spot_hourly_usd", "source")


@dataclass(frozen=True)
class Price:
    on_demand_hourly_usd: float
    spot_hourly_usd: float
    source: str


def read_prices(text: str) -> dict[str, Price]:
    """The prices of a prices.csv (its header must be COLUMNS), by GPU class."""
    reader = csv.DictReader(text.splitlines())
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise ValueError(f"prices.csv: the header must be {','.join(COLUMNS)}")
    prices = {}
    for row in reader:
        try:
            prices[row["gpu"]] = Price(float(row["on_demand_hourly_usd"]), float(row["spot_hourly_usd"]),
                                       row["source"])
        except (KeyError, ValueError) as e:
            raise ValueError(f"prices.csv line {reader.line_num}: {e}") from e
    return prices


PRICES: dict[str, Price] = read_prices(files("planner.data").joinpath("prices.csv").read_text())
