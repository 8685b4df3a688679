"""Activation bytes saved for backward equal what torch.autograd.graph.saved_tensors_hooks records on real
transformers / PEFT models run on the CPU: per decoder layer and outside the layers (ids, RoPE, final norm,
lm_head input, cross-entropy log-probs), eager and SDPA attention, full and LoRA, bf16 and fp32, with and
without gradient checkpointing."""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from contract.schema import Attention, LoraSpec, Method, Precision, TrainingSpec  # noqa: E402
from executor.training.peft_config import lora_targets as executor_lora_targets  # noqa: E402
from planner.activations import decoder_layer_saved_bytes, outside_layers_saved_bytes  # noqa: E402
from planner.hf_config import architecture_from_config  # noqa: E402
from planner.parameters import parameter_split  # noqa: E402

MICRO_BATCH, SEQ = 2, 16
LAYERS = 3
CONFIGS = {
    "llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig, "qwen2": transformers.Qwen2Config,
    "phi3": transformers.Phi3Config, "gemma2": transformers.Gemma2Config, "qwen3": transformers.Qwen3Config,
    "mixtral": lambda **kw: transformers.MixtralConfig(num_local_experts=4, num_experts_per_tok=2, **kw),
    # SmolLM3 is the Llama layout with RoPE left out of some layers: here the middle one, which the test measures
    "smollm3": lambda **kw: transformers.SmolLM3Config(no_rope_layers=[1, 0, 1], **kw),
    "olmo2": transformers.Olmo2Config,
    "gemma3": transformers.Gemma3TextConfig,
    # Phi-2's shape: partial rotary, residual dropout on the attention and MLP outputs
    "phi": lambda **kw: transformers.PhiConfig(partial_rotary_factor=0.4, resid_pdrop=0.1, **kw),
    "qwen2_moe": lambda intermediate_size, **kw: transformers.Qwen2MoeConfig(
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=intermediate_size,
        shared_expert_intermediate_size=2 * intermediate_size, **kw),
    # StarCoder2: LayerNorm, biased projections, a GELU MLP; `-drop` its released models' dropout (0.1 on the
    # embeddings, the attention probabilities and the attention and MLP outputs)
    "starcoder2": transformers.Starcoder2Config,
    "qwen3_moe": lambda intermediate_size, **kw: transformers.Qwen3MoeConfig(
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=intermediate_size, norm_topk_prob=True, **kw),
    # DeepSeek-V3: latent attention (a query latent, or `-noq` one q_proj), two dense layers lead (the middle one of
    # each kind is measured), group-limited routing over 8 experts with a shared one; `-plain` RoPE not interleaved
    "deepseek_v3": lambda **kw: _shared_experts(transformers.DeepseekV3Config, latent=True, **kw),
    # DeepSeek-V2: V3's layout with a softmax router (`-groups`: group-limited, whose mask stays) and complex RoPE
    "deepseek_v2": lambda **kw: _shared_experts(transformers.DeepseekV2Config, latent=True, **kw),
    # gpt-oss: attention sinks, biased projections, experts with biases and a clamped SwiGLU; sliding-window layers
    # around the measured full-attention one
    "gpt_oss": lambda intermediate_size, **kw: transformers.GptOssConfig(
        num_local_experts=8, num_experts_per_tok=2, intermediate_size=intermediate_size // 4, head_dim=16,
        sliding_window=8, **kw),
    # GLM-4.5: grouped-query attention with biased q/k/v, half of each head turned, `-qknorm` q/k norms; DeepSeek-V3's
    # experts
    "glm4_moe": lambda **kw: _shared_experts(transformers.Glm4MoeConfig, latent=False, attention_bias=True, **kw),
}
DEEPSEEK_LAYERS, DEEPSEEK_DENSE = 4, 2


def _shared_experts(config_class: type, latent: bool, num_hidden_layers: int, intermediate_size: int,
                    num_key_value_heads: int, **kw: object) -> object:
    """DeepSeek-V3's experts (DeepSeek-V2, GLM-4.5 too): two dense layers of twice the width, then 8 routed experts (2 a
    token, over 2 groups) and a shared one; with latent attention's shapes (a key and value per head)."""
    heads = kw["num_attention_heads"] if latent else num_key_value_heads
    shapes = dict(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=12, v_head_dim=10) if latent else {}
    return config_class(num_hidden_layers=DEEPSEEK_LAYERS, intermediate_size=2 * intermediate_size,
                        moe_intermediate_size=intermediate_size // 4, n_routed_experts=8, num_experts_per_tok=2,
                        n_group=2, topk_group=1, n_shared_experts=1, first_k_dense_replace=DEEPSEEK_DENSE,
                        num_key_value_heads=heads, **shapes, **kw)


