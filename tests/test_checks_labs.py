"""labutils.checks.labs, the helpers of the labs' visible tests: right answers pass, each mistake
gets its one-line message naming what and which rank, non-answers (None, not a tensor) are reported."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import labutils
from labutils.checks import CheckFailed as PackageCheckFailed
from labutils.checks.labs import (
    CheckFailed, adam_reference, calls, check_calls, check_close, check_equal, check_pipeline_schedule,
    full_batch_gradients, gradients, load_shard, local_backward, messages, on_rank, replica, small_integers,
)


def test_check_failed_is_the_packages_one_line_error():
    assert CheckFailed is PackageCheckFailed
    assert CheckFailed("x on rank 1: differs")._render_traceback_() == ["CheckFailed: x on rank 1: differs"]


def test_check_close_passes_within_tolerance_and_names_what_and_the_rank():
    expected = torch.tensor([1.0, 2.0, 3.0])
    check_close("output", expected + 1e-6, expected, rank=0)
    with pytest.raises(CheckFailed, match=r"^output on rank 1: max \|got - expected\| = 0\.5$"):
        check_close("output", expected + torch.tensor([0.0, 0.5, 0.0]), expected, rank=1)
    check_close("output", expected + 0.5, expected, rank=0, tol=1.0)  # a looser tolerance accepts it
    with pytest.raises(CheckFailed, match=r"^output on rank 2: shape \(3, 1\), expected \(3,\)$"):
        check_close("output", expected.reshape(3, 1), expected, rank=2)


@pytest.mark.parametrize("check", [check_close, check_equal])
def test_non_answers_are_reported_not_crashed_on(check):
    expected = torch.zeros(2)
    with pytest.raises(CheckFailed, match=r"^dX on rank 0: got None$"):
        check("dX", None, expected, 0)
    with pytest.raises(CheckFailed, match=r"^dX on rank 3: got list, expected a tensor$"):
        check("dX", [0.0, 0.0], expected, 3)


def test_check_equal_wants_the_same_values_and_dtype():
    expected = small_integers(4, dtype=torch.bfloat16)
    check_equal("sum", expected.clone(), expected, 0)
    with pytest.raises(CheckFailed, match=r"^sum on rank 0: dtype torch.float32, expected torch.bfloat16$"):
        check_equal("sum", expected.float(), expected, 0)
    with pytest.raises(CheckFailed, match=r"^sum on rank 1: max \|got - expected\| = 1$"):
        check_equal("sum", expected + 1, expected, 1)


def test_check_calls_describes_both_sides():
    check_calls("forward", {"all_reduce": 1}, {"all_reduce": 1}, 0)
    with pytest.raises(CheckFailed, match=r"^forward on rank 0 made 1 all_gather, expected 1 all_reduce$"):
        check_calls("forward", {"all_gather": 1}, {"all_reduce": 1}, 0)
    with pytest.raises(CheckFailed, match=r"^backward on rank 2 made no call, expected 2 send$"):
        check_calls("backward", {}, {"send": 2}, 2)
    with pytest.raises(CheckFailed, match=r"got NoneType, expected \{op: calls\}"):
        check_calls("backward", None, {}, 0)


class _Trace:
    """What commtrace's record() yields, as far as calls() and messages() read it."""

    def __init__(self, summary):
        self._summary = summary

    def summary(self):
        return self._summary


def test_calls_and_messages_count_what_a_trace_recorded():
    trace = _Trace({"isend": {"calls": 2, "bytes": 8}, "send": {"calls": 1, "bytes": 4},
                    "irecv": {"calls": 3, "bytes": 12}, "all_reduce": {"calls": 1, "bytes": 4}})
    assert calls(trace) == {"isend": 2, "send": 1, "irecv": 3, "all_reduce": 1}
    assert messages(trace) == {"send": 3, "recv": 3, "all_reduce": 1}


def test_inputs_on_a_rank():
    x = torch.randn(3)
    copy = on_rank(x, requires_grad=True)
    assert copy.requires_grad and torch.equal(copy.detach(), x) and copy.data_ptr() != x.data_ptr()
    values = small_integers(1000, dtype=torch.float16)
    assert values.dtype == torch.float16 and values.min() >= -8 and values.max() <= 8
    assert torch.equal(values.float().sum(), values.float().flip(0).sum())  # exact in any order


