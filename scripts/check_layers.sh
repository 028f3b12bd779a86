#!/usr/bin/env bash
# Checks that dependencies point one way (docs/architecture/layers.md): a file may include headers of
# its own layer and of the layers below it, never of a layer above. Also: a public header
# (include/kvstash/*.h) includes only other public headers ("kvstash/...") and system headers (<...>),
# and examples/ include only public headers. Exit 1 naming file, line, the include and both layers.
#
# Layers, bottom up (rank: directories):
#   0 base       src/base/          small shared utilities; no kvstash dependency but kvstash/error.h
#   1 format     src/format/        GGUF reader, tensor types
#   2 kernels    src/backends/cpu/<op>/  the CPU kernels, one folder per op (matmul, attention, norm, rope,
#                                   ...; runtime/: dispatch, thread pool), ISA variants and reference/ beside
#                                   (the op entry points beside them that take the model's types: backends,
#                                   FILE_LAYER)
#   3 kv         src/kv/            KV cache, blocks, block pool, block hash
#   4 tokenizer  src/tokenizer/     BPE, SentencePiece (a Model builds its tokenizer)
#   5 model      src/model/         config, weights, the forward pass over the Backend ops (model/backend.h)
#   6 backends   src/backends/      the ops' implementations: cpu/ (cpu_backend.cpp; per op: embed/ ffn/
#                                   adapters/ and FILE_LAYER's entry points, on the kernels), a device backend beside it
#   7 state      src/state/         State, state files, fingerprints
#   8 text       src/text/          chat templates
#   9 grammar    src/grammar/       GBNF grammars, JSON Schema -> GBNF, the token-mask matcher
#  10 engine     src/engine/        evaluator (owns a backend), generation, sampler, sessions, prefix cache
#  11 frontends  src/server/ src/hub/ tools/ python/ examples/ bench/
# A public header belongs to the layer that implements it (PUBLIC_LAYER below); tests/ may include
# anything. The CLI (tools/) and the Python bindings (python/) are users of the library like examples/:
# they include the public headers, their own files, and only the internal headers named for them in
# ACCESS_HEADERS (each one a deliberate door: an access header, or the server the CLI starts). Every include is resolved as the compiler does for each target: "x" in the including file's
# directory first, then (like <x>) in src/, tools/ (the CLI) and include/; "a/../b" is normalised. An
# include that resolves to no repository file is a system header. A directory under src/ that has no
# layer in DIR_LAYER is an error (give it one).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

