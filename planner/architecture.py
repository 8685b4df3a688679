"""Exact parameter layout of supported decoder families (config.json is read and written by planner.hf_config).

Counts follow the module layout of transformers 5.x for each family; tests compare them
with models instantiated on the meta device.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.bounds import echo
from contract.errors import InvalidFieldError
from contract.model import PEFT_EXPERT_MAPPED_NAMES, Architecture, Family, VisionTower
from contract.schema import ALL_LINEAR
from planner.errors import UnsupportedError
from planner.memo import memo


@dataclass(frozen=True)
class LinearLayer:
    """A Linear (or GPT-2 Conv1D) module that LoRA can target, repeated `count` times."""

    name: str
    in_features: int
    out_features: int
    bias: bool
    count: int
    part: str  # "decoder", "vision" or "head"

    @property
    def params(self) -> int:
        return self.count * (self.in_features * self.out_features + (self.out_features if self.bias else 0))


def _attention_linears(a: Architecture) -> list[tuple[str, int, int, bool]]:
    """Latent attention's projections (DeepSeek-V3: modeling_deepseek_v3.DeepseekV3Attention): the query through its
    latent (q_a_proj, q_b_proj) or one q_proj, the shared key/value latent with the shared RoPE key part
    (kv_a_proj_with_mqa), its expansion to every head's key part and value (kv_b_proj), the output."""
    m = a.latent_attention
    assert m is not None
    h, heads, bias = a.hidden_size, a.num_attention_heads, a.attention_bias
    query = [("q_a_proj", h, m.q_lora_rank, bias), ("q_b_proj", m.q_lora_rank, a.q_dim, False)] if m.q_lora_rank \
        else [("q_proj", h, a.q_dim, False)]
    return [*query, ("kv_a_proj_with_mqa", h, m.kv_lora_rank + m.qk_rope_head_dim, bias),
            ("kv_b_proj", m.kv_lora_rank, heads * (m.qk_nope_head_dim + m.v_head_dim), False),
            ("o_proj", a.v_dim, h, bias)]


# Families with DeepSeek-V3's mixture of experts: leading dense layers, a sigmoid router that multiplies in fp32,
# routed experts and always-on shared_experts (an MLP); PEFT maps their MLP names onto the routed experts
SHARED_EXPERTS_MOE = (Family.DEEPSEEK_V2, Family.DEEPSEEK_V3, Family.GLM4_MOE)
DEEPSEEK_MLP_NAMES = PEFT_EXPERT_MAPPED_NAMES[Family.DEEPSEEK_V3.value]


def _shared_experts_moe_linears(a: Architecture) -> list[tuple[str, int, int, bool, int]]:
    """The dense layers' MLP and the sparse layers' shared experts (modeling_deepseek_v3 / modeling_glm4_moe)."""
    h, d, s, sparse = a.hidden_size, a.dense_intermediate_size, a.shared_expert_intermediate_size, a.sparse_layers
    mlp = [("gate_proj", h, d, False, a.dense_layers), ("up_proj", h, d, False, a.dense_layers),
           ("down_proj", d, h, False, a.dense_layers)] if a.dense_layers else []
    if s:
        mlp += [("shared_experts.gate_proj", h, s, False, sparse), ("shared_experts.up_proj", h, s, False, sparse),
                ("shared_experts.down_proj", s, h, False, sparse)]
    return mlp


def _llama4_linears(a: Architecture) -> list[tuple[str, int, int, bool, int]]:
    """Llama 4's feed-forward linears (modeling_llama4: Llama4TextMLP, Llama4TextMoe): the dense layers' MLP of
    dense_intermediate_size, the sparse layers' shared expert of intermediate_size. Its router, a Linear whose forward
    returns the routing scores and logits, is no module LoRA can adapt (executor.training.peft_config)."""
    h, d, i, sparse = a.hidden_size, a.dense_intermediate_size, a.intermediate_size, a.sparse_layers
    mlp = [("gate_proj", h, d, False, a.dense_layers), ("up_proj", h, d, False, a.dense_layers),
           ("down_proj", d, h, False, a.dense_layers)] if a.dense_layers else []
    return mlp + [("shared_expert.gate_proj", h, i, False, sparse), ("shared_expert.up_proj", h, i, False, sparse),
                  ("shared_expert.down_proj", i, h, False, sparse)]


