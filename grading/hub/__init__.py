"""The course on a shared node: JupyterHub with nbgrader's exchange and GPUs assigned per student.

``course hub`` (``grading.hub.start``) checks the node and starts JupyterHub with
``jupyterhub_config.py``; ``gpus`` decides which GPUs each student's server sees.
"""