LAYERS=(base format kernels kv tokenizer model backends state text grammar engine frontends)
declare -A DIR_LAYER=(
    [src/base]=base [src/format]=format [src/kv]=kv [src/tokenizer]=tokenizer
    [src/backends/cpu/activation]=kernels [src/backends/cpu/attention]=kernels [src/backends/cpu/exp]=kernels
    [src/backends/cpu/matmul]=kernels [src/backends/cpu/norm]=kernels [src/backends/cpu/rope]=kernels
    [src/backends/cpu/runtime]=kernels [src/backends/cpu/simd]=kernels [src/backends/cpu/ssm]=kernels
    [src/backends/cpu/adapters]=backends [src/backends/cpu/embed]=backends [src/backends/cpu/ffn]=backends
    [src/model]=model [src/backends]=backends [src/state]=state [src/text]=text [src/grammar]=grammar [src/engine]=engine
    [src/server]=frontends [src/hub]=frontends [tools]=frontends [python]=frontends [examples]=frontends [bench]=frontends
)
# Files (path without .h / .cpp) whose layer is not their directory's: the CPU backend's op entry points
# that sit in a kernel folder beside the kernel they run, but take the model's and the cache's types
# (MatrixRef, ModelConfig, KvCache, segments): layer backends, so the kernels beside them cannot include them.
declare -A FILE_LAYER=(
    [src/backends/cpu/attention/segment_attention]=backends [src/backends/cpu/matmul/project]=backends
    [src/backends/cpu/norm/norm_rows]=backends [src/backends/cpu/ssm/mamba_block]=backends
)
declare -A ACCESS_HEADERS=(
    # kv_bindings.cpp: a State's KV to and from NumPy (no per-layer KV view in the public API), through
    # the KV blocks' one staging path; state_bindings.cpp: an adapter mismatch named as the library names it.
    [python]="src/model/model_access.h src/state/state_access.h src/kv/kv_cache.h src/kv/kv_block_staging.h src/state/adapter_fingerprint.h"
    # `kvstash serve` starts the HTTP server and `kvstash pull/list/rm` drive the hub client and its
    # cache (frontends both); text files are read as the library reads them (a FIFO or a directory
    # refused at once) and checked as UTF-8 with the library's own rules; an output path is checked
    # writable by the rules the library writes files by (atomic_file); `serve --preset` reads preset files
    # as the server does (server/preset.h); --device / -ngl choose the process's backend (engine/device.h,
    # to become a public header with the CUDA backend's API).
    [tools]="src/server/http.h src/server/preset.h src/engine/device.h src/hub/hub_cache.h src/hub/hub_client.h src/hub/pull.h src/base/regular_file.h src/base/utf8.h src/base/atomic_file.h"
)
declare -A PUBLIC_LAYER=(
    [error.h]=base
    [kv_type.h]=kv
    [tokenizer.h]=tokenizer
    [model.h]=model [adapter.h]=model
    [state.h]=state [state_file.h]=state [sampler_state.h]=state
    [chat.h]=text
    [grammar.h]=grammar
    [instruction_sets.h]=kernels
    [evaluator.h]=engine [sampler.h]=engine [generate.h]=engine [speculative.h]=engine [session.h]=engine
    [prefix_cache.h]=engine [shared_prefix.h]=engine [log_softmax.h]=engine
)
# Temporary exceptions while an upward include is being removed, as "file:include". Each is reported as a
# note while it exists and ignored; an entry that no longer matches anything is reported so that it is
# deleted. Keep this empty on main.
ALLOWED_UPWARD=()
declare -A ALLOWED_SEEN=()
declare -A RANK=()
for i in "${!LAYERS[@]}"; do RANK[${LAYERS[$i]}]=$i; done

failures=0
fail() {
    echo "check_layers: $*" >&2
    failures=$((failures + 1))
}

