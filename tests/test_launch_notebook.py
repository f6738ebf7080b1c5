"""launch, Pool and %%distributed from a real Jupyter kernel (nbclient), as a student uses them."""
from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from labutils.checks.notebook_kernel import UnixSocketKernelManager

CELLS = [
    "import os, torch, torch.distributed as dist\nimport labutils\n"
    "a = torch.randn(512, 512); (a @ a).sum()  # the kernel ran a parallel op: it must never be forked",
    # a function defined in a cell, one-shot launch
    "def rank_sum(scale):\n    t = torch.tensor([float(dist.get_rank() * scale)])\n    dist.all_reduce(t)\n"
    "    print('summed', t.item())\n    return t\n"
    "results = labutils.launch(rank_sum, 2, 10)\nprint('RESULTS', [r.item() for r in results])",
    # a class defined in a cell, warm pool
    "class Counter:\n    def __init__(self):\n        self.n = torch.ones(1)\n"
    "    def bump(self):\n        dist.all_reduce(self.n)\n        return self.n.item()\n"
    "pool = labutils.Pool(2)\nprint('POOL', pool.run(lambda: Counter().bump()), pool.run(lambda: Counter().bump()))",
    # an exception on one rank comes back in the cell, naming the rank
    "def fail():\n    if dist.get_rank() == 1:\n        raise ValueError('only rank 1 is unhappy')\n"
    "pool.run(fail)",
    "print('POOL AGAIN', pool.run(dist.get_rank))\npool.shutdown()",
    "%load_ext labutils",
    "%%distributed -n 2\nx = torch.ones(1) * (rank + 1)\ndist.all_reduce(x)\nprint('magic', x.item())",
    "%%distributed -n 2\nprint('still here', x.item() + rank)",
]


def _output_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}\n" + "\n".join(out.traceback))
        elif "text/plain" in out.get("data", {}):
            parts.append(out.data["text/plain"])
    return "".join(parts)


@pytest.mark.usefixtures("no_leftover_processes")
def test_all_three_apis_in_a_headless_notebook(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in CELLS]
    nb.cells[3].metadata["tags"] = ["raises-exception"]
    NotebookClient(nb, timeout=120, kernel_name="python3", kernel_manager_class=UnixSocketKernelManager,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    texts = [_output_text(c) for c in nb.cells]

    assert "[rank 0] summed 10.0" in texts[1] and "[rank 1] summed 10.0" in texts[1]
    assert "RESULTS [10.0, 10.0]" in texts[1]
    assert "POOL [2.0, 2.0] [2.0, 2.0]" in texts[2]
    assert "ValueError: only rank 1 is unhappy" in texts[3]
    assert "rank 1 of 2" in texts[3]
    assert "Cell In[4]" in texts[3] and "ipykernel_" not in texts[3]  # cells named as IPython names them
    assert "pool.run(fail)" in texts[3] and "labutils/" not in texts[3]  # the cell's line, no launcher frame
    assert "POOL AGAIN [0, 1]" in texts[4]
    assert "[rank 0] magic 3.0" in texts[6] and "[rank 1] magic 3.0" in texts[6]
    assert "[rank 0] still here 3.0" in texts[7] and "[rank 1] still here 4.0" in texts[7]
