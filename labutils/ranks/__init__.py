"""Running code on ranks: processes with torch.distributed initialised, from a notebook cell.

What a notebook uses is at labutils' top level (``labutils.launch``, ``labutils.Pool``,
``labutils.rank``, the ``RankError`` family, ``%%distributed``); the modules here are:

- ``launch``: one-shot, a function on N fresh ranks and every rank's result back;
- ``pool``: warm ranks kept between calls (``Pool.run``, ``Pool.run_each``);
- ``magic``: the ``%%distributed`` cell magic, over a pool;
- ``rank``: what a rank knows about itself (``device()``, ``backend()``);
- ``errors``: what the caller raises when a rank fails, dies or hangs;
- ``call_args``: what a caller passes, checked before any rank starts;
- ``multinode``: the same functions under torchrun, on one node or several (``labutils run``);
- ``strict``: NCCL's rules for collectives checked on any backend (``LABUTILS_STRICT_COLLECTIVES=1``).

Private, the launcher's machinery: ``_starters`` (how rank processes are created),
``_template`` (a process that imports torch once and forks ranks), ``_worker`` (the rank's
side), ``_wire`` and ``_messages`` (what travels over the sockets), ``_ranklinks`` and
``_replies`` (the caller's side of the conversation), ``_render`` (what a cell shows of a rank's
failure), ``_launch_folder`` (each start's folder in the temporary directory, and the sweep of
those whose maker was killed with its ranks).
"""
