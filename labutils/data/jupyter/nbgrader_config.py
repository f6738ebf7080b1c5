"""nbgrader in the course's JupyterLab (`make lab` points JUPYTER_CONFIG_PATH here).

Validate runs the notebook and, with ``validate_all``, fails on an error in any cell, not only
in graded ones: a lab whose visible checks fail, or whose answer still raises
NotImplementedError, never validates (its graded cells hold no tests until the grader adds
them). `labutils check LAB.ipynb` says the same part by part.
"""
c = get_config()  # noqa: F821 (defined by traitlets when it loads this file)
c.Validator.validate_all = True
