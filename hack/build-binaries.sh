#!/usr/bin/env bash
# Build the local control-plane toolchain from Go modules (Go module proxy only,
# no GitHub / dl.k8s.io downloads) into a cache directory OUTSIDE the repo:
#
#   ${SPECINFER_CACHE:-$HOME/.cache/specinfer}/bin/<name>-<version>   real binaries
#   ${SPECINFER_CACHE:-$HOME/.cache/specinfer}/bin/<name>             symlink -> pinned version
#   ${SPECINFER_CACHE:-$HOME/.cache/specinfer}/src/...                generated wrapper modules
#
# Versions come from hack/versions.env. Binaries already built for the pinned
# version are skipped, so a rerun is a no-op taking a few seconds.
# Go caches: the normal defaults (GOMODCACHE=$(go env GOMODCACHE), GOCACHE=$(go env GOCACHE))
# are used so they are shared with other Go work on the machine; override them
# via the environment if wanted.
#
# Usage: hack/build-binaries.sh [--force] [name...]
#   names: kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok helm helm-docs lws healthcheck
#          monitoring-crds (prometheus-operator's ServiceMonitor, PodMonitor and PrometheusRule CRDs, for
#          validating the chart's monitors and rules)
#          prometheus (prometheus and promtool, both from github.com/prometheus/prometheus)
#          prometheus-adapter (the custom metrics API over Prometheus, for spec.autoscaling's HorizontalPodAutoscaler)
#          crane (go-containerregistry's CLI; `crane registry serve` is the OCI registry of the release tests)
#          cosign (signs and verifies what make release pushes)
#   no name: every one but crane and cosign, which are built only when named
#   lws also copies its CRDs to ${SPECINFER_CACHE}/crds/lws-<version>/; inferencepool-crd fetches the InferencePool CRD
#   keda-crd fetches KEDA's ScaledObject CRD (spec.autoscaling with the operator's --keda-prometheus)
#   gitops-crds: the Flux (GitRepository, OCIRepository, HelmRelease, Kustomization) and Argo CD (Application,
#          ApplicationSet, AppProject) CRDs, for validating gitops/ server-side
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${HACK_DIR}/versions.env"

CACHE="${SPECINFER_CACHE:-${HOME}/.cache/specinfer}"
BIN="${CACHE}/bin"
SRC="${CACHE}/src"
mkdir -p "${BIN}" "${SRC}"

FORCE=0
WANT=()
for a in "$@"; do
  case "$a" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) WANT+=("$a") ;;
  esac
done

T_ALL=$(date +%s.%N)
log() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

