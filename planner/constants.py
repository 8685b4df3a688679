"""Every empirical constant of the memory and time models, defined once with unit and source.

Values marked "initial" are engineering estimates awaiting calibration against GPU
measurements (see benchmarks/accuracy.py); the others are exact facts of the software.
"""

from __future__ import annotations

from common.units import GiB, MiB

# --- Memory -------------------------------------------------------------------------------

# A process's device memory outside PyTorch's caching allocator (nvidia-smi's figure for it less
# torch.cuda.memory_reserved). Measured on one H100 80GB HBM3 (driver 580.159.04, CUDA 13.0, torch 2.11.0+cu130;
# benchmarks/results/gpu_measurements_h100.csv and _device.txt, 2026-11-26): 619 MiB after the first tensor, the CUDA
# context alone, within the 500-700 MiB that nvidia-smi shows for an idle torch 2.x process on Ampere/Hopper.
CUDA_CONTEXT_BYTES = 600 * MiB
# The same for a training process without DeepSpeed once it has run its steps: 766-768 MiB in each of 11 steps'
# measurements of transformers' Trainer + PEFT on the H100 (LoRA and full, Llama-3.2-1B and Llama-3.1-8B; the same
# software, benchmarks/results/gpu_measurements_h100_trainer.csv, 2026-11-26): the context, and the kernels and library
# handles (cuBLASLt, the fused optimizer's and SDPA's kernels) that a step loads.
TRAINING_OUTSIDE_ALLOCATOR_BYTES = 768 * MiB
# The same once a DeepSpeed rank has initialised NCCL and run its step: 1,333 MiB at ZeRO 0-2 in every group (1,315
# with eager attention, which loads no SDPA kernels), 1,723 MiB under ZeRO-3, which adds a communicator: NCCL's
# buffers, with the kernels and library handles a step loads. Measured on one rank; a rank with peers holds NCCL
# buffers for them too, so these are the least a rank of several holds.
DEEPSPEED_RANK_OUTSIDE_ALLOCATOR_BYTES = 1333 * MiB
ZERO3_RANK_OUTSIDE_ALLOCATOR_BYTES = 1723 * MiB
# Fit's band around the figures above: the spread of the sources for an idle process (500-700 MiB).
OUTSIDE_ALLOCATOR_SPREAD_BYTES = 100 * MiB
# cuBLAS's workspaces, which PyTorch allocates through its caching allocator per handle and stream
# (aten/src/ATen/cuda/CublasHandlePool.cpp; larger on Hopper), so that max_memory_allocated counts them and fake
# tensors never see them. Measured on the H100: every peak that activations decide, 64.0-65.1 MiB above the simulated
# one under ZeRO 0-2 (82 MiB under ZeRO-3).
CUBLAS_WORKSPACE_BYTES = 64 * MiB

