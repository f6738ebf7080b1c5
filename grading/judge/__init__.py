"""The judge: runs a lab's hidden tests where the submission cannot reach the verdict.

The hidden-test cell of a lab calls ``judge.client.judge(lab, test, **objects)`` in the
student's kernel. The client cloudpickles the objects (classes and functions defined in
cells travel by value) and sends them, unopened, to a judge process:

- ``server``: a fresh interpreter started with ``python -I`` (by the kernel, or by
  ``labutils grade`` as a warm service). It imports the lab's test spec and the reference
  kernels before it receives any submission, builds random inputs, computes the expected
  results with dense maths, and compares. It never unpickles anything the submission made.
- ``rankside``: runs on fresh ranks started by ``labutils.launch``. Each rank runs the
  reference kernel first (expected communication pattern), then loads the submission and
  runs it, and sends back raw tensors and call counts (``torch.save`` bytes, read with
  ``weights_only=True``).
- ``engine``: the comparisons and the verdict; ``protocol``: the wire format.
- one module per lab (``lab01_tensor_parallel``...): its cases, dense maths and rank code.
"""
