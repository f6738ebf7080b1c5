"""`python -m labutils ...` is the `labutils` command (also usable as `torchrun -m labutils run ...`)."""
from labutils.command.cli import main

raise SystemExit(main())
