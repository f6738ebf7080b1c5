"""labutils.costmodel.ddp_bucket_sizes forms buckets as torch's DDP does (checked against torch)."""
import random

import pytest
import torch
import torch.distributed as dist

from labutils import costmodel as cm

MIB = 2**20


def _torch_buckets(param_bytes, caps):
    """Bucket sizes from torch's own assignment, float32 tensors of the given byte sizes."""
    tensors = [torch.empty(size // 4) for size in param_bytes]
    indices, _ = dist._compute_bucket_assignment_by_size(tensors, list(caps), [False] * len(tensors))
    return [sum(param_bytes[i] for i in bucket) for bucket in indices]


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("bucket_cap_mb", [None, 0.25, 1, 3.5])
def test_buckets_match_torchs_assignment(seed, bucket_cap_mb):
    rng = random.Random(seed)
    param_bytes = [4 * rng.choice([1, 7, 1024, 65536, 300_000, 2_000_000]) for _ in range(rng.randint(1, 40))]
    first, later = cm.ddp_bucket_caps(bucket_cap_mb)
    caps = [first, later] if first < later else [later]
    assert cm.ddp_bucket_sizes(param_bytes, bucket_cap_mb) == _torch_buckets(param_bytes, caps)


def test_default_caps_are_ddps():
    assert cm.ddp_bucket_caps(None) == (dist._DEFAULT_FIRST_BUCKET_BYTES, 25 * MIB)
    assert cm.ddp_bucket_caps(2) == (2 * MIB, 2 * MIB)


def test_a_bucket_closes_at_or_above_its_cap_so_ceil_is_no_count():
    # four parameters of 0.6 MiB under a 1 MiB cap: two buckets of 1.2 MiB, where ceil(G/C) says 3
    sizes = cm.ddp_bucket_sizes([int(0.6 * MIB)] * 4, bucket_cap_mb=1)
    assert sizes == [2 * int(0.6 * MIB)] * 2
    # DDP's default: the first bucket closes at 1 MiB, the rest at 25 MiB
    assert cm.ddp_bucket_sizes([MIB // 2] * 60) == [MIB] + [25 * MIB] + [MIB * 4]


@pytest.mark.parametrize("bad", [[], [0], [-4], [1.5], [True]])
def test_bad_sizes_are_refused(bad):
    with pytest.raises(ValueError):
        cm.ddp_bucket_sizes(bad)


@pytest.mark.parametrize("cap", [0, -1, float("nan"), "1", True])
def test_bad_caps_are_refused(cap):
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        cm.ddp_bucket_sizes([4], cap)
