# tablekeeper: `make test` and `make demo` each set everything up first on a fresh machine.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
# The Spark line to set up and test (tablekeeper.lines: 3.5, 4.0, 4.1). The default line's venv
# and jars are .venv and .jars (pins: conf/jars.txt); another line's are .lines/<line>/venv and
# .lines/<line>/jars (pins: conf/lines/<line>/), e.g. `make setup SPARK=3.5`, `make test-unit SPARK=3.5`.
DEFAULT_SPARK := 4.1
SPARK ?= $(DEFAULT_SPARK)
ifeq ($(SPARK),$(DEFAULT_SPARK))
VENV := .venv
JARS := .jars
LINE_JARS_TXT := conf/jars.txt
else
ifeq ($(wildcard conf/lines/$(SPARK)/jars.txt),)
$(error SPARK=$(SPARK) is no supported Spark line: conf/lines/$(SPARK)/jars.txt is missing (lines: 3.5, 4.0, $(DEFAULT_SPARK)))
endif
VENV := .lines/$(SPARK)/venv
JARS := .lines/$(SPARK)/jars
LINE_JARS_TXT := conf/lines/$(SPARK)/jars.txt
endif
# The exact versions tested: shared ones, then the line's pyspark and delta-spark.
CONSTRAINTS := conf/constraints.txt conf/lines/$(SPARK)/constraints.txt
PY := $(VENV)/bin/python
# Airflow lives in its own venv: its Spark provider brings pyspark-client, whose jar-less `pyspark`
# package would shadow the job environment's pyspark. Its providers need Python 3.11+.
AIRFLOW_PYTHON ?= $(PYTHON)
AIRFLOW_VENV := .airflow-venv
AIRFLOW_PY := $(AIRFLOW_VENV)/bin/python
# The documentation site's build (MkDocs, Material theme) in a venv of its own, pinned in conf/.
DOCS_VENV := .docs-venv
VERSION := $(shell awk -F'"' '/^version = /{print $$2; exit}' pyproject.toml)
WHEEL := dist/tablekeeper-$(VERSION)-py3-none-any.whl
PY_FILES_ZIP := dist/tablekeeper.zip
LIB_FILES := $(shell find lib/tablekeeper -name '*.py' -o -name py.typed)
# A comment mark inside $(shell): make needs it escaped, and awk warns of the escape it sees.
HASH := \#
# Coordinates live only in conf/jars.txt ("<role> <group:artifact:version[:classifier[:packaging]]>"
# lines; a packaging other than jar is a test server's distribution archive, e.g. tar.gz),
# another line's Spark-side jars in conf/lines/<line>/jars.txt (the test servers, roles test-*, run
# in JVMs of their own and are conf/jars.txt's for every line). Roles test-* go to $(JARS)/<role>/,
# the rest to $(JARS)/.
JAR_LINES = $(shell awk '!/^[[:space:]]*$(HASH)/ && NF >= 2 && (FILENAME == "$(LINE_JARS_TXT)" || $$1 ~ /^test-/) {print $$1 "=" $$2}' \
  $(LINE_JARS_TXT) $(if $(filter-out conf/jars.txt,$(LINE_JARS_TXT)),conf/jars.txt))
MVN_DEPENDENCY := org.apache.maven.plugins:maven-dependency-plugin:3.8.1
PYTEST_ARGS ?=

TIERS := corpus interop kill airflow cluster

.PHONY: help setup setup-compat jars classes servers tools package test test-compat test-unit $(addprefix test-,$(TIERS)) lint docs format demo bench bench-scale soak clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@printf '  make %-10s %s\n' "test-TIER" "one tier of the suite, TIER one of: $(TIERS) (tests/tiers.py)"

