"""The judge's code on the ranks: the harness of the reference's launches and of a submission's.

Nothing here is imported on a rank: the judge ships these functions by value, in each rank's
program (``shipping``), with the test's rank code and only the objects that launch may hold.
``run_reference`` runs the lab's reference objects on every case of a test (their results and
communication pattern are what the submission is compared with); ``run_submission`` runs the
submission on the same cases in a launch of its own, whose ranks never held the reference: no
reference object but those the test lends (its ``substitutes``), no reference result, no dense
maths exists in a process where submission code runs, so neither ``sys.modules``, ``gc`` nor an
import finds the grader there. ``enter_student_code`` marks the point past which submission code
exists in the process.
Each rank receives only its own inputs of each case (``TestSpec.rank_data``, cut by the judge),
and its process groups run on the recording backend (``recording``), so ``CaseRun.phase`` knows
every operation the rank's code asked for, with its bytes, whatever function made it.
What goes back to the judge is ``torch.save`` bytes holding plain tensors, strings and counts,
read with ``weights_only=True``; what went wrong in submission code comes back as text.
"""
from __future__ import annotations

import io
import re
import sys
import traceback
from contextlib import contextmanager

import torch
import torch.distributed as dist

from labutils.ranks.rank import device as rank_device

from grading.autograder.rank_isolation import isolate
from grading.judge.held_memory import note_frozen_objects
from grading.judge.recording import install, log_position, since, summary

#: Longest exception message quoted back to the student (characters).
MAX_MESSAGE_CHARS = 300
_STACK_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')


class StudentCodeFailed(RuntimeError):
    """The submission's code raised on this rank; the message says what and where."""


class JudgeFailed(RuntimeError):
    """The reference itself failed on this rank: a fault of the judge, not of the student."""


class SubmissionProblem(Exception):
    """Something the judge checks about the submission's objects (a shape, a missing attribute)."""


# ----- describing student errors without showing the judge's code --------------------------

def _line_of(sources: dict, filename: str, lineno: int) -> str:
    lines = sources.get(filename, "").splitlines()
    return lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""


def describe_exception(exc: BaseException, sources: dict) -> str:
    """ "TypeError: message (in forward, line 3 of your cell: `code`)" using only the
    submission's own frames (cells whose sources the client sent)."""
    if isinstance(exc, SubmissionProblem):
        return str(exc)
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    text = text[:MAX_MESSAGE_CHARS]
    student_frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in sources]
    if student_frames:
        frame = student_frames[-1]
        text += f" (in {frame.name}, line {frame.lineno} of your cell: `{_line_of(sources, frame.filename, frame.lineno)}`)"
    return text


def student_frames_in_stack(stack_text: str, sources: dict) -> str:
    """The innermost submission frame of a stuck rank's stack (faulthandler order), or ""."""
    for line in stack_text.splitlines():
        match = _STACK_FRAME.match(line)
        if match and match["file"] in sources:
            lineno = int(match["line"])
            return f"{match['func']}, line {lineno} of your cell: `{_line_of(sources, match['file'], lineno)}`"
    return ""


# ----- one case on one rank -------------------------------------------------------------------

def _plain(value, what: str):
    """A CPU tensor of the plain torch.Tensor class, or None; SubmissionProblem for anything else."""
    if value is None:
        return None
    if not isinstance(value, torch.Tensor):
        raise SubmissionProblem(f"{what} is a {type(value).__name__}, expected a torch.Tensor")
    return value.detach().to("cpu").as_subclass(torch.Tensor).clone()


def _attribute(module, path: str):
    value = module
    for name in path.split("."):
        if not hasattr(value, name):
            raise SubmissionProblem(f"{type(module).__name__} has no attribute {path!r}")
        value = getattr(value, name)
    return value


