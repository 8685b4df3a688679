"""Popular models by Hugging Face name, with the exact shapes of their config.json files.

Source for every row: the model's config.json on the Hugging Face Hub (read 2026-11). Instruct /
chat variants share their base model's shape and are listed as aliases.
"""

from __future__ import annotations

from contract.model import Architecture, Family, LatentAttention, ModelSpec, VisionTower

F = Family


def _m(name: str, family: Family, layers: int, hidden: int, inter: int, heads: int, kv: int, vocab: int,
       tie: bool = False, head_dim: int = 0, experts: int = 0, top_k: int = 0, positions: int = 0,
       vision: VisionTower | None = None, rotary_dims: int = 0, residual_dropout: float = 0.0,
       shared: int = 0, bias: bool = False, attention_dropout: float = 0.0,
       embedding_dropout: float = 0.0) -> ModelSpec:
    arch = Architecture(family=family, num_layers=layers, hidden_size=hidden, intermediate_size=inter,
                        num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
                        tie_word_embeddings=tie, head_dim=head_dim, num_experts=experts,
                        experts_per_token=top_k, max_position_embeddings=positions, vision=vision,
                        rotary_dims=rotary_dims, residual_dropout=residual_dropout,
                        shared_expert_intermediate_size=shared, attention_bias=bias, mlp_bias=bias,
                        attention_dropout=attention_dropout, embedding_dropout=embedding_dropout)
    return ModelSpec(name=name, architecture=arch, weights=name, source=f"huggingface.co/{name}/config.json")


def _deepseek(name: str, layers: int, hidden: int, dense_inter: int, expert_inter: int, heads: int, vocab: int,
              experts: int, top_k: int, shared: int, dense_layers: int, q_lora_rank: int,
              positions: int, family: Family = Family.DEEPSEEK_V3, group_limited: bool = False) -> ModelSpec:
    """DeepSeek-V3's layout (or V2's, `family`): latent attention (kv_lora_rank 512, 128 + 64 query/key head dims,
    128 value head dims in every released model), `dense_layers` dense MLPs, then `experts` of `expert_inter` with
    `shared` always on."""
    latent = LatentAttention(q_lora_rank=q_lora_rank, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
                             v_head_dim=128)
    arch = Architecture(family=family, num_layers=layers, hidden_size=hidden, group_limited_routing=group_limited,
                        intermediate_size=expert_inter, num_attention_heads=heads, num_key_value_heads=heads,
                        vocab_size=vocab, head_dim=latent.qk_head_dim, rotary_dims=latent.qk_rope_head_dim,
                        num_experts=experts, experts_per_token=top_k, max_position_embeddings=positions,
                        shared_expert_intermediate_size=shared * expert_inter, latent_attention=latent,
                        dense_layers=dense_layers, dense_intermediate_size=dense_inter)
    return ModelSpec(name=name, architecture=arch, weights=name, source=f"huggingface.co/{name}/config.json")


def _glm4_moe(name: str, layers: int, hidden: int, dense_inter: int, expert_inter: int, experts: int,
              dense_layers: int, qk_norm: bool) -> ModelSpec:
    """GLM-4.5's layout (arXiv:2508.06471): 96 query and 8 key/value heads of 128, q/k/v biased, RoPE over half of
    each head; `dense_layers` dense MLPs, then `experts` of `expert_inter` (8 a token) with one shared; vocabulary
    151,552."""
    arch = Architecture(family=Family.GLM4_MOE, num_layers=layers, hidden_size=hidden, intermediate_size=expert_inter,
                        num_attention_heads=96, num_key_value_heads=8, vocab_size=151552, head_dim=128,
                        rotary_dims=64, attention_bias=True, num_experts=experts, experts_per_token=8,
                        max_position_embeddings=131072, shared_expert_intermediate_size=expert_inter,
                        dense_layers=dense_layers, dense_intermediate_size=dense_inter, qk_norm=qk_norm)
    return ModelSpec(name=name, architecture=arch, weights=name, source=f"huggingface.co/{name}/config.json")


