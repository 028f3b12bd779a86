#!/usr/bin/env bash
# Puts llama.cpp's vocab-only GGUFs for Llama 3 (llama-bpe), Qwen2, GPT-2, Llama 2 (llama-spm) and
# Phi-3, each with its test-tokenizer-0 .inp/.out (inputs and the ids Hugging Face's tokenizer gave),
# at models/vocabs/ (or $KVSTASH_MODELS_DIR/vocabs/), for tests/parity/tokenizer_vocabs_test.cpp.
# They ship in the PyPI sdist llama-cpp-python==0.3.36 (vendor/llama.cpp/models/, 76 MB), the only
# place they are published on reachable registries; the sdist and every extracted file are checked
# against the sha256 below. Does nothing when all files are already there and correct.
#   KVSTASH_VOCAB_SDIST=/path/llama_cpp_python-0.3.36.tar.gz  use that copy instead of downloading
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODELS_DIR="${KVSTASH_MODELS_DIR:-$ROOT/models}"
TARGET_DIR="$MODELS_DIR/vocabs"
SDIST="llama_cpp_python-0.3.36.tar.gz"
SDIST_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
SDIST_PREFIX="llama_cpp_python-0.3.36/vendor/llama.cpp/models"

# sha256 and name of every file installed (the .inp is the same for all five).
FILES="\
97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e  ggml-vocab-llama-bpe.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0  ggml-vocab-llama-bpe.gguf.inp
118abf2034a197fc5c9dec5204dfdeee7004c7c70952ae577f66b99e212fab9b  ggml-vocab-llama-bpe.gguf.out
44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c  ggml-vocab-qwen2.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0  ggml-vocab-qwen2.gguf.inp
de785bb305cc6fa9d43908ed5da337f853c0b79e971348fcfb9f0915a39c5363  ggml-vocab-qwen2.gguf.out
cedc56ca6e2e89f63e781696d1fd76b4b1d49e6720dee86463e915f6e90016ac  ggml-vocab-gpt-2.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0  ggml-vocab-gpt-2.gguf.inp
48e8c4cb3ad5c37915b225f872222567c1c4dd4d66951aa53460c8d152ff6d60  ggml-vocab-gpt-2.gguf.out
16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69  ggml-vocab-llama-spm.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0  ggml-vocab-llama-spm.gguf.inp
ad6905c925c49c022974fe67e030382e8a4f56eb4489a0b9481dcedb1ec73b29  ggml-vocab-llama-spm.gguf.out
967d7190d11c4842eab697079d98d56c2116e10eb617be355a2733bfc132e326  ggml-vocab-phi-3.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0  ggml-vocab-phi-3.gguf.inp
ad6905c925c49c022974fe67e030382e8a4f56eb4489a0b9481dcedb1ec73b29  ggml-vocab-phi-3.gguf.out
"

all_present() {
  (cd "$TARGET_DIR" 2>/dev/null && printf "%s" "$FILES" | sha256sum --check --status --strict 2>/dev/null)
}

if all_present; then
  exit 0
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
if [ -n "${KVSTASH_VOCAB_SDIST:-}" ]; then
  cp "$KVSTASH_VOCAB_SDIST" "$TMP/$SDIST"
else
  echo "==> downloading tokenizer test vocabularies (llama-cpp-python==0.3.36 sdist from PyPI, 76 MB)" >&2
  python3 -m pip download --quiet --no-deps --no-binary :all: --disable-pip-version-check -d "$TMP" \
    "llama-cpp-python==0.3.36"
fi
if ! echo "$SDIST_SHA256  $TMP/$SDIST" | sha256sum --check --status; then
  echo "fetch_vocabs.sh: sha256 of $SDIST does not match $SDIST_SHA256; refusing to use it" >&2
  exit 1
fi

NAMES=$(printf "%s" "$FILES" | awk 'NF { print $2 }' | sort -u)
MEMBERS=()
for name in $NAMES; do MEMBERS+=("$SDIST_PREFIX/$name"); done
tar -xzf "$TMP/$SDIST" -C "$TMP" "${MEMBERS[@]}"
if ! (cd "$TMP/$SDIST_PREFIX" && printf "%s" "$FILES" | sha256sum --check --status --strict); then
  echo "fetch_vocabs.sh: a vocabulary file in $SDIST does not match its recorded sha256; refusing to install" >&2
  exit 1
fi

mkdir -p "$TARGET_DIR"
for name in $NAMES; do
  mv "$TMP/$SDIST_PREFIX/$name" "$TARGET_DIR/$name.part" && mv "$TARGET_DIR/$name.part" "$TARGET_DIR/$name"
done
echo "==> tokenizer test vocabularies installed in $TARGET_DIR" >&2
