"""JupyterHub configuration of the course on a shared node (``course hub`` starts it).

Reads ``COURSE_HUB_CONFIG`` (a TOML file, default ``grading/hub/course_hub.toml``) for the
roster, the exchange folder, the shared folder and the GPU policy. Every server runs the Python
of the students' environment under the shared folder (``grading.hub.shared``: the students'
copy, installed not editable), so no server reads the checkout. Each student's server gets
``CUDA_VISIBLE_DEVICES`` from ``grading.hub.gpus`` and the students' Jupyter configuration
(nbgrader's exchange, Validate on every cell, no instructors' panels); instructors get theirs
and every GPU. Both then read the course's own configuration from the students' copy
(``labutils/data/jupyter``, as ``make lab`` does): the "Check my lab" button and its server side.
A server started on the hub's node listens on a port from ``grading.hub.server_ports``, below the
ephemeral range that the students' ranks draw their connections' ports from.
"""
import os
from pathlib import Path

from grading.hub import gpus, shared, slurm_spawner
from grading.hub.checks import load_settings
from grading.hub.server_ports import ServerPorts

settings = load_settings(Path(os.environ["COURSE_HUB_CONFIG"]))
state_dir = Path(os.environ["COURSE_HUB_STATE"])
shared_dir = Path(settings["shared"])
node = gpus.discover()
roster = list(settings["students"])
on_slurm = slurm_spawner.spawner_kind(settings) == "slurm"  # spawner = "slurm": a Slurm job per server

c = get_config()  # noqa: F821 (defined by traitlets when it loads this file)
c.JupyterHub.ip = settings.get("ip", "127.0.0.1")
c.JupyterHub.port = int(settings.get("port", 8000))
c.JupyterHub.hub_port = int(settings.get("hub_api_port", c.JupyterHub.port + 1))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{int(settings.get('proxy_api_port', c.JupyterHub.port + 2))}"
c.JupyterHub.cookie_secret_file = str(state_dir / "jupyterhub_cookie_secret")
c.JupyterHub.db_url = f"sqlite:///{state_dir / 'jupyterhub.sqlite'}"
c.JupyterHub.pid_file = str(state_dir / "jupyterhub.pid")
c.ConfigurableHTTPProxy.pid_file = str(state_dir / "proxy.pid")
c.ConfigurableHTTPProxy.command = [os.environ["COURSE_HUB_PROXY"]]
c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = set(roster) | set(settings.get("instructors", []))
c.Authenticator.admin_users = set(settings.get("instructors", []))
c.Spawner.cmd = [str(shared.python(shared_dir)), "-m", "jupyterhub.singleuser"]
# Nothing of the hub's own environment (PYTHONPATH, VIRTUAL_ENV, conda's: the checkout's course) reaches a server.
c.Spawner.env_keep = ["LANG", "LC_ALL"]
c.Spawner.default_url = "/lab"
c.Spawner.http_timeout = 120
c.Spawner.start_timeout = 120
c.Spawner.environment = {
    "COURSE_EXCHANGE": settings["exchange"],
    "COURSE_ID": settings["course_id"],
    "PATH": f"{shared.python(shared_dir).parent}:/usr/local/bin:/usr/bin:/bin",
}
if on_slurm:
    slurm_spawner.configure(c, settings, str(shared.python(shared_dir)))
# A local server's port comes from below the ephemeral range, where no rank's connection can take
# it in the seconds before the server binds it (jupyterhub's own pick is in that range).
server_ports = ServerPorts(hold_s=c.Spawner.start_timeout)


def configure_server(spawner):
    """Instructors: their nbgrader configuration and every GPU. Students: theirs (no instructors'
    panels, Validate on every cell) and the GPUs the policy gives them. Everyone: the course's
    configuration after their own (the Check my lab button)."""
    name = spawner.user.name
    role = "student" if name in roster else "instructor"
    environment = {**spawner.environment, "JUPYTER_CONFIG_PATH": shared.jupyter_config_path(shared_dir, role)}
    if on_slurm:
        return slurm_spawner.prepare_server(spawner, role, environment, settings.get("gpus", {}))
    spawner.port = server_ports.take()
    if role == "instructor":
        spawner.environment = environment
        return
    policy = settings.get("gpus", {})
    mask = gpus.visible_devices(policy.get("policy", "round_robin"), name, roster, node,
                                int(policy.get("per_student", 1)))
    spawner.environment = {**environment, "CUDA_VISIBLE_DEVICES": mask,
                           "COURSE_GPU_POLICY": policy.get("policy", "round_robin")}
    spawner.log.info("course: %s sees CUDA_VISIBLE_DEVICES=%r", name, mask)


c.Spawner.pre_spawn_hook = configure_server
