"""`labutils doctor`: what this environment can run, in one screen (or as JSON).

    labutils doctor           # Python, torch, CUDA, NCCL, GPUs, topology, backend choice, CPUs, packages
    labutils doctor --json    # the same as a JSON object (the nightly report embeds it)

From a notebook: ``labutils.command.doctor.environment()`` (a dict) or ``environment_text()``.
"""
from __future__ import annotations

import json
import os
import platform
import sys
from importlib import metadata

from labutils.machine import hardware
from labutils.devices.backend import choose_backend
from labutils.devices.cuda_build import mismatch
from labutils.devices.cuda_probe import cuda_health
from labutils.devices.gpu_exclusive import compute_modes
from labutils.machine.topology import format_cpu_list

#: distributions whose versions the report lists ("not installed" when missing)
PACKAGES = ("jupyterlab", "nbgrader", "papermill", "ipywidgets", "matplotlib", "nvidia-ml-py")
#: world sizes for which the report says what backend="auto" would pick
WORLD_SIZES = (2, 4, 8)
NOT_INSTALLED = "not installed"


def package_versions(names=PACKAGES) -> dict[str, str]:
    """``{distribution: version}``, "not installed" for those missing."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = NOT_INSTALLED
    return versions


def torch_versions() -> dict:
    """torch, the CUDA it was built with, whether CUDA works here, the NCCL and gloo backends.

    NCCL's version is asked only when CUDA is available (``torch.cuda.nccl.version()``).
    """
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return {"torch": NOT_INSTALLED, "cuda": None, "cuda_available": False, "nccl": None, "gloo": False}
    cuda_available = torch.cuda.is_available()
    nccl = None
    if cuda_available and dist.is_nccl_available():
        version = torch.cuda.nccl.version()
        nccl = ".".join(str(part) for part in version) if isinstance(version, tuple) else str(version)
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": cuda_available,
        "nccl": nccl,
        "gloo": dist.is_gloo_available(),
    }


def environment() -> dict:
    """The whole report as a JSON-ready dict: python, torch, gpus, topology, cuda_probe, backend, cpu, packages.

    Memory in bytes; each GPU carries its CUDA ordinal here ("cuda:0" or "not visible") and
    its MIG devices; the topology summary ends with the GPU rows ranks use;
    ``cuda_probe`` says whether CUDA initialises (``None`` with no GPU visible);
    ``cuda_build_mismatch`` why torch's CUDA build cannot use this driver, with the fix (or
    ``None``); ``compute_modes`` each GPU's NVML compute mode; ``gpu_mask``
    which GPUs this process was given (:func:`gpu_mask`);
    ``backend`` maps each world size (as a string) to the choice of ``backend="auto"`` and
    its reason.
    """
    gpus = hardware.gpu_report()
    cpu = hardware.cpu_info()
    topology, topology_reason = hardware.live_topology_and_reason()
    return {
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "platform": platform.platform(),
        "torch": torch_versions(),
        "gpus": {
            "count": len(gpus.gpus),
            "visible": gpus.visible_gpus,
            "driver": gpus.driver_version,
            "cuda_driver": gpus.cuda_driver_version,
            "reason": gpus.reason,
            "devices": [_gpu_dict(gpu) for gpu in gpus.gpus],
        },
        "topology": topology.summary(cuda_ordinals=_ordinals(gpus)).splitlines() if topology is not None else None,
        "topology_reason": topology_reason,
        "cuda_probe": _probe_dict(gpus.visible_gpus),
        "cuda_build_mismatch": mismatch(torch_versions()["cuda"], gpus.cuda_driver_version),
        "compute_modes": {f"GPU{index}": mode for index, mode in compute_modes().items()},
        "gpu_mask": gpu_mask(),
        "backend": {
            str(world_size): _backend_dict(world_size, gpus.visible_gpus) for world_size in WORLD_SIZES
        },
        "cpu": {
            "model": cpu.model,
            "logical_cpus": cpu.logical_cpus,
            "physical_cores": cpu.physical_cores,
            "sockets": cpu.sockets,
            "usable_cpus": len(cpu.usable_cpus),
            "numa_nodes": [
                {"node": node.node_id, "cpus": format_cpu_list(node.cpus), "memory_bytes": node.memory_bytes}
                for node in cpu.numa_nodes
            ],
        },
        "packages": package_versions(),
    }


def gpu_mask() -> dict:
    """Which GPUs this process was given: ``CUDA_VISIBLE_DEVICES`` (None when unset) and, on the
    course's hub, the account and the policy that set it (``JUPYTERHUB_USER``, ``COURSE_GPU_POLICY``)."""
    return {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "hub_user": os.environ.get("JUPYTERHUB_USER"), "policy": os.environ.get("COURSE_GPU_POLICY")}


