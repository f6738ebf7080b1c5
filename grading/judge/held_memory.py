"""The bytes of tensor memory an object holds: measured by walking what is alive, not by the names
it is kept under; and the tensors a process holds outside it (``held_outside``).

``held_storages(roots, exclude)`` follows every reference from ``roots`` (attributes, containers,
closures, default arguments, the globals of functions sent by value, bound methods, class
attributes of the roots' own classes, and autograd graphs: a node's saved tensors, its context's
attributes and the nodes it leads to) and returns each tensor storage it reaches once, by data
pointer, with its size in bytes. Modules, classes and the globals of importable modules are not
entered (they belong to the program, not to the object); storages in ``exclude`` (the
parameters, their gradients, a layer's input and output) and meta tensors are not counted.
"""
from __future__ import annotations

import gc
import sys
import time
import types
import warnings

import torch

#: Objects visited at most: a walk that reaches this many objects stops (and says so).
MAX_OBJECTS = 200_000
_NOT_ENTERED = (type, types.ModuleType, str, bytes, int, float, complex, bool, type(None))


def storage_key(tensor: torch.Tensor) -> int | None:
    """The data pointer of ``tensor``'s storage (None for a meta or storage-less tensor)."""
    if tensor.device.type == "meta":
        return None
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


def _is_live_module_namespace(namespace: dict) -> bool:
    module = sys.modules.get(namespace.get("__name__", ""))
    return module is not None and vars(module) is namespace


def _function_references(function: types.FunctionType) -> list:
    found = [cell.cell_contents for cell in function.__closure__ or () if _cell_filled(cell)]
    found += [function.__defaults__, function.__kwdefaults__, function.__dict__]
    if not _is_live_module_namespace(function.__globals__):  # a function sent by value: its own globals
        found.append(function.__globals__)
    return found


def _cell_filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _node_references(node) -> list:
    """What an autograd graph node keeps: the nodes it leads to, its saved tensors, its context."""
    found = [next_node for next_node, _ in getattr(node, "next_functions", ())]
    for name in ("saved_tensors", "variable"):
        try:
            found.append(getattr(node, name))
        except (RuntimeError, AttributeError):  # freed by a backward pass, or none
            pass
    for name in dir(node):
        if name.startswith("_saved_"):
            try:
                found.append(getattr(node, name))
            except RuntimeError:
                pass
    found.append(getattr(node, "__dict__", None))
    return found


def _class_attributes(roots: list) -> list:
    """The attributes of the roots' classes that are not torch's or Python's own."""
    found = []
    for root in roots:
        for klass in type(root).__mro__:
            if not klass.__module__.split(".")[0] in ("torch", "builtins", "abc", "typing"):
                found.extend(vars(klass).values())
    return found


def _references(obj) -> list:
    if isinstance(obj, torch.Tensor):
        return [getattr(obj, "__dict__", None)]
    if isinstance(obj, types.FunctionType):
        return _function_references(obj)
    if hasattr(obj, "next_functions"):
        return _node_references(obj)
    return gc.get_referents(obj)


def held_storages(roots: list, exclude: set) -> dict:
    """{storage data pointer: bytes} of every tensor reachable from ``roots`` (see the module's
    docstring), storages whose pointer is in ``exclude`` left out. RuntimeError past ``MAX_OBJECTS``."""
    held: dict = {}
    seen: set = set()
    visited = []  # kept alive: the wrappers some attributes return are new objects, whose ids would be reused
    stack = list(roots) + _class_attributes(roots)
    while stack:
        obj = stack.pop()
        if obj is None or isinstance(obj, _NOT_ENTERED) or id(obj) in seen:
            continue
        seen.add(id(obj))
        visited.append(obj)
        if len(seen) > MAX_OBJECTS:
            raise RuntimeError(f"the object references more than {MAX_OBJECTS} objects: too many to measure")
        if isinstance(obj, torch.Tensor):
            key = storage_key(obj)
            if key is not None and key not in exclude:
                held[key] = obj.untyped_storage().nbytes()
        stack.extend(_references(obj))
    return held



