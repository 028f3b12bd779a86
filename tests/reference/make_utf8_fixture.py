#!/usr/bin/env python3
"""Writes tests/fixtures/utf8/python_decoder.txt: CPython's strict UTF-8 codec as the oracle for
src/base/utf8 (tests/unit/utf8_test.cpp). Standard library only; runs in well under a second.

CPython's strict decoder follows the Unicode standard's table 3-7 (no overlongs, no surrogates, nothing
past U+10FFFF).

Lines:
  d <bytes hex> <valid prefix> <held back> <code points of the valid prefix, hex, comma-separated, or ->
      valid prefix: bytes before UnicodeDecodeError.start (all of them when the bytes decode);
      held back: the longest tail (1-3 bytes) that continuation bytes can complete into one character.
  e <code point hex> <its UTF-8 encoding, hex>
"""
import itertools
import os
import sys

SECOND = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xFF]
THIRD = [0x41, 0x80, 0xBF]


def inputs():
    for a in range(256):
        yield bytes([a])
    for a in range(256):
        for b in SECOND:
            yield bytes([a, b])
    for a in range(0xC0, 0x100):
        for b in SECOND:
            for c in THIRD:
                yield bytes([a, b, c])
    for a in range(0xF0, 0x100):
        for b in SECOND:
            for c in (0x80, 0xBF):
                for d in THIRD:
                    yield bytes([a, b, c, d])
    # Longer mixes: text around a malformed byte, a character cut at the end.
    for s in [b"caf\xc3\xa9", b"a\xe2\x82\xacb", b"\xf0\x9f\x98\x80!", b"ok\xffok", b"ab\xe2\x82", b"x\xf0\x9f\x98",
              b"\xed\x9f\xbf\xee\x80\x80", b"\xf4\x8f\xbf\xbf", b"a\x80\x80\x80", b"\xe2\x41\xe2\x82"]:
        yield s


CONTINUATIONS = [0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF]  # each boundary of the second-byte ranges


def completable(tail):
    """Whether continuation bytes appended to `tail` make it exactly one character for the strict codec."""
    for more in range(1, 4 - len(tail) + 1):
        for extra in itertools.product(CONTINUATIONS, repeat=more):
            try:
                if len((tail + bytes(extra)).decode("utf-8")) == 1:
                    return True
            except UnicodeDecodeError:
                pass
    return False


def held_back(data):
    """Bytes at the end that are the start of a character still missing bytes. CPython's incremental
    decoder is not the oracle here: it holds back ED A0..BF (a surrogate's start, never completable)."""
    for n in range(min(3, len(data)), 0, -1):
        if completable(data[-n:]):
            return n
    return 0


def main():
    out_path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "utf8", "python_decoder.txt")
    lines = [f"# made by tests/reference/make_utf8_fixture.py with Python {sys.version.split()[0]}"]
    for data in inputs():
        try:
            text = data.decode("utf-8")
            valid = len(data)
        except UnicodeDecodeError as e:
            valid = e.start
            text = data[:valid].decode("utf-8")
        cps = ",".join(f"{ord(ch):x}" for ch in text) or "-"
        lines.append(f"d {data.hex()} {valid} {held_back(data)} {cps}")
    code_points = set(range(0, 0x110000, 4099)) | {0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFD, 0xFFFF,
                                                    0x10000, 0x10FFFF}
    for cp in sorted(code_points):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        lines.append(f"e {cp:x} {chr(cp).encode('utf-8').hex()}")
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
