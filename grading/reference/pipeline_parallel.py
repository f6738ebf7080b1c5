"""Pipeline parallelism: GPipe and 1F1B over send/recv (Huang et al., "GPipe", arXiv:1811.06965;
Narayanan et al., arXiv:2104.04473; Megatron-LM pipeline_parallel/schedules.py; picotron).

A model of L layers is cut into p stages, one per rank of the pipeline group; a batch into m
microbatches. Stage s receives activations from s - 1 and gradients from s + 1:

    GPipe  (stage s):   F0 F1 ... F(m-1)                 B0 B1 ... B(m-1)      m microbatches in flight
    1F1B   (stage s):   F0 .. F(w-1) | F(w) B0 F(w+1) B1 ... | B(m-w) .. B(m-1)
                        warm-up w = min(p - s - 1, m)  steady 1F1B          cool-down
                        at most p - s microbatches in flight (p on stage 0)

Both flush at the end of the step, so the gradients are exact and the bubble is the same,
(p-1)/(m+p-1) of the total time; 1F1B saves activation memory, not time. Each microbatch's
loss is divided by m, so the summed gradients are those of the whole batch's mean loss.

Sends are ``isend``: a rank never blocks in a send, only in a ``recv`` of something that will
be sent. (In 1F1B, two neighbours that both block in a ``send`` wait for each other forever:
stage s sends F(w) while stage s + 1 sends the gradient of B0.) The send handles are kept
until the end of the step. Every function takes the pipeline ``group`` explicitly.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F


class StageP2P:
    """Point-to-point messages of one pipeline stage: activations forward, gradients backward."""

    def __init__(self, group):
        self.group = group
        self.stage, self.num_stages = dist.get_rank(group), dist.get_world_size(group)
        self.is_first, self.is_last = self.stage == 0, self.stage == self.num_stages - 1
        self.prev = None if self.is_first else dist.get_global_rank(group, self.stage - 1)
        self.next = None if self.is_last else dist.get_global_rank(group, self.stage + 1)
        self.pending_sends: list = []

    def _send(self, tensor: torch.Tensor, dst: int) -> None:
        self.pending_sends.append(dist.isend(tensor.detach().contiguous(), dst, group=self.group))

    def _recv(self, like: torch.Tensor, src: int) -> torch.Tensor:
        buffer = torch.empty_like(like)
        dist.recv(buffer, src, group=self.group)
        return buffer

    def send_forward(self, activation: torch.Tensor) -> None:
        self._send(activation, self.next)

    def recv_forward(self, like: torch.Tensor) -> torch.Tensor:
        return self._recv(like, self.prev)

    def send_backward(self, grad: torch.Tensor) -> None:
        self._send(grad, self.prev)

    def recv_backward(self, like: torch.Tensor) -> torch.Tensor:
        return self._recv(like, self.next)

    def wait_for_sends(self) -> None:
        for work in self.pending_sends:
            work.wait()
        self.pending_sends = []


class PipelineStep:
    """One training step of one stage: forward and backward of single microbatches, and the
    bookkeeping of what is in flight (forward done, backward not yet)."""

    def __init__(self, stage_module, microbatches: list, targets: list, group):
        self.module, self.microbatches, self.targets = stage_module, microbatches, targets
        self.num_microbatches = len(microbatches)
        self.p2p = StageP2P(group)
        self.saved: dict = {}
        self.in_flight = self.peak_in_flight = 0
        self.actions: list = []  # "F0", "F1", "B0", ... in the order this stage ran them
        self.loss = torch.zeros((), device=microbatches[0].device)

    def forward(self, i: int) -> None:
        """F_i: receive (or take) the input, run the stage, send the output (or compute the loss / m)."""
        if self.p2p.is_first:
            x = self.microbatches[i]
        else:
            x = self.p2p.recv_forward(self.microbatches[i]).requires_grad_(True)
        out = self.module(x)
        if self.p2p.is_last:
            out = F.mse_loss(out, self.targets[i]) / self.num_microbatches
            self.loss += out.detach()
        else:
            self.p2p.send_forward(out)
        self.saved[i] = (x, out)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self.actions.append(f"F{i}")

    def backward(self, i: int) -> None:
        """B_i: receive the output's gradient (the last stage starts from its loss), backpropagate,
        send the input's gradient to the previous stage."""
        x, out = self.saved.pop(i)
        if self.p2p.is_last:
            out.backward()
        else:
            out.backward(self.p2p.recv_backward(out))
        if not self.p2p.is_first:
            self.p2p.send_backward(x.grad)
        self.in_flight -= 1
        self.actions.append(f"B{i}")

    def result(self) -> tuple:
        """(the batch's mean loss on the last stage, else None; peak microbatches in flight; actions)."""
        self.p2p.wait_for_sends()
        return (self.loss if self.p2p.is_last else None), self.peak_in_flight, self.actions


def run_gpipe(stage_module, microbatches: list, targets: list, group) -> tuple:
    """GPipe: every forward, then every backward. Returns (loss or None, peak in flight = m, actions)."""
    step = PipelineStep(stage_module, microbatches, targets, group)
    for i in range(step.num_microbatches):
        step.forward(i)
    for i in range(step.num_microbatches):
        step.backward(i)
    return step.result()


def run_1f1b(stage_module, microbatches: list, targets: list, group) -> tuple:
    """1F1B (PipeDream-Flush): warm-up forwards, one forward one backward, cool-down backwards.
    Returns (loss or None, peak in flight = min(p - stage, m), actions)."""
    step = PipelineStep(stage_module, microbatches, targets, group)
    m = step.num_microbatches
    warmup = min(step.p2p.num_stages - step.p2p.stage - 1, m)
    for i in range(warmup):
        step.forward(i)
    for i in range(m - warmup):
        step.forward(warmup + i)
        step.backward(i)
    for i in range(m - warmup, m):
        step.backward(i)
    return step.result()
