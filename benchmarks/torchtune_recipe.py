"""torchtune's own single-device recipes under fake tensors: benchmarks/simulate.py sizes a plan whose training.recipe
is torchtune with these (`torchtune_peaks`).

torchtune 0.6.1's recipes/lora_finetune_single_device.py (LoRA) and recipes/full_finetune_single_device.py (full
fine-tuning) are loaded from the installed wheel as `tune run` loads them (they are scripts, not a package) and run
as a user runs them: the recipe's own setup (model under its bf16 default dtype, activation checkpointing of every
TransformerSelfAttentionLayer, CEWithChunkedOutputLoss and the model's matching output chunks, the optimizer, the
dataloader through padded_collate_sft) and its own train() loop, with the configs' defaults (dtype bf16, torch AdamW
with fused=True, no gradient clipping, no compile, no activation offloading). The config's components the harness
supplies are the ones that touch files: a checkpointer that hands the recipe a state dict made in memory, a tokenizer
with a pad id, and a dataset of full-length random token sequences; the recipe's checkpoint save at the epoch's end
is skipped. The model is torchtune's own builder for the family (`torchtune_model`), sized from the config.json.

torchtune runs in .venv-torchtune (make torchtune-env; requirements-torchtune.txt says why not in .venv): the table and
the tests run a torchtune row, or a probe of torchtune's modules, in that interpreter (`in_torchtune_venv`).

Steps are marked by hooks on the recipe's loss step (forward, then backward) and its optimizer (step).

What differs under fake tensors, with the same shapes: Llama 3's scaled RoPE (torchtune/models/llama3_1/
_position_embeddings.py: Llama3ScaledRoPE.apply_scaling) rescales its frequencies one Python float at a time, which a
fake tensor cannot give; the stand-in returns a new tensor of the same shape and dtype (`_scaling_by_shape`)."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from benchmarks.venvs import TORCHTUNE, in_venv
from contract.model import Architecture, Family
from contract.schema import Method, TrainingSpec
from executor.training.live_bytes import LiveBytes, Peak
from planner.torchtune import builder_arguments, lora_arguments

# the recipes a plan runs, by method, and the class each defines (torchtune 0.6.1's recipes/ directory)
RECIPES = {Method.LORA: ("lora_finetune_single_device", "LoRAFinetuneRecipeSingleDevice"),
           Method.FULL: ("full_finetune_single_device", "FullFinetuneRecipeSingleDevice")}
# torchtune's component builders, by family (torchtune/models/<name>/_component_builders.py: <name> and
# lora_<name>)
BUILDER_NAMES = {Family.LLAMA: "llama3_2", Family.QWEN2: "qwen2", Family.MISTRAL: "mistral"}

# what the harness's config components read (set for the run by `torchtune_peaks`)
_RUN: dict[str, Any] = {}


def in_torchtune_venv(*args: str) -> Any:
    """`python -m <args>` in .venv-torchtune; what it prints (JSON), parsed."""
    return in_venv(TORCHTUNE, *args)


@contextlib.contextmanager
def _scaling_by_shape() -> Iterator[None]:
    from torchtune.models.llama3_1._position_embeddings import Llama3ScaledRoPE

    original = Llama3ScaledRoPE.apply_scaling
    Llama3ScaledRoPE.apply_scaling = lambda self, freqs, *_: freqs * 1.0  # type: ignore[method-assign]
    try:
        yield
    finally:
        Llama3ScaledRoPE.apply_scaling = original  # type: ignore[method-assign]


def _recipe_class(method: Method) -> Any:
    """The recipe's class, loaded from the wheel's recipes/ directory as `tune run` loads a recipe file."""
    import torchtune

    module_name, class_name = RECIPES[method]
    path = Path(torchtune.__file__).parent.parent / "recipes" / f"{module_name}.py"
    spec = importlib.util.spec_from_file_location(f"torchtune_recipe_{module_name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.tqdm = functools.partial(module.tqdm, disable=True)
    return getattr(module, class_name)


def torchtune_model(a: Architecture, lora: dict[str, Any] | None = None) -> Any:
    """The architecture's model from torchtune's builder for its family: `lora_<name>` with the recipe's LoRA
    arguments (`lora`: planner.torchtune.lora_arguments), or the base builder, in the current default dtype."""
    import importlib

    name = BUILDER_NAMES[a.family]
    builders = importlib.import_module(f"torchtune.models.{name}._component_builders")
    if lora is not None:
        return getattr(builders, f"lora_{name}")(**builder_arguments(a), **lora)
    return getattr(builders, name)(**builder_arguments(a))


def build_model(**lora: Any) -> Any:
    """The recipe's model component: the plan's model, with the LoRA arguments the config gives (none: full)."""
    return torchtune_model(_RUN["architecture"], lora if _RUN["training"].method is Method.LORA else None)


class Checkpointer:
    """The recipe's checkpointer: the base model's state dict, made in memory by the same builder."""

    def __init__(self, **_: Any) -> None:
        pass

    def load_checkpoint(self) -> dict[str, Any]:
        from torchtune import training

        with training.set_default_dtype(torch.bfloat16):
            state = torchtune_model(_RUN["architecture"]).state_dict()
        return {training.MODEL_KEY: state}


class Tokenizer:
    """All padded_collate_sft reads of a tokenizer."""

    pad_id = 0

    def __init__(self, **_: Any) -> None:
        pass


class Dataset(torch.utils.data.Dataset[dict[str, list[int]]]):
    """Full-length sequences of random tokens, every one labelled (the planner sizes the longest batch)."""

    def __init__(self, tokenizer: Any, **_: Any) -> None:
        self.count, self.length = _RUN["examples"], _RUN["training"].sequence_length
        self.vocab = _RUN["architecture"].vocab_size
        self.random = random.Random(0)

    def __len__(self) -> int:
        return int(self.count)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        tokens = [self.random.randrange(1, self.vocab) for _ in range(self.length)]
        return {"tokens": tokens, "labels": tokens}


def recipe_config(t: TrainingSpec, steps: int, output_dir: str) -> Any:
    """The recipe's config: the defaults of torchtune's single-device configs (llama3_2/1B_lora_single_device.yaml,
    1B_full_single_device.yaml) with the plan's micro-batch, checkpointing and LoRA, and the harness's components."""
    from omegaconf import OmegaConf

    model: dict[str, Any] = {"_component_": f"{__name__}.build_model"}
    if t.method is Method.LORA:
        model.update(lora_arguments(t))
    here = __name__
    return OmegaConf.create({
        "output_dir": output_dir, "model": model,
        "tokenizer": {"_component_": f"{here}.Tokenizer"},
        "checkpointer": {"_component_": f"{here}.Checkpointer", "model_type": "LLAMA3_2"},
        "resume_from_checkpoint": False, "save_adapter_weights_only": False,
        "dataset": {"_component_": f"{here}.Dataset", "packed": False}, "seed": 0, "shuffle": False,
        "batch_size": t.micro_batch_size,
        "optimizer": {"_component_": "torch.optim.AdamW", "fused": True, "lr": 2e-5},
        "optimizer_in_bwd": False,
        "lr_scheduler": {"_component_": "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup",
                         "num_warmup_steps": 100},
        "loss": {"_component_": "torchtune.modules.loss.CEWithChunkedOutputLoss"},
        "epochs": 1, "max_steps_per_epoch": steps, "gradient_accumulation_steps": t.gradient_accumulation_steps,
        "clip_grad_norm": None, "compile": False,
        "metric_logger": {"_component_": "torchtune.training.metric_logging.DiskLogger", "log_dir": output_dir},
        "log_every_n_steps": 1, "log_peak_memory_stats": False, "device": "cpu", "dtype": "bf16",
        "enable_activation_checkpointing": t.gradient_checkpointing, "enable_activation_offloading": False,
        "profiler": {"_component_": "torchtune.training.setup_torch_profiler", "enabled": False},
    })


def torchtune_peaks(a: Architecture, t: TrainingSpec, counter: LiveBytes, steps: int, loaded: Any) -> list[Peak]:
    """`steps` optimizer steps of torchtune's recipe for the plan; each step's peak. `loaded(counter)` is called as
    the first step begins (the model is ready)."""
    peaks: list[Peak] = []
    _RUN.update(architecture=a, training=t, examples=steps * t.micro_batch_size * t.gradient_accumulation_steps)
    with tempfile.TemporaryDirectory() as out, _scaling_by_shape():
        config = recipe_config(t, steps, out)
        recipe = _recipe_class(t.method)(config)
        recipe.setup(config)
        recipe.save_checkpoint = lambda epoch: None
        loss_step = recipe._loss_step

        def marked_loss_step(batch: dict[str, torch.Tensor]) -> torch.Tensor:
            if counter.phase == "init":
                if not peaks:
                    loaded(counter)
                counter.peak = Peak(counter.live_bytes)
            counter.set_phase("forward")
            loss = loss_step(batch)
            counter.set_phase("backward")
            return loss

        def step_begins(*_: Any) -> None:
            counter.set_phase("step")

        def step_ends(*_: Any) -> None:
            peaks.append(counter.peak)
            counter.set_phase("init")

        recipe._loss_step = marked_loss_step
        recipe._optimizer.register_step_pre_hook(step_begins)
        recipe._optimizer.register_step_post_hook(step_ends)
        recipe.train()
        recipe.cleanup()
        del recipe
    _RUN.clear()
    return peaks
