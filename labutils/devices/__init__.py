"""Choosing the backend a launch uses, and whether this node's CUDA can serve it.

- ``backend``: ``choose_backend("auto", n)``: NCCL with one GPU per rank, else gloo, with the reason;
- ``cuda_visible``: the physical GPUs a process gets from ``CUDA_VISIBLE_DEVICES``, read as CUDA reads it;
- ``cuda_probe``: whether CUDA really works here (asked once per process);
- ``cuda_build``: whether torch's CUDA build suits the driver, and which wheel index to install from
  (also a script: ``python labutils/devices/cuda_build.py --index-url``);
- ``gpu_exclusive``: GPUs in EXCLUSIVE_PROCESS mode that a notebook kernel would keep from its ranks.
"""
