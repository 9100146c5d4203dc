"The commit-comparison harness of `research/`: each arm's process imports kvstrat from the arm's tree, or is refused."
import os, sys
from pathlib import Path
import pytest
sys.path.insert(0, str(Path(__file__).parents[1]/'research'))
import arms

SNIPPET = "import json; print(json.dumps(dict(kvstrat=kvstrat.__file__)))"

def test_run_in_imports_the_trees_kvstrat(tmp_path):
    (tmp_path/'kvstrat').mkdir()
    (tmp_path/'kvstrat'/'__init__.py').write_text('')
    imported = arms.run_in(str(tmp_path), SNIPPET)['kvstrat']
    assert os.path.realpath(imported) == os.path.realpath(tmp_path/'kvstrat'/'__init__.py')

def test_run_in_refuses_a_process_that_imported_another_kvstrat(tmp_path):
    # a tree without kvstrat: the process imports the installed one, which is not the arm's code
    with pytest.raises(SystemExit, match='imported'): arms.run_in(str(tmp_path), SNIPPET)

def test_parse_arms():
    assert arms.parse_arms(['2', '64', 'a=/x=full', 'b=/y=kivi:bits=2'], '') == (
        2, 64, [['a', '/x', 'full'], ['b', '/y', 'kivi:bits=2']])
    for bad in (['2', '64'], ['x', '64', 'a=/x=full'], ['2', '64', 'a=full']):
        with pytest.raises(SystemExit, match='usage'): arms.parse_arms(bad, '')
