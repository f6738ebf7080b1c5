"""How a rank's results differ from what was expected: values within tolerances, then what it
communicated against the reference's record (operations per phase, then bytes per operation).

Runs in the judge's main process; the torch functions it compares with are taken at import time,
before any request arrives.
"""
from __future__ import annotations

import torch

_isfinite, _float64 = torch.isfinite, torch.float64

#: Tolerances of every comparison: |got - expected| <= ATOL + RTOL * |expected|.
ATOL, RTOL = 1e-4, 1e-4


def _mismatch(got, expected: torch.Tensor) -> str | None:
    """None when ``got`` matches ``expected`` within ATOL/RTOL, else a short description."""
    if got is None:
        return "is missing (None)"
    if tuple(got.shape) != tuple(expected.shape):
        return f"has shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    got, expected = got.to(_float64), expected.to(_float64)
    if not bool(_isfinite(got).all()):
        return "contains NaN or inf"
    excess = (got - expected).abs() - (ATOL + RTOL * expected.abs())
    if bool((excess > 0).any()):
        index = int(excess.flatten().argmax())
        worst_got, worst_expected = got.flatten()[index].item(), expected.flatten()[index].item()
        max_error = (got - expected).abs().max().item()
        return f"differs: max |got - expected| = {max_error:.3g} (e.g. got {worst_got:.4g}, expected {worst_expected:.4g})"
    return None


#: Collectives that do the same communication under another name, counted as the name they map to.
EQUIVALENT_OPS = {"all_gather_into_tensor": "all_gather", "_all_gather_base": "all_gather",
                  "reduce_scatter_tensor": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
                  "all_to_all_single": "all_to_all", "isend": "send", "irecv": "recv"}


def canonical_calls(counts: dict) -> dict:
    """``counts`` ({op: calls}) with equivalent collectives (``EQUIVALENT_OPS``) under one name; zeros dropped."""
    merged: dict = {}
    for op, n in counts.items():
        if n:
            name = EQUIVALENT_OPS.get(op, op)
            merged[name] = merged.get(name, 0) + n
    return merged


def _describe_calls(counts: dict) -> str:
    calls = [f"{n} {op}" for op, n in sorted(counts.items()) if n]
    return ", ".join(calls) if calls else "no collective"


def case_problem(expected_by_rank: list, student: list, reference: list) -> str | None:
    """The first thing wrong with a run of a case (lowest rank first), or None."""
    for rank, (got, want) in enumerate(zip(student, expected_by_rank)):
        for key, label in (("out", "output"), ("dx", "input gradient dX")):
            if key not in want:  # a test with no input (collectives, bandwidth) expects no dX
                continue
            problem = _mismatch(got[key], want[key])
            if problem:
                return f"{label} on rank {rank} {problem}"
        for path, expected_grad in want["grads"].items():
            problem = _mismatch(got["grads"].get(path), expected_grad)
            if problem:
                return f"gradient of {path} on rank {rank} {problem}"
        for label, expected_value in want.get("values", {}).items():  # named measurements of a lab's test
            got_value = got.get("values", {}).get(label)
            if isinstance(got_value, str):  # could not be measured; the string says why
                return f"{label} on rank {rank}: {got_value}"
            problem = _mismatch(got_value, expected_value)
            if problem:
                return f"{label} on rank {rank} {problem}"
    for rank, (got, ref) in enumerate(zip(student, reference)):
        problem = _communication_problem(rank, got, ref)
        if problem:
            return problem
    return None


def _communication_problem(rank: int, got: dict, ref: dict) -> str | None:
    """How what ``rank`` communicated (its process group's record) differs from the reference's:
    the operations of each phase, then the bytes of each operation; or None."""
    for phase in ref["comm"]:  # "forward", "backward", and any phase a lab's test names
        if canonical_calls(got["comm"].get(phase, {})) != canonical_calls(ref["comm"][phase]):
            return (f"{phase} on rank {rank} made {_describe_calls(got['comm'].get(phase, {}))}, "
                    f"expected {_describe_calls(ref['comm'][phase])}")
    for phase, expected_bytes in ref.get("comm_bytes", {}).items():
        got_bytes = canonical_calls(got.get("comm_bytes", {}).get(phase, {}))
        if got_bytes != canonical_calls(expected_bytes):
            return (f"{phase} on rank {rank} moved {_describe_bytes(got_bytes)}, expected "
                    f"{_describe_bytes(canonical_calls(expected_bytes))} (the same operations, other sizes)")
    return None


def _describe_bytes(sizes: dict) -> str:
    parts = [f"{n:,} bytes in {op}" for op, n in sorted(sizes.items()) if n]
    return ", ".join(parts) if parts else "no bytes"