def _decoder_linears(a: Architecture) -> list[tuple[str, int, int, bool, int]]:
    """Each decoder linear with the number of layers that have it."""
    h, q, kv, i, n = a.hidden_size, a.q_dim, a.kv_dim, a.intermediate_size, a.num_layers
    if a.latent_attention is not None:  # DeepSeek-V2/V3
        layers = _attention_linears(a)
    elif a.family is Family.GPT2:
        layers = [("c_attn", h, 3 * h, True), ("c_proj", h, h, True), ("c_fc", h, i, True), ("mlp.c_proj", i, h, True)]
    elif a.family is Family.PHI:  # every projection biased; "dense" is the attention output
        layers = [("q_proj", h, q, True), ("k_proj", h, kv, True), ("v_proj", h, kv, True), ("dense", q, h, True),
                  ("fc1", h, i, True), ("fc2", i, h, True)]
    elif a.family is Family.STARCODER2:  # use_bias: every projection biased, or none; a GELU MLP (c_fc, c_proj)
        layers = [("q_proj", h, q, a.attention_bias), ("k_proj", h, kv, a.attention_bias),
                  ("v_proj", h, kv, a.attention_bias), ("o_proj", q, h, a.attention_bias),
                  ("c_fc", h, i, a.mlp_bias), ("c_proj", i, h, a.mlp_bias)]
    elif a.family is Family.PHI3:
        layers = [("qkv_proj", h, q + 2 * kv, False), ("o_proj", q, h, False),
                  ("gate_up_proj", h, 2 * i, False), ("down_proj", i, h, False)]
    else:
        # Qwen2's q/k/v always biased and o never; GLM-4.5's q/k/v biased by attention_bias, o never; gpt-oss's all four
        # by attention_bias (its experts are 3-D tensors)
        qwen2 = a.family in (Family.QWEN2, Family.QWEN2_VL, Family.QWEN2_5_VL, Family.QWEN2_MOE)
        qkv_bias = a.attention_bias or qwen2
        o_bias = a.attention_bias and not qwen2 and a.family is not Family.GLM4_MOE
        layers = [("q_proj", h, q, qkv_bias), ("k_proj", h, kv, qkv_bias),
                  ("v_proj", h, kv, qkv_bias), ("o_proj", q, h, o_bias)]
        s = a.shared_expert_intermediate_size
        if s and a.family is Family.QWEN2_MOE:
            # the shared expert (an MLP) and its per-token gate, the only linears of a Qwen2-MoE feed-forward
            layers += [("gate_proj", h, s, False), ("up_proj", h, s, False), ("down_proj", s, h, False),
                       ("shared_expert_gate", h, 1, False)]
        if a.num_experts == 0:
            layers += [("gate_proj", h, i, a.mlp_bias), ("up_proj", h, i, a.mlp_bias),
                       ("down_proj", i, h, a.mlp_bias)]
    # DeepSeek-V2/V3 and GLM-4.5: dense MLPs lead, then experts with shared ones; Llama 4: interleaved
    moe = _shared_experts_moe_linears(a) if a.family in SHARED_EXPERTS_MOE else \
        _llama4_linears(a) if a.family is Family.LLAMA4 else []
    return [(name, i_, o, b, n) for name, i_, o, b in layers] + moe


def _vision_linears(v: VisionTower) -> list[tuple[str, int, int, bool, int]]:
    e, mlp, merged = v.embed_dim, v.embed_dim * v.mlp_ratio, v.embed_dim * v.spatial_merge_size ** 2
    i = v.intermediate_size
    if v.image_size:  # SigLIP (modeling_siglip: SiglipAttention, SiglipMLP), every linear biased
        return [(name, e, e, True, v.depth) for name in ("q_proj", "k_proj", "v_proj", "out_proj")] + \
            [("fc1", e, i, True, v.depth), ("fc2", i, e, True, v.depth)]
    block = [("gate_proj", e, i, True, v.depth), ("up_proj", e, i, True, v.depth), ("down_proj", i, e, True, v.depth)] \
        if i else [("fc1", e, mlp, True, v.depth), ("fc2", mlp, e, True, v.depth)]
    return [("qkv", e, 3 * e, True, v.depth), ("proj", e, e, True, v.depth), *block,
            ("merger.mlp.0", merged, merged, True, 1), ("merger.mlp.2", merged, v.out_hidden_size, True, 1)]


