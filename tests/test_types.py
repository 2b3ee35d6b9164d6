"""#64.3: the type checker (mypy, configured in setup.cfg's [mypy]) passes over restartlab/.
So a record or a setting used with the wrong type fails the suite, not a job."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_orchestration_package_type_checks():
    """mypy over every module of restartlab/.
    Its summary line counts them. A configuration that pointed at nothing would pass on no file, so
    the count is held to the package's."""
    r = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "setup.cfg", "--cache-dir", os.devnull],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-2000:]
    n = int(re.search(r"no issues found in (\d+) source files", r.stdout).group(1))
    here = sum(f.endswith(".py") for _, _, fs in os.walk(os.path.join(ROOT, "restartlab")) for f in fs)
    assert n == here, (n, here, r.stdout[-500:])
