"""The planner's step time: GPU work, and the host's share that small steps cannot hide (planner.throughput)."""

from __future__ import annotations

from dataclasses import replace

from contract.schema import Hardware, Method, Recipe, TrainingSpec, Workload
from planner.catalog import default_catalog
from planner.throughput import host_s, step_time

CATALOG = default_catalog()
H100 = Hardware(gpu=CATALOG.gpu("h100-sxm-80gb"))


def test_a_small_step_takes_the_host_s_time_and_a_long_one_its_gpu_work() -> None:
    """Measured on an H100: Llama-3.2-1B LoRA takes 0.20-0.26 s a step at every shape up to 2 x 2,048 tokens, where
    its GPU work alone would take 0.02-0.09 s; Llama-3.1-8B LoRA at 2 x 4,096 tokens is the GPU's (1.1 s)."""
    small = CATALOG.model("meta-llama/Llama-3.2-1B")
    t = TrainingSpec(method=Method.LORA, micro_batch_size=1, sequence_length=512)
    s = step_time(small, t, H100)
    assert s.compute_s < s.host_s == s.step_s
    large = step_time(CATALOG.model("meta-llama/Llama-3.1-8B"),
                      replace(t, micro_batch_size=2, sequence_length=4096), H100)
    assert large.host_s < large.compute_s <= large.step_s


def test_host_time_grows_with_checkpointing_adapters_zero3_and_accumulation() -> None:
    a = CATALOG.model("meta-llama/Llama-3.1-8B").architecture
    full = TrainingSpec(method=Method.FULL, gradient_checkpointing=False)
    ckpt = replace(full, gradient_checkpointing=True)
    lora = replace(ckpt, method=Method.LORA)
    zero3 = replace(lora, zero_stage=3)
    accumulated = replace(zero3, gradient_accumulation_steps=4)
    times = [host_s(a, t, H100.gpu) for t in (full, ckpt, lora, zero3, accumulated)]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert times[-1] == 4 * times[-2]


def test_the_trainer_without_deepspeed_spends_less_host_time_a_step_than_a_deepspeed_engine() -> None:
    """Measured on one H100 host: Llama-3.2-1B full takes 0.16 s a small step in the executor (DeepSpeed ZeRO-2) and
    0.12 s in transformers' Trainer without DeepSpeed; under ZeRO the Trainer runs DeepSpeed's engine too."""
    a = CATALOG.model("meta-llama/Llama-3.2-1B").architecture
    executor = TrainingSpec(method=Method.FULL, zero_stage=2)
    trainer = replace(executor, recipe=Recipe.HF_TRAINER, zero_stage=0)
    gpu = H100.gpu
    assert host_s(a, trainer, gpu) < host_s(a, replace(executor, zero_stage=0), gpu) == host_s(a, executor, gpu)
    assert host_s(a, replace(trainer, zero_stage=2), H100.gpu) == host_s(a, executor, H100.gpu)


def test_the_executor_s_qlora_computes_at_its_lora_s_speed_and_the_trainer_s_slower() -> None:
    """Measured on an H100: the executor's Llama-3.1-8B QLoRA at 2 x 4,096 tokens took 1.140 s to LoRA's 1.116; the
    Trainer's QLoRA ran at 0.87 of its LoRA's tokens/s in the fms-acceleration A100 rows."""
    model = CATALOG.model("meta-llama/Llama-3.1-8B")
    lora = TrainingSpec(method=Method.LORA, micro_batch_size=2, sequence_length=4096)
    qlora = replace(lora, method=Method.QLORA)
    assert step_time(model, qlora, H100).compute_s == step_time(model, lora, H100).compute_s
    trainer = [step_time(model, replace(t, recipe=Recipe.HF_TRAINER), H100).compute_s for t in (lora, qlora)]
    assert trainer[1] > trainer[0]


CPU = Hardware(gpu=CATALOG.gpu("cpu"))


def test_a_cpu_host_class_adds_its_measured_shares_to_the_flops_and_starts_in_seconds() -> None:
    """Issue 50 item 13: a CPU host computes on the cores that launch, so the shares add (a GPU's host share hides
    behind its work); its own figures (planner.data.cpus, make bench-cpu) replace the GPU host's, and its start-up is
    its own (seconds, not a GPU job's minutes)."""
    from planner.constants import STARTUP_S
    from planner.estimate import estimate

    a = CATALOG.model("meta-llama/Llama-3.2-1B")
    t = TrainingSpec(method=Method.LORA, micro_batch_size=1, sequence_length=512)
    s = step_time(a, t, CPU)
    assert s.step_s == s.compute_s + s.host_s and s.compute_s > 0 and s.host_s > 0
    layers = a.architecture.num_layers
    assert host_s(a.architecture, t, CPU.gpu) > layers * 3 * CPU.gpu.host_s_per_layer_pass, "the trainable params'"
    e = estimate(a, t, CPU, Workload(max_steps=10))
    assert e.duration_s == CPU.gpu.startup_s + 10 * s.step_s
    assert CPU.gpu.startup_s < STARTUP_S, "its own start-up, not a GPU job's loading"


def test_the_cpu_class_is_answered_by_name_and_never_offered_among_gpus() -> None:
    assert CATALOG.gpu("cpu") is CATALOG.gpu("CPU-host")
    assert all(g.name != "cpu" for g in CATALOG.gpus), "recommend, suggestions and moves look among GPUs only"


def test_a_cpu_host_class_holds_the_live_tensors_only() -> None:
    """The executor's preflight on a CPU counts live tensor bytes; a CPU has no CUDA context, cuBLAS workspace or
    caching allocator's slack, so the plan's peak there is its allocated bytes (the demo's tiny Llama: 191.6 MiB
    planned, 191.5 MiB measured by make run's preflight)."""
    from planner.constants import CUBLAS_WORKSPACE_BYTES
    from planner.memory import per_gpu_memory

    model = CATALOG.model("meta-llama/Llama-3.2-1B")
    t = TrainingSpec(method=Method.LORA, micro_batch_size=1, sequence_length=512)
    on_cpu, on_gpu = per_gpu_memory(model, t, CPU), per_gpu_memory(model, t, H100)
    assert on_cpu.total_bytes == on_cpu.allocated_bytes < on_gpu.total_bytes
    assert on_cpu.allocated_bytes == on_gpu.allocated_bytes - CUBLAS_WORKSPACE_BYTES, "cuBLAS's workspace is a GPU's"
