"""The suite's closing line says where its time went, per group of test files."""
from time_by_group import group_of, summary_line


def test_a_top_level_file_is_grouped_by_its_first_word():
    assert group_of("tests/test_grading_e2e.py::test_x[a-b]") == "grading"
    assert group_of("tests/test_launch.py::test_y") == "launch"


def test_a_file_in_a_folder_is_grouped_by_the_folder():
    assert group_of("tests/browser/test_landing_page.py::test_z") == "browser"
    assert group_of("tests/hub/test_class_flow.py::test_w") == "hub"


def test_the_line_lists_the_largest_group_first_with_the_wall_time():
    line = summary_line({"plots": 3.2, "grading": 301.4, "hub": 120.0}, wall_s=712.3)
    assert line == "time by group (s, wall 712): grading 301, hub 120, plots 3"


def test_under_parallel_workers_the_line_gives_each_workers_busy_seconds():
    line = summary_line({"grading": 301.4, "hub": 120.0}, wall_s=712.3, busy_by_worker={"gw1": 650.2, "gw0": 700.0})
    assert line == "time by group (s, wall 712; busy gw0 700, gw1 650): grading 301, hub 120"
