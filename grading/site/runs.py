"""Which nightly run the website shows, and the machine its measurements came from.

    run = newest_complete_run(Path("build/nightly"), ["notebooks/00_start_here.ipynb", ...])
    run.executed("notebooks/03_roofline.ipynb")      # the executed notebook's path
    machine_label(run)                               # MachineLabel(cpu=..., gpu="none", ...)

A run folder is the one ``course nightly`` writes: ``results.json`` (settings, environment
block, one row per notebook) next to the executed notebooks. A run is *complete* for a list
of chapters when it was not interrupted and every one of them has a passed row and an
executed notebook: the site then shows the last green run, never a half-done one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

RESULTS_FILE = "results.json"


class SiteInputError(ValueError):
    """A mistake in what the website was asked to show (no run, an incomplete run, a missing file)."""


@dataclass(frozen=True)
class RunFiles:
    """One nightly run folder and its parsed ``results.json``."""

    folder: Path
    results: dict

    @property
    def started(self) -> str:
        return str(self.results.get("started", ""))

    def row(self, name: str) -> dict | None:
        """The result row of the notebook ``name`` (its path relative to the course root), or None."""
        return next((row for row in self.results.get("results", []) if row.get("name") == name), None)

    def executed(self, name: str) -> Path | None:
        """The executed copy of the notebook ``name`` when its row passed and the file exists, else None."""
        row = self.row(name)
        if not row or row.get("status") != "passed" or not row.get("executed"):
            return None
        path = self.folder / row["executed"]
        return path if path.is_file() else None

    def missing(self, names: list[str]) -> list[str]:
        """The notebooks among ``names`` this run has no passed, executed copy of."""
        return [name for name in names if self.executed(name) is None]


def load_run(folder: Path) -> RunFiles:
    """The run in ``folder``; SiteInputError when it has no readable ``results.json``."""
    folder = Path(folder).resolve()
    path = folder / RESULTS_FILE
    try:
        results = json.loads(path.read_text())
    except FileNotFoundError:
        raise SiteInputError(f"{folder} is not a nightly run folder: no {RESULTS_FILE} "
                             "(run `course nightly` first, or pass --run)") from None
    except (OSError, ValueError) as exc:
        raise SiteInputError(f"cannot read {path}: {exc}") from None
    if not isinstance(results, dict) or not isinstance(results.get("results"), list):
        raise SiteInputError(f"{path} is not a nightly results file (no 'results' list)")
    return RunFiles(folder, results)


def newest_complete_run(nightly_dir: Path, chapters: list[str]) -> RunFiles:
    """The newest run under ``nightly_dir`` (by its start time) that is complete for ``chapters``."""
    nightly_dir = Path(nightly_dir)
    candidates = []
    for folder in sorted(nightly_dir.iterdir()) if nightly_dir.is_dir() else ():
        try:
            run = load_run(folder)
        except SiteInputError:
            continue
        if not run.results.get("interrupted") and not run.missing(chapters):
            candidates.append(run)
    if not candidates:
        raise SiteInputError(f"no complete nightly run under {nightly_dir} (every chapter passed and executed): "
                             "run `course nightly` (or `course site --run`), or pass --from RUN_FOLDER")
    return max(candidates, key=lambda run: (run.started, run.folder.name))


@dataclass(frozen=True)
class MachineLabel:
    """Where a page's measurements came from, from the nightly's environment block."""

    cpu: str
    gpu: str
    backend: str
    torch: str
    date: str
    quick: bool | None
    world_size: int | None

    def text(self) -> str:
        """One line: 'Executed 2026-11-24 on CPU ... · GPU: none · backend gloo · torch 2.13.0 · QUICK sizes'."""
        sizes = {True: "QUICK sizes", False: "full sizes", None: "sizes unknown"}[self.quick]
        ranks = f"{self.world_size} ranks" if self.world_size else "ranks unknown"
        return (f"Executed {self.date} on {self.cpu} · GPU: {self.gpu} · backend {self.backend} · "
                f"torch {self.torch} · {ranks}, {sizes}")


def machine_label(run: RunFiles) -> MachineLabel:
    """The :class:`MachineLabel` of a run ('unknown' for what its environment block lacks)."""
    settings = run.results.get("settings") or {}
    environment = run.results.get("environment") or {}
    cpu = environment.get("cpu") or {}
    cpu_text = cpu.get("model") or "unknown CPU"
    if cpu.get("usable_cpus"):
        cpu_text += f" ({cpu['usable_cpus']} usable CPUs)"
    devices = (environment.get("gpus") or {}).get("devices") or []
    names = [device.get("name") or "unknown GPU" for device in devices]
    gpu_text = ", ".join(f"{names.count(name)}× {name}" for name in dict.fromkeys(names)) or "none"
    world_size = settings.get("WORLD_SIZE")
    backend = settings.get("BACKEND") or "unknown"
    if backend == "auto":  # what "auto" chose for this world size on that machine
        chosen = (environment.get("backend") or {}).get(str(world_size)) or {}
        backend = chosen.get("backend") or "auto"
    torch_version = (environment.get("torch") or {}).get("torch") or "unknown"
    quick = settings.get("QUICK")
    return MachineLabel(cpu_text, gpu_text, backend, str(torch_version), run.started[:10] or "unknown date",
                        quick if isinstance(quick, bool) else None,
                        world_size if isinstance(world_size, int) else None)
