"""Every verb's --help ends with an example line (restartlab/contracts/usage.py), and the example parses
with the verb's own parser; restartlab --version."""
import shlex
import subprocess
import sys

import pytest

from restartlab import __version__, cli
from restartlab.contracts import usage

OWN = ("kill-ranks", "node-check", "simulate")  # verbs main() hands to their own parser


def _verbs():
    sub = next(a for a in cli.build_parser()._actions if a.dest == "verb")
    hidden = {c.dest for c in sub._choices_actions if c.help == "==SUPPRESS=="}
    return {v: p for v, p in sub.choices.items() if v not in hidden and v != "render-all"}


def test_every_verb_has_an_example():
    assert set(_verbs()) == set(usage.EXAMPLES)


@pytest.mark.parametrize("verb", sorted(usage.EXAMPLES))
def test_the_example_is_in_the_help_and_parses(verb):
    parser = cli.verb_parser(verb)
    assert parser.format_help().rstrip().endswith(usage.epilog(verb))
    words = shlex.split(usage.EXAMPLES[verb])
    assert words[:2] == ["restartlab", verb]
    if verb in OWN:
        parser.parse_args(words[2:])
    else:
        a = cli.build_parser().parse_args(words[1:])
        assert a.verb == verb


def test_version():
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == f"restartlab {__version__}"
