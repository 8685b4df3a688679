"""A Trainer recipe's step on an older transformers stack under fake tensors: benchmarks/simulate.py sizes a plan whose
training.transformers_version is set with this (`legacy_peaks`), run in .venv-legacy (make legacy-env;
requirements-legacy.txt: fms-acceleration's reference stack, transformers 4.45.2, accelerate 1.0.1, PEFT 0.13.2,
bitsandbytes 0.43.3, over .venv's torch).

The step is what such a user's script runs, as fms-acceleration's FSDP QLoRA benchmarks ran it (the third-party rows
the planner is held to): the model built from its config in bf16 with SDPA attention (their FlashAttention 2 saves
the same tensors and builds no mask either), QLoRA's weights quantised as from_pretrained quantises them
(benchmarks.quantised), the base frozen and the embeddings' output made to require grad as their plugin's k-bit
preparation does (fms_acceleration_peft.framework_plugin_bnb: no fp32 casts), PEFT's LoRA adapters, then the
Trainer with the arguments today's hf-trainer rows get (benchmarks.recipes.trainer_arguments: bf16 autocast, the
plan's micro-batch, gradient checkpointing as transformers 4.45 defaults it, reentrant, and, sharded, PEFT's FSDP config
taken up by accelerate 1.0's own preparation on the fake process group); each step's peak counted by
executor.training.live_bytes.

What bitsandbytes 0.43.3 does in C through ctypes, which a fake tensor has no storage for, is done here in torch ops
that allocate what its functions allocate (bitsandbytes/functional.py): `quantize_4bit` (the packed weight in the
quant storage dtype, an fp32 absmax per block; nested, the absmax as uint8 with an fp32 absmax per 256 blocks and an
offset) and `dequantize_4bit` (the nested absmax dequantised to fp32, then the weight in its original dtype).
Linear4bit.forward gives an FSDP view of its weight back its quant state by wrapping it in a Params4bit, which a fake
tensor cannot be; the view is made a fake Params4bit first (`_fake_views_recovered`). bitsandbytes' optional Triton
kernels (SwitchBack layers, which Linear4bit never runs) import triton.ops, which .venv's Triton no longer has:
bitsandbytes is imported as if Triton were absent (`_bitsandbytes`). As in benchmarks/simulate.py, dropout runs as
on CUDA (benchmarks.fake_step), and the Trainer's batches are unpadded full-length sequences (no attention mask)
drawn in order.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from benchmarks.common import fake_process_group
from benchmarks.fake_step import Scalars, as_on_cuda, swappable
from benchmarks.quantised import fake_params4bit_class, fake_view_params4bit, quantised, real_dynamic_map
from benchmarks.recipes import foreach_as_on_cuda, marking_backward, step_callback, trainer_arguments
from benchmarks.simulate_rows import Row, table_rows
from contract.schema import Method, Sharding, TrainingSpec
from executor.training.caching_allocator import CachingAllocator
from executor.training.live_bytes import LiveBytes, ModuleStack, Peak
from executor.training.process import prepare

# bitsandbytes' nested quantisation: one fp32 absmax per this many 4-bit blocks' absmax (functional.quantize_4bit)
NESTED_BLOCK = 256


def _bitsandbytes() -> Any:
    """bitsandbytes 0.43.3, imported as if Triton were absent (see the module doc)."""
    find_spec = importlib.util.find_spec
    importlib.util.find_spec = lambda name, *args: None if name == "triton" else find_spec(name, *args)
    try:
        import bitsandbytes
    finally:
        importlib.util.find_spec = find_spec
    return bitsandbytes


def _quantize_4bit(a: torch.Tensor, absmax: Any = None, out: Any = None, blocksize: int = 64,
                   compress_statistics: bool = False, quant_type: str = "fp4",
                   quant_storage: torch.dtype = torch.uint8) -> tuple[torch.Tensor, Any]:
    from bitsandbytes import functional

    n = a.numel()
    blocks = -(n // -blocksize)
    absmax = torch.zeros((blocks,), device=a.device, dtype=torch.float32)
    out = torch.zeros(((n + 1) // (quant_storage.itemsize * 2), 1), dtype=quant_storage, device=a.device)
    code = functional.get_4bit_type(quant_type, device="cpu")
    if not compress_statistics:
        return out, functional.QuantState(absmax=absmax, shape=a.shape, dtype=a.dtype, blocksize=blocksize,
                                          code=code, quant_type=quant_type)
    offset = absmax.mean()
    absmax -= offset
    nested = functional.QuantState(absmax=torch.zeros((-(blocks // -NESTED_BLOCK),), device=a.device,
                                                      dtype=torch.float32),
                                   code=functional.name2qmap["dynamic"], blocksize=NESTED_BLOCK, dtype=torch.float32)
    quantised_absmax = torch.zeros(absmax.shape, dtype=torch.uint8, device=a.device)
    del absmax
    return out, functional.QuantState(absmax=quantised_absmax, shape=a.shape, dtype=a.dtype, blocksize=blocksize,
                                      code=code, quant_type=quant_type, offset=offset, state2=nested)


def _dequantize_4bit(a: torch.Tensor, quant_state: Any = None, absmax: Any = None, out: Any = None,
                     blocksize: int = 64, quant_type: str = "fp4") -> torch.Tensor:
    if quant_state.nested:
        absmax = torch.empty(quant_state.absmax.shape, dtype=torch.float32, device=a.device)
        absmax += quant_state.offset
    if out is None:
        out = torch.empty(quant_state.shape, dtype=quant_state.dtype, device=a.device)
    return out.t() if a.shape[0] == 1 else out


@contextlib.contextmanager
def _fake_bitsandbytes() -> Iterator[None]:
    """bitsandbytes 0.43.3's quantise and dequantise allocating as its C functions do (see the module doc)."""
    from bitsandbytes import functional

    saved = functional.quantize_4bit, functional.dequantize_4bit
    functional.quantize_4bit, functional.dequantize_4bit = _quantize_4bit, _dequantize_4bit
    try:
        yield
    finally:
        functional.quantize_4bit, functional.dequantize_4bit = saved


