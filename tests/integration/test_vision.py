"""Vision-language fine-tuning on the CPU: a tiny Qwen2-VL built from a config, its image processor saved
locally, real DeepSpeed + PEFT, PNG images made in the test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
from peft import PeftModel, get_peft_model
from PIL import Image
from tunefleet.v1 import hardware_pb2, model_pb2, plan_pb2, planner_pb2, progress_pb2, training_pb2

from contract.errors import PlanError
from contract.paths import Roots
from contract.progress import read_events
from contract.run_config import run_config_from_plan
from devtools.tiny import build_vision_model, image_chat, make_plan, write_plan
from executor.training import checkpoint, corpus
from executor.training.launcher import check_plan, train
from executor.training.model import Host, load_model
from executor.training.peft_config import lora_config
from planner.catalog import default_catalog
from planner.service import Planner
from tests.integration.training_helpers import logits

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
LORA, FULL = training_pb2.METHOD_LORA, training_pb2.METHOD_FULL
_IMAGE_TOKENS = 8
_CHAT = plan_pb2.DATASET_FORMAT_CHAT


@pytest.fixture(scope="module")
def vision_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_vision_model(tmp_path_factory.mktemp("tiny-qwen2-vl"))


def _plan(model: Path, data: Path, out: Path, **kwargs: object) -> plan_pb2.Plan:
    defaults: dict[str, object] = {"fmt": _CHAT, "image_tokens": _IMAGE_TOKENS, "sequence_length": 48,
                                   "micro_batch": 4, "plan_id": out.name}
    return make_plan(model, data, out, **{**defaults, **kwargs})  # type: ignore[arg-type]


def _inputs(model_dir: Path, data: Path) -> dict[str, torch.Tensor]:
    """One tokenized record of the dataset as model inputs (ids, image patches, grid, modality ids)."""
    plan = _plan(model_dir, data, data.parent / "probe")
    examples = corpus.build(run_config_from_plan(plan), Roots.from_environment())
    e = examples[0]
    ids = torch.tensor([e.input_ids])
    config = transformers.AutoConfig.from_pretrained(model_dir)
    return {"ids": ids, "pixel_values": torch.from_numpy(e.pixel_values),  # type: ignore[union-attr]
            "image_grid_thw": torch.from_numpy(e.image_grid_thw),  # type: ignore[union-attr]
            "mm_token_type_ids": (ids == config.image_token_id).long()}


def test_lora_on_image_chat_learns_and_exports_what_it_trained(vision_model: Path, tmp_path: Path) -> None:
    data = image_chat(tmp_path / "chat.jsonl", records=48, image_dir=tmp_path / "images")
    out = tmp_path / "run"
    result = train(write_plan(_plan(vision_model, data, out, max_steps=24, checkpoint_every=24, learning_rate=1e-2),
                              tmp_path / "plan.json"), progress_interval_s=0)

    assert result.succeeded, result.last_event.message
    losses = [e.loss for e in read_events(out / "progress.jsonl") if e.phase == progress_pb2.PHASE_TRAINING and e.loss]
    assert len(losses) == 24
    assert sum(losses[-4:]) / 4 < 0.85 * sum(losses[:4]) / 4, losses

    inputs = _inputs(vision_model, data)
    assert int(inputs["mm_token_type_ids"].sum()) > 0
    base = transformers.AutoModelForImageTextToText.from_pretrained(vision_model)
    exported = PeftModel.from_pretrained(transformers.AutoModelForImageTextToText.from_pretrained(vision_model),
                                         out / "final")
    rebuilt = get_peft_model(transformers.AutoModelForImageTextToText.from_pretrained(vision_model),
                             lora_config(run_config_from_plan(_plan(vision_model, data, out)).training.lora, base,
                                         frozen_vision=True))
    state = get_fp32_state_dict_from_zero_checkpoint(str(checkpoint.step_dir(out / "checkpoints", 24)),
                                                     tag=checkpoint.DEEPSPEED_TAG)
    missing, unexpected = rebuilt.load_state_dict(state, strict=False)
    assert not unexpected and {n for n, p in rebuilt.named_parameters() if p.requires_grad}.isdisjoint(missing)
    torch.testing.assert_close(logits(exported, **inputs), logits(rebuilt, **inputs), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(logits(exported, **inputs), logits(base, **inputs), atol=1e-4)
    assert not any("visual" in n for n, _ in exported.named_parameters() if "lora_" in n)


def _planner_trainable(model_dir: Path, training: training_pb2.TrainingSpec) -> int:
    request = planner_pb2.FitRequest(
        model=model_pb2.ModelRef(config_json=(model_dir / "config.json").read_text()), training=training,
        hardware=hardware_pb2.HardwareSpec(gpu="a100-80gb", gpus_per_node=1))
    return int(Planner(default_catalog()).fit(request).result.trainable_parameter_count)


@pytest.mark.parametrize("method", [LORA, FULL], ids=["lora", "full"])
def test_vision_tower_frozen_or_trained_changes_exactly_what_the_planner_counts(vision_model: Path, tmp_path: Path,
                                                                                method: int) -> None:
    data = image_chat(tmp_path / "chat.jsonl", records=4, image_dir=tmp_path / "images")
    trainable = {}
    for vision in (False, True):
        plan = _plan(vision_model, data, tmp_path / f"run-{vision}", method=method, train_vision_tower=vision,
                     target_modules=("all-linear",))
        model = load_model(run_config_from_plan(plan), Host(gpu_count=0))
        names = {n for n, p in model.named_parameters() if p.requires_grad}
        counted = sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert counted == _planner_trainable(vision_model, plan.training), (method, vision)
        trainable[vision] = names
    assert not any("visual" in n for n in trainable[False])
    added = trainable[True] - trainable[False]
    assert added and all("visual" in n for n in added) and trainable[False] <= trainable[True]


def _one_image_record(path: Path, image: str) -> Path:
    path.write_text(json.dumps({"messages": [
        {"role": "user", "content": [{"type": "image", "path": image}, {"type": "text", "text": "w0"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "w1 w2"}]}]}) + "\n")
    return path


def test_a_missing_image_is_refused_naming_the_record_and_part(vision_model: Path, tmp_path: Path) -> None:
    data = image_chat(tmp_path / "chat.jsonl", records=4, image_dir=tmp_path / "images")
    lines = data.read_text().splitlines()
    lines[2] = _one_image_record(tmp_path / "x.jsonl", "images/nowhere.png").read_text().strip()
    data.write_text("\n".join(lines) + "\n")
    with pytest.raises(PlanError) as e:
        check_plan(write_plan(_plan(vision_model, data, tmp_path / "run"), tmp_path / "plan.json"))
    assert "record 3 messages[0].content[0]" in str(e.value) and "nowhere.png does not exist" in str(e.value)


@pytest.mark.parametrize("policy", [plan_pb2.OVERSIZE_IMAGES_REFUSE, plan_pb2.OVERSIZE_IMAGES_RESIZE],
                         ids=["refuse", "resize"])
def test_an_image_over_the_token_budget_is_refused_or_resized_as_the_plan_says(vision_model: Path, tmp_path: Path,
                                                                               policy: int) -> None:
    Image.new("RGB", (280, 168), (200, 40, 40)).save(tmp_path / "big.png")  # 10 × 6 tokens of 28 px: 60 tokens
    data = _one_image_record(tmp_path / "chat.jsonl", "big.png")
    plan = write_plan(_plan(vision_model, data, tmp_path / "run", oversize_images=policy, micro_batch=1),
                      tmp_path / "plan.json")
    if policy == plan_pb2.OVERSIZE_IMAGES_REFUSE:
        with pytest.raises(PlanError) as e:
            check_plan(plan)
        assert e.value.field == "dataset.oversize_images"
        assert "record 1" in str(e.value) and "60 image tokens" in str(e.value) and f"{_IMAGE_TOKENS}" in str(e.value)
        return
    report = check_plan(plan)
    assert report.examples == 1
    examples = corpus.build(run_config_from_plan(_plan(vision_model, data, tmp_path / "run", oversize_images=policy)),
                            Roots.from_environment())
    grid = examples[0].image_grid_thw  # type: ignore[union-attr]
    tokens = int(grid.prod()) // 4
    assert 0 < tokens <= _IMAGE_TOKENS
    image_token = transformers.AutoConfig.from_pretrained(vision_model).image_token_id
    assert sum(1 for t in examples[0].input_ids if t == image_token) == tokens  # the pad expanded once per token