# Reserved-but-unallocated memory of PyTorch's caching allocator, as a fraction of the peak allocated bytes, where no
# step is simulated (serving, planner/inference.py) and for fleet Feedback from before it carried the predicted
# allocated peak (planner/calibration.py: the plans of then added this). Initial: the third-party rows in
# shared/calibration show reserved/allocated of 1.12-1.20 (fms-acceleration A100 runs).
ALLOCATOR_OVERHEAD_FRACTION = 0.12
# A training step's allocator slack (planner.memory.allocator_slack_terms), per byte of the short-lived blocks that
# leave segments cached: least squares (non-negative) over make bench-simulate's rows, where PyTorch's caching
# allocator is replayed on the simulated step's allocations (executor/training/caching_allocator.py; loading's own
# segments released, as the steps' peak is wanted). Against the third-party rows that report both figures, the replay
# is within -2.2 %..+5.4 % of nvidia-smi less 0.5 GiB of context (fms-acceleration Mistral-7B LoRA and QLoRA,
# public_measurements.csv rows 23, 24, 26, 27), where a flat 12 % was 6-12 % under.
# Fitted on 2026-11-26 by `python -m benchmarks.slack_fit` to the 173 rows' simulated allocated and replayed reserved
# peaks (simulate.csv), each row weighted by 1 / its reserved bytes: the model's reserved (simulated allocated +
# slack) is within 1.9 % of the replay at the median, 142 rows within 5 %, where a flat 12 % was 5.8 % off at the
# median (-23.7 %..+11.9 %, 77 rows within 5 %). Not refitted on 2026-11-27: a fit to the 213 rows then (Liger's
# among them: median 2.1 %, 167 rows within 5 %) took the third-party rows' memory median from 7.8 % to 8.9 %
# (make bench-accuracy). A quantised step's dequantised weights (a bf16 copy per matmul, of
# a few sizes) leave about four of the largest cached.
SLACK_PER_LOGITS_BLOCK_BYTE = 0.783
SLACK_PER_LAYER_BYTE = 0.283
SLACK_PER_FETCH_BUFFER_BYTE = 0.291
SLACK_PER_STEP_BYTE = 0.292
SLACK_PER_GRADIENT_BYTE = 0.383
SLACK_PER_DEQUANTISED_BYTE = 3.754
SLACK_PER_REDUCE_BUCKET_BYTE = 0.282
SLACK_PER_TIED_GRADIENT_BYTE = 0.704
# How far the replayed reserved bytes were found above and below the model's over those rows (under, over): Fit's
# range (planner/confidence.py). Of the 230 rows of 2026-11-27 (make bench-simulate's reserved columns): worst
# under, the Llama-2-70B FSDP QLoRA row on transformers 4.45.2, -14.1 % (then Llama-3.1-8B QLoRA under ZeRO-3 on
# 4 ranks, -13.3 %, and a Llama-3.2-1B full fine-tune under TRL's SFTTrainer with ZeRO-2 on 4 ranks, whose step's
# one-off blocks, the fp64 norm copy of its embedding among them, are half its allocated peak, -13.1 %); worst over,
# Llama-3.2-1B QLoRA under ZeRO-3 on 2 ranks, +19.0 % (then a Llama-3.2-1B full fine-tune under transformers'
# Trainer with Liger's kernels, its peak at the optimizer step, +15.6 %).
SLACK_MODEL_ERROR = (0.141, 0.190)
# How far the truth has been found above and below the planner's allocated prediction (under, over), by regime:
# the executor's step simulated at full size (make bench-simulate, its "truth above/below the plan" lines,
# benchmarks/results/simulate.csv, 2026-11-27: 174 rows of ZeRO 0-2, QLoRA, 8-bit LoRA, transformers' Trainer's,
# TRL's SFTTrainer's and both under Liger's kernels among them, and 56 of ZeRO 3, the ZeRO-3 rows over experts
# that ZeRO-3 gathers again in backward among them: GLM-4.5-Air LoRA with and without checkpointing, its full
# fine-tune, -0.8 %..+1.8 %; the truth furthest above the plan there, Llama-3.2-1B QLoRA on 2 ranks, -1.7 %; the
# plan furthest above the truth, a Llama-3.2-1B full fine-tune under the Trainer with Liger's fused loss, +1.9 %).
SIMULATED_ERROR_ZERO0_TO_2 = (0.009, 0.023)
SIMULATED_ERROR_ZERO3 = (0.017, 0.019)
# How far our own GPU runs' torch.cuda.max_memory_allocated was found above the plan's allocated bytes, whatever the
# regime: benchmarks/results/gpu_rows_h200.csv (2026-11-27, one H200, make bench-accuracy): SmolLM3-3B LoRA under
# transformers' Trainer with Liger's kernels, 2 x 4,096 tokens, +1.29 % — the caching allocator's unsplit remainders
# of 109 loaded weights (up to 1 MiB each, 109.0 MiB in all, read off its history), which max_memory_allocated counts
# and tensors' bytes, the simulation's, do not; the H100 rows (gpu_measurements_h100*.csv) reach +0.4 %. Fit's
# allocated range reaches at least this far above the plan (planner/confidence.py).
MEASURED_GPU_ALLOCATED_UNDER = 0.013
# The first transformers release that checkpoints a decoder layer from inside FSDP's unit (modeling_layers.py:
# GradientCheckpointingLayer, whose __call__ the FSDP-wrapped layer runs). Before it the model's forward called its
# checkpoint function on the wrapped layer itself — reentrant by default — so FSDP 1's pre-forward ran in the recompute
# and hooked a frozen unit's reshard on the recompute's detached input (torch/distributed/fsdp/_runtime_utils.py:
# _register_post_backward_reshard_only_hook): the hook's grad accumulator keeps that input and its gradient until
# backward ends. Simulated (benchmarks/legacy_trainer.py, torch 2.13 and 2.4.1 alike): transformers 4.45.2 and 4.51.3
# hold one hidden-sized gradient per layer below the one in backward, 4.52.4 none.
TRANSFORMERS_CHECKPOINTS_INSIDE_FSDP = (4, 52)
# The first transformers release whose SDPA attention hands grouped k/v heads to SDPA unrepeated (enable_gqa, on torch
# 2.5 or later without a padding mask: integrations/sdpa_attention.py, use_gqa_in_sdpa). Before it repeat_kv copied k
# and v to every query head, and SDPA saved the copies (4.52.4's sdpa_attention.py; 4.45's LlamaSdpaAttention).
TRANSFORMERS_SDPA_UNREPEATED_KV = (4, 54)