# Airflow (the DAG tier) runs on the default line only.
setup: $(VENV)/.installed $(if $(filter $(DEFAULT_SPARK),$(SPARK)),$(AIRFLOW_VENV)/.installed) jars classes servers tools ## create .venv and .airflow-venv with the pinned deps, fetch the jars, install the database servers (idempotent); SPARK=3.5 or 4.0: that line's .lines/<line>/venv and jars

# The line's class-data-sharing archive (lib/tablekeeper/spark/class_archive.py): local sessions
# start in about half the time with it. Built once per Spark and Java (about a minute), kept in
# $(JARS)/classes/; a no-op when it exists.
classes: $(VENV)/.installed jars
	@$(PY) -c 'from tablekeeper.spark.class_archive import main; main()'

# The database servers the sql catalog's tests start on loopback (Debian's packages; the tests run
# them from throwaway data directories, never as a system service), and the headless Chromium
# health's HTML report is opened in. Checked on every run, so a fresh machine gets them; apt-get
# only when one is missing (sudo unless root).
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
servers:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ! command -v mariadb-install-db >/dev/null; then \
	  command -v apt-get >/dev/null || { echo "install PostgreSQL's and MariaDB's servers (Debian: postgresql, mariadb-server)" >&2; exit 2; }; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql mariadb-server >/dev/null; \
	fi
	@if [ ! -x /usr/bin/chromium ]; then \
	  command -v apt-get >/dev/null || { echo "install Chromium at /usr/bin/chromium (Debian: chromium chromium-driver)" >&2; exit 2; }; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi

# The GCS and Azure emulators the storage tests start on loopback (pins: conf/tools.txt), into
# .tools/: fake-gcs-server built from the Go module proxy, Azurite from npm. Checked on every run
# (a version stamp per tool), so a fresh machine or a new pin gets them.
TOOLS := .tools
FAKE_GCS_VERSION := $(shell awk '$$1 == "fake-gcs-server" {print $$2}' conf/tools.txt)
AZURITE_VERSION := $(shell awk '$$1 == "azurite" {print $$2}' conf/tools.txt)
tools:
	@if [ "$$(cat $(TOOLS)/bin/.fake-gcs-server.version 2>/dev/null)" != "$(FAKE_GCS_VERSION)" ]; then \
	  command -v go >/dev/null || { echo "go not found: install Go (apt-get install golang)" >&2; exit 2; }; \
	  echo "building fake-gcs-server $(FAKE_GCS_VERSION)"; \
	  GOBIN="$$(pwd)/$(TOOLS)/bin" go install github.com/fsouza/fake-gcs-server@$(FAKE_GCS_VERSION) \
	    && echo "$(FAKE_GCS_VERSION)" > $(TOOLS)/bin/.fake-gcs-server.version; \
	fi
	@if [ "$$(cat $(TOOLS)/azurite/.version 2>/dev/null)" != "$(AZURITE_VERSION)" ]; then \
	  command -v npm >/dev/null || { echo "npm not found: install Node.js 20+ (apt-get install nodejs npm)" >&2; exit 2; }; \
	  echo "installing Azurite $(AZURITE_VERSION)"; \
	  mkdir -p $(TOOLS)/azurite && npm install --prefix $(TOOLS)/azurite --no-audit --no-fund --silent \
	    azurite@$(AZURITE_VERSION) && echo "$(AZURITE_VERSION)" > $(TOOLS)/azurite/.version; \
	fi

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10+ needed: set PYTHON=python3.x")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]' $(addprefix -c ,$(CONSTRAINTS))
	@touch $@

$(AIRFLOW_VENV)/.installed: conf/airflow-requirements.txt conf/airflow-constraints.txt
	@$(AIRFLOW_PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "the Airflow Spark provider needs Python 3.11+: set AIRFLOW_PYTHON=python3.x")'
	@test -x $(AIRFLOW_PY) || $(AIRFLOW_PYTHON) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(AIRFLOW_PY) -m pip install --quiet --disable-pip-version-check \
	  -r conf/airflow-requirements.txt -c conf/airflow-constraints.txt
	@touch $@

