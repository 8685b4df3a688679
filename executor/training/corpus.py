"""A run's dataset as examples of its objective: text/instruction/chat examples, vision-language chat examples
or DPO preference pairs. Tokenized once by the launcher and stored for the ranks, which load the same file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contract.errors import PlanError
from contract.paths import Roots
from contract.run_config import RunConfig
from contract.schema import Objective
from executor.training import data, preference, vision
from executor.training.model import is_vision, load_config, load_tokenizer

Examples = Sequence[data.Example] | Sequence[preference.PairExample]  # vision.VisionExample is a data.Example


def _image_processor(cfg: RunConfig) -> Any:
    import transformers

    try:
        return transformers.AutoImageProcessor.from_pretrained(cfg.model_path)
    except (OSError, ValueError) as e:
        raise PlanError("model.weights", f"{cfg.model_path} is a vision-language model without an image processor "
                                         f"(preprocessor_config.json): {e}") from e


def build(cfg: RunConfig, roots: Roots, tokenizer: Any | None = None) -> Examples:
    """Read and tokenize the plan's dataset; PlanError names the record and field of anything unusable."""
    t = cfg.training
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(cfg)
    records = data.load_records(cfg.dataset)
    if t.objective is Objective.DPO:
        return preference.tokenize(records, tokenizer, t.sequence_length)
    config = load_config(cfg)
    if is_vision(config):
        return vision.tokenize(records, tokenizer, _image_processor(cfg), int(config.image_token_id), cfg.dataset,
                               t.sequence_length, t.image_tokens, roots)
    return data.tokenize(records, tokenizer, cfg.dataset, t.sequence_length)


def save(path: Path, examples: Examples) -> None:
    if isinstance(examples[0], preference.PairExample):
        preference.save(path, examples)  # type: ignore[arg-type]
    elif isinstance(examples[0], vision.VisionExample):
        vision.save(path, examples)  # type: ignore[arg-type]
    else:
        data.save_examples(path, examples)  # type: ignore[arg-type]


def load(path: Path) -> Examples:
    import numpy as np

    with np.load(path) as saved:
        keys = set(saved.files)
    if "prompt_ids" in keys:
        return preference.load(path)
    if "pixel_values" in keys:
        return vision.load(path)
    return data.load_examples(path)
