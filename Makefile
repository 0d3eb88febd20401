# Kyma GPU module. `make help` lists the targets.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CRD := config/crd/bases/gpu.kyma-project.io_gpus.yaml
KUBECTL ?= tools/bin/kubectl
CHARTS := ../shared/charts
BUSOLA := ../shared/vendor/busola/busola-src.tar.gz

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

# hack/setup-venv.sh says what it does every few seconds (pip's own output: .venv/setup.log).
$(STAMP): pyproject.toml requirements-dev.lock hack/setup-venv.sh
	@bash hack/setup-venv.sh $(VENV) $(PYTHON)
	@touch $@

.PHONY: setup
setup: $(STAMP) ## .venv with the pinned Python dependencies (no root)

.PHONY: host
host: ## root: buildah/podman/mmdebstrap (the image), containerd/runc/CNI plugins (the real node), with apt-get
	@bash hack/host-packages.sh

.PHONY: tools
tools: ## build the Go test binaries (etcd, kube-*, kubelet, kwok, NFD, Flux, NVIDIA, KLM, modulectl, ocm, registry) into ~/.cache, once
	bash tools/build.sh

# What `make demo` runs: the control plane, kwok, Flux and the NVIDIA controller of the
# default chart (values-rules/defaults.yaml). No kubelet, NFD, helm, KLM or registry.
DEMO_CHART := $(shell awk '/^chart:/{c=1} c && /^  version: /{print $$2; exit}' values-rules/defaults.yaml)
DEMO_TOOLS := etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok \
  source-controller helm-controller flux gpu-operator-$(DEMO_CHART)

.PHONY: tools-demo
tools-demo: ## build only what `make demo` runs: control plane, kwok, Flux, the default chart's NVIDIA controller
	ONLY="$(DEMO_TOOLS)" bash tools/build.sh

# Test files run on TEST_WORKERS pytest-xdist workers, each with a local cluster of its own,
# longest first (tests/harness/scheduling.py, tests/durations.json).
TEST_WORKERS ?= 5
PYTEST_ARGS ?=

.PHONY: test
test: setup host tools ## all tests: unit, golden, integration (local cluster), Flux and KLM end-to-end
	$(BIN)/pytest -n $(TEST_WORKERS) --durations=15 $(PYTEST_ARGS)

.PHONY: test-durations
test-durations: setup host tools ## make test, then record the seconds per test file in tests/durations.json
	$(BIN)/pytest -n $(TEST_WORKERS) --durations=15 --record-durations $(PYTEST_ARGS)

.PHONY: test-unit
test-unit: setup ## unit and golden tests only (no cluster)
	$(BIN)/pytest tests/unit tests/golden

.PHONY: lint
lint: setup ## ruff, ruff format, mypy --strict, import layering
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

.PHONY: check
check: lint tools ## lint + docs against the code + locks + generated files up to date + manifests (kubeconform, policy tests) + Dockerfile + the dashboard extension against Busola's schemas
	$(BIN)/pytest -q -p no:cacheprovider tests/unit/test_docs.py tests/unit/test_docs_facts.py \
	  tests/unit/test_docs_captured.py
	bash hack/write-locks.sh --check
	bash hack/validate-manifests.sh
	$(BIN)/pytest -q tests/unit/test_manifests.py
	$(BIN)/kyma-gpu rules-schema --check
	$(BIN)/kyma-gpu dashboard-extension --check --busola $(BUSOLA)
	bash hack/flux-crds.sh --check
	bash hack/flux-bundle.sh --check
	$(BIN)/python hack/module.py render --check
	bash hack/check-dockerfile.sh
	$(BIN)/python hack/release_rbac.py --check

.PHONY: flux-bundle
flux-bundle: tools ## render flux/ into the Flux bundle the manager installs on clusters without Flux
	bash hack/flux-bundle.sh

.PHONY: release-rbac
release-rbac: setup tools ## regenerate the HelmRelease ServiceAccount's RBAC from the rendered charts (review the diff!)
	$(BIN)/python hack/release_rbac.py

.PHONY: manifests
manifests: setup ## regenerate the Gpu CRD, its admission policies, docs/crd-reference.md and the dashboard extension from the pydantic models
	$(BIN)/kyma-gpu crd > $(CRD)
	$(BIN)/kyma-gpu crd --reference > docs/crd-reference.md
	$(BIN)/kyma-gpu crd --images-policy > config/admission/gpu_images_policy.yaml
	$(BIN)/kyma-gpu crd --manager-policy > config/admission/manager_policy.yaml
	$(BIN)/kyma-gpu crd --flux-policy > config/admission/flux_policy.yaml
	$(BIN)/kyma-gpu dashboard-extension

.PHONY: rules-schema
rules-schema: setup ## regenerate values-rules/schema/*.json, values-rules/context.md and the YAML files' schema lines
	$(BIN)/kyma-gpu rules-schema