def test_load_shard_copies_a_shard_of_the_right_shape_only():
    param = nn.Parameter(torch.zeros(2, 3))
    load_shard(param, torch.ones(2, 3), "fc1.weight", 0)
    assert torch.equal(param.detach(), torch.ones(2, 3))
    with pytest.raises(CheckFailed, match=r"^fc1.weight on rank 1 has shape \(2, 3\), expected this rank's shard \(3, 3\)$"):
        load_shard(param, torch.ones(3, 3), "fc1.weight", 1)
    with pytest.raises(CheckFailed, match=r"has shape None"):
        load_shard(None, torch.ones(3, 3), "fc1.bias", 0)


def test_adam_reference_is_one_adam_step_by_hand():
    param, grad, lr, betas, eps = torch.tensor([1.0, -2.0]), torch.tensor([0.5, 0.25]), 0.1, (0.9, 0.999), 1e-8
    (updated,) = adam_reference([param], [[grad]], lr=lr, betas=betas, eps=eps)
    m_hat = (1 - betas[0]) * grad / (1 - betas[0])            # bias-corrected first moment after one step
    v_hat = (1 - betas[1]) * grad ** 2 / (1 - betas[1])
    assert torch.allclose(updated, param - lr * m_hat / (v_hat.sqrt() + eps))
    assert torch.equal(param, torch.tensor([1.0, -2.0]))  # the caller's tensors are left alone


class _TwoLayers(nn.Module):
    def __init__(self, unused_head=False):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(3, 4), nn.Linear(4, 2)
        self.head = nn.Linear(4, 2) if unused_head else None

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def _shard_gradients(state, x, y):
    model = replica(_TwoLayers(unused_head=True), state)
    local_backward(model, x, y)
    return gradients(model)


def test_data_parallel_helpers_average_to_the_full_batch_gradients():
    torch.manual_seed(0)
    state = _TwoLayers(unused_head=True).state_dict()
    x, y = torch.randn(8, 3), torch.randn(8, 2)
    expected = full_batch_gradients(_TwoLayers(unused_head=True), state, x, y)
    assert torch.equal(expected["head.weight"], torch.zeros(2, 4))  # unused: zeros, not None
    per_rank = labutils.launch(_shard_gradients, 2, state, x, y, backend="gloo")
    assert per_rank[0]["head.weight"] is None
    for name in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"):
        check_close(name, (per_rank[0][name] + per_rank[1][name]) / 2, expected[name], 0)


def _stages(num_layers):
    layers = []
    for _ in range(num_layers):
        layers += [nn.Linear(4, 4), nn.Tanh()]
    return nn.Sequential(*layers)


def _gpipe(stage, microbatches, targets, group):
    """All forwards, then all backwards, with blocking send and recv (peak: every microbatch)."""
    rank, p, m = dist.get_rank(group), dist.get_world_size(group), len(microbatches)
    inputs, outputs, actions, total = [], [], [], torch.zeros(())
    for i, microbatch in enumerate(microbatches):
        x = microbatch if rank == 0 else torch.empty_like(microbatch)
        if rank > 0:
            dist.recv(x, src=rank - 1)
            x.requires_grad_(True)
        outputs.append(stage(x))
        inputs.append(x)
        if rank < p - 1:
            dist.send(outputs[-1].detach(), dst=rank + 1)
        actions.append(f"F{i}")
    for i in range(m):
        if rank == p - 1:
            loss = F.mse_loss(outputs[i], targets[i]) / m
            loss.backward()
            total = total + loss.detach()
        else:
            upstream = torch.empty_like(outputs[i])
            dist.recv(upstream, src=rank + 1)
            outputs[i].backward(upstream)
        if rank > 0:
            dist.send(inputs[i].grad, dst=rank - 1)
        actions.append(f"B{i}")
    return total, m, actions


PIPELINE = dict(num_layers=4, hidden=4, microbatch=2, num_microbatches=3, world_size=2, backend="gloo")


def test_a_right_pipeline_schedule_passes_and_a_wrong_peak_is_named():
    actions = check_pipeline_schedule(_gpipe, lambda rank: 3, _stages, **PIPELINE)
    assert actions == [["F0", "F1", "F2", "B0", "B1", "B2"]] * 2
    with pytest.raises(CheckFailed, match=r"^rank 0: peak microbatches in flight 3, expected 2$"):
        check_pipeline_schedule(_gpipe, lambda rank: min(2 - rank, 3), _stages, **PIPELINE)


def test_a_pipeline_that_does_not_divide_the_layers_is_refused():
    with pytest.raises(ValueError, match="num_layers=3 must be divisible by world_size=2"):
        check_pipeline_schedule(_gpipe, lambda rank: 3, _stages, **dict(PIPELINE, num_layers=3))
