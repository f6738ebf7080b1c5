"""The instructor's reference kernels, one parallelism per module (never released to students).

The judges in ``grading/judge/`` run these on the same ranks as a submission, before any
student code is loaded, to get the expected results and communication pattern:

- ``tp_communications``: Megatron's f, g and the gather/scatter mappings as autograd functions
- ``tensor_parallel``: ColumnParallelLinear, RowParallelLinear and the Megatron MLP
- ``collectives``: a ring reduce-scatter, all-gather and all-reduce from send/recv; algbw and busbw
- ``data_parallel``: gradient averaging, buckets, buckets overlapped with backward, DP training
- ``zero``: ZeRO stages 1 and 2 as a ``torch.optim.Optimizer`` (AdamW) over uneven shards
- ``fsdp``: ZeRO stage 3, a layer whose parameters are gathered for forward and backward and freed after
- ``pipeline_parallel``: GPipe and 1F1B over send/recv
"""
