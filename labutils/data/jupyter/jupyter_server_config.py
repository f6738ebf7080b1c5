"""The course's JupyterLab (`make lab` points JUPYTER_CONFIG_PATH here; so do the students' copy
and the course hub): the "Check my lab" button.

- the server extension ``labutils.command.jupyter_check`` answers ``POST /labutils/check`` by running
  ``labutils check`` on the notebook; ``jupyter_server_config.d/labutils_check.json`` enables it
  (as ``jupyter server extension enable`` would, so ``jupyter server extension list`` shows it);
- the JupyterLab extension that shows the button (notebook toolbar, Run menu, command palette)
  is the prebuilt one in ``labextensions/`` beside this file (source: labutils/data/check_button,
  rebuilt by ``make labextension``), found without any build or install step.
"""
from pathlib import Path

c = get_config()  # noqa: F821 (defined by traitlets when it loads this file)
c.LabApp.extra_labextensions_path.append(str(Path(__file__).resolve().parent / "labextensions"))
