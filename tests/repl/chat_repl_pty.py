#!/usr/bin/env python3
"""The chat REPL on a real terminal (a pseudo-terminal), as a person uses it (issue 18 item 4):

  1. Ctrl-C during an answer stops it and the conversation goes on (the process lives, a new prompt);
  2. the Up arrow recalls the previous message (line editing + history, libedit), Ctrl-U clears it;
  3. a multi-line message in a \"\"\" block and a trailing-backslash continuation are sent as one turn;
  4. /help lists the commands; a blank line is not a turn;
  5. one Ctrl-C at the prompt only warns; twice quits with exit status 0.
Usage: chat_repl_pty.py KVSTASH_BINARY   (exit 0 when every check holds; prints each check's result)
"""
import os
import pty
import re
import select
import sys
import tempfile
import time


class Repl:
    def __init__(self, argv, env):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execvpe(argv[0], argv, env)
        self.buffer = b""

    def read_until(self, pattern, timeout):
        """Reads until `pattern` (bytes regex) matches what arrived since the last call; returns it."""
        deadline = time.time() + timeout
        regex = re.compile(pattern)
        while True:
            m = regex.search(self.buffer)
            if m:
                seen, self.buffer = self.buffer[:m.end()], self.buffer[m.end():]
                return seen
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError(f"waited {timeout} s for {pattern!r}; got {self.buffer[-800:]!r}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    data = os.read(self.fd, 4096)
                except OSError:
                    data = b""
                if not data:
                    raise EOFError(f"terminal closed while waiting for {pattern!r}; got {self.buffer[-800:]!r}")
                self.buffer += data

    def send(self, data):
        os.write(self.fd, data)

    def wait_exit(self, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            try:  # drain so the child never blocks on a full terminal
                if select.select([self.fd], [], [], 0.1)[0]:
                    os.read(self.fd, 4096)
            except OSError:
                pass
        raise TimeoutError("the REPL did not exit")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    binary = sys.argv[1]
    history = tempfile.NamedTemporaryFile(prefix="kvstash_repl_history_", delete=False).name
    env = {**os.environ, "KVSTASH_HISTORY": history, "TERM": "xterm"}
    checks = []

    def check(name, ok, detail=""):
        checks.append(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name}" + (f": {detail}" if detail and not ok else ""))

    repl = Repl([binary, "chat", "-n", "400", "--temp", "0", "-t", "1", "--timings"], env)
    T = 180  # generous: CI runs this beside other tests on 2 cores
    try:
        repl.read_until(rb"> ", T)
        repl.send(b"\x03")  # one Ctrl-C at the first prompt: a hint, not an exit
        hint = repl.read_until(rb"again to quit[^\n]*\n(.|\n)*?> ", 30)
        check("one Ctrl-C at the prompt asks for a second", b"again to quit" in hint)
        repl.send(b"/help\r")
        helped = repl.read_until(rb"commands:.*\n(.|\n)*?> ", T)
        check("/help lists the commands", b"/undo" in helped and b"/save" in helped)

        repl.send(b"   \r")  # blank: no turn, just a new prompt
        blank = repl.read_until(rb"> ", T)
        check("a blank line is not a turn", b"timings:" not in blank, repr(blank))

        repl.send(b"Write a very long story about a dragon and a knight.\r")
        repl.read_until(rb"[A-Za-z]{3,}", T)  # the answer started
        time.sleep(0.3)
        repl.send(b"\x03")
        stopped = repl.read_until(rb"> ", T)
        check("Ctrl-C stops the answer and keeps the chat", b"(stopped" in stopped, repr(stopped[-300:]))

        repl.send(b"What is 2+2?\r")
        answered = repl.read_until(rb"timings:[^\n]*\n(.|\n)*?> ", T)
        check("the chat goes on after Ctrl-C", b"timings:" in answered)

        repl.send(b"\x1b[A")  # Up: recalls "What is 2+2?"
        recalled = repl.read_until(rb"What is 2\+2\?", 20)
        check("Up arrow recalls the last message", b"2+2" in recalled)
        repl.send(b"\x15")  # Ctrl-U: clear the recalled line

        repl.send(b'"""\r')
        repl.read_until(rb"\.\.\. ", T)
        repl.send(b"First line of a message.\r")
        repl.send(b"Second line.\r")
        repl.send(b'"""\r')
        multi = repl.read_until(rb"timings:[^\n]*\n(.|\n)*?> ", T)
        check('a """ block is one turn', multi.count(b"timings:") == 1, repr(multi[-300:]))

        repl.send(b"Say hello \\\r")
        repl.read_until(rb"\.\.\. ", T)
        repl.send(b"in French.\r")
        cont = repl.read_until(rb"timings:[^\n]*\n(.|\n)*?> ", T)
        check("a trailing backslash continues the message", cont.count(b"timings:") == 1)

        repl.send(b"\x03")
        repl.read_until(rb"again to quit", T)
        repl.send(b"\x03")
        code = repl.wait_exit(T)
        check("Ctrl-C twice at the prompt quits with status 0", code == 0, f"exit status {code}")
        with open(history, "rb") as f:
            saved = f.read()
        check("history is saved", b"2+2" in saved, repr(saved[:200]))
    except (TimeoutError, EOFError) as e:
        check("the session ran to the end", False, str(e))
        try:
            os.kill(repl.pid, 9)
        except ProcessLookupError:
            pass
    finally:
        os.unlink(history)
    print(f"chat_repl_pty: {sum(checks)}/{len(checks)} checks passed")
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