.PHONY: chart-facts
chart-facts: setup ## regenerate values-rules/charts/ from the charts in ../shared/charts
	for chart in $(CHARTS)/gpu-operator-*.tgz; do \
	  version=$$(basename $$chart .tgz); version=$${version#gpu-operator-}; \
	  $(BIN)/kyma-gpu chart-facts $$chart > values-rules/charts/$$version.yaml; \
	done

.PHONY: golden
golden: setup ## regenerate the golden plans on purpose (review the diff!)
	UPDATE_GOLDEN=1 $(BIN)/pytest tests/golden -q

.PHONY: demo
demo: setup tools-demo ## local cluster + Flux + operator + sample Gpu; Ctrl-C stops everything
	$(BIN)/python -m tests.harness demo

.PHONY: docs-capture
docs-capture: setup tools-demo ## run the demo, capture what the docs show into docs/captured/ and the docs' marked blocks
	$(BIN)/python -m tests.harness docs-capture

# The Gpu's views in Kyma dashboard on the demo cluster: `make demo` prints this command with its
# KUBECONFIG. Builds the dashboard once (tools/dashboard.sh, cached like the tools).
DASHBOARD_PORT ?= 3001
.PHONY: dashboard
dashboard: setup ## Kyma dashboard (Busola) for KUBECONFIG (the demo's) on 127.0.0.1:DASHBOARD_PORT; Ctrl-C stops it
	@test -n "$${KUBECONFIG:-}" || { echo "dashboard: set KUBECONFIG (make demo prints it)" >&2; exit 2; }
	bash tools/dashboard.sh
	$(BIN)/python -m tests.harness dashboard --kubeconfig "$$KUBECONFIG" --port $(DASHBOARD_PORT)

.PHONY: dashboard-screenshots
dashboard-screenshots: setup host tools ## refresh docs/images/dashboard-*.png: the dashboard's end-to-end test takes them
	KYMA_GPU_DASHBOARD_SCREENSHOTS=docs/images $(BIN)/pytest -p no:cacheprovider tests/e2e/test_dashboard.py

.PHONY: demo-klm
demo-klm: setup host tools ## the module as a Kyma admin gets it: released to a local registry, installed by the real KLM
	$(BIN)/python -m tests.harness demo --klm

.PHONY: render
render: ## print the whole install (module; Flux comes at run time) with $KUBECTL (default tools/bin/kubectl, else kubectl on PATH)
	@$(if $(wildcard $(KUBECTL)),$(KUBECTL),kubectl) kustomize config/install

.PHONY: module
# A release as Kyma cuts one (hack/module.py, docs/operations.md#cutting-a-release). The
# scanning team is the release pipeline's (modulectl requires one); IMAGE_REPOSITORY and
# COMPONENT_REPOSITORY are where the image and the OCM component version go.
VERSION ?= $(shell awk -F'"' '/^version = /{print $$2; exit}' pyproject.toml)
IMAGE_REPOSITORY ?= europe-docker.pkg.dev/kyma-project/prod
COMPONENT_REPOSITORY ?=
MODULE_TEAM ?=
module: setup host tools ## a release: image, manifest, OCM component (CTF, pushed if COMPONENT_REPOSITORY), ModuleTemplate in dist/module/
	$(BIN)/python hack/module.py release --version $(VERSION) --image-repository $(IMAGE_REPOSITORY) \
	  $(if $(COMPONENT_REPOSITORY),--component-repository $(COMPONENT_REPOSITORY)) \
	  $(if $(MODULE_TEAM),--team $(MODULE_TEAM))

.PHONY: module-render
module-render: setup tools ## config/module/: the manifest, and the ModuleTemplate modulectl writes for module-config.yaml
	$(BIN)/python hack/module.py render

.PHONY: image
image: setup ## build the manager image from the Dockerfile with buildah: localhost/gpu-manager:VERSION
	@bash hack/host-packages.sh image
	bash hack/check-dockerfile.sh
	bash hack/image.sh build $(VERSION)

.PHONY: bench
bench: setup ## benchmarks: print numbers (planning, status, node facts)
	$(BIN)/python benchmarks/bench_core.py

.PHONY: bench-scale
bench-scale: setup tools ## scale benchmark on the local cluster: 1,000, 5,000 and 20,000 nodes (BENCH_SCALE_ARGS="--nodes 5000": one size, ~7 min)
	$(BIN)/python benchmarks/bench_scale.py $(BENCH_SCALE_ARGS)

.PHONY: bench-faults
bench-faults: setup tools ## fault injection: 24 manager kills + controller and API server restarts (~10 min)
	$(BIN)/python benchmarks/fault_injection.py

.PHONY: lock
lock: setup ## re-resolve requirements*.lock (with hashes) from pyproject.toml, keeping the pins (uv; needs PyPI)
	bash hack/write-locks.sh

.PHONY: clean
clean: ## remove the venv and caches (not the Go tool cache)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
