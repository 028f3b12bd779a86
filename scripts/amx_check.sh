#!/usr/bin/env bash
# The one prepared AMX check (issue 35; docs/benchmarks.md, "AMX"): run on a machine whose CPU has AMX, in the
# repository root of a copy of this tree, with build-amx-pack/ unpacked there (scripts/amx_pack.sh, run beforehand
# on a machine with the build dependencies):
#   tar xzf build-amx-pack-tgz/pack.tar.gz && scripts/amx_check.sh OUTDIR
# Steps, each under its own timeout and all within a budget of AMX_CHECK_BUDGET_S seconds (default 220):
#   1. env.txt: CPU model and flags, the AMX detection (kvstash_amx_probe; kvstash --version per KVSTASH_ISA);
#   2. tests.log: the AMX unit tests (unit_gemm_int8_amx) under KVSTASH_ISA=amx, unset (the default) and avx512, then
#      the neighbouring suites on the amx path and, through their every-path children, on every path
#      (unit_repack_tiles, unit_numerics, unit_gemm_int8, unit_matmul_canonical);
#   3. bench.txt: kvstash_bench --kernels --kernel-shape TYPE:ROWS:4096:T (q8_0: ROWS 14336 and 4096; q4_K: 14336),
#      T 64 and 512, -t 1 and -t 2, under KVSTASH_ISA=amx and avx512: GOP/s side by side;
#   4. logits.txt: final-logits hashes (kvstash_bench, a 50-token prompt and 8 decoded tokens, 2 threads, as
#      bench/logits_hashes.sh) of the tiny q8_0 / q5_0 / q4_K fixtures under scalar, avx512 and amx: equal or a FAIL;
#   5. summary.md: one line per step, the GOP/s table.
# Where AMX does not run (detection fails), the AMX steps are SKIPPED with the reason and the rest still runs. Writes
# 5 files into OUTDIR (summary.md, env.txt, tests.log, bench.txt, logits.txt). About 70 s on a 16-core AMX Xeon VM,
# 40 s on a 2-core AVX-512 VM. Exit status: 0 when nothing failed (skips included), 1 otherwise.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ $# -lt 1 ]; then
  echo "usage: scripts/amx_check.sh OUTDIR" >&2
  exit 2
