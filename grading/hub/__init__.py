"""The course on a shared node: JupyterHub with nbgrader's exchange and GPUs assigned per student.

``course hub`` (``grading.hub.start``) checks every prerequisite at once (``checks``), makes the
students' copy and the environment every server runs (``shared``), closes homes, the checkout and
the class folder to other users (``permissions``) and starts JupyterHub with
``jupyterhub_config.py``; ``gpus`` decides which GPUs each student's server sees; ``course class``
(``classroom``) releases, collects, grades and hands back a lab through the exchange.
"""