# bitsandbytes NF4: 4 bits per weight plus one absmax per 64-weight block; fp32 absmax without
# double quantisation, 8-bit absmax plus an fp32 constant per 256 blocks with it (Dettmers 2023).
NF4_BLOCK_SIZE = 64
NF4_DOUBLE_QUANT_BLOCK = 256
NF4_PACKED_BYTES_PER_PARAM = 0.5
# LLM.int8: one int8 per weight plus an fp32 scale per output row (Dettmers 2022).
INT8_BYTES_PER_PARAM = 1
# LLM.int8's outlier columns a matmul splits out (inputs with a feature at or above llm_int8_threshold, 6.0 by
# transformers' default): found by value, so the count is the data's; taken as 6 (Dettmers et al. 2022, "LLM.int8()":
# the large-magnitude features of models past 6.7B parameters sit in about 6 hidden dimensions). Their tensors are
# that many columns wide (a few MiB a step); what their presence adds whatever their number (the output's copy that
# adds them back) is sized exactly. benchmarks/quantised.py simulates with the same count.
LLM_INT8_OUTLIER_COLUMNS = 6

# Optimizer state bytes per trainable parameter (torch.optim.AdamW: exp_avg + exp_avg_sq in fp32;
# bitsandbytes 8-bit Adam: two uint8 states, block-wise quantised; SGD with momentum: one fp32 buffer).
ADAMW_STATE_BYTES = 8
ADAMW_8BIT_STATE_BYTES = 2
SGD_STATE_BYTES = 4
# fp32 master weights DeepSpeed's mixed-precision optimizers keep (runtime/fp16/fused_optimizer.py for ZeRO 0,
# runtime/zero/stage_1_and_2.py and stage3.py: single_partition_of_fp32_groups / fp32_partitioned_groups_flat).
FP32_MASTER_BYTES = 4
# The fp32 gradients exist only during DeepSpeed 0.19's mixed-precision step, after the activations are freed
# (simulated: benchmarks/simulate.py, the step's `cat` and `_to_copy`), per trainable parameter it updates:
# - ZeRO 0 (FP16_Optimizer.step, used for bf16 and fp16): `_flatten_dense_tensors([p.grad.to(fp32) ...])` holds
#   every gradient's fp32 copy and their concatenation at once: 4 + 4 bytes;
# - ZeRO 1-3: the bf16 gradient partition flattened (2) and its fp32 copy (4), for the rank's partition
#   (stage_1_and_2.step: flatten_dense_tensors_aligned(...).to(fp32)) or one sub-group of it (stage3.step).
ZERO0_STEP_GRAD_BYTES = 8
ZERO_STEP_GRAD_BYTES = 6
# ZeRO 1-2's gradient norm casts each gradient to fp64 where the device has it (deepspeed/runtime/zero/utils.py:
# get_norm_dtype; CUDA does)
GRAD_NORM_BYTES = 8
# DeepSpeed's ZeRO-3 optimizer steps one sub-group of a rank's partition at a time; tunefleet's configs leave
# sub_group_size at DeepSpeed's default (runtime/zero/config.py: sub_group_size = 1e9).
STAGE3_SUB_GROUP_ELEMENTS = 1_000_000_000

