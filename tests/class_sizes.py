"""The tree's size and its biggest classes at a revision (lines, methods), for a closing note's
before-and-after:  python -m tests.class_sizes REV  (e.g. 27b9e9f, HEAD)."""
import ast, os, sys, subprocess
rev = sys.argv[1]
files = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev], capture_output=True, text=True).stdout.split()
files = [f for f in files if f.endswith(".py") and (f.startswith("restartlab/") or f.startswith("trainer/"))]
rows, total = [], 0
pk = {}
for f in files:
    src = subprocess.run(["git", "show", f"{rev}:{f}"], capture_output=True, text=True).stdout
    n = src.count("\n"); total += n
    top = f.split("/")[0] if f.startswith("trainer") else "/".join(f.split("/")[:2]).replace(".py", "")
    pk[top] = pk.get(top, 0) + n
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ClassDef):
            meths = [b for b in node.body if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))]
            rows.append((node.end_lineno - node.lineno + 1, len(meths), f"{f}:{node.name}"))
rows.sort(reverse=True)
print(f"{rev}: {len(files)} modules, {total} lines")
for r in rows[:8]:
    print(f"  {r[0]:4d} lines {r[1]:3d} methods  {r[2]}")
for name in ("Procs", "Checkpointer", "Injector", "Supervisor"):
    for r in rows:
        if r[2].endswith(":" + name):
            print(f"  [{name}] {r[0]} lines, {r[1]} methods ({r[2].split(':')[0]})")
print("  packages:", ", ".join(f"{k} {v}" for k, v in sorted(pk.items(), key=lambda x: -x[1])[:12]))
