"""The kernels a chapter runs and checks against a plain version, beyond the labs' own.

- ``recompute``: the bytes a transformer layer saves for backward with no, selective or full recomputation;
- ``context_parallel``: ring attention and Ulysses all-to-all attention, checked against dense attention;
- ``fp8``: the E4M3 and E5M2 formats, per-tensor scaling, and an FP8 all-gather;
- ``resumable``: an FSDP2 training job that saves DCP checkpoints and resumes from the latest after a
  rank dies under ``torchrun --max-restarts`` (chapter 7.10);
- ``transformer``: a small decoder-only transformer named as torchtitan's Llama, which lab 7 parallelizes
  with ``DeviceMesh``, ``parallelize_module`` and ``fully_shard``.
"""
