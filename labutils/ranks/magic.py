"""The ``%%distributed`` cell magic: a cell's code on every rank of a warm pool.

    %load_ext labutils

    %%distributed -n 4
    t = torch.ones(1, device=device) * rank   # rank, world_size, device, dist, torch are predefined
    dist.all_reduce(t)
    print(t)                          # [rank k] tensor([6.]) (on cuda:k under NCCL)

Each rank keeps its own namespace across cells, so later cells see ``t``. Output streams
live, each line prefixed ``[rank k]``. Changing ``-n`` or ``--backend`` starts a new pool
(the old ranks and their variables are gone). ``%distributed_shutdown`` stops the ranks.
"""
from __future__ import annotations

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from labutils.ranks.pool import Pool

#: Ranks used when a cell gives no ``-n``.
DEFAULT_WORLD_SIZE = 2


@magics_class
class DistributedMagics(Magics):
    def __init__(self, shell):
        super().__init__(shell)
        self.pool: Pool | None = None
        self._backend_asked: str | None = None

    def _pool_for(self, world_size: int, backend: str) -> Pool:
        if self.pool is None or (self.pool.world_size, self._backend_asked) != (world_size, backend):
            pool = Pool(world_size, backend=backend)  # bad arguments fail here; the old ranks are kept
            if self.pool is not None:
                print(f"labutils: starting {world_size} new ranks; the {self.pool.world_size} previous "
                      "ranks and their variables are gone")
                self.pool.shutdown()
            self.pool, self._backend_asked = pool, backend
        return self.pool

    @magic_arguments()
    @argument("-n", "--world-size", type=int, default=DEFAULT_WORLD_SIZE, help="number of ranks")
    @argument("--backend", default="auto", help="auto (default), gloo or nccl")
    @argument("--timeout", type=float, default=None,
              help="seconds this cell may run before stuck ranks are stopped (default: LABUTILS_TIMEOUT or 120)")
    @cell_magic
    def distributed(self, line, cell):
        """Run this cell on every rank: %%distributed [-n N] [--backend B] [--timeout S]."""
        __tracebackhide__ = True
        args = parse_argstring(self.distributed, line)
        pool = self._pool_for(args.world_size, args.backend)
        pool.exec_cell(cell, timeout=args.timeout)

    @line_magic
    def distributed_shutdown(self, line):
        """Stop the ranks that %%distributed cells run on."""
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None


def register(ipython) -> None:
    ipython.register_magics(DistributedMagics)
