# Developer / CI entry points. Works from a fresh clone with only python3 + pip available.
#   make venv       create .venv and install the package (editable) with every extra (dev, onnx, plot, video,
#                   box2d, atari, mujoco, vizdoom, minatar, envpool, pettingzoo, minigrid, popgym, wandb, ray), pinned
#                   by constraints.txt
#   make check      the edit-test loop (minutes): lint + the unit tests, those that start no process (pytest --unit:
#                   tests/conftest.py marks the others `process` and fails a unit test that starts one)
#   make test       lint (ruff format --check, ruff check, mypy) + every test but those marked slow (CI runs this);
#                   TEST_WORKERS test files at a time (default 2; 0: one process)
#   make test-slow  only the tests marked slow: learning-quality claims of minutes each (presets reaching a score)
#   make train      train on CartPole-v1 until solved (extra flags: make train TRAIN_ARGS="--num_workers=2");
#                   installs the package without env extras; other envs: make train EXTRAS=atari
#                   TRAIN_ARGS="--env=atari_pong --experiment=pong" (extras: atari, mujoco, vizdoom, envpool, ...);
#                   CartPole's env, experiment and --stop_at_reward=475 apply only when TRAIN_ARGS names no env
#   make format     auto-format and auto-fix lint
#   make docs       regenerate docs/config-reference.md and the package tree of docs/architecture.md
#   make benchmark  run the throughput benchmark, benchmarks/benchmark.py (extra flags: make benchmark ARGS="...")
#   make clean      remove .venv, build artifacts and train_dir

PY ?= python3
VENV ?= .venv
VENV_PY := $(VENV)/bin/python
RUFF := $(VENV)/bin/ruff
STAMP := $(VENV)/.installed

# Top-level scripts (setup.py, train.py, enjoy.py); $(wildcard) avoids a literal '*.py' when none exist.
LINT_PATHS := sample_factory benchmarks tests examples $(wildcard *.py)
PIP_FLAGS := --no-input $(if $(CI),--progress-bar off,)
TRAIN_ARGS ?=
EXTRAS ?=
ARGS ?=
# What `make train` installs: the package alone, or with the comma-separated EXTRAS (one stamp per set).
comma := ,
TRAIN_STAMP := $(VENV)/.installed-train$(if $(EXTRAS),-$(subst $(comma),-,$(EXTRAS)),)

.PHONY: venv check test test-slow lint train format docs benchmark clean

venv: $(STAMP)

# Create the virtualenv only if it does not exist yet.
$(VENV_PY):
	$(PY) -m venv $(VENV)

# (Re)install whenever setup.py or constraints.txt change. The stamp is written only after a
# successful install, so an interrupted install is retried on the next run.
$(STAMP): $(VENV_PY) setup.py constraints.txt
	$(VENV_PY) -m pip install $(PIP_FLAGS) --upgrade pip -c constraints.txt
	$(VENV_PY) -m pip install $(PIP_FLAGS) -c constraints.txt -e '.[dev,onnx,plot,video,box2d,atari,mujoco,vizdoom,minatar,envpool,pettingzoo,minigrid,popgym,wandb,ray]'
	touch $@

# mypy type-checks the whole package (pyproject.toml, [tool.mypy]).
lint: venv
	$(RUFF) format --check $(LINT_PATHS)
	$(RUFF) check $(LINT_PATHS)
	$(VENV_PY) -m mypy

# Each recipe line runs in its own shell and make stops at the first non-zero exit,
# so a ruff or pytest failure fails `make test` (and therefore CI).
# Test files run TEST_WORKERS at a time (pytest-xdist, one file per worker so a module's fixtures start once): most
# of a file's time is start-up, heartbeat timeouts and engines (Ray, Slurm) coming up, not CPU. CI's 2-core VM:
# 2 workers (docs/testing.md has the times); TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
test: lint
	$(VENV_PY) -m pytest tests -q -p no:cacheprovider --timeout=600 --durations=30 -m "not slow" \
		$(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# The unit tier: no test here starts a process, so it needs no timeouts of runs and no cleanup of leftovers.
check: lint
	$(VENV_PY) -m pytest tests --unit -q -p no:cacheprovider --timeout=300 --durations=10 \
		$(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test-slow: venv
	$(VENV_PY) -m pytest tests -q -p no:cacheprovider --timeout=900 --durations=30 -m slow

# The full install (make venv / make test) has every extra already; otherwise install only what this run needs.
$(TRAIN_STAMP): $(VENV_PY) setup.py constraints.txt
	$(VENV_PY) -m pip install $(PIP_FLAGS) --upgrade pip -c constraints.txt
	$(VENV_PY) -m pip install $(PIP_FLAGS) -c constraints.txt -e '.$(if $(EXTRAS),[$(EXTRAS)],)'
	touch $@

# CartPole's experiment and stop condition apply only when TRAIN_ARGS names no env (--env=X or --env X): a Pong run
# must not inherit --stop_at_reward=475 or the cartpole folder.
TRAIN_DEFAULTS := $(if $(filter --env=% --env,$(TRAIN_ARGS)),,--env=CartPole-v1 --experiment=cartpole --stop_at_reward=475)

train: $(TRAIN_STAMP)
	$(VENV_PY) train.py $(TRAIN_DEFAULTS) --train_dir=./train_dir $(TRAIN_ARGS)

format: venv
	$(RUFF) format $(LINT_PATHS)
	$(RUFF) check --fix $(LINT_PATHS)

# Write to a temp file first so a failing generator does not leave a truncated file behind.
docs: venv
	mkdir -p docs
	$(VENV_PY) -m sample_factory.config.reference > docs/config-reference.md.tmp
	mv docs/config-reference.md.tmp docs/config-reference.md
	$(VENV_PY) -m sample_factory.config.reference architecture > docs/architecture.md.tmp
	mv docs/architecture.md.tmp docs/architecture.md

benchmark: venv
	$(VENV_PY) -m benchmarks.benchmark $(ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info train_dir .pytest_cache .ruff_cache .mypy_cache
	find . -path ./.git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
