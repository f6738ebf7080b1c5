"""2D parallelism with PyTorch's own APIs: a DeviceMesh, tensor and sequence parallel plans, FSDP2.

The plans are torchtitan's for its Llama model (``torchtitan/models/llama3/infra/parallelize.py``,
``apply_tp`` and ``apply_fsdp``), on ``labutils.kernels.transformer.TinyTransformer``, whose modules
bear the same names. A mesh of dp x tp ranks, tp the inner (fast-varying) dimension, so that the
ranks of one tensor-parallel group are consecutive (one NVLink domain on a GPU node):

    tok_embeddings      RowwiseParallel: the vocabulary split over tp, output Shard(1) (sequence)
    attention_norm,     SequenceParallel: each tp rank normalises its s/t positions
    ffn_norm, norm
    attention,          PrepareModuleInput: Shard(1) -> Replicate() (an all-gather over the sequence)
    feed_forward
    wq, wk, wv, w1      ColwiseParallel: output features split, heads split
    wo, w2              RowwiseParallel, output Shard(1): the partial sums reduce-scattered over the sequence
    output              ColwiseParallel from Shard(1), output Replicate(): full logits on every rank

Then FSDP2 over dp: ``fully_shard`` on each block, then on the whole model (its embeddings, final
norm and output), each parameter's DTensor sharded on dim 0 over dp on top of its tp placement.
Tensor parallelism goes first: ``fully_shard`` shards what ``parallelize_module`` made.

A checkpoint is ``torch.distributed.checkpoint`` (DCP) of the model's and the optimizer's state
dicts as ``get_state_dict`` gives them (each rank's shards, with their place in the whole tensor):
every rank writes its own shards and rank 0 the metadata. ``load_checkpoint`` fills the state
dicts of a model and optimizer parallelized on any mesh, at any number of ranks, each rank reading
the pieces of the saved shards that its own shards cover (torchtitan's ``components/checkpoint.py``).
"""
from __future__ import annotations

import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)


def build_mesh(dp_size: int, tp_size: int) -> DeviceMesh:
    """A (dp_size, tp_size) mesh named ("dp", "tp") on the rank's device type, tp the inner dimension."""
    from labutils.ranks.rank import device

    return init_device_mesh(device().type, (dp_size, tp_size), mesh_dim_names=("dp", "tp"))


def block_plan() -> dict:
    """The tensor and sequence parallel plan of one TransformerBlock."""
    return {
        "attention_norm": SequenceParallel(),
        "attention": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
    }


def apply_tensor_parallel(model: nn.Module, tp_mesh: DeviceMesh) -> nn.Module:
    """``model`` (a TinyTransformer) made tensor and sequence parallel over ``tp_mesh``, in place."""
    parallelize_module(model, tp_mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    })
    for block in model.layers:
        parallelize_module(block, tp_mesh, block_plan())
    return model


def parallelize(model: nn.Module, mesh: DeviceMesh) -> nn.Module:
    """``model`` with tensor parallelism over mesh["tp"], then FSDP2 over mesh["dp"], in place."""
    apply_tensor_parallel(model, mesh["tp"])
    for block in model.layers:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    return model


def save_checkpoint(model: nn.Module, optimizer, folder: str) -> None:
    """Save ``model`` and ``optimizer`` (parallelized on any mesh) to ``folder`` with DCP, from every rank."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=folder)


def load_checkpoint(model: nn.Module, optimizer, folder: str) -> None:
    """Load what ``save_checkpoint`` wrote in ``folder`` into ``model`` and ``optimizer``, whatever
    their mesh and the number of ranks that saved it, on every rank."""
    model_state, optimizer_state = get_state_dict(model, optimizer)  # the optimizer's state made if it has none
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=folder)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
