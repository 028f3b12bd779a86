#!/usr/bin/env bash
# Final-logits hashes of one build on every numerics path this CPU runs (KVSTASH_ISA unset = the best
# path, avx2, scalar), for the benchmark models and the tiny fixtures of each family (quantized, and with
# f32 / f16 / bf16 weights: the f32-activation matmul), so that two builds
# (before / after a refactor) can be compared line by line:
#   bench/logits_hashes.sh build-before > before.txt; bench/logits_hashes.sh build > after.txt
#   diff before.txt after.txt        # empty: no bit of any final logits changed
# Each line: isa, model, KV type, prompt and decode tokens, then the fnv1a hash of the last logits
# (kvstash_bench: one sequence, prefill then greedy decode) or of stream 0's (kvstash_batch_bench: 3
# sequences per eval_batch, several logits destinations). 2 threads. LOGITS_HASH_ISAS names the paths
# (KVSTASH_ISA values, "best" for unset), e.g. LOGITS_HASH_ISAS="scalar avx2 avx512-novnni avx512".
set -euo pipefail
BUILD="${1:?usage: bench/logits_hashes.sh BUILD_DIR}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODELS="${KVSTASH_MODELS_DIR:-$ROOT/models}"
FIX="$ROOT/tests/fixtures"
one() {  # isa model kv prompt decode
    local isa="$1" model="$2" kv="$3" p="$4" n="$5" out
    out="$(KVSTASH_ISA="$isa" "$BUILD/bench/kvstash_bench" -m "$model" -t 2 -r 1 --no-warmup -p "$p" -n "$n" --kv-type "$kv")"
    echo "${isa:-best} $(basename "$model") $kv p=$p n=$n $(echo "$out" | grep -o '"final_logits_fnv1a": *"[0-9a-f]*"' | head -1)"
}
batch() {  # isa model
    local isa="$1" model="$2" out
    out="$(KVSTASH_ISA="$isa" "$BUILD/bench/kvstash_batch_bench" -m "$model" -t 2 -r 1 -p 40 -n 4 --streams 1,3)"
    echo "${isa:-best} $(basename "$model") batch streams=1,3 p=40 n=4 $(echo "$out" | grep -o '"stream0_logits_fnv1a": *"[0-9a-f]*"' | tr '\n' ' ')"
}
read -r -a ISAS <<<"${LOGITS_HASH_ISAS:-best avx2 scalar}"
for isa in "${ISAS[@]}"; do
    [[ "$isa" == best ]] && isa=""
    for m in "$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf" "$MODELS/gemma-3-270m-q4_k_m.gguf"; do one "$isa" "$m" f16 100 8; done
    for kv in f32 q8_0; do one "$isa" "$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf" "$kv" 100 8; done
    for m in recurrent/granitehybrid_q8_0 recurrent/mamba1_f32 recurrent/mamba2_q8_0 gemma3_tiny/gemma3_tiny_q5_0 \
        gpt2/gpt2_q8_0 qwen2/qwen2_q8_0 tiny/gqa_f16; do
        one "$isa" "$FIX/$m.gguf" f16 50 8
    done
    for m in tiny/gqa_f32 tiny/gqa_bf16 tiny/mha_tied_f32 hf/llama_f16 hf/gemma3_bf16 gemma3_tiny/gemma3_tiny_f32 \
        gpt2/gpt2_f32 qwen2/qwen2_f32 recurrent/granitehybrid_f32 recurrent/mamba2_f32; do
        one "$isa" "$FIX/$m.gguf" f16 50 8
    done
    batch "$isa" "$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
done