class CaseRun:
    """What a test's ``run_case`` uses on a rank: its group, data, parameter loading, phases."""

    def __init__(self, group, group_rank: int, group_size: int, data: dict, private_folder: str | None = None):
        self.group, self.group_rank, self.group_size = group, group_rank, group_size
        self.private_folder = private_folder  # the only folder the rank may write (None: not isolated)
        self.device = rank_device()
        self._data = data  # this rank's own inputs only, when the test splits them (TestSpec.rank_data)
        self._params: dict = {}
        self.comm = {"forward": {}, "backward": {}}
        self.comm_bytes: dict = {"forward": {}, "backward": {}}
        self.messages: dict = {}

    def tensor(self, name: str) -> torch.Tensor:
        """The case's tensor ``name`` on this rank's device (a fresh copy)."""
        return self._data[name].to(self.device).clone()

    def tensors(self, name: str) -> dict:
        """The case's dict of tensors ``name`` (a model's state) on this rank's device (fresh copies)."""
        return {key: value.to(self.device).clone() for key, value in self._data[name].items()}

    def leaf(self, name: str, shard_last_dim: bool = False) -> torch.Tensor:
        """Like ``tensor`` (or this rank's slice of its last dimension), requiring grad so that
        its gradient can be read after backward."""
        tensor = self.tensor(name)
        if shard_last_dim:
            tensor = self.shard_last_dim(tensor)
        return tensor.requires_grad_(True)

    def as_leaf(self, tensor: torch.Tensor) -> torch.Tensor:
        """A copy of ``tensor`` that requires grad (a leaf of this case's graph)."""
        return tensor.detach().clone().requires_grad_(True)

    def shard_last_dim(self, tensor: torch.Tensor) -> torch.Tensor:
        """This rank's contiguous slice of ``tensor``'s last dimension."""
        return tensor.chunk(self.group_size, dim=-1)[self.group_rank].contiguous()

    def load(self, module, shards: dict) -> None:
        """Copy each shard into ``module``'s parameter at that dotted path (same shape required)."""
        for path, shard in shards.items():
            param = _attribute(module, path)
            if shard is None:
                if param is not None:
                    raise SubmissionProblem(f"{path} should be None for this layer (bias=False)")
                continue
            if not isinstance(param, torch.Tensor) or not param.requires_grad:
                raise SubmissionProblem(f"{path} is not a trainable parameter (found {type(param).__name__})")
            if tuple(param.shape) != tuple(shard.shape):
                raise SubmissionProblem(
                    f"{path} has shape {tuple(param.shape)} on group rank {self.group_rank}; "
                    f"this rank's shard has shape {tuple(shard.shape)}")
            with torch.no_grad():
                param.copy_(shard)
            self._params[path] = param

    @contextmanager
    def phase(self, name: str):
        """Record what this rank communicated inside the block as phase ``name``, at its process
        group (``recording``): ``comm[name]`` {op: calls}, ``comm_bytes[name]`` {op: bytes} and
        ``messages[name]`` (every ``recording.Message``, in order)."""
        start = log_position()
        yield
        self.messages[name] = since(start)
        self.comm[name], self.comm_bytes[name] = summary(self.messages[name])

    def result(self, out, dx) -> dict:
        """The case's outcome on this rank: output, input gradient, parameter gradients, calls."""
        return {
            "out": _plain(out, "the output"),
            "dx": _plain(dx, "the input gradient"),
            "grads": {path: _plain(p.grad, f"the gradient of {path}") for path, p in self._params.items()},
            "comm": self.comm,
            "comm_bytes": self.comm_bytes,
        }


# ----- the rank's whole job ---------------------------------------------------------------------

def _groups_by_size(world_size: int, group_sizes: list) -> dict:
    """{group_size: this rank's group}: consecutive blocks of group_size ranks (every rank joins all)."""
    rank, mine = dist.get_rank(), {}
    for group_size in group_sizes:
        for start in range(0, world_size, group_size):
            ranks = list(range(start, start + group_size))
            group = dist.new_group(ranks)
            if rank in ranks:
                mine[group_size] = group
    return mine


def _run_case(run_case, objects: dict, case, data: dict, groups: dict, private_folder: str | None = None) -> dict:
    rank = dist.get_rank()
    run = CaseRun(groups[case.group_size], rank % case.group_size, case.group_size, data, private_folder)
    return run_case(objects, case, run)


def _by_value_namespaces(objects: dict) -> list:
    """The globals dicts that cloudpickle rebuilt for the submission's functions and methods."""
    functions = []
    for obj in objects.values():
        if isinstance(obj, type):
            for klass in obj.__mro__:
                for attr in vars(klass).values():
                    attr = getattr(attr, "__func__", attr)
                    functions.extend(f for f in (attr, getattr(attr, "fget", None)) if callable(f))
        elif callable(obj):
            functions.append(obj)
    namespaces = {}
    for fn in functions:
        namespace = getattr(fn, "__globals__", None)
        if namespace is None:
            continue
        live_module = sys.modules.get(namespace.get("__name__"))
        if live_module is None or namespace is not vars(live_module):
            namespaces[id(namespace)] = namespace
    return list(namespaces.values())


#: The grader's top-level package: a submission must not hand the judge their objects.
GRADER_PACKAGES = ("grading",)