def _llama4(name: str, experts: int, moe_interval: int, qk_norm: bool, positions: int) -> ModelSpec:
    """Llama 4's language model (text_config; 48 layers of 5120, 40 query and 8 key/value heads of 128, vocabulary
    202,048): every `moe_interval`-th layer `experts` of 8192 (one a token) with a shared expert, the others dense
    MLPs of 16384; every 4th layer without RoPE; RoPE layers attend within chunks of 8192 tokens."""
    arch = Architecture(family=Family.LLAMA4, num_layers=48, hidden_size=5120, intermediate_size=8192,
                        num_attention_heads=40, num_key_value_heads=8, vocab_size=202048, head_dim=128,
                        num_experts=experts, experts_per_token=1, max_position_embeddings=positions,
                        dense_layers=48 - 48 // moe_interval if moe_interval > 1 else 0,
                        dense_intermediate_size=16384 if moe_interval > 1 else 0, qk_norm=qk_norm,
                        moe_layer_interval=moe_interval if moe_interval > 1 else 0, nope_layer_interval=4,
                        attention_chunk_size=8192)
    return ModelSpec(name=name, architecture=arch, weights=name, source=f"huggingface.co/{name}/config.json",
                     note="Llama 4's language model (Llama4ForCausalLM); its vision encoder is not planned")


def _qwen2_vl_vision(out_hidden: int) -> VisionTower:
    return VisionTower(depth=32, embed_dim=1280, num_heads=16, mlp_ratio=4, patch_size=14,
                       temporal_patch_size=2, in_channels=3, spatial_merge_size=2, out_hidden_size=out_hidden)


def _gemma3_vision(out_hidden: int) -> VisionTower:
    """Gemma 3's SigLIP-So400m encoder: 27 blocks of 1152 (MLP 4304), 896-pixel images in 14-pixel patches, 64 x 64
    patches pooled 4 x 4 into 256 image tokens."""
    return VisionTower(depth=27, embed_dim=1152, num_heads=16, mlp_ratio=4, patch_size=14, temporal_patch_size=1,
                       in_channels=3, spatial_merge_size=4, out_hidden_size=out_hidden, intermediate_size=4304,
                       image_size=896)


def _qwen2_5_vl_vision(out_hidden: int) -> VisionTower:
    """Qwen2.5-VL's vision tower in every size: 32 blocks of 1280 with RMSNorms and a gated MLP of 3420."""
    return VisionTower(depth=32, embed_dim=1280, num_heads=16, mlp_ratio=4, patch_size=14, temporal_patch_size=2,
                       in_channels=3, spatial_merge_size=2, out_hidden_size=out_hidden, intermediate_size=3420)


