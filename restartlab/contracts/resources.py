"""Where the shipped templates and scenarios are: inside the installed package, or at the top
level of a source checkout (editable install)."""
import os

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the restartlab package


def resource_dir(name: str) -> str:
    """Directory `name` ('templates' or 'scenarios'): packaged copy first, then the checkout."""
    for cand in (os.path.join(_PKG, name), os.path.join(os.path.dirname(_PKG), name)):
        if os.path.isdir(cand):
            return cand
    raise FileNotFoundError(f"restartlab: cannot find the {name}/ directory next to {_PKG}")
