"""The harness of the scripts that compare commits (`peak_arms.py`, `long_prefill.py`): a snippet run in a fresh
process that imports kvstrat from a given tree, and a check that it did."""
import json, os, subprocess, sys

def run_in(tree:str, # a clean worktree of the commit to measure
           code:str, # Python that prints one JSON object as its last line
           *args:str) -> dict: # the snippet's `sys.argv[1:]`
    "Run `code` in a fresh process whose kvstrat is `tree`'s; its JSON object, refused unless kvstrat came from `tree`."
    # `python -c` puts its working directory first on sys.path, ahead of PYTHONPATH and of the editable install. (A
    # spawned worker takes its parent's sys.path instead: until 2026-12-05 every arm of `peak_arms.py` ran the code its
    # parent had imported, whatever tree the arm named.)
    tree = os.path.realpath(tree)
    child = subprocess.run([sys.executable, '-c', 'import kvstrat\n' + code, *args], cwd=tree, capture_output=True,
                           text=True, env=os.environ | dict(PYTHONPATH=tree))
    if child.returncode: sys.exit(f'the process in {tree} failed:\n{child.stderr[-3000:]}')
    out = json.loads(child.stdout.strip().splitlines()[-1])
    if not os.path.realpath(out['kvstrat']).startswith(tree + os.sep):
        sys.exit(f"the process meant to run {tree}'s kvstrat imported {out['kvstrat']}")
    return out
