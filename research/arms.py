"""The harness of the scripts that compare commits (`peak_arms.py`, `long_prefill.py`, `decode_arms.py`,
`fold_cost.py`): a snippet run in a fresh process that imports kvstrat from a given tree, a check that it did, their
command line and their token file."""
import json, os, subprocess, sys, tempfile
import torch

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

def parse_arms(argv:list[str], # the command line after the script's name, past any options the script took
               doc:str, usage:str='ROUNDS LENGTH LABEL=DIR=STRATEGY...') -> tuple[int, int, list[list[str]]]:
    "Rounds, length and arms (LABEL, DIR, STRATEGY) of a comparison's command line; exits with the usage if malformed."
    arms = [a.split('=', 2) for a in argv[2:]]
    if len(argv) < 3 or not (argv[0].isdigit() and argv[1].isdigit()) or any(len(a) != 3 for a in arms):
        sys.exit(f'usage: {usage}\n{doc}')
    return int(argv[0]), int(argv[1]), arms

def saved_tokens(length:int) -> str:
    "A file holding the first `length` tokens of WikiText-2 (where it is found) as the bench takes them, for the arms."
    from kvstrat.core import load_model, load_text, tokenize
    _, tok = load_model('smollm2-135m')
    path = os.path.join(tempfile.mkdtemp(), 'ids.pt')
    torch.save(tokenize(tok, load_text('auto')[0])[:length], path)
    return path

if __name__ == '__main__': print(__doc__) # a harness the comparison scripts import; nothing to run