# Logits/loss: fp32 vocab-sized tensors alive together at the first op of the loss backward — log_softmax's
# saved output, its gradient and the gradient of its input (transformers ForCausalLMLoss upcasts the logits
# with .float(); the bf16 logits and the upcast are freed before backward). Counted by the fake-tensor
# simulation of the executor's step (benchmarks/simulate.py).
LOGITS_FP32_COPIES = 3
# DPO (executor/training/dpo.py: TRL's selective_log_softmax over logits[:, :-1].float()): at the peak, in the
# backward of its gather, the saved fp32 logits, the gather's scattered gradient, logsumexp's gradient and their sum
# (simulated, as above: 4 copies over every position but each row's last).
DPO_LOGITS_FP32_COPIES = 4
# Eager attention's softmax backward: the saved fp32 probabilities, the fp32 upcast of their incoming gradient and
# the gradient of the scores (aten _softmax_backward_data) alive together (simulated: benchmarks/simulate.py).
EAGER_SOFTMAX_BACKWARD_FP32_COPIES = 3
# Hidden-sized tensors alive in a recomputed layer's forward beside an adapter's fp32 input casts (hf-trainer and
# trl-sft LoRA, planner/recipes.py adapter_cast_bytes), beyond what the layer saves: the residual, the MLP's input
# and the down projection's base output the forward holds as locals, the layer output's gradient and what the final
# norm's backward left. Held to: simulate.csv's trl-sft LoRA rows on every linear ('trl-sft Llama-3.1-8B
# lora[all-linear] mb2x2048 ckpt sdpa z0 x1', '... Qwen3-8B ... mb1x8192 ...', '... Llama-3.2-1B ... mb8x2048 ...')
CAST_PEAK_HIDDEN_TENSORS = 7
# CUDA's native_dropout keeps a bool mask: one byte per element (aten/src/ATen/native/cuda/Dropout.cu).
DROPOUT_MASK_BYTES = 1
# The Trainer recipes' autocast computes in bf16 (TrainingArguments bf16=True: torch.autocast(dtype=bfloat16)).
AUTOCAST_BYTES = 2
# Token ids (embedding backward) and the shifted labels (nll_loss) are int64.
TOKEN_ID_BYTES = 8
# Chunked / fused cross-entropy processes this many tokens' logits at a time (Liger default order).
CHUNKED_LOSS_TOKENS = 1024

# Host memory of one training rank: Python, torch, CUDA libraries, tokenizer and data loader.
# Initial: 2.5-3.5 GiB RSS per rank seen for torch 2.x + transformers training processes.
HOST_PROCESS_BYTES_PER_RANK = 3 * GiB
# from_pretrained streams safetensors shards; peak host copy is about one shard per rank.
# Hugging Face Hub default max_shard_size is 5 GB (transformers save_pretrained).
HOST_LOADING_SHARD_BYTES = 5 * 10**9
# DeepSpeed CPU offload keeps fp32 master, both Adam moments and an fp32 gradient in pinned RAM.
HOST_OFFLOAD_OPTIMIZER_BYTES_PER_PARAM = 16

# --- Time ---------------------------------------------------------------------------------

