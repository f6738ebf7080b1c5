"""The judge: runs a lab's hidden tests where the submission cannot reach the verdict.

A lab's hidden-test cell is one call, in the student's kernel::

    from grading.judge import judge
    judge("lab01_tensor_parallel", "test_f", copy_to_tp_region=copy_to_tp_region)

``judge`` is ``client.judge``. The client cloudpickles the objects (classes and functions defined in
cells travel by value) and sends them, unopened, to a judge process:

- ``server``: a fresh interpreter started with ``python -E -s -m grading.judge.server`` in the
  course root (by the kernel, or by ``course grade`` as a warm service). It imports the lab's test spec and the reference
  kernels before it receives any submission, builds random inputs, computes the expected
  results with dense maths, and compares. It never unpickles anything the submission made.
- ``rankside``: the harness on fresh ranks started by ``labutils.launch``, shipped there by value
  with the test's rank code (``shipping``: no rank imports the grader). The reference runs in
  launches of its own; a submission's launch holds its objects, its inputs, the harness and the
  reference objects the test lends, nothing else of the grader. Ranks send back raw tensors and
  call counts (``torch.save`` bytes, read with ``weights_only=True``).
- ``engine``: the cases, the launches and the verdict; ``comparisons``: how results differ from what
  was expected; ``protocol``: the wire format.
- one module per lab (``lab01_tensor_parallel``...): its cases, dense maths and rank code.
"""
from grading.judge.client import HiddenTestsFailed, judge

__all__ = ["HiddenTestsFailed", "judge"]