MODELS: tuple[ModelSpec, ...] = (
    _m("meta-llama/Llama-2-7b-hf", F.LLAMA, 32, 4096, 11008, 32, 32, 32000, positions=4096),
    _m("meta-llama/Llama-2-13b-hf", F.LLAMA, 40, 5120, 13824, 40, 40, 32000, positions=4096),
    _m("meta-llama/Llama-2-70b-hf", F.LLAMA, 80, 8192, 28672, 64, 8, 32000, positions=4096),
    _m("meta-llama/Meta-Llama-3-8B", F.LLAMA, 32, 4096, 14336, 32, 8, 128256, positions=8192),
    _m("meta-llama/Meta-Llama-3-70B", F.LLAMA, 80, 8192, 28672, 64, 8, 128256, positions=8192),
    _m("meta-llama/Llama-3.1-8B", F.LLAMA, 32, 4096, 14336, 32, 8, 128256, positions=131072),
    _m("meta-llama/Llama-3.1-70B", F.LLAMA, 80, 8192, 28672, 64, 8, 128256, positions=131072),
    _m("meta-llama/Llama-3.1-405B", F.LLAMA, 126, 16384, 53248, 128, 8, 128256, positions=131072),
    _m("meta-llama/Llama-3.2-1B", F.LLAMA, 16, 2048, 8192, 32, 8, 128256, tie=True, head_dim=64, positions=131072),
    _m("meta-llama/Llama-3.2-3B", F.LLAMA, 28, 3072, 8192, 24, 8, 128256, tie=True, head_dim=128, positions=131072),
    _m("meta-llama/Llama-3.3-70B-Instruct", F.LLAMA, 80, 8192, 28672, 64, 8, 128256, positions=131072),
    _m("TinyLlama/TinyLlama-1.1B-Chat-v1.0", F.LLAMA, 22, 2048, 5632, 32, 4, 32000, positions=2048),
    _m("mistralai/Mistral-7B-v0.1", F.MISTRAL, 32, 4096, 14336, 32, 8, 32000, positions=32768),
    _m("mistralai/Mistral-7B-v0.3", F.MISTRAL, 32, 4096, 14336, 32, 8, 32768, positions=32768),
    _m("mistralai/Mixtral-8x7B-v0.1", F.MIXTRAL, 32, 4096, 14336, 32, 8, 32000, experts=8, top_k=2, positions=32768),
    _m("Qwen/Qwen2-0.5B", F.QWEN2, 24, 896, 4864, 14, 2, 151936, tie=True, positions=131072),
    _m("Qwen/Qwen2-1.5B", F.QWEN2, 28, 1536, 8960, 12, 2, 151936, tie=True),
    _m("Qwen/Qwen2-7B", F.QWEN2, 28, 3584, 18944, 28, 4, 152064),
    _m("Qwen/Qwen2-72B", F.QWEN2, 80, 8192, 29568, 64, 8, 152064),
    _m("Qwen/Qwen2.5-0.5B", F.QWEN2, 24, 896, 4864, 14, 2, 151936, tie=True, positions=32768),
    _m("Qwen/Qwen2.5-1.5B", F.QWEN2, 28, 1536, 8960, 12, 2, 151936, tie=True),
    _m("Qwen/Qwen2.5-3B", F.QWEN2, 36, 2048, 11008, 16, 2, 151936, tie=True),
    _m("Qwen/Qwen2.5-7B", F.QWEN2, 28, 3584, 18944, 28, 4, 152064),
    _m("Qwen/Qwen2.5-14B", F.QWEN2, 48, 5120, 13824, 40, 8, 152064),
    _m("Qwen/Qwen2.5-32B", F.QWEN2, 64, 5120, 27648, 40, 8, 152064),
    _m("Qwen/Qwen2.5-72B", F.QWEN2, 80, 8192, 29568, 64, 8, 152064),
    _m("Qwen/Qwen2-VL-2B-Instruct", F.QWEN2_VL, 28, 1536, 8960, 12, 2, 151936, tie=True,
       vision=_qwen2_vl_vision(1536)),
    _m("Qwen/Qwen2-VL-7B-Instruct", F.QWEN2_VL, 28, 3584, 18944, 28, 4, 152064, vision=_qwen2_vl_vision(3584)),
    _m("Qwen/Qwen2.5-VL-3B-Instruct", F.QWEN2_5_VL, 36, 2048, 11008, 16, 2, 151936, tie=True,
       vision=_qwen2_5_vl_vision(2048)),
    _m("Qwen/Qwen2.5-VL-7B-Instruct", F.QWEN2_5_VL, 28, 3584, 18944, 28, 4, 152064, vision=_qwen2_5_vl_vision(3584)),
    _m("Qwen/Qwen2.5-VL-72B-Instruct", F.QWEN2_5_VL, 80, 8192, 29568, 64, 8, 152064, vision=_qwen2_5_vl_vision(8192)),
    _m("Qwen/Qwen3-0.6B", F.QWEN3, 28, 1024, 3072, 16, 8, 151936, tie=True, head_dim=128, positions=40960),
    _m("Qwen/Qwen3-1.7B", F.QWEN3, 28, 2048, 6144, 16, 8, 151936, tie=True, head_dim=128, positions=40960),
    _m("Qwen/Qwen3-4B", F.QWEN3, 36, 2560, 9728, 32, 8, 151936, tie=True, head_dim=128, positions=40960),
    _m("Qwen/Qwen3-8B", F.QWEN3, 36, 4096, 12288, 32, 8, 151936, head_dim=128, positions=40960),
    _m("Qwen/Qwen3-14B", F.QWEN3, 40, 5120, 17408, 40, 8, 151936, head_dim=128, positions=40960),
    _m("Qwen/Qwen3-32B", F.QWEN3, 64, 5120, 25600, 64, 8, 151936, head_dim=128, positions=40960),
    # intermediate: the experts' (moe_intermediate_size); every layer is sparse; Qwen2-MoE adds a shared expert
    _m("Qwen/Qwen1.5-MoE-A2.7B", F.QWEN2_MOE, 24, 2048, 1408, 16, 16, 151936, experts=60, top_k=4, positions=8192,
       shared=5632),
    _m("Qwen/Qwen2-57B-A14B", F.QWEN2_MOE, 28, 3584, 2560, 28, 4, 151936, experts=64, top_k=8, positions=131072,
       shared=20480),
    _m("Qwen/Qwen3-30B-A3B", F.QWEN3_MOE, 48, 2048, 768, 32, 4, 151936, head_dim=128, experts=128, top_k=8,
       positions=40960),
    _m("Qwen/Qwen3-235B-A22B", F.QWEN3_MOE, 94, 4096, 1536, 64, 4, 151936, head_dim=128, experts=128, top_k=8,
       positions=40960),
    _m("allenai/OLMo-2-1124-7B", F.OLMO2, 32, 4096, 11008, 32, 32, 100352, positions=4096),
    _m("allenai/OLMo-2-1124-13B", F.OLMO2, 40, 5120, 13824, 40, 40, 100352, positions=4096),
    # SmolLM3 (model_type smollm3) is the Llama layout, RoPE left out of every 4th layer
    _m("HuggingFaceTB/SmolLM3-3B", F.LLAMA, 36, 2048, 11008, 16, 4, 128256, tie=True, positions=65536),
    # the text-only Gemma 3 (gemma3_text); the larger sizes are vision-language models (gemma3)
    _m("google/gemma-3-1b-pt", F.GEMMA3, 26, 1152, 6912, 4, 1, 262144, tie=True, head_dim=256, positions=32768),
    # Gemma 3's image-text models (model_type gemma3: the gemma3_text layout, 262,208 tokens, with the SigLIP encoder)
    *(_m(f"google/gemma-3-{size}-pt", F.GEMMA3, layers, hidden, inter, heads, kv, 262208, tie=True, head_dim=head_dim,
         positions=131072, vision=_gemma3_vision(hidden))
      for size, layers, hidden, inter, heads, kv, head_dim in (("4b", 34, 2560, 10240, 8, 4, 256),
                                                               ("12b", 48, 3840, 15360, 16, 8, 256),
                                                               ("27b", 62, 5376, 21504, 32, 16, 128))),
    _m("google/gemma-2-2b", F.GEMMA2, 26, 2304, 9216, 8, 4, 256000, tie=True, head_dim=256, positions=8192),
    _m("google/gemma-2-9b", F.GEMMA2, 42, 3584, 14336, 16, 8, 256000, tie=True, head_dim=256, positions=8192),
    _m("google/gemma-2-27b", F.GEMMA2, 46, 4608, 36864, 32, 16, 256000, tie=True, head_dim=128, positions=8192),
    # Phi-1.5 / Phi-2: a parallel block, partial rotary (0.5 / 0.4 of each head), Phi-2 with resid_pdrop 0.1
    _m("microsoft/phi-1_5", F.PHI, 24, 2048, 8192, 32, 32, 51200, positions=2048, rotary_dims=32),
    _m("microsoft/phi-2", F.PHI, 32, 2560, 10240, 32, 32, 51200, positions=2048, rotary_dims=32,
       residual_dropout=0.1),
    _m("microsoft/Phi-3-mini-4k-instruct", F.PHI3, 32, 3072, 8192, 32, 32, 32064, positions=4096),
    _m("microsoft/Phi-3-medium-4k-instruct", F.PHI3, 40, 5120, 17920, 40, 10, 32064, positions=4096),
    # Phi-3.5-mini and Phi-4 are the phi3 layout (model_type phi3)
    _m("microsoft/Phi-3.5-mini-instruct", F.PHI3, 32, 3072, 8192, 32, 32, 32064, positions=131072),
    _m("microsoft/phi-4", F.PHI3, 40, 5120, 17920, 40, 10, 100352, positions=16384),
    _m("openai-community/gpt2", F.GPT2, 12, 768, 3072, 12, 12, 50257, tie=True, positions=1024),
    # StarCoder2 (arXiv:2402.19173, its model table): LayerNorm, every projection biased (use_bias), a GELU MLP of
    # 4 x hidden, RoPE; released with dropout 0.1 on the embeddings, the attention probabilities and the attention
    # and MLP outputs; the 3B and 7B tie their embeddings
    *(_m(f"bigcode/starcoder2-{size}", F.STARCODER2, layers, hidden, 4 * hidden, heads, kv, 49152, tie=tie,
         positions=16384, bias=True, residual_dropout=0.1, attention_dropout=0.1, embedding_dropout=0.1)
      for size, layers, hidden, heads, kv, tie in (("3b", 30, 3072, 24, 2, True), ("7b", 32, 4608, 36, 4, True),
                                                   ("15b", 40, 6144, 48, 4, False))),
    # DeepSeek-V3's layout (transformers' deepseek_v3; Kimi-K2 ships it as model_type kimi_k2). Counts are what
    # transformers builds: DeepSeek-V3's next-token-prediction layer (its 62nd, ~11.5B) is not loaded, so 671.0B
    _deepseek("deepseek-ai/DeepSeek-V3", 61, 7168, 18432, 2048, 128, 129280, 256, 8, 1, 3, 1536, 163840),
    _deepseek("moonshotai/Moonlight-16B-A3B", 27, 2048, 11264, 1408, 16, 163840, 64, 6, 2, 1, 0, 8192),
    _deepseek("moonshotai/Kimi-K2-Instruct", 61, 7168, 18432, 2048, 64, 163840, 384, 8, 1, 1, 1536, 131072),
    # DeepSeek-V2 (236B, group-limited routing over 8 groups; V2.5 and Coder-V2 share it) and V2-Lite (15.7B)
    _deepseek("deepseek-ai/DeepSeek-V2", 60, 5120, 12288, 1536, 128, 102400, 160, 6, 2, 1, 1536, 163840,
              family=Family.DEEPSEEK_V2, group_limited=True),
    _deepseek("deepseek-ai/DeepSeek-V2-Lite", 27, 2048, 10944, 1408, 16, 102400, 64, 6, 2, 1, 0, 163840,
              family=Family.DEEPSEEK_V2),
    # gpt-oss (its model card: 24 / 36 layers of 32 / 128 experts, 4 a token, every projection biased, attention
    # sinks, sliding-window layers of 128 tokens alternating with full ones); its MXFP4 expert weights load as bf16 for
    # training (Mxfp4Config(dequantize=True)), which these counts and bytes are
    *(_m(f"openai/gpt-oss-{size}", F.GPT_OSS, layers, 2880, 2880, 64, 8, 201088, head_dim=64, experts=experts,
         top_k=4, positions=131072, bias=True) for size, layers, experts in (("20b", 24, 32), ("120b", 36, 128))),
    # GLM-4.5 (355B, 32B active: q/k norms, 3 dense layers) and GLM-4.5-Air (106B, 12B active)
    _glm4_moe("zai-org/GLM-4.5", 92, 5120, 12288, 1536, 160, 3, qk_norm=True),
    _glm4_moe("zai-org/GLM-4.5-Air", 46, 4096, 10944, 1408, 128, 1, qk_norm=False),
    # Llama 4 (text_config of the image-text checkpoints): Scout 107.77B of its 109B (17.17B active), every layer
    # sparse with q/k norms; Maverick 400.71B (17.18B active), every other layer sparse, no q/k norms
    _llama4("meta-llama/Llama-4-Scout-17B-16E", 16, 1, qk_norm=True, positions=10485760),
    _llama4("meta-llama/Llama-4-Maverick-17B-128E", 128, 2, qk_norm=False, positions=1048576),
)

