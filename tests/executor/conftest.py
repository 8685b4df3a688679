from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.tiny_llama import build_model, counting_text


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised two-layer Llama and a word-level tokenizer with a chat template, built locally."""
    return build_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture()
def counting_data(tmp_path: Path) -> Path:
    return counting_text(tmp_path / "data.jsonl", records=64)
