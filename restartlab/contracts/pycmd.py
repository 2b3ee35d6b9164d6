"""How a Python command line reads, in one place.

A command has the interpreter, its own options, what it runs (-m MODULE, -c CODE, a script, - for
standard input) and the program's arguments. The warm pool (what it can fork), preflight (what it
checks exists) and the ezpz check (which example runs) read a command through it.

It reads the command line as CPython 3.11 does:
- -W, -X and --check-hash-based-pycs take the next word, or their value attached (-Wignore).
- -m and -c end the options, their argument attached too (-mjson.tool). So do `--` and the first
  word that is not an option.
- One-letter options group (-uB, -uc CODE)."""
import dataclasses
import os
import re
from typing import List, Optional, Sequence, Tuple

IS_PYTHON = re.compile(r"^python[0-9.]*$")  # a word that names a Python interpreter (its basename)
_TAKES_VALUE = ("-W", "-X", "--check-hash-based-pycs")


@dataclasses.dataclass(frozen=True)
class PyCommand:
    python: str                  # the interpreter, as written
    options: Tuple[str, ...]     # its own option words, as written (-u; -W and its value as two words)
    run: str                     # "module", "code", "script", "stdin", or "" (nothing to run)
    target: Optional[str]        # the module, the code or the script; None for stdin, nothing, or -m/-c at the end
    args: Tuple[str, ...]        # the program's own arguments
    flags: Tuple[str, ...] = ()  # the interpreter's options one by one, without values (-uB -W x -> -u -B -W;
    #                              -m and -c are what it runs, not among them)


def parse(argv: Sequence[str]) -> PyCommand:
    """`argv` (the interpreter first) as a PyCommand. ValueError when argv is empty."""
    if not argv:
        raise ValueError("no command")
    rest = list(argv[1:])
    options: List[str] = []
    flags: List[str] = []

    def made(run: str, target: Optional[str], args: Sequence[str]) -> PyCommand:
        return PyCommand(argv[0], tuple(options), run, target, tuple(args), tuple(flags))

    while rest and rest[0].startswith("-") and rest[0] != "-":
        w = rest.pop(0)
        options.append(w)
        if w == "--":  # the end of the options: the next word is the script, whatever it looks like
            break
        if w.startswith("--"):
            flags.append(w)
            if w in _TAKES_VALUE and rest:
                options.append(rest.pop(0))
            continue
        for i, ch in enumerate(w[1:], 1):  # a group of one-letter options: -uB, -uc CODE, -Wignore
            if ch not in "mc":
                flags.append("-" + ch)
            if ch in "mc" or "-" + ch in _TAKES_VALUE:
                value = w[i + 1:] or (rest.pop(0) if rest else None)
                if ch in "mc":
                    if i == 1:  # -m/-c alone: not one of the interpreter's options (in -um, -u is)
                        options.pop()
                    return made("module" if ch == "m" else "code", value, rest)
                if value is not None and not w[i + 1:]:
                    options.append(value)
                break
    if not rest:
        return made("", None, ())
    if rest[0] == "-":
        return made("stdin", None, rest[1:])
    return made("script", rest[0], rest[1:])


def find(argv: Sequence[str]) -> Tuple[int, PyCommand]:
    """(where the first word naming a Python interpreter is, the command from there).

    The command may start with a wrapper (env, numactl). (-1, an empty command) when no word names
    one."""
    for i, w in enumerate(argv):
        if IS_PYTHON.match(os.path.basename(w)):
            return i, parse(argv[i:])
    return -1, PyCommand("", (), "", None, ())
