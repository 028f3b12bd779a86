#!/usr/bin/env python3
"""Extract one Jane Austen novel (public domain; Project Gutenberg texts) from Debian's
r-cran-janeaustenr package, without R.

The package stores the novels as R lazy-load data (data/Rdata.rdx, a gzipped R serialization of the index, + data/Rdata.rdb
objects; each object is a 4-byte big-endian length followed by a zlib stream of R's XDR
serialization). Each novel is a character vector, one element per line of the Gutenberg text.
This file implements just enough of R's serialization format to read those vectors.

Usage:
  apt-get download r-cran-janeaustenr && dpkg-deb -x r-cran-janeaustenr_*.deb pkg
  python extract_austen.py pkg/usr/lib/R/site-library/janeaustenr/data persuasion out.txt --chapters 2
"""
import argparse
import gzip
import re
import struct
import sys
import zlib


class RReader:
    def __init__(self, data: bytes):
        self.d = data
        self.p = 0
        self.refs = []

    def i32(self):
        v = struct.unpack(">i", self.d[self.p:self.p + 4])[0]
        self.p += 4
        return v

    def header(self):
        fmt = self.d[self.p:self.p + 2]
        assert fmt == b"X\n", fmt
        self.p += 2
        version = self.i32()
        self.i32()  # writer R version
        self.i32()  # min reader version
        if version == 3:
            n = self.i32()
            self.p += n  # native encoding name
        return self.item()

    def item(self):
        flags = self.i32()
        typ = flags & 0xFF
        has_attr = bool(flags & (1 << 9))
        has_tag = bool(flags & (1 << 10))
        if typ == 254:  # NILVALUE_SXP
            return None
        if typ == 255:  # REFSXP
            idx = flags >> 8
            if idx == 0:
                idx = self.i32()
            return self.refs[idx - 1]
        if typ == 1:  # SYMSXP
            name = self.item()
            self.refs.append(name)
            return name
        if typ == 9:  # CHARSXP
            n = self.i32()
            if n == -1:
                return None
            s = self.d[self.p:self.p + n].decode("utf-8")
            self.p += n
            return s
        if typ in (2,):  # LISTSXP (pairlist): attr?, tag?, car, cdr
            attr = self.item() if has_attr else None
            tag = self.item() if has_tag else None
            car = self.item()
            cdr = self.item()
            out = [(tag, car)]
            if isinstance(cdr, list):
                out += cdr
            return out
        if typ == 16:  # STRSXP
            n = self.i32()
            v = [self.item() for _ in range(n)]
        elif typ == 19:  # VECSXP
            n = self.i32()
            v = [self.item() for _ in range(n)]
        elif typ == 13 or typ == 10:  # INTSXP / LGLSXP
            n = self.i32()
            v = list(struct.unpack(">%di" % n, self.d[self.p:self.p + 4 * n]))
            self.p += 4 * n
        elif typ == 14:  # REALSXP
            n = self.i32()
            v = list(struct.unpack(">%dd" % n, self.d[self.p:self.p + 8 * n]))
            self.p += 8 * n
        else:
            raise ValueError(f"unsupported SEXP type {typ}")
        if has_attr:
            attrs = dict(self.item())
            if "names" in attrs and isinstance(v, list):
                return dict(zip(attrs["names"], v))
        return v


def unserialize_blob(blob: bytes):
    (n,) = struct.unpack(">I", blob[:4])
    raw = zlib.decompress(blob[4:])
    assert len(raw) == n
    return RReader(raw).header()


def read_object(data_dir: str, name: str):
    with open(f"{data_dir}/Rdata.rdx", "rb") as f:
        index = RReader(gzip.decompress(f.read())).header()  # the index is a gzipped .rds
    offset, length = index["variables"][name]
    with open(f"{data_dir}/Rdata.rdb", "rb") as f:
        f.seek(offset)
        return unserialize_blob(f.read(length))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data_dir", help="…/site-library/janeaustenr/data")
    ap.add_argument("name", help="emma, mansfieldpark, northangerabbey, persuasion, prideprejudice, sensesensibility")
    ap.add_argument("out")
    ap.add_argument("--chapters", type=int, default=0,
                    help="keep the text from its start through chapter N (stop before the 'Chapter N+1' line)")
    args = ap.parse_args()
    lines = read_object(args.data_dir, args.name)
    if args.chapters:
        heading = re.compile(rf"^chapter {args.chapters + 1}$", re.IGNORECASE)
        end = next(i for i, line in enumerate(lines) if heading.match(line.strip()))
        lines = lines[:end]
    while lines and not lines[-1].strip():
        lines.pop()
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
