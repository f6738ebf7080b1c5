"""The `labutils` command itself: its subcommands, and the instructors' commands that moved to `course`."""
import subprocess
import sys

import pytest

from labutils.command import cli, usage


@pytest.mark.parametrize("command", ["grade", "nightly"])
def test_instructor_commands_point_to_course_in_one_line(command, capsys):
    assert cli.main([command, "submissions/", "--jobs", "2"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"`{command}` is an instructors' command: run `course {command} ...` "
                   "in the course repository\n")


def test_instructor_commands_import_nothing_of_grading_or_the_nightly():
    code = ("import sys; from labutils.command.cli import main; main(['grade', 'x']); main(['nightly']); "
            "print(sorted(m for m in sys.modules if m.startswith(('grading', 'labutils.grade', 'labutils.nightly'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[]"
    assert done.stderr.count("\n") == 2


def test_help_lists_the_student_commands_only(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for command in ("doctor", "bench", "model", "check", "run"):
        assert command in out
    assert "grade" not in out and "nightly" not in out


def test_a_usage_error_is_one_line_with_status_2(capsys):
    assert cli.main(["model", "zero", "--params", "-1", "--world-size", "8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("labutils model: error: ") and err.count("\n") == 1


def test_usage_error_lives_below_the_cli():
    assert cli.UsageError is usage.UsageError
