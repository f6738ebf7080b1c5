"""Hidden tests of lab 7 (PyTorch's APIs): the 2D DeviceMesh, the tensor and sequence parallel plan,
TP + FSDP2, and a distributed checkpoint loaded at another world size.

Every test runs on 4 ranks with ``labutils.kernels.transformer.TinyTransformer`` (vocabulary 32,
width 16, 4 heads, feed-forward 32, 2 blocks) on batches of 2 sequences of 8 tokens. Expected results
are the same model in one process, in float64: the logits, the loss and every parameter's gradient
(the mean loss over the data-parallel ranks' batches, as FSDP averages), and for the training test
the parameters after two SGD steps with momentum. Beside the numbers the judge compares each
parameter's placements (what it is sharded on, per mesh dimension: a parameter left a plain tensor
is named) and, at each rank's process group, the collectives of a forward and a backward pass and
their bytes with the reference plan's. The checkpoint test saves on 4 ranks and loads on 2 ranks of
a second launch, which receive only the saved files (``handoff``). Later parts run with the
reference for the earlier ones.
"""
from __future__ import annotations

import contextlib

import torch

from labutils.kernels.transformer import TinyTransformer, TransformerConfig, next_token_loss

from grading.judge.engine import Case, TestSpec, group_layout
from grading.judge.handoff import Reload
from grading.judge.rankside import SubmissionProblem
from grading.reference import pytorch_apis as apis

WORLD_SIZE = 4
#: Whether the hidden tests' ranks build optimizers (whose torch._dynamo import the judge's templates make first).
RANKS_BUILD_OPTIMIZERS = True
CONFIG = TransformerConfig()
BATCH, SEQ = 2, 8
LEARNING_RATE, MOMENTUM, STEPS = 0.1, 0.9, 2
#: What a parameter is on one mesh dimension, as a number: sharded on dim d (Shard, _StridedShard) d,
#: Replicate -1, Partial -2; a parameter that is no DTensor is [-3].
REPLICATE, PARTIAL, NOT_A_DTENSOR = -1.0, -2.0, -3.0
#: The tensor-parallel placement of every parameter of the reference plan, by name (after the layer's prefix).
TP_PLACEMENT = {"tok_embeddings.weight": 0, "norm.weight": REPLICATE, "norm.bias": REPLICATE, "output.weight": 0,
                "attention_norm.weight": REPLICATE, "attention_norm.bias": REPLICATE,
                "ffn_norm.weight": REPLICATE, "ffn_norm.bias": REPLICATE,
                "attention.wq.weight": 0, "attention.wk.weight": 0, "attention.wv.weight": 0,
                "attention.wo.weight": 1, "feed_forward.w1.weight": 0, "feed_forward.w2.weight": 1}

REFERENCE = {
    "build_mesh": apis.build_mesh,
    "apply_tensor_parallel": apis.apply_tensor_parallel,
    "parallelize": apis.parallelize,
    "save_checkpoint": apis.save_checkpoint,
    "load_checkpoint": apis.load_checkpoint,
}


def _float(values) -> torch.Tensor:
    return torch.as_tensor(values, dtype=torch.float64).reshape(-1)


def _tp_placement(name: str) -> float:
    return float(TP_PLACEMENT[name.split(".", 2)[2] if name.startswith("layers.") else name])


# ----- what runs on the ranks ---------------------------------------------------------------------------

def _placement_codes(parameter) -> torch.Tensor:
    """One number per mesh dimension of ``parameter`` (a DTensor), or [NOT_A_DTENSOR]."""
    placements = getattr(parameter, "placements", None)
    if placements is None:
        return _float([NOT_A_DTENSOR])
    # Shard(d), and FSDP's _StridedShard(d) over a dimension tensor parallelism already split, have a dim
    return _float([float(p.dim) if isinstance(getattr(p, "dim", None), int) else PARTIAL if p.is_partial()
                   else REPLICATE for p in placements])