# Model FLOP/s utilisation for dense bf16/fp16 transformer training on one GPU with a large
# micro-batch, by architecture. Initial: public MFU reports for HF/DeepSpeed fine-tuning
# (about 35-50 % on A100/H100). Hopper: what our H100 80GB HBM3 steps realise where the GPU's work dominates
# (benchmarks/results/gpu_measurements_h100*.csv, 2026-11-26: Llama-3.1-8B LoRA at 1-2 x 4,096 tokens, the executor's
# and the Trainer's, 0.34-0.38, median 0.35). Ampere: that x 1.43, the median ratio of A100 80GB to H100 80GB MFU
# for the same bf16 training on 8 GPUs in llm-foundry's benchmark tables (mosaicml/llm-foundry
# scripts/train/benchmarking/README.md: 22 configurations, 1B-30B at 512-65,536 tokens, ratios 1.32-1.64). The
# third-party rows of benchmarks/accuracy.py test these; they were not fitted to them.
BASE_MFU_BY_ARCHITECTURE = {
    "pascal": 0.30,
    "volta": 0.35,
    "turing": 0.30,
    "ampere": 0.50,
    "ada": 0.40,
    "hopper": 0.35,
    "blackwell": 0.35,
    "cdna3": 0.30,
    # a CPU host class (planner.data.cpus): of its measured fp32 matmul peak, fitted by make bench-cpu
    # (benchmarks/results/cpu_class_figures.csv, 2026-11-28)
    "cpu": 0.745,
}
# Tokens per micro-batch at which utilisation reaches half its asymptote (small batches
# under-fill the GPU). Initial.
MFU_HALF_SATURATION_TOKENS = 512
# Throughput penalty of dequantising base weights every matmul (bitsandbytes NF4 / int8). Initial, from the
# fms-acceleration A100 rows: transformers' Trainer's QLoRA ran at 0.87 of LoRA's tokens/s.
QUANTISED_MFU_FACTOR = {"qlora": 0.85, "lora-8bit": 0.6}
# The executor's QLoRA pays none once the GPU's work dominates: on our H100 (gpu_measurements_h100*.csv) Llama-3.1-8B
# QLoRA with checkpointing took 0.622 / 1.140 s at 1 / 2 x 4,096 tokens against its LoRA's 0.622 / 1.116, and
# Llama-3.2-3B 0.167 s a pass at 2 x 4,096 against LoRA's 0.170.
EXECUTOR_QLORA_MFU_FACTOR = 1.0
# The host's share of a step, which the GPU cannot outrun on small steps: Python and kernel launches per decoder
# layer and pass (forward; backward counts twice, a checkpointed re-run once more), a little more per adapted linear,
# and under ZeRO-3 the hooks that fetch and release every parameter tensor. Fitted to the executor's steps measured on
# one H100 80GB HBM3 host (benchmarks/results/gpu_measurements_h100.csv, 2026-11-26) where the GPU's work was small:
# Llama-3.2-1B full ZeRO-2 0.16 s (16 layers x 4 passes: 2.5 ms); LoRA on all linears 0.20-0.22 s at 1B, 0.35-0.38 s
# at 3B, 0.35 s at 8B (2.7-3.2 ms a layer-pass: about 0.06 ms an adapted linear more); ZeRO-3 1.8 ms a parameter
# tensor (Llama-3.1-8B LoRA 1.69 s at every shape, 738 tensors; Llama-3.2-1B full 0.38-0.46 s). A slower host CPU
# takes longer.
HOST_S_PER_LAYER_PASS = 2.5e-3
# transformers' Trainer without DeepSpeed (the Trainer recipes on one GPU) spends less: fitted to its steps on the
# same host (benchmarks/results/gpu_measurements_h100_trainer.csv, 2026-11-26): Llama-3.2-1B full 0.116-0.133 s
# (16 layers x 4 passes: 1.8-2.1 ms, the optimizer's step included), LoRA on all linears 0.139-0.163 s (1.75 ms a
# layer-pass after the adapters' 0.06 ms each).
TRAINER_HOST_S_PER_LAYER_PASS = 1.8e-3
HOST_S_PER_ADAPTER_PASS = 0.06e-3
ZERO3_HOST_S_PER_TENSOR = 1.8e-3
# Share of collective communication hidden behind compute (DeepSpeed overlap_comm). Initial.
COMMUNICATION_OVERLAP_FRACTION = 0.5
# Effective host<->GPU bandwidth for DeepSpeed offload over PCIe with pinned memory. Initial.
OFFLOAD_PCIE_BYTES_PER_S = 20e9
# DeepSpeed CPUAdam parameter updates per second per node. Initial: ~1 s per billion
# parameters on a 32-core host (DeepSpeed ZeRO-Offload paper, Ren et al. 2021, fig. 7).
CPU_ADAM_PARAMS_PER_S = 1.0e9
# Inter-node bandwidth per GPU when the request gives none: 200 Gb/s per node NIC shared by 8.
DEFAULT_INTER_NODE_BYTES_PER_S = 25e9 / 8
# Model loading, process start and first-step compilation, once per job. Initial.
STARTUP_S = 180.0
# Duration range around the expected value: utilisation is the least certain input.
DURATION_LOW_FACTOR = 0.8
DURATION_HIGH_FACTOR = 1.3
