#!/usr/bin/env bash
# Installs what Bulwark needs to build, test and run its demo on Debian 12.
# Idempotent: skips apt-get when every package is already installed.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build pkg-config git
  ccache                  # warm rebuilds across build dirs and clones (CMake uses it if present)
  clang-19 libclang-rt-19-dev  # libFuzzer and its sanitizers: the fuzz targets (scripts/fuzz.sh)
  clang-format-14         # format_test: the sources as .clang-format leaves them
  libyaml-cpp-dev nlohmann-json3-dev libsqlite3-dev libcli11-dev libxxhash-dev
  libgtest-dev libgmock-dev
  python3 python3-torch   # real PyTorch 1.13 with gloo on CPU (the example trainer)
  python3-yaml            # the benchmark driver reads job specs
  python3-venv python3-pip python3-setuptools python3-wheel  # pip install ./python (the SDK)
  libopenblas0-pthread    # fast BLAS for torch on CPU (the reference BLAS is ~6x slower)
  fortunes               # the text corpus the example language model trains on
  gdb                    # native stacks of hung ranks (optional at run time)
  libcurl4-openssl-dev libssl-dev  # objstore: the S3 client (HTTP, SHA-256/HMAC)
  prometheus             # monitoring tests: a real Prometheus scrapes a job; promtool
  chromium               # the web dashboard's browser test (tests/ui) drives it headless
  docker-registry        # registry tests: images' commands from a real registry on loopback
  slurmctld slurmd slurm-client  # Slurm 22.05: the Slurm test cluster (src/backend/testing);
                                 # its services need /etc/slurm/slurm.conf, so they do not start
)
# objstore's integration tests run s3rver on node. Take Debian's node/npm only when
# none is installed (a NodeSource nodejs bundles npm and conflicts with Debian's npm).
command -v node >/dev/null 2>&1 || PKGS+=(nodejs)
command -v npm >/dev/null 2>&1 || PKGS+=(npm)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# s3rver, the S3-compatible server of the objstore tests, pinned by
# tools/s3rver/package-lock.json.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -x "$ROOT/tools/s3rver/node_modules/.bin/s3rver" ]; then
  echo "setup: installing s3rver into tools/s3rver/node_modules"
  npm ci --prefix "$ROOT/tools/s3rver" --no-audit --no-fund
fi
# uPlot, the web dashboard's charts (src/ui embeds it at build time), and playwright-core,
# which drives Chromium in the dashboard's browser test (no browser download: Debian's
# chromium above); pinned by ui/package-lock.json.
if [ ! -f "$ROOT/ui/node_modules/uplot/dist/uPlot.iife.min.js" ] ||
   [ ! -f "$ROOT/ui/node_modules/playwright-core/package.json" ]; then
  echo "setup: installing uplot and playwright-core into ui/node_modules"
  npm ci --prefix "$ROOT/ui" --no-audit --no-fund
fi
# kubernetes-models (the official Kubernetes v1.36 OpenAPI schema) and ajv, with which
# k8s_schema_test validates every object Bulwark generates; pinned by
# tools/k8s-schema/package-lock.json.
if [ ! -f "$ROOT/tools/k8s-schema/node_modules/kubernetes-models/package.json" ] ||
   [ ! -f "$ROOT/tools/k8s-schema/node_modules/ajv-formats/package.json" ]; then
  echo "setup: installing kubernetes-models into tools/k8s-schema/node_modules"
  npm ci --prefix "$ROOT/tools/k8s-schema" --no-audit --no-fund
fi
