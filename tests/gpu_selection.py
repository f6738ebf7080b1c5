"""Whether a pytest run asks for the GPU tests (read by conftest before torch touches CUDA)."""
from __future__ import annotations


def selects_gpu_tests(markexpr: str) -> bool:
    """Whether a ``-m`` expression asks for GPU tests ("gpu", "gpu or multigpu"; not "not gpu")."""
    words = markexpr.replace("(", " ").replace(")", " ").split()
    return any(w in ("gpu", "multigpu") and (i == 0 or words[i - 1] != "not") for i, w in enumerate(words))
