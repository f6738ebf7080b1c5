"""The ``labutils`` command and its JupyterLab side.

- ``cli``: ``labutils`` (``python -m labutils``), one subcommand per module, loaded when used:
  ``doctor``, ``bench`` (``bench_cli``), ``model`` (``model_cli``), ``check``
  (:mod:`labutils.checks.labcheck`), ``run`` (:mod:`labutils.ranks.multinode`);
- ``usage``: ``UsageError``, the mistake a command-line user can fix;
- ``jupyter_check``: the server side of JupyterLab's "Check my lab" button;
- ``kernel_exit``: a notebook kernel's exit without freeing torch's objects one by one.
"""
