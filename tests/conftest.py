import shutil

import pytest

from tests import helpers  # noqa: F401  (makes `tests` importable as a package)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "multirank" in item.keywords and not shutil.which("mpiexec"):
            item.add_marker(pytest.mark.skip(reason="no mpiexec on PATH (pip install mpich)"))

