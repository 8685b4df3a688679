"""The caching allocator's replay follows PyTorch's rules: rounding, pools, segment sizes, best fit, splitting,
merging, and empty_cache's release of wholly free segments."""

from __future__ import annotations

import pytest

from executor.training.caching_allocator import CachingAllocator, round_size, segment_size

MiB = 1 << 20


def test_requests_round_up_to_512_bytes() -> None:
    assert [round_size(n) for n in (1, 512, 513, 4000)] == [512, 512, 1024, 4096]


def test_segment_sizes_follow_the_request_size() -> None:
    assert segment_size(512) == 2 * MiB  # small pool: 2 MiB segments
    assert segment_size(MiB) == 2 * MiB
    assert segment_size(MiB + 512) == 20 * MiB  # 1-10 MiB: 20 MiB segments
    assert segment_size(10 * MiB) == 10 * MiB  # 10 MiB and up: the request rounded up to 2 MiB
    assert segment_size(101 * MiB) == 102 * MiB


def test_small_requests_share_one_segment() -> None:
    a = CachingAllocator()
    for key in range(4):
        a.malloc(key, 100_000)
    assert a.reserved_bytes == 2 * MiB
    assert a.allocated_bytes == 4 * round_size(100_000)


def test_a_medium_request_splits_a_20_mib_segment_the_next_one_reuses() -> None:
    a = CachingAllocator()
    a.malloc("x", 5 * MiB)
    a.malloc("y", 5 * MiB)
    a.malloc("z", 9 * MiB)
    # 5 + 5 leave 10 MiB, which holds 9 MiB whole: a 1 MiB remainder is not split off
    assert (a.reserved_bytes, a.allocated_bytes) == (20 * MiB, 20 * MiB)
    a.malloc("w", 5 * MiB)
    a.malloc("v", 5 * MiB)
    assert a.reserved_bytes == 40 * MiB  # w and v split a second segment, leaving 10 MiB
    a.malloc("u", 10 * MiB + 512)  # too large for it: a segment of its own, rounded up to 2 MiB
    assert a.reserved_bytes == 52 * MiB


def test_a_large_block_is_not_split_for_a_remainder_of_1_mib_or_less() -> None:
    a = CachingAllocator()
    a.malloc("x", 101 * MiB)
    assert (a.reserved_bytes, a.allocated_bytes) == (102 * MiB, 102 * MiB)


def test_a_freed_block_too_small_for_the_next_request_leaves_it_cached_and_a_new_segment_reserved() -> None:
    a = CachingAllocator()
    a.malloc("a", 100 * MiB)
    a.malloc("b", 100 * MiB)
    a.free("a")
    a.malloc("c", 150 * MiB)
    assert a.reserved_bytes == 350 * MiB
    a.free("b")
    a.malloc("d", 200 * MiB)  # 100 + 100 free, but in two segments: they never merge
    assert a.reserved_bytes == a.peak_reserved_bytes == 550 * MiB
    assert a.allocated_bytes == 350 * MiB


def test_freed_neighbours_in_one_segment_merge() -> None:
    a = CachingAllocator()
    for key in "abc":
        a.malloc(key, 5 * MiB)
    a.free("b")
    a.free("a")  # a and b merge into one 10 MiB block
    a.malloc("d", 9 * MiB)
    assert a.reserved_bytes == 20 * MiB


def test_the_smallest_free_block_that_fits_is_taken() -> None:
    a = CachingAllocator()
    for key, size in (("a", 300), ("gap1", 10), ("b", 120), ("gap2", 10), ("c", 200)):
        a.malloc(key, size * MiB)
    for key in "abc":
        a.free(key)
    a.malloc("d", 110 * MiB)  # best fit: b's 120 MiB block, its 10 MiB remainder split off
    a.malloc("e", 190 * MiB)  # c's 200 MiB block, not a's 300
    a.malloc("f", 290 * MiB)  # a's
    assert a.reserved_bytes == 640 * MiB
    a.malloc("g", 10 * MiB)  # one of the three 10 MiB remainders
    assert a.reserved_bytes == 640 * MiB


def test_empty_cache_keeps_what_is_in_use_and_restarts_the_peak() -> None:
    a = CachingAllocator()
    a.malloc("a", 200 * MiB)
    a.malloc("b", 50 * MiB)
    a.free("a")
    a.empty_cache()
    assert a.reserved_bytes == a.peak_reserved_bytes == 50 * MiB


def test_a_key_in_use_cannot_be_allocated_twice() -> None:
    a = CachingAllocator()
    a.malloc("a", 512)
    with pytest.raises(ValueError, match="already allocated"):
        a.malloc("a", 512)


def test_the_live_bytes_counter_drives_the_replay_on_real_tensors() -> None:
    import torch

    from executor.training.live_bytes import LiveBytes

    allocator = CachingAllocator()
    with LiveBytes(allocator=allocator):
        x = torch.empty(1000)  # 4000 bytes
        y = torch.empty(3 * MiB // 4)  # 3 MiB: a 20 MiB segment
        assert allocator.allocated_bytes == 4096 + 3 * MiB
        del x
        assert allocator.allocated_bytes == 3 * MiB
        del y
    assert (allocator.allocated_bytes, allocator.reserved_bytes) == (0, 22 * MiB)


def test_a_storage_resized_in_place_is_uncounted_when_emptied_and_counted_again_when_regrown() -> None:
    """FSDP frees a gathered parameter by shrinking its storage to nothing and gathers into it again by regrowing it
    (no aten op is dispatched for either): the counter and the replay follow both, and the regrown bytes are born in
    the phase that regrew them."""
    import torch

    from executor.training.live_bytes import LiveBytes

    allocator = CachingAllocator()
    with LiveBytes(allocator=allocator) as counter:
        x = torch.empty(1024)  # 4 KiB
        assert counter.live_bytes == 4096
        x.untyped_storage().resize_(0)
        assert (counter.live_bytes, allocator.allocated_bytes) == (0, 0)
        counter.set_phase("forward")
        x.untyped_storage().resize_(8192)
        assert (counter.live_bytes, allocator.allocated_bytes) == (8192, 8192)
        assert counter.peak.by_phase == {"forward": 8192}
        del x
        assert counter.live_bytes == 0


def test_the_counter_puts_storage_resizing_back_as_it_leaves() -> None:
    import torch

    from executor.training.live_bytes import LiveBytes

    original = torch.UntypedStorage.resize_
    with LiveBytes():
        assert torch.UntypedStorage.resize_ is not original
    assert torch.UntypedStorage.resize_ is original
