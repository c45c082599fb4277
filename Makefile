# The README's commands. Each creates .venv with python3.10 on first use.
SHELL := /bin/bash
PYTHON310 ?= $(shell for p in python3.10 $$HOME/.pyenv/versions/3.10*/bin/python3.10 /usr/local/bin/python3.10 /usr/bin/python3.10; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 10)' >/dev/null 2>&1 && { echo $$p; break; }; done)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYX := $(wildcard relay_eqsat/*/*.pyx relay_eqsat/*/*.pxd relay_eqsat/*/*.pxi)
# the pure-Python modules setup.py compiles (COMPILED_PY) are among these
PY_COMPILED := $(wildcard relay_eqsat/types.py relay_eqsat/ops/*.py relay_eqsat/rewrite/*.py)
EXT_STAMP := $(VENV)/.ext-built
DEMO_MODEL ?= zoo:nasrnn
PYTEST_ARGS ?=
# pytest-xdist workers of `make test`: one per CPU, at most 4 (each holds TVM, ~0.9 GB); 0 runs the
# tests in one process
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 4 ? n : 4 )))
# bench scripts run by `make bench`, in order; BENCH_ARGS go to each (e.g. "--small --models squeezenet,bert").
# NasNet-A runs at its small size by default where TVM builds it: over 12 minutes for the full model on 2 cores.
BENCH_SCRIPTS ?= egraph_throughput extraction cost_accuracy foreign_models simplify_copies mcts_vs_tensat end_to_end real_models
BENCH_ARGS ?= --small-models nasnet_a
# Each script's own arguments after BENCH_ARGS: the README's issue-15 tables. cost_accuracy judges the
# model with every kernel predicted (learned), whole graphs held out and single-rule pairs; real_models
# times the real-model set and the whole zoo, TVM opt_level 3 against the pass's defaults (a model
# whose 9 paired rounds would take over 300 s gets fewer, at least 3: BERT at opt_level 3, a minute a
# run on a Zen 1).
BENCH_ARGS_cost_accuracy ?= --kinds learned,auto,analytic --held-out --small-pairs --max-pairs 6 --repeat 15 \
	--rounds 10 --min-repeat-ms 200
# mcts_vs_tensat builds nothing with TVM: NasNet-A at its full size there, the MCTS paper's model. The
# reference (TENSAT under 200,000 e-nodes, on the paper's six models: about 5 minutes here) shows
# what any schedule of the rules could reach.
BENCH_ARGS_mcts_vs_tensat ?= --small-models '' --reference-node-limit 200000 \
	--reference-models nasnet_a,nasrnn,resnext50,mobilenet_v2,squeezenet,bert
BENCH_ARGS_real_models ?= --variants opt3,default --time-budget 300 \
	--zoo vit,inception_v3,squeezenet,nasnet_a,nasrnn,bert,mobilenet_v2,resnet50,resnet50_full,resnext50,vgg19
# Where the scripts write their JSON and logs: a new folder per run (a run's tables stay together and
# no earlier result the README cites is overwritten); set BENCH_OUT to choose one.
ifndef BENCH_OUT
BENCH_OUT := bench/results/bench_$(shell date +%Y%m%d_%H%M%S)
endif
# pytest arguments of the slow checks run first ('' skips them).
BENCH_PYTEST ?= -m slow

.PHONY: demo test bench results venv ext clean

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py
	@test -n "$(PYTHON310)" || { echo "python3.10 not found (hhb-tvm has wheels for CPython 3.10 only)"; exit 1; }
	test -x $(PY) || $(PYTHON310) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel "Cython>=3.0" "numpy<2"
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Rebuild the Cython core in place whenever a .pyx/.pxd, or a compiled .py, changed.
$(EXT_STAMP): $(STAMP) $(PYX) $(PY_COMPILED) setup.py
	$(PY) setup.py -q build_ext --inplace
	touch $(EXT_STAMP)

ext: $(EXT_STAMP)

demo: $(EXT_STAMP)
	$(VENV)/bin/relay-eqsat optimize $(DEMO_MODEL)

test: $(EXT_STAMP)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

bench: $(EXT_STAMP)
	$(if $(strip $(BENCH_PYTEST)),$(PY) -m pytest -q $(BENCH_PYTEST))
	mkdir -p $(BENCH_OUT)
	set -o pipefail; $(foreach b,$(BENCH_SCRIPTS),\
	echo "== $$(date '+%F %T') bench/$(b).py $(BENCH_ARGS) $(BENCH_ARGS_$(b)) --out $(BENCH_OUT)/$(b).json"; \
	$(PY) bench/$(b).py $(BENCH_ARGS) $(BENCH_ARGS_$(b)) --out $(BENCH_OUT)/$(b).json 2>&1 | tee $(BENCH_OUT)/$(b).log || exit 1;)\
	echo "== $$(date '+%F %T') done"

# docs/results.md (and the README's results table) from bench/summaries/, after summarizing RUN into them:
# RUN is a `make bench` output folder, by default the newest bench/results/bench_* run with real_models.json;
# with none (a fresh clone) the committed summaries are rendered as they are. Standard library only.
results:
	python3 bench/results_doc.py summarize $(RUN)
	python3 bench/results_doc.py render

clean:
	rm -rf build *.egg-info relay_eqsat/egraph/*.c relay_eqsat/egraph/*.so relay_eqsat/extract/*.c \
		relay_eqsat/extract/*.so relay_eqsat/*.c relay_eqsat/*.so relay_eqsat/ops/*.c relay_eqsat/ops/*.so \
		relay_eqsat/rewrite/*.c relay_eqsat/rewrite/*.so relay_eqsat/_compiled_sources.json $(EXT_STAMP)