# Always checked (a file test per jar when nothing is missing), so a deleted jar comes back.
# Missing jars are fetched by one Maven run per directory (a throwaway pom listing them), then jars
# of versions no longer pinned are dropped so two versions never share a classpath. conf/jars.txt
# lists every jar, so each dependency excludes all of its own: Maven would otherwise download the
# whole graph (hadoop-aws's 612 MiB SDK bundle among it) before leaving it uncopied.
jars:
	@command -v mvn >/dev/null || { echo "mvn not found: install Maven 3 (apt-get install maven)" >&2; exit 2; }
	@set -o pipefail; declare -A missing; keep=""; \
	for line in $(JAR_LINES); do \
	  role=$${line%%=*}; coord=$${line#*=}; \
	  IFS=: read -r group artifact version classifier packaging <<< "$$coord"; \
	  dir=$(JARS); case "$$role" in test-*) dir=$(JARS)/$$role;; esac; \
	  file=$$artifact-$$version$${classifier:+-$$classifier}.$${packaging:-jar}; \
	  keep="$$keep $$dir/$$file"; \
	  [ -s "$$dir/$$file" ] && continue; \
	  echo "fetching $$coord"; \
	  missing[$$dir]+="<dependency><groupId>$$group</groupId><artifactId>$$artifact</artifactId><version>$$version</version>$${classifier:+<classifier>$$classifier</classifier>}$${packaging:+<type>$$packaging</type>}<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions></dependency>"; \
	done; \
	for dir in "$${!missing[@]}"; do \
	  mkdir -p "$$dir"; pom=$$(mktemp -d); \
	  printf '<project><modelVersion>4.0.0</modelVersion><groupId>local</groupId><artifactId>jars</artifactId><version>0</version><dependencies>%s</dependencies></project>' "$${missing[$$dir]}" > $$pom/pom.xml; \
	  mvn --quiet --batch-mode -Dstyle.color=never -f $$pom/pom.xml $(MVN_DEPENDENCY):copy-dependencies \
	    -DexcludeTransitive=true -DoutputDirectory="$$(pwd)/$$dir" 2>&1 | sed 's/\x1b\[[0-9;]*m//g' \
	    || { rm -rf $$pom; echo "could not fetch jars for $$dir from Maven Central: check the network and conf/jars.txt" >&2; exit 2; }; \
	  rm -rf $$pom; \
	done; \
	for jar in $(JARS)/*.jar $(JARS)/test-*/*.jar $(JARS)/test-*/*.tar.gz; do \
	  [ -e "$$jar" ] || continue; \
	  case "$$keep " in *" $$jar "*) ;; *) echo "removing stale $$jar"; rm -f "$$jar";; esac; \
	done

package: $(WHEEL) $(PY_FILES_ZIP) ## build the wheel and the zip spark-submit --py-files takes into dist/

# Order-only on the venv: building must never reinstall the environment it runs in.
$(WHEEL): pyproject.toml $(LIB_FILES) | $(VENV)/.installed
	@# setuptools' build/ keeps modules the source has since dropped; they would ride in the wheel.
	@rm -rf build dist/tablekeeper-*.whl
	$(PY) -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir dist .

# A pure-Python wheel is a zip with the package at its root, which is all --py-files needs; its
# .dist-info rides along, so tablekeeper.__version__ is right when imported from the zip.
$(PY_FILES_ZIP): $(WHEEL)
	cp $< $@

# The other lines CI proves with the compatibility tier (tests/compat) after the whole suite on
# the default line. Each is set up first, so the suite's time is the tests' own.
COMPAT_LINES := 3.5 4.0

test: setup setup-compat package ## set up, then run every test: the whole suite on the default line, the compat tier on the others
	$(PY) -m pytest -m "not compat" $(PYTEST_ARGS)
	@for line in $(COMPAT_LINES); do \
	  echo "compat tier on Spark $$line"; \
	  .lines/$$line/venv/bin/python -m pytest tests/compat -m compat $(PYTEST_ARGS); \
	done

setup-compat: ## set up every line of COMPAT_LINES (.lines/<line>/venv and jars)
	@for line in $(COMPAT_LINES); do $(MAKE) --no-print-directory setup SPARK=$$line; done

test-compat: setup package ## the compat tier on one line: make test-compat SPARK=3.5
	$(PY) -m pytest tests/compat -m compat $(PYTEST_ARGS)

# The unit tier proves it needs no JVM: JAVA_HOME unset, and no jars directory to find.
test-unit: $(VENV)/.installed servers ## the unit tier only: no JVM, no jars, no ../shared, no Airflow
	env -u JAVA_HOME TABLEKEEPER_JARS_DIR=/nonexistent-tablekeeper-jars $(PY) -m pytest tests/unit -m unit $(PYTEST_ARGS)

# One target per other tier (tests/tiers.py says what each needs): make test-kill, make test-corpus, ...
$(addprefix test-,$(TIERS)): test-%: setup package
	$(PY) -m pytest -m $* $(PYTEST_ARGS)

LINTED := lib tests jobs bench airflow_dags

lint: $(VENV)/.installed docs ## ruff (check and format --check) on everything, mypy --strict on lib/, the docs built strictly
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/mypy --strict

$(DOCS_VENV)/.installed: conf/docs-requirements.txt
	@test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r conf/docs-requirements.txt
	@touch $@

docs: $(DOCS_VENV)/.installed ## build the documentation site (docs/, mkdocs.yml) into site/; a broken link fails it
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict --quiet

format: $(VENV)/.installed ## ruff's fixes and formatting, in place
	$(VENV)/bin/ruff check --fix $(LINTED)
	$(VENV)/bin/ruff format $(LINTED)

demo: setup ## set up, then tour every job on embedded defaults (Delta -> Iceberg -> maintenance)
	$(VENV)/bin/tablekeeper doctor
	$(PY) -m tablekeeper.demo

bench: setup ## run the benchmarks (prints tables, writes bench/out/*.json)
	$(PY) -m bench.delta_replay $(REPLAY_ARGS)
	$(PY) -m bench.convert_delta $(CONVERT_ARGS)
	$(PY) -m bench.maintenance $(MAINTENANCE_ARGS)
	$(PY) -m bench.compact $(COMPACT_ARGS)
	$(PY) -m bench.backfill $(BACKFILL_ARGS)
	$(PY) -m bench.rewrite_manifests $(REWRITE_MANIFESTS_ARGS)
	$(PY) -m bench.rewrite_position_deletes $(REWRITE_POSITION_DELETES_ARGS)
	$(PY) -m bench.rewrite_equality_deletes $(REWRITE_EQUALITY_DELETES_ARGS)
	$(PY) -m bench.health $(HEALTH_ARGS)

# The scale benchmark's charts need matplotlib, which nothing else does: the bench extra.
$(VENV)/.bench-installed: pyproject.toml | $(VENV)/.installed
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[bench]'
	@touch $@

bench-scale: setup $(VENV)/.bench-installed ## 10x scaling of convert-delta, expire-snapshots, remove-orphans (listing and inventory); charts in bench/results/
	$(PY) -m bench.scale $(SCALE_ARGS)
	$(PY) -m bench.scale_inventory $(SCALE_INVENTORY_ARGS)

soak: setup ## kill destructive jobs 200 times at random phases while Iceberg Spark appends (bench/soak.py)
	$(PY) -m bench.soak $(SOAK_ARGS)

clean: ## remove the venvs, the jars, local warehouses and dist/
	rm -rf $(VENV) $(AIRFLOW_VENV) $(DOCS_VENV) $(JARS) $(TOOLS) .lines warehouse dist build site
