"""PyTorch's CUDA caching allocator, replayed: the bytes it reserves from the device (what nvidia-smi shows, less the
CUDA context) for a sequence of allocations and frees. Pure Python, no torch.

The rules are c10/cuda/CUDACachingAllocator.cpp's (torch 2.x) under its defaults — no expandable segments, no
max_split_size, no garbage-collection threshold — on one stream:
- a request is rounded up to a multiple of 512 bytes (round_size);
- requests of at most 1 MiB come from the small pool, larger ones from the large pool;
- the smallest cached free block of the pool that holds the request is taken, the lowest address among equals
  (BlockComparatorSize: size, then address); none cached, a new segment is reserved: 2 MiB for a small request,
  20 MiB for one under 10 MiB, else the request rounded up to 2 MiB (get_allocation_size);
- the block taken is split when what remains is at least 512 bytes (small pool) or more than 1 MiB (large pool),
  the request keeping the lower address (should_split, alloc_found_block);
- a freed block merges with its free neighbours in the same segment (try_merge_blocks);
- a segment is given back only by torch.cuda.empty_cache (`empty_cache`: every wholly free segment) or under memory
  pressure, which the replay does not bound: its peak is what a device large enough would show.

What it cannot see: blocks another stream holds (DeepSpeed's ZeRO-3 gathers and reductions run on side streams)
and the memory a kernel allocates for itself outside the allocator (cuBLAS workspaces are in the CUDA context term).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

MIN_BLOCK_BYTES = 512  # kMinBlockSize: every request is rounded up to a multiple of this
SMALL_REQUEST_BYTES = 1 << 20  # kSmallSize: the largest request the small pool serves
SMALL_SEGMENT_BYTES = 2 << 20  # kSmallBuffer: the segment a small request reserves
MEDIUM_SEGMENT_BYTES = 20 << 20  # kLargeBuffer: the segment a request under kMinLargeAlloc reserves
MIN_LARGE_ALLOC_BYTES = 10 << 20  # kMinLargeAlloc
LARGE_ROUNDING_BYTES = 2 << 20  # kRoundLarge: larger segments are the request rounded up to this


def round_size(nbytes: int) -> int:
    """The block size a request of `nbytes` takes (round_size)."""
    return max(MIN_BLOCK_BYTES, -(-nbytes // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES)


def segment_size(size: int) -> int:
    """The segment reserved for a rounded request of `size` bytes that no cached block holds (get_allocation_size)."""
    if size <= SMALL_REQUEST_BYTES:
        return SMALL_SEGMENT_BYTES
    if size < MIN_LARGE_ALLOC_BYTES:
        return MEDIUM_SEGMENT_BYTES
    return -(-size // LARGE_ROUNDING_BYTES) * LARGE_ROUNDING_BYTES


@dataclass(eq=False)
class _Block:
    address: int
    size: int
    small: bool
    allocated: bool = False
    prev: _Block | None = None
    next: _Block | None = None


class CachingAllocator:
    """Reserved bytes of the caching allocator as `malloc` and `free` are called; `peak_reserved_bytes` is the most it
    held at once."""

    def __init__(self) -> None:
        self.reserved_bytes = 0
        self.peak_reserved_bytes = 0
        self.allocated_bytes = 0  # rounded block bytes in use
        self._pools: dict[bool, list[tuple[int, int]]] = {True: [], False: []}  # free (size, address), sorted
        self._free_blocks: dict[int, _Block] = {}  # address -> free block
        self._in_use: dict[object, _Block] = {}  # caller's key -> its block
        self._next_address = 0

    def malloc(self, key: object, nbytes: int) -> None:
        """Allocate `nbytes` for `key` (a key still in use is an error)."""
        if key in self._in_use:
            raise ValueError(f"{key!r} is already allocated")
        size = round_size(nbytes)
        small = size <= SMALL_REQUEST_BYTES
        block = self._take_free(size, small) or self._reserve(size, small)
        remaining = block.size - size
        if remaining >= MIN_BLOCK_BYTES if small else remaining > SMALL_REQUEST_BYTES:
            rest = _Block(block.address + size, remaining, small, prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next, block.size = rest, size
            self._cache(rest)
        block.allocated = True
        self._in_use[key] = block
        self.allocated_bytes += block.size

    def free(self, key: object) -> None:
        """Return `key`'s block to its pool, merged with its free neighbours."""
        block = self._in_use.pop(key)
        block.allocated = False
        self.allocated_bytes -= block.size
        for neighbour in (block.prev, block.next):
            if neighbour is not None and not neighbour.allocated:
                self._uncache(neighbour)
                if neighbour is block.prev:
                    neighbour.size += block.size
                    neighbour.next = block.next
                    if block.next is not None:
                        block.next.prev = neighbour
                    block = neighbour
                else:
                    block.size += neighbour.size
                    block.next = neighbour.next
                    if neighbour.next is not None:
                        neighbour.next.prev = block
        self._cache(block)

    def _cache(self, block: _Block) -> None:
        bisect.insort(self._pools[block.small], (block.size, block.address))
        self._free_blocks[block.address] = block

    def _uncache(self, block: _Block) -> None:
        pool = self._pools[block.small]
        del pool[bisect.bisect_left(pool, (block.size, block.address))]
        del self._free_blocks[block.address]

    def _take_free(self, size: int, small: bool) -> _Block | None:
        pool = self._pools[small]
        i = bisect.bisect_left(pool, (size, -1))
        if i == len(pool):
            return None
        return self._free_blocks.pop(pool.pop(i)[1])

    def _reserve(self, size: int, small: bool) -> _Block:
        segment = segment_size(size)
        block = _Block(self._next_address, segment, small)
        self._next_address += segment
        self.reserved_bytes += segment
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)
        return block

    def empty_cache(self) -> None:
        """torch.cuda.empty_cache(): give back every segment no block of which is in use (release_cached_blocks);
        the peak restarts from what stays reserved."""
        for block in [b for b in self._free_blocks.values() if b.prev is None and b.next is None]:
            self._uncache(block)
            self.reserved_bytes -= block.size
        self.peak_reserved_bytes = self.reserved_bytes
