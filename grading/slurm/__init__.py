"""The course on a Slurm cluster: grading a class and the nightly as Slurm jobs.

``jobs`` submits a job array and waits for it (``sbatch --wait``), ``shards`` splits a class
into disjoint sets of students, one per array task, ``merge`` puts the tasks' course folders
back into one, exactly as a single-node ``course grade`` leaves it, ``grade`` is
``course grade ... --slurm PARTITION --shards K``, ``nightly`` ``course nightly --slurm PARTITION``.
"""
