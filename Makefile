# Everything runs from the virtual environment at .venv/, created on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: setup run test check lint typecheck unit package e2e engine images crd chart chart-package release version docs site vllm-flags bench bench-operator bench-telemetry bench-hostile bench-scrape-pieces bench-churn bench-tuning bench-load-sweep bench-autoscale-day bench-learning clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

## run: local control plane with simulated Ascend nodes, the CRD and the examples
run: setup
	hack/demo

## test: lint, type-check and run every test suite (hack/test-suites): the checks first, while the control plane's
## binaries, the engine venv and the images build beside them (cached; logs and each suite's output in
## $SPECINFER_CACHE/test-logs), then the suites in lanes of their own, each as soon as what it needs is ready
test: setup
	hack/test-suites

## check: the inner loop while editing: lint, types and the unit tests (no cluster, no engine, no images)
check: setup
	$(MAKE) --no-print-directory lint typecheck unit

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/hadolint Dockerfile images/runtime/Dockerfile images/trainer/Dockerfile images/bases/vllm-cpu/Containerfile

typecheck: setup
	$(BIN)/mypy runtime/specinfer_runtime operator/specinfer_operator tests bench hack

## unit: the unit tests, a file at a time on every core (a module's fixtures run once)
unit: setup
	$(BIN)/pytest -n auto --dist loadfile tests/unit

## package: the wheel installed into a fresh venv; its entry points and the runtime's dry run per example
package: setup
	$(BIN)/pytest tests/package

## e2e: the e2e suite (hack/test-suites e2e) against a local control plane (built from Go modules on first use,
## while the engine venv and the images build beside it), stopped afterwards, with a real engine behind the pods
## of the acceptance, canary and tuning tests: in the runtime image (images/build), on the engine venv's model
## cache; SPECINFER_E2E_KUBECONFIG=FILE runs it against that cluster instead
e2e: setup
	hack/test-suites e2e

## engine: a real vLLM (vllm-cpu) serving a tiny local model through specinfer-runtime: ngram, suffix and
## draft_model give the same greedy output as no speculation, and real spec-decode metrics; ngram and suffix
## are served by the runtime image; the engine venv (several GB) is built once by hack/engine-venv outside
## the repository
engine: setup
	venv="$$(hack/engine-venv)" && images="$$(images/build)" && \
	env SPECINFER_ENGINE_VENV="$$venv" $$images $(BIN)/pytest --durations=8 tests/engine

## images: the operator and runtime images, built with podman on base images made from Debian and PyPI
## packages (images/build; cached by content)
images: setup
	images/build

## crd: regenerate the CRDs and admission policies from the API models, in crds/ and in the specinfer-crds chart,
## and the generated parts of the operator chart's values.schema.json (tenantPolicy.spec from the policy model,
## prometheusRule.disabled from the alerts)
crd: setup
	$(BIN)/specinfer crd > crds/speculativeinference.yaml
	cp crds/speculativeinference.yaml charts/specinfer-crds/files/speculativeinference.yaml
	$(BIN)/python -m hack.chart_schema

## chart: the charts' generated files: the operator chart's values.schema.json parts (as make crd), and each
## chart's README.md from its values.yaml and README.md.gotmpl, by helm-docs (hack/chart-readme)
chart: setup
	$(BIN)/python -m hack.chart_schema
	hack/chart-readme

## chart-package: the artefacts a release publishes, dist/charts/specinfer-crds-VERSION.tgz and
## specinfer-operator-VERSION.tgz (helm package; ci/ and README.md.gotmpl left out by .helmignore)
chart-package: chart
	hack/build-binaries.sh helm
	"$${SPECINFER_CACHE:-$$HOME/.cache/specinfer}/bin/helm" package charts/specinfer-crds charts/specinfer-operator \
	  --destination dist/charts

