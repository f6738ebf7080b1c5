"""Tests whose ranks hand files to a second launch: a checkpoint saved by n ranks, loaded by m.

A test with ``TestSpec.reload`` runs twice per side (the reference's, then the submission's): its
``run_case`` on ``world_size`` ranks, whose result of each case holds ``"files"``, the files the
rank wrote ({path relative to its folder: uint8 tensor of the bytes}); then ``reload.run_case`` on
``reload.world_size`` fresh ranks of a launch of their own, each of which receives the case's data
and, under ``"files"``, every file the first launch's ranks wrote (a name written by several ranks:
the lowest rank's) and, under ``"bytes written by each rank"``, how many bytes each wrote. Nothing of the first launch's processes survives into the second, so what the
second launch knows of the first is in those files alone. The judge compares the second launch's
results; neither launch's files are ever read in the judge (they are bytes passed from one set of
ranks to the other). The first launch's sandbox traffic is added to the second's.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch


@dataclasses.dataclass(frozen=True)
class Reload:
    """The second launch of a test: ``run_case(objects, case, run)`` on ``world_size`` ranks."""

    world_size: int
    run_case: Callable


def merged_files(results: list, side: str, index: int) -> dict:
    """The files of case ``index`` over every rank of a first launch (lowest rank first on a clash)."""
    files: dict = {}
    for result in reversed(results):
        files.update(result[side][index].get("files", {}))
    return files


def bytes_written(results: list, side: str, index: int) -> torch.Tensor:
    """What each rank of a first launch wrote for case ``index``, in bytes (float64, one per rank)."""
    return torch.tensor([float(sum(t.numel() for t in result[side][index].get("files", {}).values()))
                         for result in results], dtype=torch.float64)


def second_launch_inputs(reload: Reload, cases: list, first: list, side: str) -> list:
    """Per rank of the second launch, (the cases as it sees them, [its data of each case]): the case's
    data, the files (``"files"``) and what each first rank wrote (``"bytes written by each rank"``)."""
    seen = [dataclasses.replace(case, group_size=reload.world_size, groups=[]) for case in cases]
    data = [{**case.groups[0], "files": merged_files(first, side, index),
             "bytes written by each rank": bytes_written(first, side, index)} for index, case in enumerate(cases)]
    return [(seen, data) for _ in range(reload.world_size)]


def run_stages(spec, cases: list, launch: Callable, first_inputs: list, side: str):
    """``launch(run_case, world_size, per_rank_inputs)`` once, or twice for a test with ``spec.reload``;
    the results of the last launch, with the loopback bytes of both."""
    first = launch(spec.run_case, spec.world_size, first_inputs)
    if spec.reload is None:
        return first
    second = launch(spec.reload.run_case, spec.reload.world_size,
                    second_launch_inputs(spec.reload, cases, first, side))
    if first.loopback_bytes is not None and second.loopback_bytes is not None:
        second.loopback_bytes += first.loopback_bytes
    return second