def _full(tensor):
    """A DTensor's whole value (gathered outside any recorded phase), or the tensor itself."""
    import logging

    if not hasattr(tensor, "full_tensor"):
        return tensor
    # gathering a 2D-sharded tensor takes one all-gather per mesh dimension, which DTensor warns about
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    return tensor.full_tensor()


def _plain_logits(logits):
    if not isinstance(logits, torch.Tensor):
        raise SubmissionProblem(f"the model returned {type(logits).__name__}, expected the logits as a tensor")
    if hasattr(logits, "placements"):
        raise SubmissionProblem("the model returned a DTensor: the output layer's plan should hand back the whole "
                                "logits as a plain tensor (output_layouts=Replicate(), use_local_output=True)")
    return logits


def _model(run, mesh_shape) -> tuple:
    """The case's model with the test's weights on every rank, and the (dp, tp) mesh it runs on."""
    from torch.distributed.device_mesh import init_device_mesh

    model = TinyTransformer(CONFIG).to(run.device)
    model.load_state_dict(run.tensors("state"))
    mesh = init_device_mesh(run.device.type, mesh_shape, mesh_dim_names=("dp", "tp"))
    return model, mesh


def _pass(run, model, tokens, targets, label: str = "") -> tuple:
    with run.phase(f"forward{label}"):
        logits = _plain_logits(model(tokens))
        loss = next_token_loss(logits, targets)
    with run.phase(f"backward{label}"):
        loss.backward()
    return logits, loss


def _placements_label(name: str) -> str:
    return f"placements of {name} (per mesh dimension, d: sharded on dim d, -1: Replicate, -3: a plain tensor)"


def _placements(model) -> dict:
    return {_placements_label(name): _placement_codes(p) for name, p in model.named_parameters()}


def _result(run, out, values: dict, grads: dict) -> dict:
    return {"out": out.detach().cpu().to(torch.float64), "grads": grads, "values": values,
            "comm": run.comm, "comm_bytes": run.comm_bytes}


# ----- Part 1: the mesh -------------------------------------------------------------------------------

MESH_SHAPES = ((2, 2), (1, 4), (4, 1))


def _mesh_cases(generator):
    del generator  # a mesh has no data
    return [Case(f"build_mesh({dp}, {tp}): dp={dp} x tp={tp} on {WORLD_SIZE} ranks", WORLD_SIZE,
                 {"dp": dp, "tp": tp}, [{}]) for dp, tp in MESH_SHAPES]