@dataclass(frozen=True)
class Saved:
    per_layer: int  # a middle layer's own saved tensors
    outside: int  # everything else, RoPE cos/sin included
    dense_layer: int = 0  # a middle one of the dense layers that lead a mixture of experts (DeepSeek-V3)


def _model(family: str, attention: str, method: str, dtype: torch.dtype, dropout: float, ckpt: bool) -> object:
    """`family`, with `-mha` for as many key/value heads as query heads (no repeat_kv copy), `-drop` for the model's
    own dropout."""
    base, *variant = family.split("-")
    own_dropout = dict(residual_dropout=0.1, attention_dropout=0.1, embedding_dropout=0.1) if "drop" in variant else {}
    if base == "deepseek_v3":
        own_dropout = dict(q_lora_rank=None if "noq" in variant else 24, rope_interleave="plain" not in variant)
    if base == "glm4_moe":
        own_dropout = dict(use_qk_norm="qknorm" in variant)
    if base == "deepseek_v2":
        own_dropout = dict(q_lora_rank=None if "noq" in variant else 24,
                           topk_method="group_limited_greedy" if "groups" in variant else "greedy")
    config = CONFIGS[base](**own_dropout, num_hidden_layers=LAYERS, hidden_size=64, intermediate_size=128,
                           num_attention_heads=4, num_key_value_heads=4 if "mha" in variant else 2, vocab_size=256,
                           tie_word_embeddings=False, attn_implementation=attention, pad_token_id=0)
    torch.manual_seed(0)
    # in the training dtype throughout, as DeepSpeed casts the engine's module (DeepSeek-V3's fp32 router weight too)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype).to(dtype)
    if method == "lora":
        # all-linear as the executor resolves it: a mixture of experts' linear modules (its attention), not its 3-D
        # expert tensors (executor.training.peft_config)
        # (Qwen2-MoE: and its shared expert with the expert's gate)
        moe_linears = {"mixtral": [], "qwen3_moe": [], "qwen2_moe": ["gate_proj", "up_proj", "down_proj",
                                                                     "shared_expert_gate"],
                       "deepseek_v3": ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"],
                       "deepseek_v2": ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"],
                       "glm4_moe": [], "gpt_oss": []}
        targets = ["q_proj", "k_proj", "v_proj", "o_proj", *moe_linears[base]] if base in moe_linears else \
            "all-linear"
        lora = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout, target_modules=targets)
        model = peft.get_peft_model(model, lora).to(dtype)  # DeepSpeed casts adapters to the training dtype too
    if ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    model.train()
    return model


def _batch(family: str) -> int:
    """The micro-batch: 1 for a `-b1` family (matmul then folds the batch into a view, copying nothing)."""
    return 1 if "b1" in family.split("-") else MICRO_BATCH


def _measure(model: torch.nn.Module, batch: int = MICRO_BATCH) -> Saved:
    """A middle layer's saved bytes (of each kind, where dense layers lead) and everything else (`_saved_by_layer`)."""
    by_layer, total = _saved_by_layer(model, batch)
    layers = len(by_layer)
    dense = getattr(model.config, "first_k_dense_replace", 0)
    if dense:  # a middle layer of each kind stands for its kind (the first layer's difference is counted outside)
        sparse_count = layers - dense
        return Saved(per_layer=by_layer[dense], dense_layer=by_layer[dense - 1],
                     outside=total - dense * by_layer[dense - 1] - sparse_count * by_layer[dense])
    return Saved(per_layer=by_layer[1], outside=total - LAYERS * by_layer[1])