@memo(512)
def linear_layers(a: Architecture) -> tuple[LinearLayer, ...]:
    out = [LinearLayer(n, i, o, b, c, "decoder") for n, i, o, b, c in _decoder_linears(a)]
    if a.vision is not None:
        out += [LinearLayer(n, i, o, b, c, "vision") for n, i, o, b, c in _vision_linears(a.vision)]
    if not a.tie_word_embeddings:
        out.append(LinearLayer("lm_head", a.hidden_size, a.vocab_size, a.family is Family.PHI, 1, "head"))
    return tuple(out)


# Families whose norms are LayerNorm (a weight and a bias; the input, mean and rstd saved) rather than RMSNorm
LAYER_NORM_FAMILIES = (Family.GPT2, Family.PHI, Family.STARCODER2)


def norms_per_layer(a: Architecture) -> int:
    """The hidden-size norms of a decoder layer: one in Phi's parallel block, four in Gemma 2 and 3 (pre/post
    feed-forward norms too), two elsewhere."""
    if a.family is Family.PHI:
        return 1
    return 4 if a.family in (Family.GEMMA2, Family.GEMMA3) else 2


def qk_norm_rows(a: Architecture) -> tuple[int, int]:
    """Rows per token of the q_norm and k_norm: one per head (Qwen3, Qwen3-MoE, Gemma 3), one over the whole
    projection (OLMo 2); (0, 0) for a family without them."""
    if a.family is Family.LLAMA4:  # its L2 norm has no weight and covers its RoPE layers only (activations.py)
        return 0, 0
    if a.family in (Family.QWEN3, Family.QWEN3_MOE, Family.GEMMA3) or a.qk_norm:
        return a.num_attention_heads, a.num_key_value_heads
    if a.family is Family.OLMO2:
        return 1, 1
    return 0, 0


def _norm_params(a: Architecture) -> int:
    # LayerNorm (GPT-2, Phi, StarCoder2) has a weight and a bias; the final norm is one more
    per_norm = 2 if a.family in LAYER_NORM_FAMILIES else 1
    rows_q, rows_k = qk_norm_rows(a)
    qk_norms = a.q_dim // rows_q + a.kv_dim // rows_k if rows_q else 0  # a weight over one row each
    m = a.latent_attention
    latent_norms = m.q_lora_rank + m.kv_lora_rank if m else 0  # q_a_layernorm (with a query latent), kv_a_layernorm
    return per_norm * a.hidden_size * (norms_per_layer(a) * a.num_layers + 1) + \
        (qk_norms + latent_norms) * a.num_layers


def layer_expert_params(a: Architecture) -> int:
    """One sparse layer's fused expert tensors: gate and up (E x 2I x H) and down (E x H x I)."""
    return 3 * a.num_experts * a.hidden_size * a.intermediate_size


def _expert_params(a: Architecture) -> int:
    if a.num_experts == 0:
        return 0
    router = a.num_experts * a.hidden_size
    return a.sparse_layers * (router + layer_expert_params(a) + _expert_extras(a))


def _expert_extras(a: Architecture) -> int:
    """gpt-oss's per-layer extras: the router's bias, each expert's gate/up and down biases, and one attention sink
    per head (modeling_gpt_oss: GptOssTopKRouter, GptOssExperts, GptOssAttention.sinks)."""
    if a.family is not Family.GPT_OSS:
        return 0
    return a.num_experts * (1 + 2 * a.intermediate_size + a.hidden_size) + a.num_attention_heads


