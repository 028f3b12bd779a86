#!/usr/bin/env python3
"""Runs the shell commands of README.md as written, so the README cannot drift from the product.

Every ```sh block of README.md is run by bash (`set -euo pipefail`), block after block, in one scratch
directory where `build`, `models` and `tests` point at the build tree and the repository, so relative
paths resolve as they do at the repository root and files the commands write (book.kvs, ...) land in
the scratch directory. Three adaptations, each because the command cannot run unchanged in a test:
  * scripts/setup.sh and scripts/test.sh lines are not run: they are what runs this test (CI);
  * `build/kvstash serve ...` starts in the background on a free port (8080 in the README is replaced
    by it everywhere in the block), the block's later lines run once it listens, and it is stopped at
    the end of the block;
  * `curl` is given --fail-with-body -sS, so an HTTP error fails the block instead of printing JSON.
Interactive commands (`chat`) read stdin from /dev/null and end at once. Every ```python block is run
the same way by the project venv's python (.venv/bin/python, where scripts/setup.sh installs the
package), also as written.
Usage: readme_commands.py BUILD_DIR   (exit 0 when every block succeeds; names the failing one otherwise)
"""
import os
import pathlib
import re
import socket
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
SKIPPED = re.compile(r"^\s*scripts/(setup|test)\.sh\b")
SERVE = re.compile(r"^\s*build/kvstash serve\b(.*)$")

PREAMBLE = """set -euo pipefail -x
curl() { command curl --fail-with-body -sS "$@"; }
wait_for_port() {
  for _ in $(seq 1 300); do
    if command curl -s "http://127.0.0.1:$1/health" >/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "server did not start" >&2; return 1
}
SERVER_PID=""
trap 'if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi' EXIT
"""


BLOCK_TIMEOUT_S = 900  # a block that runs longer fails (exit 124); the -x trace names the command


def _text(data):
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def sh_blocks(text, language="sh"):
    blocks, current = [], None
    for line in text.splitlines():
        if current is None:
            if line.strip() == "```" + language:
                current = []
        elif line.strip() == "```":
            blocks.append(current)
            current = None
        else:
            current.append(line)
    return blocks


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def script_for(block):
    port = str(free_port())
    lines = [PREAMBLE]
    for line in block:
        if SKIPPED.match(line):
            lines.append("# (not run here: CI runs it) " + line)
            continue
        line = line.replace("8080", port)
        serve = SERVE.match(line)
        if serve:
            args = serve.group(1).split("#", 1)[0]
            lines.append(f"build/kvstash serve{args} --port {port} </dev/null & SERVER_PID=$!")
            lines.append(f"wait_for_port {port}")
            continue
        lines.append(line)
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    build = pathlib.Path(sys.argv[1]).resolve()
    readme = (ROOT / "README.md").read_text()
    python = ROOT / ".venv" / "bin" / "python"
    blocks = [("sh", b, ["bash", "-c", script_for(b)]) for b in sh_blocks(readme)]
    blocks += [("python", b, [str(python), "-c", "\n".join(b)]) for b in sh_blocks(readme, "python")]
    if not blocks:
        print("readme_commands: README.md has no ```sh block", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="kvstash_readme_") as scratch:
        scratch = pathlib.Path(scratch)
        (scratch / "build").symlink_to(build)
        for name in ("models", "tests", "scripts", "examples", "docs"):
            (scratch / name).symlink_to(ROOT / name)
        failures = 0
        for i, (language, block, argv) in enumerate(blocks, 1):
            script = argv[-1]
            try:
                proc = subprocess.run(argv, cwd=scratch, stdin=subprocess.DEVNULL,
                                      capture_output=True, text=True, errors="replace", timeout=BLOCK_TIMEOUT_S,
                                      env={**os.environ, "KVSTASH_MODELS_DIR": str(ROOT / "models")})
            except subprocess.TimeoutExpired as e:
                proc = subprocess.CompletedProcess(e.cmd, 124, _text(e.stdout), _text(e.stderr))
            status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
            print(f"README ```{language} block {i} ({len(block)} lines): {status}")
            if proc.returncode != 0:
                failures += 1
                print("--- script ---\n" + script + "--- stdout (tail) ---\n" + proc.stdout[-3000:] +
                      "--- stderr (tail) ---\n" + proc.stderr[-3000:])
        print(f"readme_commands: {len(blocks) - failures}/{len(blocks)} blocks ran")
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
