"""What the tests measure of torchtune, run in .venv-torchtune (benchmarks/torchtune_recipe.py: in_torchtune_venv) and
printed as one line of JSON for a test in .venv to hold the planner to:

  python -m benchmarks.torchtune_probe steps CONFIG_JSON METHOD CKPT     the recipe's steps on fake and on real tensors
  python -m benchmarks.torchtune_probe layers ARCHITECTURE_JSON METHOD   what each decoder layer saves for backward

CONFIG_JSON is a config.json's dict; ARCHITECTURE_JSON the fields of contract.model.Architecture (family by value).
Both run a micro-batch of MICRO_BATCH x SEQUENCE tokens, LoRA on every linear layer without dropout."""

from __future__ import annotations

import json
import os
import sys
import weakref
from typing import Any

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402

from contract.model import Architecture, Family  # noqa: E402
from contract.schema import ALL_LINEAR, LoraSpec, Method, Precision, Recipe, TrainingSpec  # noqa: E402

MICRO_BATCH, SEQUENCE = 2, 32
LORA = LoraSpec(target_modules=(ALL_LINEAR,), dropout=0.0)


def spec(method: Method, ckpt: bool) -> TrainingSpec:
    return TrainingSpec(method=method, micro_batch_size=MICRO_BATCH, sequence_length=SEQUENCE,
                        gradient_checkpointing=ckpt, lora=LORA, recipe=Recipe.TORCHTUNE, precision=Precision.BF16_PURE)


def steps(config_json: dict[str, Any], method: Method, ckpt: bool) -> dict[str, Any]:
    """The recipe's steps simulated on real and on fake tensors: per-step peaks, the peak's place, the reserved peak."""
    from benchmarks.simulate import simulate

    t = spec(method, ckpt)
    out = {}
    for kind, fake in (("real", False), ("fake", True)):
        s = simulate(config_json, t, fake=fake)
        out[kind] = {"step_peak_bytes": list(s.step_peak_bytes), "peak_bytes": s.peak_bytes, "phase": s.phase,
                     "op": s.op, "peak_reserved_bytes": s.peak_reserved_bytes}
    return out


def layers(a: Architecture, method: Method) -> list[int]:
    """Unique storages (parameters and buffers excluded) each decoder layer of torchtune's model saves for backward
    in a forward pass."""
    from torchtune import training

    from benchmarks.torchtune_recipe import torchtune_model
    from planner import torchtune

    t = spec(method, ckpt=False)
    torch.manual_seed(0)
    with training.set_default_dtype(torch.bfloat16):
        model = torchtune_model(a, torchtune.lora_arguments(t) if method is Method.LORA else None)
    if method is Method.LORA:
        for name, p in model.named_parameters():
            p.requires_grad_("lora_" in name)
    held = {x.untyped_storage().data_ptr() for x in [*model.parameters(), *model.buffers()]}
    where: dict[str, int | None] = {"layer": None}
    for index, layer in enumerate(model.layers):
        layer.register_forward_pre_hook(lambda m, args, index=index: where.update(layer=index))
        layer.register_forward_hook(lambda m, args, out: where.update(layer=None))
    saved: list[tuple[weakref.ref[torch.Tensor], int | None]] = []

    def pack(x: torch.Tensor) -> torch.Tensor:
        saved.append((weakref.ref(x), where["layer"]))
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        out = model(torch.randint(0, a.vocab_size, (MICRO_BATCH, SEQUENCE)))
    first: dict[int, tuple[int, int | None]] = {}
    for ref, at in saved:
        x = ref()
        if x is not None and x.untyped_storage().data_ptr() not in held:
            first.setdefault(x.untyped_storage().data_ptr(), (x.untyped_storage().nbytes(), at))
    del out
    return [sum(n for n, at in first.values() if at == i) for i in range(a.num_layers)]


def main(argv: list[str]) -> int:
    command, given, method = argv[0], json.loads(argv[1]), Method(argv[2])
    if command == "steps":
        result: Any = steps(given, method, argv[3] == "ckpt")
    else:
        result = layers(Architecture(**{**given, "family": Family(given["family"])}), method)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
