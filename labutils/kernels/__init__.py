"""The kernels a chapter runs and checks against a plain version, beyond the labs' own.

- ``recompute``: the bytes a transformer layer saves for backward with no, selective or full recomputation;
- ``context_parallel``: ring attention and Ulysses all-to-all attention, checked against dense attention;
- ``fp8``: the E4M3 and E5M2 formats, per-tensor scaling, and an FP8 all-gather.
"""
