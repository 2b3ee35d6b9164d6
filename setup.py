"""setuptools shim: templates/ and scenarios/ live at the top level of the repository and are
shipped inside the `restartlab` package (as restartlab/templates, restartlab/scenarios) by copying
them in at build time; an editable install finds them at the top level instead (see
restartlab/contracts/resources.py)."""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithData(build_py):
    def run(self):
        super().run()
        if self.editable_mode if hasattr(self, "editable_mode") else False:
            return
        for name in ("templates", "scenarios"):
            dst = os.path.join(self.build_lib, "restartlab", name)
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(os.path.join(HERE, name), dst)


setup(cmdclass={"build_py": BuildWithData})
