"""A live-bytes counter: every tensor storage an op allocates, counted from its creation until it is freed.

A TorchDispatchMode sees every aten op's outputs; a storage seen for the first time is counted, and a weakref
finalizer uncounts it when the last tensor on it dies. The same counter runs on real tensors and on fake ones
(torch._subclasses.fake_tensor: shapes, dtypes and devices, no storage), so the peak of a fake full-size step is
what the real step allocates — byte for byte at small scale (tests/benchmarks/test_simulate.py).

Each storage is tagged where it was born: the phase the caller set (init / forward / backward / step), the aten
op and the innermost module running (`ModuleStack`: forward hooks, so a checkpointed layer's recompute in
backward is named too). torch.utils.module_tracker is not used: its backward hooks keep tensors alive across
steps, which is exactly what must not be counted. Live bytes are kept per birth phase as storages
come and go, so every new peak records them (bytes per phase) with the op and module that raised it.

A storage resized in place (UntypedStorage.resize_, no aten op: how PyTorch's FSDP frees a gathered parameter and
gathers it again into the same storage) is uncounted when it shrinks to nothing and counted anew, born where it is
regrown, when it grows back; the counter wraps resize_ while it is entered.

What it does not see, by construction: memory a C++ extension allocates outside aten (none on the executor's
path: DeepSpeed's optimizers allocate their state with torch.zeros_like), and the CUDA caching allocator's
rounding (512-byte blocks) and reserve, unless given a `CachingAllocator` to replay them on.
"""

from __future__ import annotations

import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from executor.training.caching_allocator import CachingAllocator


class ModuleStack:
    """The qualified name of the innermost module whose forward is running (global forward hooks, removed on
    exit)."""

    def __init__(self, root: torch.nn.Module | None = None) -> None:
        self.names: dict[int, str] = {}
        self.stack: list[str] = []
        self.handles: list[Any] = []
        if root is not None:
            self.name(root)

    def name(self, root: torch.nn.Module) -> None:
        self.names = {id(m): name for name, m in root.named_modules()}

    def current(self) -> str:
        return self.stack[-1] if self.stack else ""

    def _enter(self, module: torch.nn.Module, args: Any) -> None:
        self.stack.append(self.names.get(id(module), type(module).__name__))

    def _exit(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if self.stack:
            self.stack.pop()

    def __enter__(self) -> ModuleStack:
        from torch.nn.modules import module as nn_module

        self.handles = [nn_module.register_module_forward_pre_hook(self._enter),
                        nn_module.register_module_forward_hook(self._exit, always_call=True)]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.remove()
        self.stack.clear()


@dataclass(frozen=True)
class Birth:
    phase: str
    op: str
    module: str


@dataclass
class Peak:
    bytes: int = 0
    phase: str = ""
    op: str = ""
    module: str = ""
    by_phase: dict[str, int] = field(default_factory=dict)  # live bytes at the peak by the phase they were born in


class LiveBytes(TorchDispatchMode):
    """Counts live tensor storage bytes; `peak` holds the highest count and what was alive then."""

    def __init__(self, modules: ModuleStack | None = None, allocator: CachingAllocator | None = None) -> None:
        super().__init__()
        self.allocator = allocator  # replays the CUDA caching allocator on the same births and deaths
        self.phase = "init"
        self.live_bytes = 0
        self.peak = Peak()
        self.loading_peak = Peak()  # the highest count before the first step (`steps_begin`)
        self.modules = modules
        # storage key -> (bytes, birth); keys are the storages' data pointers' stand-in: id of the StorageImpl
        # wrapper, which PyTorch preserves for as long as the storage lives
        self._live: dict[int, tuple[int, Birth]] = {}
        self._by_phase: Counter[str] = Counter()  # live bytes by the phase they were born in, kept as they change
        self._counted: set[int] = set()  # storages counted at least once and still alive: the ones resize_ recounts
        self._resize: Any = None  # UntypedStorage.resize_ while the counter is entered

    def steps_begin(self) -> None:
        """The model is loaded and the first step begins: what loading raised the count to is kept in `loading_peak`
        (each step then counts its own `peak`)."""
        self.loading_peak = self.peak

    def set_phase(self, phase: str) -> None:
        self.phase = phase

    def _module(self) -> str:
        return self.modules.current() if self.modules is not None else ""

    def __enter__(self) -> LiveBytes:
        resize = self._resize = torch.UntypedStorage.resize_

        def counted_resize(storage: torch.UntypedStorage, size: int) -> Any:
            out = resize(storage, size)
            self._resized(storage)
            return out

        torch.UntypedStorage.resize_ = counted_resize  # type: ignore[method-assign, assignment]
        return super().__enter__()  # type: ignore[no-any-return]

    def __exit__(self, *exc: Any) -> None:
        torch.UntypedStorage.resize_ = self._resize  # type: ignore[method-assign]
        super().__exit__(*exc)

    def _resized(self, storage: torch.UntypedStorage) -> None:
        """A counted storage changed size in place: uncount what it held, count what it holds now (nothing when it
        shrank to zero), born here. Storages never counted (meta tensors' shape-only copies) stay uncounted."""
        key = id(storage)
        if key not in self._counted:
            return
        self._free(key)
        self._count(storage, "resize_")

    def _count(self, storage: torch.UntypedStorage, op: str) -> None:
        key = id(storage)
        if key in self._live:
            return
        if key not in self._counted:  # a storage made empty may be grown later (resize_)
            self._counted.add(key)
            weakref.finalize(storage, self._counted.discard, key)
        nbytes = storage.nbytes()
        if nbytes == 0:
            return
        birth = Birth(self.phase, op, self._module())
        self._live[key] = (nbytes, birth)
        self.live_bytes += nbytes
        self._by_phase[birth.phase] += nbytes
        if self.allocator is not None:
            self.allocator.malloc(key, nbytes)
        weakref.finalize(storage, self._free, key)
        if self.live_bytes > self.peak.bytes:
            by_phase = {phase: size for phase, size in self._by_phase.items() if size}
            self.peak = Peak(self.live_bytes, birth.phase, op, birth.module, by_phase)

    def _free(self, key: int) -> None:
        if key not in self._live:
            return
        size, birth = self._live.pop(key)
        self.live_bytes -= size
        self._by_phase[birth.phase] -= size
        if self.allocator is not None:
            self.allocator.free(key)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket.__name__) if hasattr(func, "overloadpacket") else str(func)
        for t in tree_leaves(out):
            # meta tensors hold no memory (DeepSpeed builds shape-only copies of the parameters with them); a fake
            # tensor reports the device it stands for
            if isinstance(t, torch.Tensor) and t.layout is torch.strided and t.device.type != "meta":
                self._count(t.untyped_storage(), name)
        return out
