# The two commands users need: `make local` (the whole pipeline on this machine) and
# `make test` (installs what it needs, then lints and runs every test).
SHELL := /bin/bash
# Python 3.13, Lambda's runtime, when this machine has it (bin/find-python: on PATH or in pyenv);
# `.ci/run` installs it where it is missing. Otherwise python3 (3.11 or newer: the code stays valid
# on 3.11, ruff's target). `make PYTHON=python3.11 test` picks another.
PYTHON ?= $(or $(shell bin/find-python 2>/dev/null),python3)
PYTHON_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
VENV := .venv
PY := $(VENV)/bin/python
# Each consumer's own pins (functions/<name>/requirements.txt) are installed too, for tests and `make local`.
CONSUMER_REQUIREMENTS := $(sort $(wildcard functions/*/requirements.txt))
# The stamp names the interpreter too: a .venv of another Python is made anew.
STAMP := $(VENV)/.installed-py$(PYTHON_VERSION)-$(shell cat requirements.txt requirements-dev.txt $(CONSUMER_REQUIREMENTS) | sha1sum | cut -c1-12)

# jsii prints a banner on Node 20; the CDK still synthesizes fine.
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
# Tests and synth never need real credentials; these keep boto3 from looking for any.
export AWS_DEFAULT_REGION ?= eu-central-1
# The stage of `make synth`, `make local`, `make demo` and `make doctor`: make local STAGE=prod
# (unset: cdk.json's stage, else dev; docs/deploy.md "Stages").
STAGE ?=
STAGE_ARG := $(if $(STAGE),--stage $(STAGE),)

.PHONY: python-version install ruff lint test test-unit test-infra synth local demo chaos doctor bench bench-smoke consumer clean

$(STAMP): requirements.txt requirements-dev.txt $(CONSUMER_REQUIREMENTS)
	@if test -x $(PY) && ! $(PY) -c 'import sys; sys.exit("%d.%d" % sys.version_info[:2] != "$(PYTHON_VERSION)")'; then \
	  echo "$(VENV) is not Python $(PYTHON_VERSION): making it anew"; rm -rf $(VENV); fi
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt $(addprefix -r ,$(CONSUMER_REQUIREMENTS))
	@rm -f $(VENV)/.installed-*
	@touch $@

install: $(STAMP)

# Which Python `make` runs the tests on (CI prints it).
python-version:
	@echo "$(PYTHON) (Python $(PYTHON_VERSION))"

ruff: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

lint: ruff
	$(PY) -m mypy

# Three test processes on CI's 2 cores: the e2e files spend much of their time waiting on real
# time (outages, backoffs, sweeps, batching), which left a third of two processes' CPU idle
# (a full run 19 min 17 s at -n 2, 15 min 31 s at -n 3, same machine). `make TEST_WORKERS=2 test`.
# Whole files to each process, in collection order: the modules that take minutes first
# (tests/conftest.py), not xdist's default order by number of tests, which started them last.
# mypy runs beside the tests (a cold cache is over a minute of one core, which the waiting e2e
# files leave idle), its report printed after theirs; ruff first, so a style error stops at once.
# `make test` fails when either does. `make test TEST_ARGS=tests/unit` runs a part, mypy still whole.
TEST_WORKERS ?= 3
MYPY_LOG := .local/mypy.log
test: ruff
	@mkdir -p $(dir $(MYPY_LOG))
	@$(PY) -m mypy > $(MYPY_LOG) 2>&1 & mypy=$$!; \
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15 $(TEST_ARGS); tests=$$?; \
	wait $$mypy; typed=$$?; echo "mypy (exit $$typed):"; cat $(MYPY_LOG); \
	test $$tests -eq 0 && test $$typed -eq 0

test-unit: install
	$(PY) -m pytest tests/unit

test-infra: install
	$(PY) -m pytest tests/infra

synth: install
	$(PY) app.py $(if $(STAGE),-c stage=$(STAGE),)

# No AWS account needed: moto + local stand-ins of Telegram, the CRM, Bedrock and the SMS gateways (see local/README.md).
# Options after ARGS, e.g. make local ARGS="--persist --no-ai" (python -m local --help lists them).
local: install
	$(PY) -m local $(STAGE_ARG) $(ARGS)

# Runs beside a running `make local`: its own state directory (.local/demo) and free ports.
demo: install
	$(PY) -m local demo $(STAGE_ARG) $(ARGS)

# A seeded random fault campaign through the whole local pipeline, checked against invariants
# (docs/reliability.md): make chaos ARGS="--seed 7 --events 50000 --minutes 30".
chaos: install
	$(PY) -m local chaos $(ARGS)

# Is the deployed stack ready (secrets, webhook, CRMs, alarms, DLQs, SMS, Bedrock)? OK/WARN/FAIL with fixes.
# make doctor ARGS=--local checks the running `make local`; ARGS="--stack NAME --region REGION --json".
doctor: install
	$(PY) -m ops doctor $(STAGE_ARG) $(ARGS)

# Figures, not tests: latency, throughput and a cost model (see bench/README.md).
bench: install
	$(PY) -m bench

# Every benchmark in its quick mode (under 2 minutes): fails when one reports FAILED. CI runs it after `make test`.
bench-smoke: install
	$(PY) -m bench --quick

# A new consumer, ready to edit: the folder functions/<name>/ (declaration, handler, requirements.txt,
# tests), and no other file.
consumer: install
	@test -n "$(NAME)" || { echo "usage: make consumer NAME=<name>" >&2; exit 2; }
	$(PY) -m ops new-consumer "$(NAME)"

clean:
	rm -rf cdk.out .local .pytest_cache .ruff_cache .mypy_cache
