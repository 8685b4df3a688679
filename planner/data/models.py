"""Popular models by Hugging Face name, each read from its config.json as stored here.

models.csv lists them, one row a model: its name, the other names people use for the same weights (instruct and chat
variants share their base model's shape; separated by spaces), where its config.json was read and when, a note shown
with every answer for it (where the planner's reading is an approximation) and a remark for maintainers. Its shape is
configs/<name>.json: the keys of the model's config.json that shape the model, read through planner.hf_config as a
user's own config.json is, so a catalog model and an uploaded config go through one reader. Both are read once; a row
or a file that does not parse names itself.
"""

from __future__ import annotations

import csv
from importlib.resources import files
from importlib.resources.abc import Traversable

from contract.errors import InvalidFieldError
from contract.model import ModelSpec
from planner.errors import UnsupportedError
from planner.hf_config import architecture_from_config

COLUMNS = ("name", "aliases", "source", "read", "note", "about")
_DATA = files("planner.data")


def config_path(name: str, data: Traversable = _DATA) -> Traversable:
    """Where model `name`'s config.json is stored: configs/<organisation>/<model>.json."""
    return data.joinpath("configs", *f"{name}.json".split("/"))


def read_models(data: Traversable = _DATA) -> tuple[tuple[ModelSpec, ...], dict[str, str]]:
    """The models of data/models.csv with their stored configs, and their aliases (alias -> name)."""
    reader = csv.DictReader(data.joinpath("models.csv").read_text().splitlines())
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise ValueError(f"models.csv: the header must be {','.join(COLUMNS)}")
    models, aliases = [], {}
    for row in reader:
        path = config_path(row["name"], data)
        try:
            architecture = architecture_from_config(path.read_text())
        except (OSError, InvalidFieldError, UnsupportedError) as e:
            raise ValueError(f"models.csv line {reader.line_num}: configs/{row['name']}.json: {e}") from e
        models.append(ModelSpec(name=row["name"], architecture=architecture, weights=row["name"],
                                source=row["source"], note=row["note"]))
        aliases.update(dict.fromkeys(row["aliases"].split(), row["name"]))
    return tuple(models), aliases


MODELS, ALIASES = read_models()
