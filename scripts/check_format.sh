#!/usr/bin/env bash
# Fails when a tracked C++ source is not formatted by .clang-format (clang-format 14, Debian bookworm)
# or is longer than 600 lines (split it by concept; see ../shared/STYLE.md).
#   scripts/check_format.sh          check (used by scripts/test.sh)
#   scripts/check_format.sh --fix    reformat the tree in place, then check the line limit
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MAX_LINES=600
FIX=0
for arg in "$@"; do
  case "$arg" in
    --fix) FIX=1 ;;
    -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check_format.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

FORMAT=""
for candidate in clang-format-14 clang-format; do
  if command -v "$candidate" >/dev/null; then FORMAT="$candidate"; break; fi
done
if [ -z "$FORMAT" ]; then
  echo "check_format.sh: clang-format not found; install the Debian package clang-format (scripts/setup.sh does)" >&2
  exit 2
fi
version="$("$FORMAT" --version | grep -o 'version [0-9]*' | cut -d' ' -f2)"
if [ "$version" != "14" ]; then
  echo "check_format.sh: warning: $FORMAT is version $version; the tree is formatted with 14 (Debian bookworm)" >&2
fi

mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.hpp' '*.cc')
status=0
if [ "$FIX" -eq 1 ]; then
  "$FORMAT" -i "${files[@]}"
elif ! "$FORMAT" --dry-run --Werror "${files[@]}" 2>/tmp/check_format.$$; then
  grep -o '^[^:]*:[0-9]*:[0-9]*: error' /tmp/check_format.$$ | cut -d: -f1 | sort -u |
    sed 's/^/not formatted: /' >&2
  echo "check_format.sh: run scripts/check_format.sh --fix (or $FORMAT -i FILE) and commit" >&2
  status=1
fi
rm -f /tmp/check_format.$$

for f in "${files[@]}"; do
  n=$(wc -l < "$f")
  if [ "$n" -gt "$MAX_LINES" ]; then
    echo "too long: $f has $n lines (limit $MAX_LINES): split it by concept" >&2
    status=1
  fi
done
if [ "$status" -eq 0 ]; then
  echo "check_format.sh: ${#files[@]} files formatted ($FORMAT $version), none over $MAX_LINES lines" >&2
fi
exit "$status"