# pinned NAME -> the path of binary NAME at its pinned version (fails for a name that is no single binary)
pinned() {
  case "$1" in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl) echo "${BIN}/$1-${KUBERNETES_VERSION}" ;;
    etcd) echo "${BIN}/etcd-${ETCD_VERSION}" ;;
    kwok) echo "${BIN}/kwok-${KWOK_VERSION}" ;;
    helm) echo "${BIN}/helm-${HELM_VERSION}" ;;
    helm-docs) echo "${BIN}/helm-docs-${HELM_DOCS_VERSION}" ;;
    lws) echo "${BIN}/lws-${LWS_VERSION}" ;;
    prometheus-adapter) echo "${BIN}/prometheus-adapter-${PROMETHEUS_ADAPTER_VERSION}" ;;
    crane) echo "${BIN}/crane-${GO_CONTAINERREGISTRY_VERSION}" ;;
    cosign) echo "${BIN}/cosign-${COSIGN_VERSION}" ;;
    *) return 1 ;;
  esac
}
all_wanted_built() {
  [[ ${FORCE} -eq 0 && ${#WANT[@]} -gt 0 ]] || return 1
  local w path; for w in "${WANT[@]}"; do path="$(pinned "$w")" && [[ -x "${path}" ]] || return 1; done
}

# One build at a time: make test starts one beside its first checks, and hack/cluster up asks again. A run that
# names binaries (the unit tests ask for kubectl and helm, built first) waits for those, not for the whole build.
exec 9>"${CACHE}/build-binaries.lock"
until flock -n 9; do
  if all_wanted_built; then
    log "${WANT[*]}: built by the build under way"
    exit 0
  fi
  sleep 2
done

# ---- locate a Go toolchain -------------------------------------------------
GO="${GO:-}"
if [[ -z "${GO}" ]]; then
  if command -v go >/dev/null 2>&1; then GO="$(command -v go)"
  elif [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go
  else echo "error: no Go toolchain found (set GO=/path/to/go or add go to PATH)" >&2; exit 1
  fi
fi
export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
# GOPROXY/GOMODCACHE/GOCACHE are left as configured (`go env`); only the module proxy is needed.
GOPROXY_URL="$("${GO}" env GOPROXY)"; GOPROXY_URL="${GOPROXY_URL%%,*}"; GOPROXY_URL="${GOPROXY_URL%%|*}"

# Built only when named (make release, hack/registry.py): no suite needs them, and cosign alone takes about a quarter
# of an hour of two cores to build.
ON_DEMAND=" crane cosign "
wanted() {
  [[ ${#WANT[@]} -eq 0 && ${ON_DEMAND} != *" $1 "* ]] && return 0
  local w; for w in "${WANT[@]}"; do [[ "$w" == "$1" ]] && return 0; done
  return 1
}

# needs_build NAME VERSION -> 0 if the versioned binary is missing (or --force)
needs_build() {
  local out="${BIN}/$1-$2"
  if [[ ${FORCE} -eq 0 && -x "${out}" ]]; then
    ln -sfn "$1-$2" "${BIN}/$1"
    log "$1 $2: already built (${out})"
    return 1
  fi
  return 0
}

# finish NAME VERSION TMPFILE START -> atomically install + symlink
finish() {
  local name="$1" ver="$2" tmp="$3" t0="$4"
  chmod +x "${tmp}"
  mv -f "${tmp}" "${BIN}/${name}-${ver}"
  ln -sfn "${name}-${ver}" "${BIN}/${name}"
  log "${name} ${ver}: built in $(elapsed "${t0}")s ($(du -h "${BIN}/${name}-${ver}" | cut -f1))"
}

# go_install NAME VERSION T0 LDFLAGS PACKAGE@VERSION: `go install` into a temporary GOBIN (nothing half-written in
# BIN), then finish
go_install() {
  local name="$1" ver="$2" t0="$3" ld="$4" pkg="$5" tmpbin
  tmpbin="$(mktemp -d "${BIN}/.gobin.XXXXXX")"
  GOBIN="${tmpbin}" "${GO}" install -trimpath -ldflags "${ld}" "${pkg}"
  mv -f "${tmpbin}/${name}" "${BIN}/.${name}.tmp"; rmdir "${tmpbin}"
  finish "${name}" "${ver}" "${BIN}/.${name}.tmp" "${t0}"
}

# modfield MODULE VERSION FIELD -> value of a top-level string field of `go mod download -json`
modjson() { "${GO}" mod download -json "$1@$2"; }

# crd_file NAME MODULE VERSION PATH STEM: the CRD at PATH in MODULE@VERSION, copied to crds/STEM-VERSION.yaml once.
crd_file() {
  local name="$1" module="$2" version="$3" path="$4" out="${CACHE}/crds/$5-$3.yaml"
  wanted "${name}" && [[ ${FORCE} -eq 1 || ! -s "${out}" ]] || return 0
  mkdir -p "${CACHE}/crds"
  cp "$(modjson "${module}" "${version}" | jfield Dir)/${path}" "${out}.tmp"
  chmod u+w "${out}.tmp"
  mv -f "${out}.tmp" "${out}"
  log "${name} ${version}: ${out}"
}
jfield() { sed -n "s/^[[:space:]]*\"$1\": \"\\(.*\\)\",\\{0,1\\}\$/\\1/p" | head -n1; }

# git commit of a module version (from the proxy's Origin metadata), best effort;
# empty when the proxy does not record it (then the -X gitCommit flag is omitted).
modcommit() {
  local json="$1" mod="$2" ver="$3" h
  h="$(jfield Hash <<<"${json}")"
  if [[ -z "${h}" ]] && command -v curl >/dev/null 2>&1; then
    h="$(curl -fsSL "${GOPROXY_URL}/${mod}/@v/${ver}.info" 2>/dev/null | sed -n 's/.*"Hash":"\([0-9a-f]\{40\}\)".*/\1/p')" || true
  fi
  echo "${h}"
}
modtime() { "${GO}" list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' "$1@$2" 2>/dev/null || true; }

# wrapper DIR NAME GOVERSION MODULE VERSION PACKAGE... -> a module in DIR requiring MODULE@VERSION, from which
# the PACKAGEs build: for modules with replace directives, or whose version list the proxy refuses (go install
# mod@version asks for it).
wrapper() {
  local dir="$1" name="$2" go="$3" mod="$4" ver="$5"
  shift 5
  mkdir -p "${dir}"
  [[ -f "${dir}/.tidy-ok" ]] && return 0
  printf '// Code generated by hack/build-binaries.sh. DO NOT EDIT.\nmodule specinfer.local/%s-build\n\ngo %s\n\nrequire %s %s\n' \
    "${name}" "${go}" "${mod}" "${ver}" > "${dir}/go.mod"
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    printf '\t_ "%s"\n' "$@"
    printf ')\n'
  } > "${dir}/tools.go"
  (cd "${dir}" && "${GO}" mod tidy)
  touch "${dir}/.tidy-ok"
}

log "go: $(${GO} version) | GOMODCACHE=$(${GO} env GOMODCACHE) GOCACHE=$(${GO} env GOCACHE) GOPROXY=$(${GO} env GOPROXY)"
log "cache: ${CACHE}"

# Two lanes: Kubernetes' four binaries share one module and its compiled packages (Prometheus follows them, which
# makes the lanes about as long); helm, etcd, kwok and the rest are modules of their own. Running them side by side
# fills the time one lane spends linking (single threaded) or downloading modules.
build_kubernetes() {
  # ---- Kubernetes (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl) ----
  K8S_BINS=(kubectl kube-apiserver kube-controller-manager kube-scheduler)  # kubectl first: the unit tests wait for it
  k8s_todo=()
  for b in "${K8S_BINS[@]}"; do
    if wanted "$b" && needs_build "$b" "${KUBERNETES_VERSION}"; then k8s_todo+=("$b"); fi
  done
  if [[ ${#k8s_todo[@]} -gt 0 ]]; then
    t=$(date +%s.%N)
    kv="${KUBERNETES_VERSION}"
    json="$(modjson k8s.io/kubernetes "${kv}")"
    kdir="$(jfield Dir <<<"${json}")"
    [[ -n "${kdir}" && -f "${kdir}/go.mod" ]] || { echo "error: cannot download k8s.io/kubernetes@${kv}" >&2; echo "${json}" >&2; exit 1; }
    commit="$(modcommit "${json}" k8s.io/kubernetes "${kv}")"
    bdate="$(modtime k8s.io/kubernetes "${kv}")"; bdate="${bdate:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}"
    major="${kv#v}"; major="${major%%.*}"
    minor="${kv#v*.}"; minor="${minor%%.*}"
    staging_ver="v0.${kv#v*.}"            # v1.35.8 -> v0.35.8
    godir="$(sed -n 's/^go \([0-9.]*\).*/\1/p' "${kdir}/go.mod" | head -n1)"

    wdir="${SRC}/kubernetes-${kv}"
    mkdir -p "${wdir}"
    if [[ ! -f "${wdir}/.tidy-ok" ]]; then
      # Generated from the downloaded kubernetes go.mod: every `k8s.io/X => ./staging/...`
      # line becomes `k8s.io/X => k8s.io/X v0.<minor>.<patch>`.
      mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._/-]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "${kdir}/go.mod" | sort -u)
      [[ ${#staging[@]} -gt 0 ]] || { echo "error: no staging replace lines found in ${kdir}/go.mod" >&2; exit 1; }
      {
        echo "// Code generated by hack/build-binaries.sh from k8s.io/kubernetes@${kv}/go.mod. DO NOT EDIT."
        echo "module specinfer.local/kubernetes-build"
        echo
        echo "go ${godir}"
        echo
        echo "require k8s.io/kubernetes ${kv}"
        echo
        echo "replace ("
        for m in "${staging[@]}"; do printf '\t%s => %s %s\n' "$m" "$m" "${staging_ver}"; done
        echo ")"
      } > "${wdir}/go.mod"
      {
        echo "//go:build tools"
        echo
        echo "package tools"
        echo
        echo "import ("
        for b in "${K8S_BINS[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/${b}\""; done
        echo ")"
      } > "${wdir}/tools.go"
      log "kubernetes ${kv}: generated wrapper module ${wdir} (${#staging[@]} staging replaces -> ${staging_ver}); go mod tidy..."
      (cd "${wdir}" && "${GO}" mod tidy) || { echo "error: go mod tidy failed in ${wdir}" >&2; exit 1; }
      touch "${wdir}/.tidy-ok"
    fi
    log "kubernetes ${kv}: module prep took $(elapsed "${t}")s (commit ${commit}, buildDate ${bdate})"

    ld="-s -w"
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ld+=" -X ${p}.gitVersion=${kv} -X ${p}.gitMajor=${major} -X ${p}.gitMinor=${minor}"
      ld+=" -X ${p}.gitTreeState=clean -X ${p}.buildDate=${bdate}"
      if [[ -n "${commit}" ]]; then ld+=" -X ${p}.gitCommit=${commit}"; fi
    done
    for b in "${k8s_todo[@]}"; do
      t=$(date +%s.%N)
      log "${b} ${kv}: building..."
      (cd "${wdir}" && "${GO}" build -trimpath -ldflags "${ld}" -o "${BIN}/.${b}.tmp" "k8s.io/kubernetes/cmd/${b}")
      finish "${b}" "${kv}" "${BIN}/.${b}.tmp" "${t}"
    done
  fi
}

build_others() {
  # ---- helm (first: the unit tests wait for it) --------------------------------
  if wanted helm && needs_build helm "${HELM_VERSION}"; then
    t=$(date +%s.%N)
    hv="${HELM_VERSION}"
    json="$(modjson helm.sh/helm/v3 "${hv}")"
    hdir="$(jfield Dir <<<"${json}")"
    commit="$(modcommit "${json}" helm.sh/helm/v3 "${hv}")"
    cgv="$(sed -n 's#^[[:space:]]*k8s\.io/client-go v0\.\([0-9]*\)\..*#\1#p' "${hdir}/go.mod" | head -n1)"
    ld="-s -w -X helm.sh/helm/v3/internal/version.version=${hv} -X helm.sh/helm/v3/internal/version.metadata="
    ld+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
    if [[ -n "${commit}" ]]; then ld+=" -X helm.sh/helm/v3/internal/version.gitCommit=${commit}"; fi
    if [[ -n "${cgv}" ]]; then
      for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
        ld+=" -X ${p}.k8sVersionMajor=1 -X ${p}.k8sVersionMinor=${cgv}"
      done
    fi
    log "helm ${hv}: building..."
    go_install helm "${hv}" "${t}" "${ld}" "helm.sh/helm/v3/cmd/helm@${hv}"
  fi

  # ---- etcd (server module has replace directives -> wrapper module) ----------
  if wanted etcd && needs_build etcd "${ETCD_VERSION}"; then
    t=$(date +%s.%N)
    ev="${ETCD_VERSION}"
    json="$(modjson go.etcd.io/etcd/server/v3 "${ev}")"
    commit="$(modcommit "${json}" go.etcd.io/etcd/server/v3 "${ev}")"
    wdir="${SRC}/etcd-${ev}"
    wrapper "${wdir}" etcd 1.24 go.etcd.io/etcd/server/v3 "${ev}" go.etcd.io/etcd/server/v3
    log "etcd ${ev}: building..."
    sha="${commit:0:8}"; sha="${sha:-${ev}}"
    (cd "${wdir}" && "${GO}" build -trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=${sha}" -o "${BIN}/.etcd.tmp" go.etcd.io/etcd/server/v3)
    finish etcd "${ev}" "${BIN}/.etcd.tmp" "${t}"
  fi

  # ---- kwok (controller only; we do not use kwokctl) --------------------------
  if wanted kwok && needs_build kwok "${KWOK_VERSION}"; then
    t=$(date +%s.%N)
    log "kwok ${KWOK_VERSION}: building..."
    go_install kwok "${KWOK_VERSION}" "${t}" \
      "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${KUBERNETES_VERSION#v}" \
      "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
  fi

  # ---- helm-docs (the charts' README.md from their values.yaml) ----------------
  if wanted helm-docs && needs_build helm-docs "${HELM_DOCS_VERSION}"; then
    t=$(date +%s.%N)
    log "helm-docs ${HELM_DOCS_VERSION}: building..."
    go_install helm-docs "${HELM_DOCS_VERSION}" "${t}" "-s -w -X main.version=${HELM_DOCS_VERSION#v}" \
      "github.com/norwoodj/helm-docs/cmd/helm-docs@${HELM_DOCS_VERSION}"
  fi

  # ---- LeaderWorkerSet controller (a wrapper module: `go install mod@version` asks the proxy for the
  # module's version list, which it refuses for sigs.k8s.io/lws), and its CRDs from the same module ----
  if wanted lws && needs_build lws "${LWS_VERSION}"; then
    t=$(date +%s.%N)
    lv="${LWS_VERSION}"
    wdir="${SRC}/lws-${lv}"
    wrapper "${wdir}" lws 1.26.0 sigs.k8s.io/lws "${lv}" sigs.k8s.io/lws/cmd
    json="$(modjson sigs.k8s.io/lws "${lv}")"
    commit="$(modcommit "${json}" sigs.k8s.io/lws "${lv}")"
    ld="-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion=${lv}"
    if [[ -n "${commit}" ]]; then ld+=" -X sigs.k8s.io/lws/pkg/version.GitCommit=${commit}"; fi
    log "lws ${lv}: building..."
    (cd "${wdir}" && "${GO}" build -trimpath -ldflags "${ld}" -o "${BIN}/.lws.tmp" sigs.k8s.io/lws/cmd)
    crds="${CACHE}/crds/lws-${lv}"
    mkdir -p "${crds}.tmp"
    cp "$(jfield Dir <<<"${json}")"/config/crd/bases/*.yaml "${crds}.tmp/"
    chmod u+w "${crds}.tmp"/*.yaml
    rm -rf "${crds}"; mv "${crds}.tmp" "${crds}"
    finish lws "${lv}" "${BIN}/.lws.tmp" "${t}"
  fi

  # ---- single CRDs from their projects' modules: the InferencePool (Gateway API Inference Extension, for
  # spec.inferencePool's pools) and KEDA's ScaledObject (spec.autoscaling rendered for KEDA, validated server-side) ----
  crd_file inferencepool-crd sigs.k8s.io/gateway-api-inference-extension "${GATEWAY_API_INFERENCE_EXTENSION_VERSION}" \
    config/crd/bases/inference.networking.k8s.io_inferencepools.yaml inferencepools
  crd_file keda-crd github.com/kedacore/keda/v2 "${KEDA_VERSION}" config/crd/bases/keda.sh_scaledobjects.yaml \
    keda-scaledobjects

  # ---- healthcheck (hack/tools/healthcheck: Argo CD Lua and kstatus health, for the GitOps tests) ----
  hc_dir="${HACK_DIR}/tools/healthcheck"
  hc_ver="$(cat "${hc_dir}/go.mod" "${hc_dir}/go.sum" "${hc_dir}/main.go" | cksum | cut -d' ' -f1)"
  if wanted healthcheck && needs_build healthcheck "${hc_ver}"; then
    t=$(date +%s.%N)
    log "healthcheck ${hc_ver}: building..."
    (cd "${hc_dir}" && "${GO}" build -trimpath -ldflags "-s -w" -o "${BIN}/.healthcheck.tmp" .)
    finish healthcheck "${hc_ver}" "${BIN}/.healthcheck.tmp" "${t}"
  fi

  # ---- the prometheus-operator CRDs the chart's monitors and rules are validated against (server-side) ----
  mon="${CACHE}/crds/monitoring-${PROMETHEUS_OPERATOR_VERSION}"
  if wanted monitoring-crds && [[ ${FORCE} -eq 1 || ! -d "${mon}" ]]; then
    json="$(modjson github.com/prometheus-operator/prometheus-operator "${PROMETHEUS_OPERATOR_VERSION}")"
    pdir="$(jfield Dir <<<"${json}")/example/prometheus-operator-crd"
    mkdir -p "${mon}.tmp"
    for kind in servicemonitors podmonitors prometheusrules; do
      cp "${pdir}/monitoring.coreos.com_${kind}.yaml" "${mon}.tmp/"
    done
    chmod u+w "${mon}.tmp"/*.yaml
    rm -rf "${mon}"; mv "${mon}.tmp" "${mon}"
    log "monitoring-crds ${PROMETHEUS_OPERATOR_VERSION}: ${mon}"
  fi

  # ---- the Flux and Argo CD CRDs gitops/'s objects are validated against (server-side) ----
  gitops="${CACHE}/crds/gitops-${FLUX_SOURCE_CONTROLLER_VERSION}-${FLUX_HELM_CONTROLLER_VERSION}-${FLUX_KUSTOMIZE_CONTROLLER_VERSION}-${ARGOCD_VERSION}"
  if wanted gitops-crds && [[ ${FORCE} -eq 1 || ! -d "${gitops}" ]]; then
    mkdir -p "${gitops}.tmp"
    for mv in "fluxcd/source-controller ${FLUX_SOURCE_CONTROLLER_VERSION} gitrepositories ocirepositories" \
              "fluxcd/helm-controller ${FLUX_HELM_CONTROLLER_VERSION} helmreleases" \
              "fluxcd/kustomize-controller ${FLUX_KUSTOMIZE_CONTROLLER_VERSION} kustomizations"; do
      read -r mod ver kinds <<<"${mv}"
      dir="$(modjson "github.com/${mod}" "${ver}" | jfield Dir)/config/crd/bases"
      group="$(sed -n 's/^  group: //p' "${dir}"/*.yaml | head -n1)"
      for kind in ${kinds}; do cp "${dir}/${group}_${kind}.yaml" "${gitops}.tmp/"; done
    done
    cp "$(modjson github.com/argoproj/argo-cd/v3 "${ARGOCD_VERSION}" | jfield Dir)"/manifests/crds/*-crd.yaml "${gitops}.tmp/"
    chmod u+w "${gitops}.tmp"/*.yaml
    rm -rf "${gitops}"; mv "${gitops}.tmp" "${gitops}"
    log "gitops-crds: ${gitops}"
  fi

  # ---- prometheus-adapter: the custom metrics API the HorizontalPodAutoscaler of spec.autoscaling reads, from the
  # engines' own counters in Prometheus (a wrapper module: the proxy refuses the module's version list) ----
  if wanted prometheus-adapter && needs_build prometheus-adapter "${PROMETHEUS_ADAPTER_VERSION}"; then
    t=$(date +%s.%N)
    av="${PROMETHEUS_ADAPTER_VERSION}"
    wdir="${SRC}/prometheus-adapter-${av}"
    wrapper "${wdir}" prometheus-adapter 1.26 sigs.k8s.io/prometheus-adapter "${av}" sigs.k8s.io/prometheus-adapter/cmd/adapter
    log "prometheus-adapter ${av}: building..."
    (cd "${wdir}" && "${GO}" build -trimpath -ldflags "-s -w" -o "${BIN}/.prometheus-adapter.tmp" \
      sigs.k8s.io/prometheus-adapter/cmd/adapter)
    finish prometheus-adapter "${av}" "${BIN}/.prometheus-adapter.tmp" "${t}"
  fi
}

build_release_tools() {
  # ---- crane (its `registry serve` is the loopback OCI registry of hack/registry.py) and cosign (make release
  # signs with it); last, as nothing but the release needs them ----
  if wanted crane && needs_build crane "${GO_CONTAINERREGISTRY_VERSION}"; then
    t=$(date +%s.%N)
    log "crane ${GO_CONTAINERREGISTRY_VERSION}: building..."
    go_install crane "${GO_CONTAINERREGISTRY_VERSION}" "${t}" \
      "-s -w -X github.com/google/go-containerregistry/cmd/crane/cmd.Version=${GO_CONTAINERREGISTRY_VERSION}" \
      "github.com/google/go-containerregistry/cmd/crane@${GO_CONTAINERREGISTRY_VERSION}"
  fi
  if wanted cosign && needs_build cosign "${COSIGN_VERSION}"; then
    t=$(date +%s.%N)
    cv="${COSIGN_VERSION}"
    json="$(modjson github.com/sigstore/cosign/v3 "${cv}")"
    commit="$(modcommit "${json}" github.com/sigstore/cosign/v3 "${cv}")"
    ld="-s -w -X sigs.k8s.io/release-utils/version.gitVersion=${cv} -X sigs.k8s.io/release-utils/version.gitTreeState=clean"
    if [[ -n "${commit}" ]]; then ld+=" -X sigs.k8s.io/release-utils/version.gitCommit=${commit}"; fi
    log "cosign ${cv}: building..."
    go_install cosign "${cv}" "${t}" "${ld}" "github.com/sigstore/cosign/v3/cmd/cosign@${cv}"
  fi
}

build_prometheus() {
  # ---- Prometheus and promtool (a wrapper module: the proxy refuses the module's version list) ----
  if wanted prometheus && { needs_build prometheus "${PROMETHEUS_VERSION}" || needs_build promtool "${PROMETHEUS_VERSION}"; }; then
    t=$(date +%s.%N)
    pv="${PROMETHEUS_VERSION}"
    wdir="${SRC}/prometheus-${pv}"
    wrapper "${wdir}" prometheus 1.26 github.com/prometheus/prometheus "${pv}" \
      github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
    release="${pv#v0.}"; release="${release:0:1}.${release:1}"  # module v0.316.0 is Prometheus 3.16.0
    for b in prometheus promtool; do
      log "${b} ${pv}: building..."
      (cd "${wdir}" && "${GO}" build -trimpath -ldflags "-s -w -X github.com/prometheus/common/version.Version=${release}" \
        -o "${BIN}/.${b}.tmp" "github.com/prometheus/prometheus/cmd/${b}")
      finish "${b}" "${pv}" "${BIN}/.${b}.tmp" "${t}"
    done
  fi
}

build_others &
others=$!
trap 'kill "${others}" 2>/dev/null || true' EXIT
build_kubernetes
build_prometheus
wait "${others}"
build_release_tools
trap - EXIT

log "all done in $(elapsed "${T_ALL}")s; binaries in ${BIN}"