def _saved_by_layer(model: torch.nn.Module, batch: int = MICRO_BATCH) -> tuple[dict[int, int], int]:
    """Unique storages saved for backward (parameters excluded) and still held as the forward ends, by the layer that
    first saved them (what an op saves for a part of the graph that needs no gradient is freed with it: DeepSeek-V3's
    group-limited expert choice), and their total."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    layers = next(m for name, m in model.named_modules() if name.endswith("layers") and
                  isinstance(m, torch.nn.ModuleList))
    where: dict[str, object] = {"layer": None}
    for index, layer in enumerate(layers):
        layer.register_forward_pre_hook(lambda m, a, index=index: where.update(layer=index))
        layer.register_forward_hook(lambda m, a, o: where.update(layer=None))
    saved: list[tuple[weakref.ref, object]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append((weakref.ref(t), where["layer"]))
        return t

    ids = torch.randint(0, 256, (batch, SEQ))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_ids=ids, labels=ids)
    first_seen: dict[int, tuple[int, object]] = {}
    for ref, where_saved in saved:
        t = ref()
        if t is not None and t.untyped_storage().data_ptr() not in params:
            first_seen.setdefault(t.untyped_storage().data_ptr(), (t.untyped_storage().nbytes(), where_saved))
    out.loss.backward()
    by_layer = {i: sum(n for n, layer in first_seen.values() if layer == i) for i in range(len(layers))}
    return by_layer, sum(n for n, _ in first_seen.values())


def _planned(model: torch.nn.Module, family: str, attention: str, method: str, precision: Precision, dropout: float,
             ckpt: bool) -> Saved:
    base = family.split("-")[0]
    a = architecture_from_config(json.dumps(model.config.to_dict()))
    t = TrainingSpec(method=Method.FULL if method == "full" else Method.LORA, precision=precision,
                     attention=Attention.EAGER if attention == "eager" else Attention.SDPA,
                     micro_batch_size=_batch(family), sequence_length=SEQ, gradient_checkpointing=ckpt,
                     lora=LoraSpec(rank=4, alpha=8, dropout=dropout))
    split = parameter_split(a, t.method, t.lora, False, 0)
    tokens = _batch(family) * SEQ
    per_layer = decoder_layer_saved_bytes(a, t, split, tokens)
    dense_layer = decoder_layer_saved_bytes(a, t, split, tokens, dense=True) if a.dense_layers else 0
    outside = outside_layers_saved_bytes(a, t, split, tokens)
    if dropout:
        # The planner models CUDA's native_dropout, which keeps a one-byte mask; the CPU kernel keeps the mask
        # in the activation dtype. Each adapter draws its own dropout over its input width; the first layer's
        # q/k/v adapters keep none (their input needs no gradient).
        h, extra = a.hidden_size, t.precision.element_bytes - 1
        m = a.latent_attention
        if m is not None:  # DeepSeek-V3: the query and key/value latents read the input; the latents; o_proj
            qkv_adapters, widths = 2, 2 * h + m.q_lora_rank + m.kv_lora_rank + a.v_dim
        elif base in ("glm4_moe", "gpt_oss"):  # their attention only
            qkv_adapters, widths = 3, 3 * h + a.q_dim
        else:
            # Phi: q, k, v and fc1 read the layer's input norm; Qwen2-MoE: its shared expert's gate/up and gate
            qkv_adapters, gate_up_adapters = (1, 1) if family.startswith("phi3") else (3, 3) \
                if family == "qwen2_moe" else (3, 0) if a.num_experts else (4, 0) if family == "phi" else (3, 1) \
                if family.startswith("starcoder2") else (3, 2)
            down = a.shared_expert_intermediate_size if a.num_experts else a.intermediate_size
            widths = (qkv_adapters + gate_up_adapters) * h + a.q_dim + down
        per_layer += extra * widths * tokens
        dense_layer += extra * widths * tokens if a.dense_layers else 0
        outside -= extra * qkv_adapters * h * tokens
    mask_extra = t.precision.element_bytes - 1  # the model's own dropout: the CPU mask in the activation dtype
    if a.residual_dropout:  # on the attention and MLP outputs
        per_layer += mask_extra * 2 * a.hidden_size * tokens
    if a.attention_dropout and attention == "eager":  # on the probabilities (SDPA draws it inside the kernel)
        per_layer += mask_extra * a.num_attention_heads * SEQ * tokens
    if a.embedding_dropout and method == "full":  # frozen embeddings' dropout saves nothing
        outside += mask_extra * a.hidden_size * tokens
    if base in ("phi", "starcoder2"):
        # LayerNorm's saved mean and rstd: fp32 on CUDA (layer_norm_cuda: the accumulate type), which the planner
        # models, the input's dtype on the CPU (layer_norm_cpu); the layer's norms and the final one
        cpu_less = (8 - 2 * t.precision.element_bytes) * tokens
        per_layer -= cpu_less * (1 if base == "phi" else 2)
        outside -= cpu_less if method == "full" else 0  # LoRA's first layer norm saves nothing
    if ckpt:
        outside -= 2 * t.precision.element_bytes * a.resolved_head_dim * SEQ  # RoPE cos/sin: held, not saved
    return Saved(per_layer=per_layer, outside=outside, dense_layer=dense_layer)


# Outside the layers the loss also saves a 4-byte fp32 scalar (nll_loss's total weight); nothing else differs.
_SCALARS_BYTES = 4
# Phi-3 and Phi under SDPA are left out: their partial-rotary cat makes q head-major, and the CPU flash kernel then
# returns a head-major output that o_proj (Phi: dense) must copy, which CUDA's kernels (output sequence-major) do not.
CASES = [(f, attn, m, "bf16", d) for f in ("llama", "mistral", "qwen2", "phi3", "qwen3") for attn in ("eager", "sdpa")
         for m, d in (("full", 0.0), ("lora", 0.0), ("lora", 0.1)) if (f, attn) != ("phi3", "sdpa")]
CASES += [("gemma2", "eager", m, "bf16", d) for m, d in (("full", 0.0), ("lora", 0.0))]
CASES += [("phi", "eager", m, "bf16", d) for m, d in (("full", 0.0), ("lora", 0.0), ("lora", 0.1))]
CASES += [("gemma3", attn, m, "bf16", d) for attn in ("eager", "sdpa") for m, d in (("full", 0.0), ("lora", 0.0),
                                                                                     ("lora", 0.1))]
CASES += [("olmo2", attn, m, "bf16", d) for attn in ("eager", "sdpa") for m, d in (("full", 0.0), ("lora", 0.0),
                                                                                    ("lora", 0.1))]
CASES += [("smollm3", attn, m, "bf16", d) for attn in ("eager", "sdpa") for m, d in (("full", 0.0), ("lora", 0.1))]
CASES += [("qwen2_moe", attn, m, "bf16", d) for attn in ("eager", "sdpa") for m, d in (("full", 0.0), ("lora", 0.1))]
CASES += [("qwen3_moe", attn, m, "bf16", d) for attn in ("eager", "sdpa") for m, d in (("full", 0.0), ("lora", 0.1))]
CASES += [("mixtral", attn, m, "bf16", d) for attn in ("eager", "sdpa") for m, d in (("full", 0.0), ("lora", 0.1))]
CASES += [("starcoder2", attn, m, "bf16", d) for attn in ("eager", "sdpa") for m, d in (("full", 0.0), ("lora", 0.1))]
CASES += [("starcoder2-drop", "eager", m, p, d) for m, d in (("full", 0.0), ("lora", 0.1)) for p in ("bf16", "fp32")]
# DeepSeek-V3 under eager attention: the CPU's SDPA takes its math path for a value head narrower than the query's,
# which CUDA's memory-efficient kernel does not (benchmarks/simulate.py sizes that)
CASES += [(f, "eager", m, "bf16", d) for f in ("deepseek_v3", "deepseek_v3-noq", "deepseek_v3-plain")
          for m, d in (("full", 0.0), ("lora", 0.0), ("lora", 0.1))]
CASES += [(f, "eager", m, "bf16", d) for f in ("deepseek_v2", "deepseek_v2-noq-groups")
          for m, d in (("full", 0.0), ("lora", 0.1))]
# gpt-oss runs eager attention only (transformers 5: no SDPA for its sinks)
CASES += [("gpt_oss", "eager", m, "bf16", d) for m, d in (("full", 0.0), ("lora", 0.0), ("lora", 0.1))]
# GLM-4.5 under eager attention: its partial-rotary cat makes q head-major, as Phi's
CASES += [(f, "eager", m, "bf16", d) for f in ("glm4_moe", "glm4_moe-qknorm") for m, d in (("full", 0.0),
                                                                                           ("lora", 0.1))]
CASES += [("llama", attn, m, "fp32", 0.0) for attn in ("eager", "sdpa") for m in ("full", "lora")]
# As many key/value heads as query heads: eager attention's matmul reads k and v themselves, not repeated copies; with
# one sequence it folds the batch into a view, so Phi-3's v, a slice of the fused qkv output, keeps all of it alive
CASES += [(f, "eager", m, "bf16", d) for f in ("llama-mha", "phi3-mha", "llama-mha-b1", "phi3-mha-b1")
          for m, d in (("full", 0.0), ("lora", 0.1))]


@pytest.mark.parametrize(("family", "attention", "method", "precision", "dropout"), CASES,
                         ids=[f"{f}-{a}-{m}{'-dropout' if d else ''}-{p}" for f, a, m, p, d in CASES])
def test_saved_activations_match_the_model(family: str, attention: str, method: str, precision: str,
                                           dropout: float) -> None:
    dtype, prec = (torch.bfloat16, Precision.BF16) if precision == "bf16" else (torch.float32, Precision.FP32)
    model = _model(family, attention, method, dtype, dropout, ckpt=False)
    measured = _measure(model, _batch(family))
    planned = _planned(model, family, attention, method, prec, dropout, ckpt=False)
    assert planned.per_layer == measured.per_layer
    assert planned.dense_layer == measured.dense_layer
    assert planned.outside + _SCALARS_BYTES == measured.outside


@pytest.mark.parametrize("method", ["full", "lora"])
def test_with_checkpointing_a_layer_keeps_only_its_input(method: str) -> None:
    """A checkpointed layer keeps only its input (recomputing the rest in backward); what is saved outside the
    layers is the same as without checkpointing."""
    model = _model("llama", "sdpa", method, torch.bfloat16, 0.0, ckpt=True)
    measured = _measure(model)
    planned = _planned(model, "llama", "sdpa", method, Precision.BF16, 0.0, ckpt=True)
    assert measured.per_layer == 2 * model.config.hidden_size * MICRO_BATCH * SEQ  # bf16 hidden states
    assert planned.outside + _SCALARS_BYTES == measured.outside


# Llama 4: six layers, every other one sparse (4 experts, every one computed for every token, and a shared one) and
# every third without RoPE (its queries temperature-scaled), so layers 1-5 are each kind: dense and sparse, with RoPE
# (complex, then the L2 q/k norm with `-qknorm`) and without
LLAMA4_LAYERS = 6


def _llama4(method: str, dropout: float, qk_norm: bool) -> torch.nn.Module:
    config = transformers.AutoConfig.for_model(
        "llama4_text", num_hidden_layers=LLAMA4_LAYERS, hidden_size=64, intermediate_size=32, intermediate_size_mlp=96,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256, num_local_experts=4,
        num_experts_per_tok=1, interleave_moe_layer_step=2, no_rope_layer_interval=3, use_qk_norm=qk_norm,
        attention_chunk_size=64, tie_word_embeddings=False, attn_implementation="sdpa", pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).to(torch.bfloat16)
    if method == "lora":
        # all-linear as the executor resolves it: the linear modules, its router (a Linear subclass) not among them
        targets = executor_lora_targets(LoraSpec(target_modules=("all-linear",)), model)
        model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout,
                                                           target_modules=targets)).to(torch.bfloat16)
    model.config.use_cache = False
    model.train()
    return model


@pytest.mark.parametrize(("method", "dropout", "qk_norm"), [("full", 0.0, True), ("lora", 0.0, True),
                                                            ("lora", 0.1, True), ("full", 0.0, False),
                                                            ("lora", 0.1, False)])
def test_llama4_s_layers_of_every_kind_save_what_the_planner_counts(method: str, dropout: float, qk_norm: bool) -> None:
    model = _llama4(method, dropout, qk_norm)
    by_layer, total = _saved_by_layer(model)
    a = architecture_from_config(json.dumps(model.config.to_dict()))
    t = TrainingSpec(method=Method.FULL if method == "full" else Method.LORA, attention=Attention.SDPA,
                     micro_batch_size=MICRO_BATCH, sequence_length=SEQ, gradient_checkpointing=False,
                     lora=LoraSpec(rank=4, alpha=8, dropout=dropout))
    split = parameter_split(a, t.method, t.lora, False, 0)
    tokens = MICRO_BATCH * SEQ
    # the CPU's dropout keeps its mask in bf16 (CUDA's one byte, which the planner counts): each adapter's, over its
    # input's width
    adapters = (3 * a.hidden_size + a.q_dim) if dropout else 0
    widths = {True: 2 * a.hidden_size + a.dense_intermediate_size, False: 2 * a.hidden_size + a.intermediate_size}
    kinds = []
    for index in range(1, LLAMA4_LAYERS):
        sparse, rope = a.is_sparse_layer(index), a.turns_rope(index)
        kinds.append((sparse, rope))
        cpu_masks = (adapters + widths[not sparse]) * tokens if dropout else 0
        planned = decoder_layer_saved_bytes(a, t, split, tokens, dense=not sparse, rope=rope) + cpu_masks
        assert planned == by_layer[index], (index, sparse, rope)
    assert set(kinds) == {(True, True), (True, False), (False, True), (False, False)}
    # everything but layers 1-5 and the first layer as planned (a dense layer with RoPE) is what the planner counts
    # outside the layers: the complex RoPE factor per position, ids, the final norm, the log-probs, and the first
    # layer's differences (under LoRA its input needs no gradient: no input norm, no q/k/v dropout masks)
    first = decoder_layer_saved_bytes(a, t, split, tokens, dense=True, rope=True)
    first += (adapters + widths[True] - 3 * a.hidden_size) * tokens if dropout else 0
    outside = total - sum(by_layer[i] for i in range(1, LLAMA4_LAYERS)) - first
    assert outside_layers_saved_bytes(a, t, split, tokens) + _SCALARS_BYTES == outside
