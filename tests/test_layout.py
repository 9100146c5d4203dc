"""The library's layout, checked from its source: which module may import which, that importing kvstrat changes
nothing in transformers, that every strategy module is known to the registry, and the sizes a reader can hold."""
import ast, re, subprocess, sys
from pathlib import Path
import pytest

PKG = Path(__file__).resolve().parents[1]/'kvstrat'
MODULES = sorted(p.stem for p in PKG.glob('*.py') if p.stem not in ('__init__', '_modidx'))
from kvstrat.policy import strategy_modules
STRATEGY_MODULES = {m.split('.')[1] for m in strategy_modules()}
READING_ORDER = ['core', 'adapter', 'quant', 'kernels', 'formats', 'store', 'attention', 'triton_attention', 'policy', 'cache',
                 'baselines', 'protocol', 'importance', 'stratigraphic', 'linear_attention', 'sensitivity', 'measure', 'zoned',
                 'streaming', 'calibration', 'results', 'bench', 'distributed', 'report', 'cli', '__main__', 'docs', 'preview', 'architectures', 'arch_study']

def imports(module:str) -> set[str]:
    "The kvstrat modules `module` imports, anywhere in its source (function bodies too)."
    out = set()
    for node in ast.walk(ast.parse((PKG/f'{module}.py').read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1: out |= {node.module} if node.module else {a.name for a in node.names}
            elif (node.module or '').startswith('kvstrat.'): out.add(node.module.split('.')[1])
            elif node.module == 'kvstrat': out |= {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name.split('.')[1] for a in node.names if a.name.startswith('kvstrat.')}
    return out & set(MODULES)

def test_every_module_is_in_the_reading_order():
    assert sorted(READING_ORDER) == MODULES

@pytest.mark.parametrize('module,allowed', [('quant', set()), ('kernels', {'core'}), ('adapter', set()),
                                            ('formats', {'quant', 'kernels'})])
def test_low_modules_import_only_below(module, allowed):
    assert imports(module) <= allowed, imports(module) - allowed

@pytest.mark.parametrize('module', ['formats', 'store', 'attention', 'triton_attention', 'linear_attention'])
def test_store_and_attention_know_no_strategy(module):
    assert not imports(module) & (STRATEGY_MODULES | {'policy', 'cache', 'protocol'}), imports(module)

@pytest.mark.parametrize('module', READING_ORDER[:READING_ORDER.index('bench')])
def test_nothing_below_bench_imports_bench(module):
    assert 'bench' not in imports(module) and 'docs' not in imports(module)

@pytest.mark.parametrize('module', ['results', 'report'])
def test_rows_and_reports_need_no_model(module):
    "Rows and reports are read without running anything: no bench, cache or strategy module."
    assert not imports(module) & (STRATEGY_MODULES | {'bench', 'cache', 'protocol', 'store', 'attention'}), imports(module)

@pytest.mark.parametrize('module', [m for m in MODULES if m != 'adapter'])
def test_only_the_adapter_reaches_into_transformers(module):
    "Other modules use transformers' public API alone: top-level names and the Cache classes."
    for node in ast.walk(ast.parse((PKG/f'{module}.py').read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or '').startswith('transformers.'):
            assert node.module == 'transformers.cache_utils' and {a.name for a in node.names} <= {'Cache', 'CacheLayerMixin'}, \
                (module, node.module)

def test_importing_kvstrat_patches_nothing():
    "Import every module in a fresh process: transformers' registries and module attributes are unchanged."
    code = f'''
import importlib, transformers
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface
import transformers.cache_utils as cu, transformers.masking_utils as mu, transformers.models.llama.modeling_llama as ml
snap = lambda: ({{m.__name__: {{k: id(v) for k, v in vars(m).items()}} for m in (transformers, cu, mu, ml)}},
                sorted(AttentionInterface._global_mapping), sorted(AttentionMaskInterface._global_mapping))
before = snap()
for m in {MODULES!r}: importlib.import_module('kvstrat.' + m)
after = snap()
changed = [(n, k) for n in before[0] for k in before[0][n] if after[0][n].get(k) != before[0][n][k]]
assert not changed and before[1:] == after[1:], (changed, before[1:], after[1:])
'''
    subprocess.run([sys.executable, '-c', code], check=True, timeout=300)

def test_the_registry_knows_every_strategy_module():
    "Every module that registers a strategy is one `strategy_modules` finds, so it is loaded on the first look-up."
    code = f'''
import importlib
from kvstrat.policy import STRATEGIES, strategy_modules
for m in {MODULES!r}: importlib.import_module('kvstrat.' + m)
found = {{cls.__module__ for cls in STRATEGIES.classes.values()}}
assert found == set(strategy_modules()), (found, strategy_modules())
'''
    subprocess.run([sys.executable, '-c', code], check=True, timeout=300)

PLUGIN = '''"A strategy in a module of its own, which no list names."
from dataclasses import dataclass
from typing import ClassVar
import torch
from kvstrat.policy import Strategy, register
from kvstrat.formats import FP16, TierSpec

@register
@dataclass
class NewestInt8(Strategy):
    "The newest `window` tokens in fp16, older ones in INT8."
    name: ClassVar[str] = 'plugin-newest-int8'
    window: int = 8
    def tiers(self, head_dim): return (FP16, TierSpec(8, 'token', head_dim, head_dim, symmetric=True))
    def assign(self, view): return torch.where(view.pos < view.seen - self.window, 1, view.tier)
'''

def test_a_strategy_in_a_new_module_is_found_and_run_by_the_matrix(tmp_path):
    "A module added to the package (here through its `__path__`) is found by name, and the shared matrix runs it."
    (tmp_path/'plugin_strategy.py').write_text(PLUGIN)
    code = f'''
import sys, kvstrat, pytest
kvstrat.__path__.append({str(tmp_path)!r})
from kvstrat.policy import make_strategy
assert type(make_strategy('plugin-newest-int8:window=4')).__module__ == 'kvstrat.plugin_strategy'
sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', {str(PKG.parent/'tests'/'test_strategies.py')!r},
                      '-k', 'plugin-newest-int8 and gqa']))
'''
    run = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert re.search(r'\b([1-9]\d*) passed', run.stdout), run.stdout[-500:] # the matrix selected and ran it

def test_a_strategy_module_needs_no_prior_import():
    "`from kvstrat.stratigraphic import *` is the whole API, every strategy included."
    code = '''
from kvstrat.stratigraphic import *
assert make_strategy('streaming').name == 'streaming' and Hybrid and Kivi and H2O and StreamingLLM
assert {'full', 'int8', 'int4', 'kivi', 'h2o', 'snapkv', 'streamingllm', 'keynorm', 'stratigraphic', 'zoned',
        'adaptive', 'streaming', 'hybrid'} <= set(STRATEGIES)
'''
    subprocess.run([sys.executable, '-c', code], check=True, timeout=300)

@pytest.mark.parametrize('module', MODULES)
def test_module_size(module):
    n = len((PKG/f'{module}.py').read_text().splitlines())
    assert n <= 600, f'{module}.py has {n} lines' # about 500 is the aim

@pytest.mark.parametrize('module', MODULES)
def test_lines_fit_120(module):
    lines = (PKG/f'{module}.py').read_text().splitlines()
    # nbdev writes the first line (the notebook's one-liner) and `__all__`; they are not code a reader maintains
    long = [i + 1 for i, l in enumerate(lines) if len(l) > 120 and i > 0 and not l.startswith('__all__')]
    assert not long, f'{module}.py lines over 120 characters: {long}'
