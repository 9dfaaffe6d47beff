#!/usr/bin/env python3
"""Extract Jane Austen's six novels from Debian's r-cran-janeaustenr (R lazy-load data) as
plain text, one paragraph a line, with nothing but the standard library.

The package keeps each novel as an R character vector (one element per printed line) in
data/Rdata.rdb, indexed by data/Rdata.rdx (a gzip'd serialized list of offsets). Each rdb
record is a 4-byte big-endian length and a zlib stream holding one XDR-serialized R object.
Usage: extract_janeausten.py PACKAGE_ROOT OUT_DIR
"""
import gzip
import os
import struct
import sys
import zlib


class Reader:
    """A minimal R unserializer (format 2 or 3, XDR): enough for vectors, pairlists and refs."""

    def __init__(self, data):
        self.d, self.p, self.refs = data, 0, []

    def int(self):
        (v,) = struct.unpack_from(">i", self.d, self.p)
        self.p += 4
        return v

    def header(self):
        assert self.d[:2] == b"X\n", "only XDR serialization is supported"
        self.p = 2
        version = self.int()
        self.int(), self.int()
        if version == 3:
            n = self.int()
            self.p += n

    def item(self):
        flags = self.int()
        t, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if t in (254, 253, 242, 241, 251, 252):  # NILVALUE, GLOBALENV, EMPTYENV, BASEENV, MISSINGARG, UNBOUNDVALUE
            return None
        if t == 255:  # REFSXP
            idx = flags >> 8 or self.int()
            return self.refs[idx - 1]
        if t == 1:  # SYMSXP
            sym = self.item()
            self.refs.append(sym)
            return sym
        if t in (247, 250, 249):  # PERSISTSXP / PACKAGESXP / NAMESPACESXP: a string vector
            self.int()
            n = self.int()
            v = [self.item() for _ in range(n)]
            self.refs.append(v)
            return v
        if t in (2, 6, 17, 18, 3, 5):  # pairlist-like (LIST, LANG, DOT, ..., CLOS, PROM)
            attr = self.item() if has_attr else None
            tag = self.item() if has_tag else None
            car = self.item()
            cdr = self.item()
            return ("pair", tag, car, cdr, attr)
        if t == 9:  # CHARSXP
            n = self.int()
            if n == -1:
                return None
            s = self.d[self.p : self.p + n].decode("utf-8", "replace")
            self.p += n
            return s
        if t in (10, 13):  # LGLSXP, INTSXP
            n = self.int()
            v = list(struct.unpack_from(f">{n}i", self.d, self.p))
            self.p += 4 * n
        elif t == 14:  # REALSXP
            n = self.int()
            v = list(struct.unpack_from(f">{n}d", self.d, self.p))
            self.p += 8 * n
        elif t in (16, 19, 20):  # STRSXP, VECSXP, EXPRSXP
            n = self.int()
            v = [self.item() for _ in range(n)]
        elif t == 4:  # ENVSXP
            self.refs.append("env")
            self.int()
            for _ in range(4):
                self.item()
            return "env"
        else:
            raise ValueError(f"unsupported SEXP type {t} at byte {self.p}")
        if has_attr:
            names = dict(pairs(self.item())).get("names")
            if names is not None:
                v = Named(v)
                v.names = names
        return v


class Named(list):
    """A vector with a names attribute."""

    names = None


def unserialize(blob):
    r = Reader(blob)
    r.header()
    return r.item()


def pairs(node):
    """(tag, value) of a pairlist."""
    while isinstance(node, tuple) and node[0] == "pair":
        yield node[1], node[2]
        node = node[3]


def main():
    root, out = sys.argv[1], sys.argv[2]
    data_dir = os.path.join(root, "usr/lib/R/site-library/janeaustenr/data")
    index = unserialize(gzip.decompress(open(os.path.join(data_dir, "Rdata.rdx"), "rb").read()))
    # The index is a named list (variables, references, compressed); `variables` maps each data
    # set's name to its (offset, length) in the rdb.
    variables = index[index.names.index("variables")]
    rdb = open(os.path.join(data_dir, "Rdata.rdb"), "rb").read()
    os.makedirs(out, exist_ok=True)
    total = 0
    for name, (off, length) in zip(variables.names, variables):
        rec = rdb[off : off + length]
        obj = unserialize(zlib.decompress(rec[4:]))
        if not (isinstance(obj, list) and obj and all(isinstance(x, (str, type(None))) for x in obj)):
            continue
        # Join printed lines into paragraphs (blank lines separate them).
        paras, cur = [], []
        for line in obj:
            line = (line or "").strip()
            if line:
                cur.append(line)
            elif cur:
                paras.append(" ".join(cur))
                cur = []
        if cur:
            paras.append(" ".join(cur))
        path = os.path.join(out, f"{name}.txt")
        with open(path, "w") as f:
            f.write("\n".join(paras) + "\n")
        total += os.path.getsize(path)
        print(f"{path}: {len(paras)} paragraphs")
    print(f"{total} bytes")


if __name__ == "__main__":
    main()