# Sets LAYER to the layer of a repository file: "" when it is in none (tests/), "?" for a public header
# missing from PUBLIC_LAYER, "!" for a file in a src/ directory missing from DIR_LAYER. (Functions set
# globals instead of printing: no subshell per include.)
layer_of() {
    local path="$1" dir
    LAYER=""
    if [[ "$path" == include/kvstash/* ]]; then
        LAYER="${PUBLIC_LAYER[${path#include/kvstash/}]:-?}"
        return
    fi
    LAYER="${FILE_LAYER[${path%.*}]:-}"
    [[ -n "$LAYER" ]] && return
    local longest=""  # the longest matching directory wins (src/backends/cpu/matmul over src/backends)
    for dir in "${!DIR_LAYER[@]}"; do
        if [[ "$path" == "$dir"/* && ${#dir} -gt ${#longest} ]]; then
            longest="$dir"
        fi
    done
    if [[ -n "$longest" ]]; then
        LAYER="${DIR_LAYER[$longest]}"
        return
    fi
    [[ "$path" == src/* ]] && LAYER="!"
    return 0
}

# Sets TARGET to where a quoted include of `file` resolves: its own directory first, then the targets'
# include directories (tools/ before include/: the CLI's "kvstash/common.h" is tools/kvstash/common.h);
# "" when it is not a repository header.
# `kind` is "quoted" or "angle" (<...>: no lookup in the including file's directory).
resolve() {
    local file="$1" inc="$2" kind="$3" candidate
    TARGET=""
    local -a candidates=("src/$inc" "include/$inc")
    [[ "$file" == tools/* ]] && candidates=("src/$inc" "tools/$inc" "include/$inc")
    [[ "$kind" == quoted ]] && candidates=("${file%/*}/$inc" "${candidates[@]}")
    for candidate in "${candidates[@]}"; do
        if [[ -f "$candidate" ]]; then
            TARGET="$candidate"
            if [[ "$TARGET" == *..* || "$TARGET" == *./* ]]; then
                TARGET="$(realpath -m --relative-to="$ROOT" "$TARGET")"
            fi
            return 0
        fi
    done
}

n_files=0
n_includes=0
while IFS= read -r file; do
    n_files=$((n_files + 1))
    layer_of "$file"
    from_layer="$LAYER"
    if [[ "$from_layer" == "?" ]]; then
        fail "$file: a public header with no layer: add it to PUBLIC_LAYER in scripts/check_layers.sh"
        continue
    fi
    if [[ "$from_layer" == "!" ]]; then
        fail "$file: its directory has no layer: add it to DIR_LAYER in scripts/check_layers.sh (and to docs/architecture/layers.md)"
        continue
    fi
    while IFS=: read -r line kind inc; do
        [[ -z "$line" ]] && continue
        n_includes=$((n_includes + 1))
        resolve "$file" "$inc" "$kind"
        target="$TARGET"
        if [[ "$file" == include/kvstash/* && -n "$target" && "$target" != include/kvstash/* ]] ||
            [[ "$file" == include/kvstash/* && "$kind" == quoted && "$inc" != kvstash/* ]]; then
            fail "$file:$line: public header includes \"$inc\": public headers include only \"kvstash/...\" and <system> headers"
            continue
        fi
        if [[ "$file" == examples/* && "$target" != include/kvstash/* && ("$kind" == quoted || -n "$target") ]]; then
            fail "$file:$line: example includes \"$inc\" (${target:-not found}): examples use the public headers (include/kvstash/) only"
            continue
        fi
        [[ -z "$target" ]] && continue  # not a repository header
        top="${file%%/*}"
        if [[ ("$top" == tools || "$top" == python) && "$target" != include/kvstash/* && "$target" != "$top"/* &&
            " ${ACCESS_HEADERS[$top]} " != *" $target "* ]]; then
            fail "$file:$line: includes \"$inc\" ($target): $top/ uses the public headers, its own files and the access headers named in ACCESS_HEADERS (scripts/check_layers.sh) only"
            continue
        fi
        layer_of "$target"
        to_layer="$LAYER"
        if [[ "$to_layer" == "?" ]]; then
            fail "$file:$line: includes \"$inc\", a public header with no layer: add it to PUBLIC_LAYER in scripts/check_layers.sh"
            continue
        fi
        if [[ "$to_layer" == "!" ]]; then
            fail "$file:$line: includes \"$inc\" ($target), whose directory has no layer: add it to DIR_LAYER in scripts/check_layers.sh"
            continue
        fi
        [[ -z "$to_layer" ]] && continue
        if ((RANK[$to_layer] > RANK[$from_layer])); then
            if [[ " ${ALLOWED_UPWARD[*]} " == *" $file:$inc "* ]]; then
                echo "check_layers: note: $file:$line: includes \"$inc\": $from_layer -> $to_layer, allowed for now (ALLOWED_UPWARD)" >&2
                ALLOWED_SEEN[$file:$inc]=1
                continue
            fi
            fail "$file:$line: includes \"$inc\" ($target): layer $from_layer may not include layer $to_layer (above it)"
        fi
    done < <(
             grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]' "$file" |
                 sed -e 's/^\([0-9]*\):[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1:quoted:\2/' \
                     -e 's/^\([0-9]*\):[[:space:]]*#[[:space:]]*include[[:space:]]*<\([^>]*\)>.*/\1:angle:\2/')
done < <(find include/kvstash src tools python examples bench -type f \( -name '*.h' -o -name '*.cpp' \) | sort)

for allowed in "${ALLOWED_UPWARD[@]}"; do
    [[ -n "${ALLOWED_SEEN[$allowed]:-}" ]] ||
        echo "check_layers: note: ALLOWED_UPWARD entry $allowed no longer occurs: delete it" >&2
done
if ((failures > 0)); then
    echo "check_layers: FAILED: $failures violation(s) in $n_files files (layers bottom up: ${LAYERS[*]})" >&2
    exit 1
fi
allowed_note=""
((${#ALLOWED_SEEN[@]} > 0)) && allowed_note=" but ${#ALLOWED_SEEN[@]} in ALLOWED_UPWARD"
echo "check_layers: OK: $n_files files, $n_includes includes, none points up$allowed_note (layers bottom up: ${LAYERS[*]}); public headers and examples/ include only public headers"