# Other names people use for the same weights (instruct variants share the base shape).
ALIASES: dict[str, str] = {
    "meta-llama/Llama-2-7b-chat-hf": "meta-llama/Llama-2-7b-hf",
    "meta-llama/Llama-2-13b-chat-hf": "meta-llama/Llama-2-13b-hf",
    "meta-llama/Llama-2-70b-chat-hf": "meta-llama/Llama-2-70b-hf",
    "NousResearch/Llama-2-70b-hf": "meta-llama/Llama-2-70b-hf",
    "meta-llama/Meta-Llama-3-8B-Instruct": "meta-llama/Meta-Llama-3-8B",
    "meta-llama/Meta-Llama-3-70B-Instruct": "meta-llama/Meta-Llama-3-70B",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Llama-3.1-8B",
    "meta-llama/Meta-Llama-3.1-8B": "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Llama-3.1-70B",
    "meta-llama/Llama-3.2-1B-Instruct": "meta-llama/Llama-3.2-1B",
    "meta-llama/Llama-3.2-3B-Instruct": "meta-llama/Llama-3.2-3B",
    "unsloth/Llama-3.2-3B-Instruct": "meta-llama/Llama-3.2-3B",
    "mistralai/Mistral-7B-Instruct-v0.3": "mistralai/Mistral-7B-v0.3",
    "mistralai/Mistral-7B-Instruct-v0.2": "mistralai/Mistral-7B-v0.1",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mistralai/Mixtral-8x7B-v0.1",
    "Qwen/Qwen2.5-0.5B-Instruct": "Qwen/Qwen2.5-0.5B",
    "Qwen/Qwen2.5-1.5B-Instruct": "Qwen/Qwen2.5-1.5B",
    "Qwen/Qwen2.5-3B-Instruct": "Qwen/Qwen2.5-3B",
    "Qwen/Qwen2.5-7B-Instruct": "Qwen/Qwen2.5-7B",
    "Qwen/Qwen2.5-14B-Instruct": "Qwen/Qwen2.5-14B",
    "Qwen/Qwen2.5-32B-Instruct": "Qwen/Qwen2.5-32B",
    "Qwen/Qwen2.5-72B-Instruct": "Qwen/Qwen2.5-72B",
    "Qwen/Qwen2-7B-Instruct": "Qwen/Qwen2-7B",
    "Qwen/Qwen2-VL-2B": "Qwen/Qwen2-VL-2B-Instruct",
    **{f"Qwen/Qwen3-{size}-Base": f"Qwen/Qwen3-{size}" for size in ("0.6B", "1.7B", "4B", "8B", "14B")},
    "HuggingFaceTB/SmolLM3-3B-Base": "HuggingFaceTB/SmolLM3-3B",
    "allenai/OLMo-2-1124-7B-Instruct": "allenai/OLMo-2-1124-7B",
    "Qwen/Qwen3-30B-A3B-Base": "Qwen/Qwen3-30B-A3B",
    "allenai/OLMo-2-1124-13B-Instruct": "allenai/OLMo-2-1124-13B",
    "Qwen/Qwen2-VL-7B": "Qwen/Qwen2-VL-7B-Instruct",
    "google/gemma-2-2b-it": "google/gemma-2-2b",
    "google/gemma-3-1b-it": "google/gemma-3-1b-pt",
    **{f"google/gemma-3-{size}-it": f"google/gemma-3-{size}-pt" for size in ("4b", "12b", "27b")},
    "google/gemma-2-9b-it": "google/gemma-2-9b",
    "google/gemma-2-27b-it": "google/gemma-2-27b",
    "gpt2": "openai-community/gpt2",
    "deepseek-ai/DeepSeek-V3-Base": "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-V3-0324": "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1": "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1-0528": "deepseek-ai/DeepSeek-V3",
    "moonshotai/Moonlight-16B-A3B-Instruct": "moonshotai/Moonlight-16B-A3B",
    "moonshotai/Kimi-K2-Base": "moonshotai/Kimi-K2-Instruct",
    "moonshotai/Kimi-K2-Instruct-0905": "moonshotai/Kimi-K2-Instruct",
    "zai-org/GLM-4.5-Base": "zai-org/GLM-4.5",
    "deepseek-ai/DeepSeek-V2-Chat": "deepseek-ai/DeepSeek-V2",
    "deepseek-ai/DeepSeek-V2.5": "deepseek-ai/DeepSeek-V2",
    "deepseek-ai/DeepSeek-Coder-V2-Instruct": "deepseek-ai/DeepSeek-V2",
    "deepseek-ai/DeepSeek-V2-Lite-Chat": "deepseek-ai/DeepSeek-V2-Lite",
    "deepseek-ai/DeepSeek-Coder-V2-Lite-Instruct": "deepseek-ai/DeepSeek-V2-Lite",
    "zai-org/GLM-4.5-Air-Base": "zai-org/GLM-4.5-Air",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": "meta-llama/Llama-4-Scout-17B-16E",
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": "meta-llama/Llama-4-Maverick-17B-128E",
}