def gpu_mask_text(mask: dict) -> str:
    """One line on what the mask gives this process, for people."""
    value = mask["cuda_visible_devices"]
    by = f" by the course hub for {mask['hub_user']} (policy {mask['policy']})" if mask.get("policy") else ""
    if value is None:
        return "CUDA_VISIBLE_DEVICES is not set: every GPU of the machine is visible"
    if not value.strip():
        return f"CUDA_VISIBLE_DEVICES is empty{by or ''}: no GPU is visible, ranks run on gloo (CPU)"
    return f"CUDA_VISIBLE_DEVICES={value}{' (set' + by + ')' if by else ''}: ranks see these, as cuda:0, cuda:1, ..."


def _ordinals(gpus: hardware.GpuReport) -> dict[str, int | None] | None:
    """{"GPU4": 0, "GPU0": None, ...}: each GPU row's CUDA ordinal here (None: not visible)."""
    return {f"GPU{gpu.index}": gpu.cuda_ordinal for gpu in gpus.gpus} or None


def _probe_dict(visible_gpus: int) -> dict | None:
    """Whether CUDA works here (a throwaway process initialises it); ``None`` with no GPU visible."""
    if visible_gpus == 0:
        return None
    health = cuda_health()
    return {"usable": health.usable, "reason": health.reason, "device_count": health.device_count}


def _gpu_dict(gpu: hardware.GpuInfo) -> dict:
    return {
        "index": gpu.index,
        "cuda": gpu.visibility,
        "uuid": gpu.uuid,
        "name": gpu.name,
        "memory_total_bytes": gpu.memory_total_bytes,
        "compute_capability": ".".join(map(str, gpu.compute_capability)) if gpu.compute_capability else None,
        "pci_bus_id": gpu.pci_bus_id,
        "pcie_max": _pcie(gpu.pcie_generation_max, gpu.pcie_width_max),
        "pcie_current": _pcie(gpu.pcie_generation_current, gpu.pcie_width_current),
        "nvlinks_up": gpu.nvlinks_up,
        "numa_node": gpu.numa_node,
        "cpus": format_cpu_list(gpu.cpus),
        "mig_enabled": gpu.mig_enabled,
        "mig_devices": [
            {"uuid": mig.uuid, "name": mig.name, "memory_total_bytes": mig.memory_total_bytes,
             "cuda": f"cuda:{gpu.cuda_ordinal}" if mig.uuid == gpu.visible_mig_uuid else "not visible"}
            for mig in gpu.mig_devices
        ],
    }


def _pcie(generation: int | None, width: int | None) -> str | None:
    return f"Gen{generation} x{width}" if generation is not None and width is not None else None


def _backend_dict(world_size: int, gpu_count: int) -> dict:
    choice = choose_backend("auto", world_size, gpu_count=gpu_count)
    return {"backend": choice.backend, "device_type": choice.device_type, "reason": choice.reason}


