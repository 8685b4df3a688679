"""Reproducible kernels, on request (plan.hyperparameters.deterministic).

On the CPU a resumed run already ends bit for bit where an uninterrupted one does (tests/integration/
test_training.py). On a GPU some kernels are not deterministic by default, and this switches them:
- cuBLAS may pick different reduction orders per stream unless its workspace is fixed (CUBLAS_WORKSPACE_CONFIG,
  NVIDIA cuBLAS documentation, "Results reproducibility");
- atomics-based backward kernels (the embedding's and index_add's scatter, SDPA's memory-efficient backward) add
  in arrival order; torch.use_deterministic_algorithms picks ordered ones or raises for an op that has none
  (PyTorch, "Reproducibility", docs.pytorch.org/docs/stable/notes/randomness.html);
- FlashAttention-2's backward accumulates dq with atomics unless asked not to (transformers passes
  deterministic=True when FLASH_ATTENTION_DETERMINISTIC=1);
- cuDNN autotuning may choose another algorithm per run.
NCCL's collectives are deterministic for a fixed world size, topology and message sizes (a resume keeps all
three). The cost — slower backward kernels — was not measured here (no GPU); `make bench` on a GPU host should.
"""

from __future__ import annotations

from contract.run_config import RunConfig

# Set in every rank's environment before CUDA starts (the launcher does it).
ENVIRONMENT = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "FLASH_ATTENTION_DETERMINISTIC": "1"}


def environment(cfg: RunConfig) -> dict[str, str]:
    return dict(ENVIRONMENT) if cfg.deterministic else {}


def apply(cfg: RunConfig) -> None:
    """In a rank, before the model is built."""
    if not cfg.deterministic:
        return
    import torch

    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