def _siglip_params(v: VisionTower) -> int:
    """SigLIP's patch Conv2d (biased) and learned positions, two LayerNorms a block and the post-layernorm; Gemma 3's
    projector: an RMSNorm and a projection weight into the language model (modeling_gemma3:
    Gemma3MultiModalProjector)."""
    e = v.embed_dim
    patch = e * v.in_channels * v.patch_size ** 2 + e
    positions = (v.image_size // v.patch_size) ** 2 * e
    norms = (v.depth * 2 + 1) * 2 * e
    projector = e + e * v.out_hidden_size
    return patch + positions + norms + projector + sum(
        c * (i * o + (o if b else 0)) for _, i, o, b, c in _vision_linears(v))


def _vision_params(v: VisionTower) -> int:
    if v.image_size:
        return _siglip_params(v)
    patch = v.embed_dim * v.in_channels * v.temporal_patch_size * v.patch_size ** 2  # Conv3d, no bias
    per_norm = 1 if v.intermediate_size else 2  # RMSNorm (Qwen2.5-VL) or LayerNorm, with its bias (Qwen2-VL)
    norms = per_norm * (v.depth * 2 * v.embed_dim + v.embed_dim)  # norm1, norm2 per block; merger ln_q
    return patch + norms + sum(
        c * (i * o + (o if b else 0)) for _, i, o, b, c in _vision_linears(v))


@dataclass(frozen=True)
class ParameterCounts:
    total: int
    embedding: int
    decoder_layer: int
    vision: int
    lm_head: int
    active: int

    @property
    def language_model(self) -> int:
        return self.total - self.vision


@memo(512)
def parameter_counts(a: Architecture) -> ParameterCounts:
    embedding = a.vocab_size * a.hidden_size
    if a.family is Family.GPT2:
        embedding += a.max_position_embeddings * a.hidden_size
    decoder_linear = sum(layer.params for layer in linear_layers(a) if layer.part == "decoder")
    # a layer as the largest one holds it: with leading dense layers, a sparse one (without the dense MLP)
    sparse_linears = sum(layer.params // layer.count for layer in linear_layers(a)
                         if layer.part == "decoder" and not (a.dense_layers and layer.name in DEEPSEEK_MLP_NAMES))
    experts = _expert_params(a) // a.sparse_layers if a.num_experts else 0
    per_layer = sparse_linears + experts + _norm_params(a) // a.num_layers
    vision = _vision_params(a.vision) if a.vision else 0
    lm_head = 0 if a.tie_word_embeddings else a.vocab_size * (a.hidden_size + (a.family is Family.PHI))
    total = embedding + decoder_linear + _expert_params(a) + _norm_params(a) + vision + lm_head
    active = total
    if a.num_experts:
        idle = a.num_experts - a.experts_per_token
        active -= a.sparse_layers * idle * 3 * a.hidden_size * a.intermediate_size
        if a.family is Family.GPT_OSS:  # the idle experts' biases
            active -= a.sparse_layers * idle * (2 * a.intermediate_size + a.hidden_size)
    return ParameterCounts(total, embedding, per_layer, vision, lm_head, active)


def lora_targets(a: Architecture, target_modules: tuple[str, ...], field: str) -> tuple[LinearLayer, ...]:
    """The linear layers a LoRA config adapts, resolved the way PEFT matches module names."""
    layers = linear_layers(a)
    deepseek = a.family in SHARED_EXPERTS_MOE
    if target_modules == (ALL_LINEAR,):  # DeepSeek-V3, GLM-4.5: their attention (the executor adapts the same)
        return tuple(layer for layer in layers if layer.part != "head" and
                     not (deepseek and layer.name.split(".")[-1] in DEEPSEEK_MLP_NAMES))
    chosen: list[LinearLayer] = []
    for target in target_modules:
        if deepseek and target.split(".")[-1] in DEEPSEEK_MLP_NAMES:
            attention = sorted({layer.name for layer in layers if layer.part == "decoder" and
                                layer.name.split(".")[-1] not in DEEPSEEK_MLP_NAMES})
            raise UnsupportedError(field, f"PEFT maps {echo(target)} of a {a.family.value} model onto its routed "
                                          "experts' fused tensors (not its dense or shared-expert MLPs), which the "
                                          f"planner does not model; adapt the attention ({', '.join(attention)}, or "
                                          f"{ALL_LINEAR})")
        matched = [layer for layer in layers if layer.name == target or layer.name.endswith("." + target)]
        if not matched:
            known = sorted({layer.name.split(".")[-1] for layer in layers} | {ALL_LINEAR})
            raise InvalidFieldError(field, f"{a.family.value} has no module {echo(target)}; "
                                           f"choose from {', '.join(known)}")
        chosen += [layer for layer in matched if layer not in chosen]
    return tuple(chosen)


def lora_parameter_count(targets: tuple[LinearLayer, ...], rank: int) -> int:
    """LoRA adds A (rank × in) and B (out × rank) to each targeted linear layer (Hu et al. 2021)."""
    return sum(layer.count * rank * (layer.in_features + layer.out_features) for layer in targets)


def largest_layer_params(a: Architecture) -> int:
    """Parameters ZeRO-3 must gather at once for the biggest module (decoder layer or embedding)."""
    counts = parameter_counts(a)
    return max(counts.decoder_layer, counts.embedding, counts.lm_head)
