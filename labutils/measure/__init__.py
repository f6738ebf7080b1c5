"""Measuring: a device's copies and matmuls, collectives in nccl-tests' terms, what a rank sent, a profiled step.

- ``bench``: single-device copy bandwidth, host-device transfers, matmul and op throughput;
- ``collectives_bench``: collectives with nccl-tests' sizes, algbw/busbw and table;
- ``commtrace``: every torch.distributed call a rank makes, its bytes and group;
- ``step_profile``: a training step read from a ``torch.profiler`` trace (compute, communication,
  overlap, exposed communication).

Private: ``_timing`` (per-call samples on the CPU or a GPU; devices and dtypes by name),
``_cuda_timing`` (CUDA-event timing, cold calls flushed), ``_collectives_layout``,
``_collectives_check`` and ``_collectives_report`` (the benchmark's sizes, cases and table).
"""