fi
OUTDIR="$1"
mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"
START=$(date +%s)
BUDGET="${AMX_CHECK_BUDGET_S:-220}"
BIN="${AMX_BIN_DIR:-$ROOT/build-amx-pack/bin}"
[ -d "$ROOT/build-amx-pack/lib" ] && export LD_LIBRARY_PATH="$ROOT/build-amx-pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KVSTASH_TEST_SOURCE_DIR="$ROOT"  # the test binaries were built elsewhere: the fixtures are here
SUMMARY="$OUTDIR/summary.md"
FAILED=0
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
elapsed() { echo $(($(date +%s) - START)); }
# step_timeout WANTED: WANTED seconds or what is left of the budget, whichever is less (0: no time left).
step_timeout() {
  local left=$((BUDGET - $(elapsed)))
  [ "$left" -lt 5 ] && { echo 0; return; }
  [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}
chmod +x "$BIN"/* 2>/dev/null

note "# AMX check ($(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
if [ ! -x "$BIN/kvstash_bench" ]; then
  note "FAIL: no binaries in $BIN: run scripts/amx_pack.sh first and unpack build-amx-pack-tgz/pack.tar.gz here"
  exit 1
fi

# ---- 1. the machine and the detection
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "uname: $(uname -a)"
  echo "glibc: $(ldd --version 2>&1 | head -1)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) ($(nproc) logical CPUs)"
  echo "flags (amx, avx512): $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(amx|avx512)' | sort -u | tr '\n' ' ')"
  echo "--- carried pack"
  cat "$ROOT/build-amx-pack/MANIFEST" 2>/dev/null || echo "no build-amx-pack/MANIFEST (AMX_BIN_DIR=$BIN)"
  echo "--- kvstash_amx_probe (bench/amx_probe.cpp)"
  timeout 20 "$BIN/kvstash_amx_probe" 2>&1
  echo "exit $?"
  for isa in "" amx avx512 scalar; do
    echo "--- KVSTASH_ISA=${isa:-(unset)} kvstash --version"
    KVSTASH_ISA="$isa" timeout 10 "$BIN/kvstash" --version 2>&1
  done
  echo "--- AmxDispatch (the library's detection)"
  timeout 20 "$BIN/unit_gemm_int8_amx" --gtest_filter='AmxDispatch.DetectionSaysWhatItFound' 2>&1 | grep -E 'AMX detection|OK|FAILED'
} >"$OUTDIR/env.txt" 2>&1
DETECTION="$(grep -m1 'AMX detection' "$OUTDIR/env.txt" || echo 'AMX detection: unknown (the test binary did not run)')"
note "- $DETECTION"
AMX=0
grep -q '^AMX detection: usable' "$OUTDIR/env.txt" && AMX=1
if [ "$AMX" -eq 0 ]; then
  note "- AMX: SKIPPED on this machine (the library does not use AMX here); the non-AMX checks still run"
fi

# ---- 2. unit tests
TESTS_LOG="$OUTDIR/tests.log"
: >"$TESTS_LOG"
run_test() {  # label isa binary filter wanted_timeout
  local label="$1" isa="$2" bin="$3" filter="$4" t rc
  t=$(step_timeout "$5")
  if [ "$t" -eq 0 ]; then note "- $label: NOT RUN (time budget spent)"; return; fi
  echo "=== $label: KVSTASH_ISA=${isa:-(unset)} $bin --gtest_filter='$filter' (timeout $t s)" >>"$TESTS_LOG"
  local t0 from
  t0=$(date +%s)
  from=$(wc -l <"$TESTS_LOG")
  if [ -n "$isa" ]; then
    KVSTASH_ISA="$isa" timeout "$t" "$BIN/$bin" --gtest_filter="$filter" >>"$TESTS_LOG" 2>&1
  else
    env -u KVSTASH_ISA timeout "$t" "$BIN/$bin" --gtest_filter="$filter" >>"$TESTS_LOG" 2>&1
  fi
  rc=$?
  local passed skipped
  passed=$(tail -n +"$((from + 1))" "$TESTS_LOG" | grep -c '^\[       OK \]' || true)
  skipped=$(tail -n +"$((from + 1))" "$TESTS_LOG" | grep -c '^\[  SKIPPED \] .* ([0-9]* ms)$' || true)
  if [ "$rc" -eq 0 ]; then
    note "- $label: ok ($(($(date +%s) - t0)) s; $passed passed, $skipped skipped, children included)"
  else
    FAILED=1
    [ "$rc" -eq 124 ] && note "- $label: FAIL (timed out after $t s)" || note "- $label: FAIL (exit $rc; tests.log)"
  fi
}
if [ "$AMX" -eq 1 ]; then
  run_test "AMX unit tests, KVSTASH_ISA=amx" amx unit_gemm_int8_amx '*' 60
else
  run_test "AMX unit tests (AMX parts skip here)" "" unit_gemm_int8_amx '*' 60
fi

# ---- 3. kernel speeds, amx against avx512
BENCH="$OUTDIR/bench.txt"
: >"$BENCH"
gops() {  # isa shape threads -> GOP/s (2 ops per multiply-add), or "-"
  local t out
  t=$(step_timeout 25)
  [ "$t" -eq 0 ] && { echo "not run"; return; }
  out="$(KVSTASH_ISA="$1" timeout "$t" "$BIN/kvstash_bench" --kernels --kernel-shape "$2" -t "$3" -r 3 2>&1)"
  echo "=== KVSTASH_ISA=$1 --kernel-shape $2 -t $3" >>"$BENCH"
  echo "$out" >>"$BENCH"
  echo "$out" | tr -d ' \n' | grep -o '"gflop_s":[0-9.e+-]*' | head -1 | cut -d: -f2 | awk '{ if ($1 == "") print "-"; else printf "%.1f", $1 }'
}
ISAS=(avx512)
[ "$AMX" -eq 1 ] && ISAS=(avx512 amx)
{
  echo
  echo "## Prefill kernels, GOP/s (kvstash_bench --kernels --kernel-shape TYPE:ROWS:4096:T -r 3; -t 1: min thread CPU time, -t 2: median wall)"
  echo
  echo "| type | rows × cols | tokens | threads | avx512 (VNNI tiles) | amx | amx / avx512 |"
  echo "|---|---|---:|---:|---:|---:|---:|"
} >>"$SUMMARY"
for type_rows in q8_0:14336 q8_0:4096 q4_K:14336; do
  type="${type_rows%%:*}"
  rows="${type_rows##*:}"
  for tokens in 64 512; do
    for threads in 1 2; do
      shape="$type:$rows:4096:$tokens"
      v="$(gops avx512 "$shape" "$threads")"
      a="SKIPPED"
      ratio="-"
      if [ "$AMX" -eq 1 ]; then
        a="$(gops amx "$shape" "$threads")"
        ratio="$(awk -v a="$a" -v v="$v" 'BEGIN { if (a + 0 > 0 && v + 0 > 0) printf "%.2f", a / v; else print "-" }')"
      fi
      echo "| $type | $rows × 4096 | $tokens | $threads | $v | $a | $ratio |" >>"$SUMMARY"
    done
  done
done
echo >>"$SUMMARY"

# ---- 4. whole-model logits: scalar, avx512, amx
LOGITS="$OUTDIR/logits.txt"
: >"$LOGITS"
LOGIT_ISAS=(scalar avx512)
[ "$AMX" -eq 1 ] && LOGIT_ISAS=(scalar avx512 amx)
for model in qwen2/qwen2_q8_0.gguf gpt2/gpt2_q8_0.gguf gemma3_tiny/gemma3_tiny_q5_0.gguf tiny/q_q4_k.gguf \
  recurrent/granitehybrid_q8_0.gguf recurrent/mamba2_q8_0.gguf; do
  hashes=()
  for isa in "${LOGIT_ISAS[@]}"; do
    t=$(step_timeout 15)
    h="not run"
    if [ "$t" -gt 0 ]; then
      out="$(KVSTASH_ISA="$isa" timeout "$t" "$BIN/kvstash_bench" -m "tests/fixtures/$model" -t 2 -r 1 --no-warmup \
        -p 50 -n 8 2>&1)"
      h="$(echo "$out" | grep -o '"final_logits_fnv1a": *"[0-9a-f]*"' | head -1 | grep -o '[0-9a-f]*"$' | tr -d '"')"
      [ -z "$h" ] && { h="error"; echo "$out" | tail -5 >>"$LOGITS"; }
    fi
    echo "$isa $model p=50 n=8 final_logits_fnv1a=$h" >>"$LOGITS"
    hashes+=("$h")
  done
  if printf '%s\n' "${hashes[@]}" | grep -q '^not run$'; then
    note "- logits $model: NOT RUN (time budget spent): ${LOGIT_ISAS[*]} = ${hashes[*]}"
  elif [ "$(printf '%s\n' "${hashes[@]}" | sort -u | wc -l)" -eq 1 ] && [ "${hashes[0]}" != error ]; then
    note "- logits $model: equal on ${LOGIT_ISAS[*]} (${hashes[0]})"
  else
    FAILED=1
    note "- logits $model: FAIL, differ or missing: ${LOGIT_ISAS[*]} = ${hashes[*]}"
  fi
done

# ---- 2b. the neighbouring suites, then the AMX tests on the default and avx512 settings (lower priority: last)
if [ "$AMX" -eq 1 ]; then
  run_test "AMX unit tests, KVSTASH_ISA unset (the default)" "" unit_gemm_int8_amx '*' 60
  run_test "AMX unit tests, KVSTASH_ISA=avx512 (AMX kernel called directly)" avx512 unit_gemm_int8_amx '*' 60
  run_test "repack tiles on the amx path" amx unit_repack_tiles 'Types/RepackTiles.*:RepackTilesModel.*' 60
  run_test "gemm_int8 on the amx path" amx unit_gemm_int8 '*' 60
fi
run_test "numerics pins, every path (children per KVSTASH_ISA setting)" "" unit_numerics '*' 90
run_test "repack tiles, every path" "" unit_repack_tiles 'RepackTilesEveryPath.*' 90
run_test "matmul canonical (default path, avx512-novnni child)" "" unit_matmul_canonical '*' 90

note ""
note "total: $(elapsed) s of a $BUDGET s budget; $( [ "$FAILED" -eq 0 ] && echo 'nothing failed' || echo 'FAILURES above')"
exit "$FAILED"