def grader_code_in(objects: dict) -> str | None:
    """"NAME (module.object)" if the submission's objects are, inherit from or call the grader's
    own code (a ``from grading.reference... import`` run at grading time), else None."""
    def origin(value) -> str:
        if isinstance(value, type(sys)):
            return value.__name__
        return getattr(value, "__module__", None) or ""

    candidates = []
    for name, obj in objects.items():
        candidates.append((name, obj))
        if isinstance(obj, type):
            candidates += [(name, klass) for klass in obj.__mro__]
    for namespace in _by_value_namespaces(objects):
        candidates += [(name, value) for name, value in namespace.items() if not name.startswith("__")]
    for name, value in candidates:
        module = origin(value)
        if module.split(".")[0] in GRADER_PACKAGES:
            qualname = getattr(value, "__qualname__", "")
            return f"{name} ({module}.{qualname})" if qualname else f"{name} ({module})"
    return None


def substitute(objects: dict, replacements: dict) -> None:
    """Make the submission's code use ``replacements`` (reference objects) for those names, so
    that a part is graded on its own, whatever the parts it builds on do. A name bound to a base
    class of a graded class keeps the student's class: a subclass that calls its base by name
    (``ZeroStage1Adam.__init__(self, ...)``) must get the class it inherits from."""
    bases = {id(base) for obj in objects.values() if isinstance(obj, type) for base in obj.__mro__[1:]}
    for namespace in _by_value_namespaces(objects):
        for name, replacement in replacements.items():
            if name in namespace and id(namespace[name]) not in bases:
                namespace[name] = replacement


def _groups_for(world_size: int, cases) -> dict:
    """Every launch records at its process groups: the default one re-created on the recording
    backend first, then the groups of the cases on it."""
    install()
    return _groups_by_size(world_size, sorted({case.group_size for case in cases}))


def _as_bytes(payload: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


def run_reference(run_case, reference: dict, world_size: int, cases: list, rank_data: list, *,
                  walks_live_objects: bool = False) -> bytes:
    """Run the reference objects ``reference`` through the test's rank code ``run_case`` on every case
    (``rank_data[i]``: this rank's inputs of case i); torch.save bytes of {"reference": [...]}, or of
    {"judge_failed": text}: no submission code runs in this launch, a failure here is the judge's.
    ``walks_live_objects``: the rank code lists every live object (``engine.TestSpec``)."""
    try:
        if walks_live_objects:
            note_frozen_objects()
        groups = _groups_for(world_size, cases)
        results = [_run_case(run_case, reference, case, data, groups) for case, data in zip(cases, rank_data)]
    except BaseException as exc:
        return _as_bytes({"judge_failed": "".join(traceback.format_exception(exc))[-2000:]})
    return _as_bytes({"reference": results})


def enter_student_code(walks_live_objects: bool) -> str:
    """The point past which submission code exists in this process: every call of a submission's
    launch passes here once, after its process groups are made and before the blob is unpickled.
    With ``walks_live_objects`` (the test's rank code lists every live object), the objects frozen so
    far are counted first. Returns the rank's private folder, the only one it may write."""
    if walks_live_objects:
        note_frozen_objects()
    return isolate(nccl=rank_device().type == "cuda")  # no channel to a sibling rank but the counted one


def run_submission(run_case, lent: dict, world_size: int, cases: list, rank_data: list, blob: bytes,
                   sources: dict, *, walks_live_objects: bool = False) -> bytes:
    """Run the submission's objects (``blob``) through the test's rank code ``run_case`` on every case
    (``rank_data[i]``: this rank's inputs of case i, nothing of the other ranks'), with ``lent``
    (the reference objects of the parts this test does not grade) put in place of those names;
    torch.save bytes of {"student": [...]}, or of {"failed": what went wrong, in the student's terms}.
    ``walks_live_objects``: as for ``run_reference``."""
    groups = _groups_for(world_size, cases)
    private_folder = enter_student_code(walks_live_objects)
    import cloudpickle

    try:
        objects = cloudpickle.loads(blob)
    except BaseException as exc:
        return _as_bytes({"failed": f"your code could not be loaded on the ranks: {describe_exception(exc, sources)}"})
    borrowed = grader_code_in(objects)
    if borrowed:
        return _as_bytes({"failed": f"your code uses the grader's own implementation: {borrowed}"})
    substitute(objects, lent)
    objects = {**lent, **objects}  # the test's rank code finds the lent objects by name too
    student = []
    for case, data in zip(cases, rank_data):
        try:
            student.append(_run_case(run_case, objects, case, data, groups, private_folder))
        except BaseException as exc:
            return _as_bytes({"failed": f"{case.name}: {describe_exception(exc, sources)}"})
    return _as_bytes({"student": student})