def environment_text(env: dict | None = None) -> str:
    """:func:`environment` as text for people, one fact per line."""
    env = environment() if env is None else env
    torch_info, gpus, cpu = env["torch"], env["gpus"], env["cpu"]
    lines = [
        f"Python      {env['python']['version']} ({env['python']['executable']})",
        f"Platform    {env['platform']}",
        f"torch       {torch_info['torch']}",
        f"CUDA        {_cuda_text(torch_info)}",
        f"NCCL        {torch_info['nccl'] or 'not available (needs CUDA)'}",
        f"gloo        {'available' if torch_info['gloo'] else 'not available'}",
    ]
    if gpus["devices"]:
        lines.append(
            f"GPUs        {gpus['count']} (driver {gpus['driver']}, supports CUDA {gpus['cuda_driver']}; "
            f"{gpus['visible']} visible to CUDA)"
        )
        for gpu in gpus["devices"]:
            lines.extend(_gpu_lines(gpu))
    else:
        lines.append(f"GPUs        {gpus['reason']}")
    if env.get("gpu_mask"):
        lines.append(f"GPU mask    {gpu_mask_text(env['gpu_mask'])}")
    probe = env.get("cuda_probe")
    if probe is not None:
        lines.append(f"CUDA probe  {'works' if probe['usable'] else 'fails'}: {probe['reason']}")
    if env.get("cuda_build_mismatch"):
        lines.append(f"CUDA build  WRONG FOR THIS DRIVER: {env['cuda_build_mismatch']}")
    exclusive = [gpu for gpu, mode in (env.get("compute_modes") or {}).items() if mode != "DEFAULT"]
    if exclusive:
        modes = env["compute_modes"]
        lines.append(f"GPU mode    {', '.join(f'{gpu} {modes[gpu]}' for gpu in exclusive)}: one process per GPU, "
                     "so a kernel that used a GPU blocks the rank given it (launch ranks before GPU work in the kernel)")
    topology = env["topology"] or [env["topology_reason"]]
    lines.extend(f"{'Topology' if i == 0 else '':<12}{line}" for i, line in enumerate(topology))
    lines.extend(
        f"{'Backend' if i == 0 else '':<12}auto with {world_size} ranks -> {choice['backend']} ({choice['reason']})"
        for i, (world_size, choice) in enumerate(env["backend"].items())
    )
    lines.append(
        f"CPU         {cpu['model']}: {cpu['logical_cpus']} logical CPUs, "
        f"{cpu['physical_cores'] or '?'} cores, {cpu['usable_cpus']} usable"
    )
    for node in cpu["numa_nodes"]:
        memory = f", {node['memory_bytes'] / hardware.GB:.1f} GB" if node["memory_bytes"] else ""
        lines.append(f"  NUMA node {node['node']}: CPUs {node['cpus']}{memory}")
    width = max(len(name) for name in env["packages"])
    lines.append("Packages")
    lines.extend(f"  {name:<{width}}  {version}" for name, version in env["packages"].items())
    return "\n".join(lines)


def _gpu_lines(gpu: dict) -> list[str]:
    """"  GPU4 [cuda:0] NVIDIA H100 ..." and one line per MIG device."""
    lines = [
        f"  GPU{gpu['index']} [{gpu.get('cuda', '?')}] {gpu['name']}, {hardware.memory_text(gpu['memory_total_bytes'])}, "
        f"compute capability {gpu['compute_capability']}, PCIe {gpu['pcie_max']}, NVLinks up {gpu['nvlinks_up']}, "
        f"NUMA node {gpu['numa_node']}, CPUs {gpu['cpus'] or '?'}"
        + (f", MIG mode on ({len(gpu['mig_devices'])} MIG devices)" if gpu.get("mig_enabled") else "")
    ]
    lines.extend(
        f"    {mig['uuid']} [{mig['cuda']}] {mig['name'] or 'MIG device'}, {hardware.memory_text(mig['memory_total_bytes'])}"
        for mig in gpu.get("mig_devices", ())
    )
    return lines


def _cuda_text(torch_info: dict) -> str:
    if torch_info["cuda"] is None:
        return "none (CPU build of torch)" if torch_info["torch"] != NOT_INSTALLED else "unknown (torch not installed)"
    return f"{torch_info['cuda']} ({'available' if torch_info['cuda_available'] else 'built for, but no usable GPU'})"


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")


def main(args) -> int:
    env = environment()
    print(json.dumps(env, indent=2) if args.json else environment_text(env))
    return 0
