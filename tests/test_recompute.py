"""labutils.kernels.recompute: the bytes saved for backward match arXiv:2205.05198's count per variant."""
from __future__ import annotations

import pytest
import torch

from labutils.kernels import recompute

S, B, H, A, LAYERS = 32, 2, 32, 4, 2


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: one thread, so OpenMP threads never wait on each other on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _run(mode, dtype=torch.bfloat16):
    torch.manual_seed(0)
    stack = recompute.LayerStack(LAYERS, H, A, mode).to(dtype)
    x = torch.randn(S, B, H, dtype=dtype, requires_grad=True)
    return stack, x, recompute.measure(stack, x, iters=1)


@pytest.mark.parametrize("mode", recompute.RECOMPUTE_MODES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_saved_bytes_match_the_paper_up_to_layernorm_statistics(mode, dtype):
    _stack, x, run = _run(mode, dtype)
    formula = LAYERS * recompute.activation_bytes_per_layer(S, B, H, A, mode, bytes_per_value=x.element_size())
    # LayerNorm also keeps a mean and 1/std per token (2 norms x 2 values x s b per layer), not in the paper's count
    layernorm_statistics = 0 if mode == "full" else LAYERS * 4 * S * B * x.element_size()
    assert run.saved_bytes == formula + layernorm_statistics
    assert run.step_s > 0 and run.cuda_peak_bytes is None


def test_the_paper_formula():
    sbh = 2048 * 1 * 12288
    assert recompute.activation_bytes_per_layer(2048, 1, 12288, 96) == sbh * (34 + 5 * 96 * 2048 / 12288)
    assert recompute.activation_bytes_per_layer(2048, 1, 12288, 96, "selective") == 34 * sbh
    assert recompute.activation_bytes_per_layer(2048, 1, 12288, 96, "full") == 2 * sbh


def test_recomputation_gives_the_same_gradients():
    grads = {}
    for mode in recompute.RECOMPUTE_MODES:
        stack, x, _ = _run(mode, torch.float64)
        torch.manual_seed(1)   # the same dropout masks in every variant: checkpoint replays the RNG state
        stack(x).square().mean().backward()
        grads[mode] = [x.grad.clone()] + [p.grad.clone() for p in stack.parameters()]
    for mode in ("selective", "full"):
        for got, want in zip(grads[mode], grads["none"]):
            torch.testing.assert_close(got, want)


def test_views_of_one_storage_count_once_and_parameters_not_at_all():
    weight = torch.randn(4, 4, requires_grad=True)
    x = torch.randn(8, 4, requires_grad=True)
    with recompute.SavedTensorBytes(exclude=[weight]) as counter:
        y = (x[:4] * x[4:]) @ weight            # mul saves two views of x; matmul saves the product and weight
    assert counter.nbytes == x.numel() * 4 + y.numel() * 4


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="recompute must be one of"):
        recompute.activation_bytes_per_layer(16, 1, 16, 2, "some")
    with pytest.raises(ValueError, match="divide hidden"):
        recompute.TransformerLayer(10, 3)
    with pytest.raises(ValueError, match="dropout probability"):
        recompute.dropout_with_byte_mask(torch.ones(2), 1.5, True)