## release: VERSION=x.y.z REGISTRY=host[/namespace]: the repository must state VERSION everywhere (hack/release.py
## check); the charts packaged (chart-package); the operator, runtime and trainer images built with OCI labels and an
## SPDX SBOM each (dist/sbom/); images and charts pushed, signed by digest with cosign (COSIGN_KEY=key reference, or
## KEYLESS=1 in CI; neither: unsigned), and dist/release-VERSION.json listing every reference with its digest.
## INSECURE=1 for a plain-HTTP registry (127.0.0.1:PORT from python -m hack.registry start); IMAGES=a,b for a subset
release: setup
	@test -n "$(VERSION)" && test -n "$(REGISTRY)" || { \
	  echo "usage: make release VERSION=x.y.z REGISTRY=ghcr.io/specinfer [INSECURE=1] [KEYLESS=1] [IMAGES=operator,runtime,trainer]" >&2; exit 2; }
	$(BIN)/python -m hack.release check $(VERSION)
	$(MAKE) --no-print-directory chart-package
	$(BIN)/python -m hack.release publish $(VERSION) --registry $(REGISTRY) $(if $(INSECURE),--insecure) \
	  $(if $(KEYLESS),--keyless) $(if $(IMAGES),--images $(IMAGES))

## version: VERSION=x.y.z written into every place that states the release's version (hack/release.py set-version),
## and the charts' READMEs regenerated
version: setup
	@test -n "$(VERSION)" || { echo "usage: make version VERSION=x.y.z" >&2; exit 2; }
	$(BIN)/python -m hack.release set-version $(VERSION)
	$(MAKE) --no-print-directory chart

## site: the documentation site from docs/ (MkDocs, strict: a broken link or anchor, or a page missing from the
## navigation of mkdocs.yml, fails), into site/
site: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## docs: regenerate the support matrix (docs/support-matrix.md) from the runtime's compatibility table, the
## tables of the pages (hack/doc_tables.py: the README's methods, ConfigValid's reasons, every spec field), the
## `kubectl get specinference` samples' columns from the CRD's printer columns (hack/get_samples.py), and
## the output of every `$ specinfer` transcript of the pages from the CLI, on the files their transcripts.yaml
## define (hack/transcripts.py)
docs: setup
	$(BIN)/specinfer support-matrix > docs/support-matrix.md
	$(BIN)/python -m hack.doc_tables
	$(BIN)/python -m hack.get_samples
	$(BIN)/python -m hack.transcripts

## vllm-flags: regenerate the table of vllm serve's flags (and which the operator owns) and of --compilation-config's keys from the engine venv's vLLM
vllm-flags: setup
	venv="$$(hack/engine-venv)" && "$$venv/bin/python" -m hack.vllm_flags table runtime/specinfer_runtime/vllm_serve_flags.json

## bench: validation and rendering throughput
bench: setup
	$(BIN)/python -m bench.validate_render

## bench-operator: the operator on the local control plane (latency, 500 resources, RSS, idle writes)
bench-operator: setup
	$(BIN)/python bench/operator.py

## bench-telemetry: the scrape loop's cost with 500 resources of 2 pods each (CPU, RSS, status writes/min)
bench-telemetry: setup
	$(BIN)/python -m bench.telemetry

## bench-hostile: a telemetry round over 505 pods with 16 of them hostile, against the round without them; then a
## resource's round beside 48 silent pods of another, against it beside them answering; then the operator's own
## ports under 10,000 idle connections and 8 flooding clients, against the same run without them
bench-hostile: setup
	$(BIN)/python -m bench.hostile
	$(BIN)/python -m bench.flood

## bench-scrape-pieces: one scrape of a 4 MiB body dribbled in 32-byte segments, against the body sent at once
bench-scrape-pieces: setup
	$(BIN)/python -m bench.scrape_pieces

## bench-churn: 1,000 resources created, measured and deleted: the operator's series and RSS after each batch
bench-churn: setup
	$(BIN)/python -m bench.churn

## bench-tuning: tokens/s at every K and without speculation on a real engine, against the recommended K
bench-tuning: setup
	venv="$$(hack/engine-venv)" && SPECINFER_ENGINE_VENV="$$venv" $(BIN)/python -m bench.tuning

## bench-load-sweep: every static K at concurrency 1, 4, 16 and 32 and over a mixed day, against what tuning chooses
bench-load-sweep: setup
	venv="$$(hack/engine-venv)" && SPECINFER_ENGINE_VENV="$$venv" $(BIN)/python -m bench.load_sweep

## bench-learning: a draft's mean acceptance length and decode speed against the samples and time it trained on
bench-learning: setup
	venv="$$(hack/engine-venv)" && SPECINFER_ENGINE_VENV="$$venv" $(BIN)/python -m bench.learning_curve

## bench-autoscale-day: a day of load against spec.autoscaling and Auto's K, simulated from the load sweep's profiles
bench-autoscale-day: setup
	$(BIN)/python -m bench.autoscale_day

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
