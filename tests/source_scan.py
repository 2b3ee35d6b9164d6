"""What the tests that keep a name in one owner read.

They read the modules of the tree and the string constants of each, from its syntax tree.
Docstrings are left out, as prose may name what code must not spell."""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def modules(owners=(), tops=("restartlab", "trainer")):
    """The .py files under `tops`, relative to the checkout, but the `owners` (relative paths)."""
    for top in tops:
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                rel = os.path.relpath(os.path.join(d, f), ROOT)
                if f.endswith(".py") and rel not in owners:
                    yield rel


def docstrings(tree) -> set:
    """The ids of the docstring nodes of a module, its classes and its functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def parse(path):
    with open(path) as f:
        return ast.parse(f.read(), path)


def constants(tree, skip=frozenset()):
    """[(line, value)] of the string constants outside docstrings and the node ids in `skip`."""
    docs = docstrings(tree)
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs and id(n) not in skip]
