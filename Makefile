# tablekeeper: `make test` and `make demo` each set everything up first on a fresh machine.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
JARS := .jars
# Coordinates live only in conf/jars.txt ("<role> <group:artifact:version>" lines).
JAR_COORDS = $(shell awk '!/^[[:space:]]*#/ && NF >= 2 {print $$2}' conf/jars.txt)
MVN_DEPENDENCY := org.apache.maven.plugins:maven-dependency-plugin:3.8.1
PYTEST_ARGS ?=

.PHONY: help setup jars test lint demo bench clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-8s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: $(VENV)/.installed jars ## create .venv with the pinned deps and fetch the jars (idempotent)

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10+ needed: set PYTHON=python3.x")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $@

# Always checked (four file tests when nothing is missing), so a deleted jar comes back.
jars:
	@command -v mvn >/dev/null || { echo "mvn not found: install Maven 3 (apt-get install maven)" >&2; exit 2; }
	@mkdir -p $(JARS)
	@for coord in $(JAR_COORDS); do \
	  IFS=: read -r group artifact version <<< "$$coord"; \
	  if [ ! -s "$(JARS)/$$artifact-$$version.jar" ]; then \
	    echo "fetching $$coord"; \
	    mvn --quiet --batch-mode -Dstyle.color=never $(MVN_DEPENDENCY):copy -Dartifact="$$coord" -DoutputDirectory=$(JARS) \
	      2>&1 | sed 's/\x1b\[[0-9;]*m//g' \
	      || { echo "could not fetch $$coord from Maven Central: check the network and conf/jars.txt" >&2; exit 2; }; \
	  fi; \
	done
	@# Drop jars of versions no longer pinned so two versions never share a classpath.
	@keep=" $(foreach c,$(JAR_COORDS),$(word 2,$(subst :, ,$(c)))-$(word 3,$(subst :, ,$(c))).jar) "; \
	for jar in $(JARS)/*.jar; do \
	  case "$$keep" in *" $$(basename $$jar) "*) ;; *) echo "removing stale $$jar"; rm -f "$$jar";; esac; \
	done

test: setup ## set up, then run every test (unit, spark, interop)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: setup ## ruff on everything, mypy --strict on lib/
	$(VENV)/bin/ruff check lib tests jobs bench airflow_dags
	$(VENV)/bin/mypy --strict

demo: setup ## set up, then run the main job on embedded defaults (Delta -> Iceberg, read back)
	$(VENV)/bin/tablekeeper doctor
	$(PY) -m tablekeeper.demo

bench: setup ## run the benchmarks (prints tables, writes bench/out/*.json)
	$(PY) -m bench.delta_replay $(REPLAY_ARGS)
	$(PY) -m bench.convert_delta $(CONVERT_ARGS)
	$(PY) -m bench.maintenance $(MAINTENANCE_ARGS)
	$(PY) -m bench.compact $(COMPACT_ARGS)
	$(PY) -m bench.backfill $(BACKFILL_ARGS)

clean: ## remove the venv, the jars and local warehouses
	rm -rf $(VENV) $(JARS) warehouse dist build