def _mesh_expected(case, data):
    del data
    dp, tp = case.params["dp"], case.params["tp"]
    expected = []
    for rank in range(WORLD_SIZE):
        tp_group = [rank // tp * tp + i for i in range(tp)]
        dp_group = [rank % tp + i * tp for i in range(dp)]
        expected.append({"grads": {}, "values": {"mesh shape": _float([dp, tp]),
                                                 "ranks of this rank's tp group": _float(tp_group),
                                                 "ranks of this rank's dp group": _float(dp_group)}})
    return expected


def _mesh_run(objects, case, run):
    import torch.distributed as dist

    mesh = objects["build_mesh"](case.params["dp"], case.params["tp"])
    names = getattr(mesh, "mesh_dim_names", None)
    if names is None or tuple(names) != ("dp", "tp"):
        raise SubmissionProblem(f"the mesh's dimensions are named {names}, expected ('dp', 'tp')")
    if mesh.device_type != run.device.type:
        raise SubmissionProblem(f"the mesh is on {mesh.device_type!r}, the ranks compute on {run.device.type!r}")
    groups = {dim: sorted(dist.get_process_group_ranks(mesh[dim].get_group())) for dim in ("tp", "dp")}
    return {"grads": {}, "values": {"mesh shape": _float(list(mesh.shape)),
                                    "ranks of this rank's tp group": _float(groups["tp"]),
                                    "ranks of this rank's dp group": _float(groups["dp"])},
            "comm": run.comm, "comm_bytes": run.comm_bytes}


# ----- the data of the model tests ------------------------------------------------------------------

def _model_data(generator, sequences: int) -> dict:
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
    state = {name: value.clone() for name, value in TinyTransformer(CONFIG).state_dict().items()}
    return {"state": state,
            "tokens": torch.randint(0, CONFIG.vocab, (sequences, SEQ), generator=generator),
            "targets": torch.randint(0, CONFIG.vocab, (sequences, SEQ), generator=generator)}


def _dense_model(state: dict) -> TinyTransformer:
    model = TinyTransformer(CONFIG).to(torch.float64)
    model.load_state_dict({name: value.to(torch.float64) for name, value in state.items()})
    return model


# ----- Part 2: tensor and sequence parallelism ------------------------------------------------------

def _tp_cases(generator):
    return [Case(f"apply_tensor_parallel, a batch of {BATCH} x {SEQ} tokens per tp group, "
                 f"{group_layout(f'tp_size={tp}', tp, WORLD_SIZE)}", tp, {"tp": tp},
                 [_model_data(generator, BATCH) for _ in range(WORLD_SIZE // tp)])
            for tp in (4, 2)]


def _tp_expected(case, data):
    model = _dense_model(data["state"])
    logits = model(data["tokens"])
    loss = next_token_loss(logits, data["targets"])
    loss.backward()
    values = {"loss": loss.detach().reshape(1)}
    values.update({_placements_label(name): _float([_tp_placement(name)]) for name, _ in model.named_parameters()})
    grads = {name: p.grad for name, p in model.named_parameters()}
    return [{"out": logits.detach(), "grads": grads, "values": values} for _ in range(case.group_size)]


def _tp_run(objects, case, run):
    tp = case.params["tp"]
    model, mesh = _model(run, (WORLD_SIZE // tp, tp))
    objects["apply_tensor_parallel"](model, mesh["tp"])
    logits, loss = _pass(run, model, run.tensor("tokens"), run.tensor("targets"))
    grads = {name: _full(p.grad).detach().cpu().to(torch.float64) for name, p in model.named_parameters()
             if p.grad is not None}
    values = {"loss": loss.detach().cpu().to(torch.float64).reshape(1), **_placements(model)}
    return _result(run, logits, values, grads)


# ----- Part 3: tensor parallelism, then FSDP2 over the other dimension, trained -----------------------

def _fsdp_cases(generator):
    return [Case(f"parallelize, dp={dp} x tp={tp}, {STEPS} SGD steps (momentum {MOMENTUM}) on a batch of "
                 f"{BATCH} x {SEQ} tokens per dp rank", WORLD_SIZE, {"dp": dp, "tp": tp},
                 [_model_data(generator, BATCH * dp)])
            for dp, tp in ((2, 2), (4, 1))]


def _fsdp_rank_data(case, data, rank):
    """This rank's batch (its dp rank's sequences) and the initial weights."""
    dp_rank = rank // case.params["tp"]
    rows = slice(dp_rank * BATCH, (dp_rank + 1) * BATCH)
    return {"state": data["state"], "tokens": data["tokens"][rows], "targets": data["targets"][rows]}


def _fsdp_expected(case, data):
    model = _dense_model(data["state"])
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    rows = [slice(r * BATCH, (r + 1) * BATCH) for r in range(case.params["dp"])]
    losses = []  # per pass, the loss of each dp rank's batch
    for step in range(STEPS + 1):  # the last pass only measures the loss
        losses.append([next_token_loss(model(data["tokens"][r]), data["targets"][r]).item() for r in rows])
        optimizer.zero_grad()
        next_token_loss(model(data["tokens"]), data["targets"]).backward()  # the mean of the dp ranks' losses
        if step < STEPS:
            optimizer.step()
    values = {_placements_label(name): _float([0.0, _tp_placement(name)]) for name, _ in model.named_parameters()}
    values.update({f"{name} after {STEPS} steps": p.detach() for name, p in model.named_parameters()})
    return [{"grads": {}, "values": {**values, "loss of each pass on this rank's batch":
                                     _float([loss[rank // case.params["tp"]] for loss in losses])}}
            for rank in range(WORLD_SIZE)]


def _fsdp_run(objects, case, run):
    model, mesh = _model(run, (case.params["dp"], case.params["tp"]))
    model = objects["parallelize"](model, mesh)
    if not isinstance(model, torch.nn.Module):
        raise SubmissionProblem(f"parallelize returned {type(model).__name__}, expected the model")
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    tokens, targets, losses = run.tensor("tokens"), run.tensor("targets"), []
    for step in range(STEPS + 1):
        optimizer.zero_grad()
        _, loss = _pass(run, model, tokens, targets, "" if step == 0 else f" of step {step + 1}")
        losses.append(loss.item())
        if step < STEPS:
            with run.phase(f"optimizer step {step + 1}"):
                optimizer.step()
    values = {**_placements(model), "loss of each pass on this rank's batch": _float(losses)}
    values.update({f"{name} after {STEPS} steps": _full(p).detach().cpu().to(torch.float64)
                   for name, p in model.named_parameters()})
    return {"grads": {}, "values": values, "comm": run.comm, "comm_bytes": run.comm_bytes}


# ----- Part 4: a distributed checkpoint saved at 4 ranks, loaded at 2 ------------------------------------
#: (dp, tp) of the 2 ranks that load the checkpoint the 2 x 2 mesh saved.
RELOAD_MESHES = ((1, 2), (2, 1))
SAVED_MESH = (2, 2)
#: A distributed checkpoint: every saving rank writes its own shards (the 2 x 2 reference: 16-28% each,
#: metadata included), where a checkpoint gathered to one rank has that rank write everything.
SHARED_WRITING = "every saving rank wrote its own share of the checkpoint (1: each wrote, none over half the bytes)"


def _each_rank_wrote_its_share(written: torch.Tensor) -> torch.Tensor:
    total = float(written.sum())
    return _float([float(total > 0 and bool((written > 0).all()) and float(written.max()) <= total / 2)])


def _checkpoint_cases(generator):
    return [Case(f"save_checkpoint on a {SAVED_MESH[0]} x {SAVED_MESH[1]} mesh after one SGD step, "
                 f"load_checkpoint on 2 other ranks as dp={dp} x tp={tp}, then one more step", WORLD_SIZE,
                 {"dp": dp, "tp": tp}, [_model_data(generator, BATCH * SAVED_MESH[0])])
            for dp, tp in RELOAD_MESHES]


def _dense_two_steps(data) -> tuple:
    """(model, optimizer, parameters, momentum buffers) after one SGD step on the whole batch, in float64."""
    model = _dense_model(data["state"])
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    next_token_loss(model(data["tokens"]), data["targets"]).backward()
    optimizer.step()
    saved = {name: p.detach().clone() for name, p in model.named_parameters()}
    momentum = {name: optimizer.state[p]["momentum_buffer"].clone() for name, p in model.named_parameters()}
    return model, optimizer, saved, momentum


def _checkpoint_expected(case, data):
    model, optimizer, saved, momentum = _dense_two_steps(data)
    dp = case.params["dp"]
    rows = data["tokens"].shape[0] // dp
    losses = [next_token_loss(model(data["tokens"][r * rows:(r + 1) * rows]),
                              data["targets"][r * rows:(r + 1) * rows]).detach().reshape(1) for r in range(dp)]
    optimizer.zero_grad()
    next_token_loss(model(data["tokens"]), data["targets"]).backward()
    optimizer.step()
    values = {SHARED_WRITING: _float([1.0]), **{f"{name} as loaded": saved[name] for name in saved}}
    values.update({f"momentum of {name} as loaded": momentum[name] for name in momentum})
    values.update({f"{name} after one more step": p.detach() for name, p in model.named_parameters()})
    return [{"grads": {}, "values": {**values, "loss of the step after loading": losses[rank // case.params["tp"]]}}
            for rank in range(dp * case.params["tp"])]


@contextlib.contextmanager
def _scratch_folder(run, name: str):
    """A fresh folder of this rank's own (in its private folder when the rank is isolated), removed
    with what is in it when the block ends: the reference's ranks, and the judge's own when it runs
    without a sandbox, would otherwise leave every checkpoint in the system's temporary folder."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix=f"{name}-", dir=run.private_folder)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # what the submission made unremovable goes with its sandbox


def _save_run(objects, case, run):
    import os

    model, mesh = _model(run, SAVED_MESH)
    objects["parallelize"](model, mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    rows = slice(mesh["dp"].get_local_rank() * BATCH, (mesh["dp"].get_local_rank() + 1) * BATCH)
    next_token_loss(model(run.tensor("tokens")[rows]), run.tensor("targets")[rows]).backward()
    optimizer.step()
    files = {}
    with _scratch_folder(run, "checkpoint") as folder:
        objects["save_checkpoint"](model, optimizer, folder)
        for where, _, names in os.walk(folder):
            for name in names:
                with open(os.path.join(where, name), "rb") as f:
                    files[os.path.relpath(os.path.join(where, name), folder)] = torch.frombuffer(
                        bytearray(f.read()), dtype=torch.uint8)
    return {"grads": {}, "files": files, "comm": run.comm, "comm_bytes": run.comm_bytes}


def _momentum(optimizer, parameter):
    buffer = optimizer.state.get(parameter, {}).get("momentum_buffer")
    if buffer is None:
        return "the optimizer holds no momentum buffer for it after load_checkpoint"
    return _full(buffer).detach().cpu().to(torch.float64)


def _load_run(objects, case, run):
    import os

    dp, tp = case.params["dp"], case.params["tp"]
    model, mesh = _model(run, (dp, tp))
    objects["parallelize"](model, mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    with _scratch_folder(run, "loaded") as folder:
        for path, content in run.tensors("files").items():
            os.makedirs(os.path.dirname(os.path.join(folder, path)), exist_ok=True)
            with open(os.path.join(folder, path), "wb") as f:
                f.write(content.cpu().numpy().tobytes())
        objects["load_checkpoint"](model, optimizer, folder)
    values = {SHARED_WRITING: _each_rank_wrote_its_share(run.tensor("bytes written by each rank"))}
    values.update({f"{name} as loaded": _full(p).detach().cpu().to(torch.float64) for name, p in model.named_parameters()})
    values.update({f"momentum of {name} as loaded": _momentum(optimizer, p) for name, p in model.named_parameters()})
    rows = run.tensor("tokens").shape[0] // dp
    mine = slice(mesh["dp"].get_local_rank() * rows, (mesh["dp"].get_local_rank() + 1) * rows)
    optimizer.zero_grad()
    loss = next_token_loss(model(run.tensor("tokens")[mine]), run.tensor("targets")[mine])
    loss.backward()
    optimizer.step()
    values["loss of the step after loading"] = loss.detach().cpu().to(torch.float64).reshape(1)
    values.update({f"{name} after one more step": _full(p).detach().cpu().to(torch.float64)
                   for name, p in model.named_parameters()})
    return {"grads": {}, "values": values, "comm": run.comm, "comm_bytes": run.comm_bytes}


#: grade_id of the hidden-test cell -> its test.
TESTS = {
    "test_mesh": TestSpec("Part 1: build_mesh", ("build_mesh",), (), _mesh_cases, _mesh_expected, _mesh_run,
                          WORLD_SIZE),
    "test_tensor_parallel": TestSpec("Part 2: apply_tensor_parallel", ("apply_tensor_parallel",), (),
                                     _tp_cases, _tp_expected, _tp_run, WORLD_SIZE),
    "test_parallelize": TestSpec("Part 3: parallelize (TP, then FSDP2), trained", ("parallelize",),
                                 ("apply_tensor_parallel",), _fsdp_cases, _fsdp_expected, _fsdp_run, WORLD_SIZE,
                                 rank_data=_fsdp_rank_data),
    "test_checkpoint": TestSpec("Part 4: save_checkpoint and load_checkpoint at another world size",
                                ("save_checkpoint", "load_checkpoint"), ("apply_tensor_parallel", "parallelize"),
                                _checkpoint_cases, _checkpoint_expected, _save_run, WORLD_SIZE,
                                reload=Reload(2, _load_run)),
}