def storages_of(tensors) -> set:
    """The storage data pointers of ``tensors`` (None entries skipped): what to exclude."""
    return {key for key in (storage_key(t) for t in tensors if t is not None) if key is not None}


#: ``gc.get_freeze_count()`` before any code of the submission's ran on this rank (``note_frozen_objects``);
#: None until noted.
_frozen_before = None
#: The interpreter's own ``gc.freeze``, and whether code on this rank has called it since it was noted.
_interpreters_freeze = gc.freeze
_rank_froze = False


def _noted_freeze() -> None:
    """``gc.freeze`` on a rank once noted: the same, and the next memory walk checks what it froze."""
    global _rank_froze
    _rank_froze = True
    _interpreters_freeze()


def note_frozen_objects() -> None:
    """Remember how many objects are frozen now, before code of the submission's runs: the rank
    template froze what it imported (``gc.freeze``), which ``gc.get_objects`` then no longer lists;
    and have every later ``gc.freeze`` on this rank say so (``_noted_freeze``). (The count is a walk
    of the frozen list, about 25 ms over torch's imports: once per launch, not per walk.)"""
    global _frozen_before, _rank_froze
    _frozen_before = gc.get_freeze_count()
    _rank_froze = False
    gc.freeze = _noted_freeze


def _thaw_if_rank_code_froze() -> None:
    """Code on the rank that froze objects of its own would hide them from ``gc.get_objects``, as the
    template's imports are: when something froze since the count was noted (``_noted_freeze`` ran, or
    ``gc.freeze`` is no longer it), the count is taken again, and when it has grown past the one noted
    (or none was noted), every frozen object is thawed (listed again, at the cost of slower walks);
    the count is then noted afresh. The count shrinks on its own as the rank frees a few of the
    template's objects; a freeze adds every object the rank has made."""
    global _frozen_before, _rank_froze
    if _frozen_before is not None and not _rank_froze and gc.freeze is _noted_freeze:
        return
    frozen = None if _frozen_before is None else gc.get_freeze_count()
    if frozen is None or frozen > _frozen_before:
        gc.unfreeze()
        frozen = 0
    _frozen_before, _rank_froze, gc.freeze = frozen, False, _noted_freeze


def live_storages() -> dict:
    """{storage data pointer: (bytes, its gradient's storage pointer or None)} of every tensor object
    alive in this process, after a full garbage collection (tensors are tracked by Python's collector
    wherever they are kept: a module's globals, a closure, a hook, a class attribute)."""
    _thaw_if_rank_code_froze()
    gc.collect()
    live = {}
    with warnings.catch_warnings():  # looking at every object wakes deprecated ones: not the rank's warnings
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            if isinstance(obj, torch.Tensor):
                key = storage_key(obj)
                if key is not None:
                    grad = obj.grad if obj.is_leaf else None
                    live[key] = (obj.untyped_storage().nbytes(), None if grad is None else storage_key(grad))
    return live


#: Samples ``held_outside`` takes at most, and seconds between them: a buffer a background thread
#: (a collective's completion) still holds for a moment is gone by the next one; state is not.
OUTSIDE_SAMPLES, OUTSIDE_PAUSE_S = 3, 0.2


def held_outside(before: set, accounted: set, allowed: int) -> dict:
    """{storage pointer: bytes} of the tensors this process holds now that it did not hold at
    ``before`` (the keys of a ``live_storages()`` taken earlier) and that are neither in ``accounted``
    (what the measured object reaches, the parameters and their gradients) nor the gradient of a
    tensor in it (stage 2's gradient shard is gradient memory, not state): the fewest over up to
    ``OUTSIDE_SAMPLES`` samples, stopping at the first that totals at most ``allowed`` bytes."""
    fewest = None
    for sample in range(OUTSIDE_SAMPLES):
        if sample:
            time.sleep(OUTSIDE_PAUSE_S)
        live = live_storages()
        gradients = {grad for key, (_, grad) in live.items() if key in accounted and grad is not None}
        outside = {key: nbytes for key, (nbytes, _) in live.items()
                   if key not in before and key not in accounted and key not in gradients}
        if fewest is None or sum(outside.values()) < sum(fewest.values()):
            fewest = outside
        if sum(fewest.values()) <= allowed:
            break
    return fewest
