"""What is in this machine: GPUs, CPUs and NUMA nodes, how the GPUs are linked, how fast the links are.

- ``hardware``: ``hardware.inventory()``, the GPUs (through NVML), CPUs and NUMA nodes, peer access;
- ``topology``: ``nvidia-smi topo -m`` read and said in plain words, with twelve real examples;
- ``interconnects``: the bandwidth of each kind of link, with where each number comes from;
- ``gpu_state``: clocks, power, temperature and throttle reasons while a benchmark runs.

Private: ``_nvml_devices`` (NVML opened safely, MIG included), ``_gpu_records`` (one record per
GPU), ``_host_cpu`` (CPUs and NUMA from sysfs), ``_topology_links``, ``_topology_parse``,
``_topology_summary`` and ``_topology_examples`` (what ``topology`` re-exports).
"""
