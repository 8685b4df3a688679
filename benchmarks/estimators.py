"""Side by side: tunefleet's planner vs DeepSpeed's ZeRO model-state estimators and accelerate's
training-memory estimate, on the same models: time per call and the answers.

DeepSpeed estimates model states only (no activations, no overhead); accelerate multiplies
the model size by a fixed factor per precision. The table shows how far each is from our
full per-GPU peak and from our model-state terms alone.
"""

from __future__ import annotations

import os
from functools import partial

from executor.training.process import prepare

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
import transformers  # noqa: E402
from accelerate.commands.estimate import estimate_training_usage  # noqa: E402
from accelerate.utils import calculate_maximum_sizes  # noqa: E402
from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs  # noqa: E402
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs  # noqa: E402

from benchmarks.common import pct, print_table, time_calls, write_csv  # noqa: E402
from common.units import GiB  # noqa: E402
from contract.schema import Hardware, Method, TrainingSpec  # noqa: E402
from planner.architecture import largest_layer_params, parameter_counts  # noqa: E402
from planner.catalog import default_catalog  # noqa: E402
from planner.memory import per_gpu_memory  # noqa: E402

MODELS = ["meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B", "mistralai/Mistral-7B-v0.3"]
GPUS = 4


def meta_model(name: str) -> torch.nn.Module:
    a = default_catalog().model(name).architecture
    config = transformers.AutoConfig.for_model(
        a.family.value, num_hidden_layers=a.num_layers, hidden_size=a.hidden_size,
        intermediate_size=a.intermediate_size, num_attention_heads=a.num_attention_heads,
        num_key_value_heads=a.num_key_value_heads, vocab_size=a.vocab_size, tie_word_embeddings=a.tie_word_embeddings,
        **({"head_dim": a.head_dim} if a.head_dim else {}))
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config)


def main() -> None:
    catalog = default_catalog()
    rows: list[list[object]] = []
    for name in MODELS:
        spec = catalog.model(name)
        params = parameter_counts(spec.architecture).total
        largest = largest_layer_params(spec.architecture)
        hw = Hardware(gpu=catalog.gpu("a100-80gb"), gpus_per_node=GPUS, host_memory_bytes=10**12)
        for stage in (2, 3):
            t = TrainingSpec(method=Method.FULL, zero_stage=stage, micro_batch_size=1, sequence_length=2048)
            ours = per_gpu_memory(spec, t, hw)
            ours_state = ours.weights_bytes + ours.gradients_bytes + ours.optimizer_bytes
            ours_s = time_calls(partial(per_gpu_memory, spec, t, hw), 2000)
            if stage == 2:
                ds_fn = partial(estimate_zero2_model_states_mem_needs, params, GPUS, 1, cpu_offload=False)
            else:
                ds_fn = partial(estimate_zero3_model_states_mem_needs, params, largest, GPUS, 1, cpu_offload=False,
                                cpu_offload_params=False)
            ds_s = time_calls(ds_fn, 2000)
            ds_gpu = ds_fn()[1]  # (cpu bytes, gpu bytes[, largest layer bytes])
            rows.append([name, f"ZeRO-{stage} x{GPUS}", f"{ours.total_bytes / GiB:.1f}", f"{ours_state / GiB:.1f}",
                         f"{ds_gpu / GiB:.1f}", f"{(ds_gpu - ours_state) / ours_state:+.0%}", "",
                         f"{pct(ours_s, 50) * 1e6:.0f}", f"{pct(ds_s, 50) * 1e6:.1f}", ""])
        model = meta_model(name)
        acc_fn = lambda model=model: estimate_training_usage(calculate_maximum_sizes(model)[0], "bfloat16")  # noqa: E731
        acc_s = time_calls(acc_fn, 20, warmup=2)
        acc = acc_fn()
        acc_peak = max(v for v in acc.values() if v is not None)
        t1 = TrainingSpec(method=Method.FULL, zero_stage=0, micro_batch_size=1, sequence_length=2048)
        one = Hardware(gpu=catalog.gpu("h200"), host_memory_bytes=10**12)
        ours = per_gpu_memory(spec, t1, one)
        ours_state = ours.weights_bytes + ours.gradients_bytes + ours.optimizer_bytes
        ours_s = time_calls(partial(per_gpu_memory, spec, t1, one), 2000)
        rows.append([name, "1 GPU, accelerate", f"{ours.total_bytes / GiB:.1f}", f"{ours_state / GiB:.1f}", "",
                     "", f"{acc_peak / GiB:.1f} ({(acc_peak - ours_state) / ours_state:+.0%})",
                     f"{pct(ours_s, 50) * 1e6:.0f}", "", f"{pct(acc_s, 50) * 1e3:.1f} ms"])
    header = ["model", "layout", "ours total GiB", "ours states GiB", "DeepSpeed GiB", "DS vs states",
              "accelerate GiB (vs states)", "ours us", "DeepSpeed us", "accelerate"]
    print_table("Full fine-tuning, bf16 AdamW, micro-batch 1 x 2048: per-GPU memory and time per call", header, rows)
    print("\nDeepSpeed counts 16 bytes/param of partitioned state plus unpartitioned fp16 params and grads "
          "(ZeRO-2), or the largest layer (ZeRO-3), and no activations; accelerate multiplies model bytes "
          "by a fixed factor and needs a model instance (meta device), hence its milliseconds.")
    print(f"\nwrote {write_csv('estimators.csv', header, rows)}")


if __name__ == "__main__":
    prepare()  # set up as a training process is (executor.training.process)
    main()