@contextlib.contextmanager
def _fake_views_recovered() -> Iterator[None]:
    """Linear4bit.forward on an FSDP view of its weight: the view made a fake Params4bit with the module's quant
    state, as the forward's own recovery makes a real view one (nn/modules.py: Linear4bit.forward)."""
    bnb = _bitsandbytes()
    original = bnb.nn.Linear4bit.forward
    params_class = fake_params4bit_class()

    def forward(module: Any, x: torch.Tensor) -> torch.Tensor:
        if isinstance(module.weight, FakeTensor) and not isinstance(module.weight, bnb.nn.Params4bit):
            module.weight = fake_view_params4bit(module, params_class)
        return original(module, x)

    bnb.nn.Linear4bit.forward = forward
    try:
        yield
    finally:
        bnb.nn.Linear4bit.forward = original


def _model(config: Any, t: TrainingSpec) -> Any:
    """The user's model: built in bf16, QLoRA's quantised, the base frozen with the embeddings' output requiring grad
    (reentrant checkpointing needs it), PEFT's adapters."""
    import peft
    import transformers

    from executor.training.model import quantization
    from executor.training.peft_config import lora_config

    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16,
                                                          attn_implementation="sdpa").eval()
    bnb_config = quantization(t)
    if bnb_config is not None:
        model = quantised(model, bnb_config)
        # what transformers 4.45's from_pretrained sets beside its quantizer (the Trainer's FSDP QLoRA update reads it)
        model.is_quantized, model.quantization_method = True, bnb_config.quant_method
    model.requires_grad_(False)
    model.enable_input_require_grads()
    return peft.get_peft_model(model, lora_config(t.lora, model))


def legacy_peaks(config_json: dict[str, Any], t: TrainingSpec, world_size: int, steps: int = 2) -> dict[str, Any]:
    """`steps` Trainer steps of the plan on this virtualenv's stack; the highest peak, where it fell and what the CUDA
    caching allocator replayed on the same allocations reserved."""
    _bitsandbytes()  # before anything else imports it
    import transformers

    if t.method not in (Method.LORA, Method.QLORA) or t.transformers_version != transformers.__version__:
        raise ValueError(f"this stack simulates LoRA and QLoRA on transformers {transformers.__version__}, not "
                         f"{t.method.value} on {t.transformers_version}")
    started = time.perf_counter()
    config = transformers.AutoConfig.for_model(**config_json)
    config.use_cache = False
    modules, allocator = ModuleStack(), CachingAllocator()
    counter = LiveBytes(modules, allocator)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    peaks: list[Peak] = []
    ranks = fake_process_group(world_size) if t.sharding is Sharding.FSDP else contextlib.nullcontext()
    with real_dynamic_map(), ranks, trainer_arguments(t, world_size) as args, as_on_cuda(), _fake_bitsandbytes(), \
            _fake_views_recovered(), foreach_as_on_cuda():
        args.max_steps = steps
        with swappable(mode), mode, Scalars(), counter, modules:
            torch.manual_seed(0)
            model = _model(config, t)
            modules.name(model)
            vocab = config.vocab_size
            examples = [{"input_ids": torch.randint(0, vocab, (t.sequence_length,)),
                         "labels": torch.randint(0, vocab, (t.sequence_length,))}
                        for _ in range(steps * t.micro_batch_size)]

            class _InOrder(marking_backward(transformers.Trainer, counter)):  # type: ignore[misc]
                def _get_train_sampler(self, *args: Any, **kwargs: Any) -> Any:
                    return torch.utils.data.SequentialSampler(self.train_dataset)

            _InOrder(model=model, args=args, train_dataset=examples, callbacks=[step_callback(counter, peaks)]).train()
            del model
    peak = max(peaks, key=lambda p: p.bytes)
    return {"simulated_bytes": peak.bytes, "simulated_reserved_bytes": allocator.peak_reserved_bytes,
            "peak_at": f"{peak.phase}:{peak.op}", "by_phase": peak.by_phase, "seconds": time.perf_counter() - started,
            "steps": [p.bytes for p in peaks], "transformers": transformers.__version__}


def main(argv: list[str] | None = None) -> int:
    from planner.catalog import default_catalog
    from planner.hf_config import config_json

    p = argparse.ArgumentParser(description="A make bench-simulate row on .venv-legacy's Trainer stack (run there by "
                                            "benchmarks/simulate.py); prints its peaks as JSON.")
    p.add_argument("--row", required=True, help="the row's label, as make bench-simulate prints it")
    a = p.parse_args(argv)
    rows: dict[str, Row] = {row.label: row for row in table_rows()}
    if a.row not in rows:
        print(f"no make bench-simulate row is labelled {a.row!r}", file=sys.stderr)
        return 2
    row = rows[a.row]
    architecture = default_catalog().model(row.model).architecture
    print(json.dumps(legacy_peaks(config_json(architecture), row.training, row.world_size)))
    return 0


if __name__ == "__main__":
    prepare()  # set up as a training process is (executor.training.process)
    raise SystemExit(main())
