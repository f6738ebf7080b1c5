"""The nightly job: ``course nightly`` executes every notebook with papermill, checks every lab with
nbgrader and writes a report.

- ``runner``: the run as a whole (``run_nightly``) and the command line
- ``notebooks``: which notebooks; ``processes``: the kernel and running one command under a timeout
- ``execute``: one notebook through papermill; ``progress``: what the terminal shows
- ``labs``: the nbgrader check of a lab (solution full marks, release zero)
- ``report``: results.json, report.md, report.html, junit.xml
- ``publish``: ``--site``: the course website rebuilt from a green run (:mod:`grading.site`), linked from the report
"""
