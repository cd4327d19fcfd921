"""Generated bad inputs against every `attnsim` subcommand (issue 10: hardening the command line).

Usage: bad_inputs_test.py ATTNSIM_EXE [--long] [--seed N] [--only CMD,...] [--jobs N] [--keep]
                          [--list] [--verbose]

For every subcommand the test builds a table of cases from one valid invocation: option mutations
(missing required options, unknown options, bad values: negative, zero, huge, non-numeric, NaN,
unknown method names and options, duplicated keys, empty strings), input-file mutations of a small
valid dump or results file (truncated at several offsets, seeded byte flips, wrong rank, dtype
and attributes, empty tensors, NaN/Inf, mismatched shapes, heads that do not divide, missing
datasets, non-HDF5 files, directories, FIFOs, device files, missing files), hostile output paths
(a directory, a FIFO, /dev/null, the input itself also through ./ and links, a missing or
read-only directory), malformed TOML for `sweep --config` and `gate --rules`, raw files of the
wrong size, huge sizes (which the memory estimate must refuse) and interrupted runs (SIGINT,
SIGTERM and SIGHUP while computing or writing).

Each case runs in a fresh directory with ATTNSIM_MAX_MEMORY=1G and is checked for the contract of
experiments/README.md:
  - the exit code is one the subcommand documents (0; 1 for compare/gate; 2; 3 for sweep) and the
    one the case expects; never death by a signal (except the signal an interrupt case sends);
  - an exit-2 case prints exactly one line `attnsim: error: ...` on stderr and nothing on stdout
    (no partial report); no stderr ever shows `std::`, `terminate called`, HDF5's error stack or
    `what():`;
  - no file in the directory was created, changed or removed, except the documented outputs of a
    successful run (and, for an interrupted or --max-points sweep, a checkpoint holding points);
    no temp file is left anywhere;
  - the child's peak RSS (wait4's ru_maxrss) stays below 1.5 GiB.

The default run uses a fixed seed (deterministic, part of the `unit` label); `--long` (CTest label
`fuzz_cli`) adds many more random mutations (byte flips, truncations, specs, method strings, TOML
edits, argument-list edits) from a random seed, printed so that a failure can be replayed with
--seed. A summary per subcommand lists the cases and the histogram of exit codes.
"""
import argparse
import hashlib
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

try:
    import h5py
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"FAIL missing python package: {e} (run .ci/setup.sh)")
    sys.exit(1)

EXE = None  # the attnsim under test (main)
MEMORY_LIMIT = "1G"
RSS_BOUND_KIB = int(1.5 * 1024 * 1024)
ERROR_PREFIX = "attnsim: error: "
# "internal error" is how main() words an exception that is not a UsageError: for a bad input it
# means a library's message got through (basic_filebuf::underflow, stoi, ...).
FORBIDDEN = ("std::", "terminate called", "HDF5-DIAG", "what():", "Segmentation fault",
             "Aborted", "AddressSanitizer", "#000:", "libc++abi", "CLI::", "internal error")
# Exit codes each subcommand documents (experiments/README.md, `attnsim COMMAND --help`).
DOCUMENTED = {"compare": {0, 1, 2}, "gate": {0, 1, 2}, "sweep": {0, 2, 3}}
COMMANDS = ["info", "methods", "bench", "convert", "synth", "sweep", "mma", "special", "run",
            "compare", "gate", "repro", "quantize", "attribute"]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
# An error for a legal but huge size names the size and the limit, never "must be a positive
# integer" (issue 10).
NAMES_LIMIT = r"memory|limit|at most|out of range|too large|beyond|exceeds"


def doc_codes(cmd):
    return DOCUMENTED.get(cmd, {0, 2})


# ---- files a case starts with --------------------------------------------------------------------
#
# A maker builds one entry of a case directory: maker(fixtures: Path, path: Path).


def copy(fixture):
    return lambda fx, p: shutil.copyfile(fx / fixture, p)


def raw(data):
    return lambda fx, p: p.write_bytes(data)


def text(s):
    return lambda fx, p: p.write_text(s)


def mkdir(mode=None):
    def make(fx, p):
        p.mkdir()
        if mode is not None:
            p.chmod(mode)
    return make


def fifo():
    return lambda fx, p: os.mkfifo(p)


def symlink(target):
    return lambda fx, p: os.symlink(target, p)


def hardlink(target):
    return lambda fx, p: os.link(p.parent / target, p)


def sparse(size):
    def make(fx, p):
        with open(p, "wb") as f:
            f.truncate(size)
    return make


def run_first(argv, name):
    """A maker that runs `attnsim ARGV` in a scratch directory (exit 0 or 3) and takes the file
    `name` it leaves (a checkpoint, an output)."""
    def make(fx, p):
        scratch = Path(tempfile.mkdtemp(dir=p.parent.parent))
        try:
            subprocess.run([EXE, *argv], cwd=scratch, env=child_env(), capture_output=True)
            shutil.copyfile(scratch / name, p)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return make


def mutated(fixture, fn):
    return lambda fx, p: p.write_bytes(fn((fx / fixture).read_bytes()))


def chmod(maker, mode):
    def make(fx, p):
        maker(fx, p)
        p.chmod(mode)
    return make


def h5(build):
    """An HDF5 file written by h5py: build(f) fills it."""
    def make(fx, p):
        with h5py.File(p, "w") as f:
            build(f)
    return make


def truncate_at(frac):
    return lambda b: b[:int(len(b) * frac)] if frac >= 0 else b[:len(b) + int(frac)]


def flip_bytes(seed, n):
    def fn(b):
        r = random.Random(seed)
        a = bytearray(b)
        for _ in range(n):
            i = r.randrange(len(a))
            a[i] ^= 1 << r.randrange(8)
        return bytes(a)
    return fn


# ---- the valid small inputs ----------------------------------------------------------------------

RNG = np.random.default_rng(20240610)
Q = RNG.standard_normal((1, 2, 8, 4)).astype(np.float32)
K = RNG.standard_normal((1, 1, 8, 4)).astype(np.float32)
V = RNG.standard_normal((1, 1, 8, 4)).astype(np.float32)


def dump(q=Q, k=K, v=V, attrs=None, prefix="", extra=None, compress=False):
    """Builder of an attention dump with the given tensors (None: dataset left out)."""
    def build(f):
        g = f.require_group(prefix) if prefix else f
        for name, x in (("q", q), ("k", k), ("v", v)):
            if x is None:
                continue
            if callable(x):
                x(g, name)
            elif compress and np.asarray(x).size:
                g.create_dataset(name, data=x, compression="gzip", fletcher32=True)
            else:
                g.create_dataset(name, data=x)
        for key, val in (attrs if attrs is not None else {"causal": 0, "sm_scale": 0.5}).items():
            g.attrs[key] = val
        if extra:
            extra(f)
    return build


def ds(data, **attrs):
    """A dataset maker with attributes."""
    def make(g, name):
        g.create_dataset(name, data=data)
        for key, val in attrs.items():
            g[name].attrs[key] = val
    return make


def declared(shape, dtype="f4"):
    """A chunked dataset declared at `shape` and never written (a tiny file, a huge tensor)."""
    def make(g, name):
        chunk = tuple(min(s, 64) if s else 1 for s in shape) if len(shape) else None
        g.create_dataset(name, shape=shape, dtype=dtype, chunks=chunk if all(shape) else None)
    return make


def bf16_bits(x):
    return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def with_value(x, idx, value):
    y = np.array(x, copy=True)
    y[idx] = value
    return y


def make_fixtures(exe, fx):
    """Valid inputs of every command, made once and copied into each case's directory."""
    env = child_env()

    def run(*args):
        p = subprocess.run([exe, *args], cwd=fx, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"fixture {' '.join(args)}: {p.stderr.strip()}")

    with h5py.File(fx / "dump.h5", "w") as f:
        dump()(f)
    with h5py.File(fx / "layers.h5", "w") as f:
        dump(prefix="layer_00")(f)
        dump(prefix="layer_01")(f)
    # Written by attnsim: chunked, gzip and Fletcher-32 (a flipped data byte is a read error).
    run("synth", "--synthetic", "kbias:hq=2,hkv=1,nq=16,d=8,seed=1", "--out", "synth.h5")
    run("sweep", "--methods", "golden,flash", "--input", "dump.h5", "--out", "results.h5",
        "--quiet")
    (fx / "rules.toml").write_text(
        'key = ["method", "input", "seed"]\n\n[rel_fro]\nrel = 1e-6\nbetter = "lower"\n\n'
        '[cosine]\nabs = 1e-9\nbetter = "higher"\n')
    (fx / "config.toml").write_text(
        'methods = ["golden", "flash:qkv=bf16"]\nsynthetic = ["normal:nq=8,d=4"]\nseeds = 2\n')
    x = np.array([0.0, -0.0, 1.0, -1.5, 3.25, 448.0, 500.0, 1e-9, 2.0 ** -7, -65504.0, 0.1, 7.0,
                  -2.0, 0.5, 1e3, -0.25], np.float32)
    x.tofile(fx / "x.f32")
    x.astype(np.float64).tofile(fx / "x.f64")
    np.arange(8, dtype=np.uint8).tofile(fx / "codes.u8")
    # sm90.hmma.f16.f32, m16n8k16: A 16x16 and Bt 8x16 fp16 bits, C 16x8 float32.
    RNG2 = np.random.default_rng(7)
    RNG2.standard_normal((16, 16)).astype(np.float16).view(np.uint16).tofile(fx / "A.u16")
    RNG2.standard_normal((8, 16)).astype(np.float16).view(np.uint16).tofile(fx / "B.u16")
    np.zeros((16, 8), np.float32).tofile(fx / "C.f32")
    # Two layer groups with checksummed chunks (a flipped byte in layer_01 is a read error).
    with h5py.File(fx / "layers_ck.h5", "w") as f:
        for g in ("layer_00", "layer_01"):
            for name, x in (("q", Q), ("k", K), ("v", V)):
                f.create_dataset(f"{g}/{name}", data=x, chunks=x.shape, fletcher32=True)


# ---- cases ---------------------------------------------------------------------------------------


@dataclass
class Case:
    cmd: str
    name: str
    argv: list
    files: dict = field(default_factory=dict)
    codes: set = None           # allowed exit codes; None: {2}
    outputs: tuple = ()         # files a successful (or exit 1/3) run may create
    env: dict = field(default_factory=dict)
    sig: int = 0                # interrupt case: this signal after `delay` seconds
    delay: float = 0.0
    require: str = ""           # regex the error line must match
    timeout: float = 20.0
    may_remove: tuple = ()      # files a successful run removes (a resumed sweep's checkpoint)

    def allowed(self):
        return self.codes if self.codes is not None else {2}


def replace_value(argv, opt, value):
    """argv with the value of `opt` replaced (opt appended with value if absent)."""
    out = list(argv)
    if opt in out:
        i = out.index(opt)
        out[i + 1] = value
    else:
        out += [opt, value]
    return out


def drop_option(argv, opt):
    out = list(argv)
    i = out.index(opt)
    del out[i:i + 2]
    return out


# The default run (part of the unit suite) takes a deterministic sample of the long tables below;
# --long takes all of them.
LONG = False


def sample(items, step, phase=0):
    """Every `step`-th item (from `phase`) in the default run, all of them with --long."""
    items = list(items)
    return items if LONG else items[phase % step::step]


# Integer values: (text, its integer value, or None when it is not a decimal integer).
INT_VALUES = [("-1", -1), ("0", 0), ("abc", None), ("", None), ("1.5", None), ("nan", None),
              ("inf", None), ("1e3", None), ("0x10", None), ("2147483648", 2 ** 31),
              ("4294967297", 2 ** 32 + 1), ("99999999999999999999", 10 ** 20),
              ("-2147483649", None), ("--", None)]
FLOAT_VALUES = ["-1", "nan", "NaN", "inf", "-inf", "abc", "", "1e999", "--3"]
TEXT_VALUES = ["", "BOGUS", " ", "a,b", "\t", "x" * 5000]


def option_cases(cmd, base, required, ints, floats, texts, outputs):
    """Mutations of a valid argument list: unknown options, stray arguments, each required option
    left out, each value replaced by bad ones, options given twice. `ints`: {option: (lo, hi)},
    its legal range (a value beyond hi must be refused naming the limit); `floats`: options that
    take a finite number; `texts`: {option: values that are valid}."""
    cases = [
        Case(cmd, "unknown option --bogus", base + ["--bogus"]),
        Case(cmd, "unknown option --bogus=1", base + ["--bogus=1"]),
        Case(cmd, "unknown short option -Z", base + ["-Z"]),
        Case(cmd, "stray argument", base + ["stray"]),
        Case(cmd, "option value missing at the end", base + [(list(ints) + list(texts) +
                                                               ["--max-memory"])[0]]),
    ]
    for opt in required:
        cases.append(Case(cmd, f"required {opt} left out", drop_option(base, opt)))
    for opt, (lo, hi) in ints.items():
        for value, n in sample(INT_VALUES, 3, len(opt)):
            ok = n is not None and lo <= n <= hi
            case = Case(cmd, f"{opt} {value!r}", replace_value(base, opt, value),
                        codes=doc_codes(cmd) if ok else {2}, outputs=outputs)
            if n is not None and n > hi:
                case.require = NAMES_LIMIT
            cases.append(case)
    for opt in floats:
        for value in sample(FLOAT_VALUES, 3, len(opt)):
            cases.append(Case(cmd, f"{opt} {value!r}", replace_value(base, opt, value)))
    for opt, valid in texts.items():
        for value in sample(TEXT_VALUES, 3, len(opt)):
            if value in valid:
                continue
            cases.append(Case(cmd, f"{opt} {value[:12]!r}", replace_value(base, opt, value)))
    for opt in list(texts)[:1] + list(ints)[:1]:
        if opt in base:
            i = base.index(opt)
            cases.append(Case(cmd, f"{opt} given twice", base + base[i:i + 2],
                              codes=doc_codes(cmd), outputs=outputs))
    return cases


def memory_option_cases(cmd, base):
    cases = []
    for value in sample(["0", "-1", "abc", "", "1.5Q", "1e99", "nan", "99999999999999999999999T",
                         "2T5"], 3, len(cmd)):
        cases.append(Case(cmd, f"--max-memory {value!r}", base + ["--max-memory", value]))
    for value in sample(["lots", "0", "-5G"], 3, len(cmd)):
        cases.append(Case(cmd, f"ATTNSIM_MAX_MEMORY={value!r}", base,
                          env={"ATTNSIM_MAX_MEMORY": value}))
    cases.append(Case(cmd, "--max-memory 1k refuses the run", base + ["--max-memory", "1k"],
                      require=NAMES_LIMIT))
    return cases


def input_path_cases(cmd, base, opt, step=2):
    """Hostile input paths for option `opt` (or a positional `opt` in base); `step` > 1 samples
    them in the default run (commands with several inputs)."""
    variants = [
        ("nonexistent file", "nope.h5", {}),
        ("empty path", "", {}),
        ("directory", "adir", {"adir": mkdir()}),
        ("directory with slash", "adir/", {"adir": mkdir()}),
        ("FIFO", "afifo", {"afifo": fifo()}),
        ("/dev/null", "/dev/null", {}),
        ("/dev/zero", "/dev/zero", {}),
        ("dangling symlink", "dangling", {"dangling": symlink("nowhere")}),
        ("symlink loop", "loop", {"loop": symlink("loop")}),
        ("newline in the name", "no\nsuch.h5", {}),
        ("file as a directory", "plain/x.h5", {"plain": text("x")}),
        ("empty file", "empty", {"empty": raw(b"")}),
        ("text file", "notes.txt", {"notes.txt": text("not a tensor\n" * 10)}),
        ("huge sparse file", "huge.bin", {"huge.bin": sparse(64 << 30)}),
    ]
    if not IS_ROOT:
        variants.append(("unreadable file", "secret", {"secret": chmod(text("x" * 64), 0)}))
    cases = []
    for name, value, files in sample(variants, step, len(opt)):
        argv = replace_value(base, opt, value) if opt.startswith("-") else \
            [value if a == opt else a for a in base]
        cases.append(Case(cmd, f"input {opt}: {name}", argv, files=files))
    return cases


def output_path_cases(cmd, base, opt, first_input, outputs=()):
    """Hostile output paths for option `opt`; `first_input`: an input file of `base`."""
    variants = [
        ("existing directory", "odir", {"odir": mkdir()}, {2}),
        ("name ending in /", "odir/", {"odir": mkdir()}, {2}),
        ("existing FIFO", "ofifo", {"ofifo": fifo()}, {2}),
        ("/dev/null", "/dev/null", {}, {2}),
        ("the input itself", first_input, {}, {2}),
        ("the input through ./", "./" + first_input, {}, {2}),
        ("the input through ../", f"../{{case}}/{first_input}", {}, {2}),
        ("a symlink to the input", "alias", {"alias": symlink(first_input)}, {2}),
        ("a hard link to the input", "hard", {"hard": hardlink(first_input)}, {2}),
        ("missing directory", "missing/out.h5", {}, {2}),
        ("parent is a file", "plain/out.h5", {"plain": text("x")}, {2}),
        ("symlink to a directory", "dlink", {"dlink": symlink("odir"), "odir": mkdir()}, {2}),
        ("name too long", "n" * 300, {}, {2}),
    ]
    variants.append(("empty path", "", {}, {2}))
    if not IS_ROOT:
        variants.append(("read-only directory", "ro/out.h5", {"ro": mkdir(0o555)}, {2}))
    cases = []
    for name, value, files, codes in sample(variants, 2, len(cmd)):
        c = Case(cmd, f"output {opt}: {name}", replace_value(base, opt, value), files=files,
                 codes=codes, outputs=outputs)
        cases.append(c)
    return cases


def make_layers_ck(fx, p):
    """Two layer groups with Fletcher-32 chunks and a flipped byte in layer_01/k: found only when
    the second group is read."""
    shutil.copyfile(fx / "layers_ck.h5", p)
    with h5py.File(p, "r") as f:
        off = f["layer_01/k"].id.get_chunk_info(0).byte_offset
    b = bytearray(p.read_bytes())
    b[off + 3] ^= 0x10
    p.write_bytes(bytes(b))


# Dump mutations: (name, maker, allowed codes); every one is an invalid attention input.
def dump_mutations():
    muts = []
    add = lambda name, maker, codes={2}: muts.append((name, maker, codes))
    for frac in (0.0, 0.02, 0.3, 0.6, 0.95, -1):
        add(f"truncated at {frac}", mutated("synth.h5", truncate_at(frac)))
        add(f"h5py dump truncated at {frac}", mutated("dump.h5", truncate_at(frac)))
    add("rank 3 q", h5(dump(q=Q[0])))
    add("rank 5 q", h5(dump(q=Q[None])))
    add("rank 0 q", h5(dump(q=np.float32(1.0))))
    add("rank 1 v", h5(dump(v=V.ravel())))
    add("int32 q", h5(dump(q=Q.astype(np.int32))))
    add("int8 k", h5(dump(k=K.astype(np.int8))))
    add("uint16 q without dtype attribute", h5(dump(q=bf16_bits(Q))))
    add("complex64 q", h5(dump(q=Q.astype(np.complex64))))
    add("bool v", h5(dump(v=V > 0)))
    add("string q", h5(dump(q=np.array([b"abc"] * 4))))
    add("vlen string k", h5(dump(k=lambda g, n: g.create_dataset(
        n, data=np.array(["x", "yy"], dtype=h5py.string_dtype())))))
    add("compound q", h5(dump(q=np.zeros((1, 2, 8, 4), dtype=[("a", "f4"), ("b", "f4")]))))
    add("dtype=bfloat16 on float32", h5(dump(q=ds(Q, dtype="bfloat16"))))
    add("dtype=bfloat16 on int16", h5(dump(k=ds(bf16_bits(K).astype(np.int16), dtype="bfloat16"))))
    add("dtype attribute an integer on uint16", h5(dump(q=ds(bf16_bits(Q), dtype=5))))
    add("empty tokens", h5(dump(q=Q[:, :, :0], k=K[:, :, :0], v=V[:, :, :0])))
    add("empty head_dim", h5(dump(q=Q[..., :0], k=K[..., :0])))
    add("empty batch", h5(dump(q=Q[:0], k=K[:0], v=V[:0])))
    add("zero k/v heads", h5(dump(k=K[:, :0], v=V[:, :0])))
    add("NaN in q", h5(dump(q=with_value(Q, (0, 1, 3, 2), np.nan))))
    add("Inf in k", h5(dump(k=with_value(K, (0, 0, 7, 0), np.inf))))
    add("-Inf in v", h5(dump(v=with_value(V, (0, 0, 0, 3), -np.inf))))
    add("NaN in float16 q", h5(dump(q=with_value(Q, (0, 0, 0, 0), np.nan).astype(np.float16))))
    add("NaN in bfloat16 k", h5(dump(k=ds(bf16_bits(with_value(K, (0, 0, 1, 1), np.nan)),
                                          dtype="bfloat16"))))
    add("float64 beyond float32", h5(dump(v=with_value(V.astype(np.float64), (0, 0, 2, 2), 1e300))))
    add("k head_dim differs", h5(dump(k=K[..., :3])))
    add("v tokens differ", h5(dump(v=V[:, :, :5])))
    add("v heads differ", h5(dump(v=np.concatenate([V, V], axis=1))))
    add("batch differs", h5(dump(k=np.concatenate([K, K]), v=np.concatenate([V, V]))))
    add("heads do not divide", h5(dump(q=np.concatenate([Q, Q[:, :1]], axis=1),
                                       k=np.concatenate([K, K], axis=1),
                                       v=np.concatenate([V, V], axis=1))))
    add("missing q", h5(dump(q=None)))
    add("missing k", h5(dump(k=None)))
    add("missing v", h5(dump(v=None)))
    add("q is a group", h5(dump(q=lambda g, n: g.create_group(n))))
    add("q is a dangling soft link", h5(dump(q=lambda g, n: g.__setitem__(n, h5py.SoftLink("/x")))))
    add("q is an external link", h5(dump(q=lambda g, n: g.__setitem__(
        n, h5py.ExternalLink("elsewhere.h5", "/q")))))
    add("causal a string", h5(dump(attrs={"causal": "yes"})))
    # Issue 28: attributes on a dataset are not where attnsim reads them; one that disagrees with
    # what the run would use is refused (the run would silently be another problem).
    add("causal = 1 on dataset q (root says 0)", h5(dump(q=ds(Q, causal=1))), {2})
    add("causal = 1 on dataset k, no root attribute", h5(dump(k=ds(K, causal=1), attrs={})), {2})
    add("sm_scale on dataset v differs", h5(dump(v=ds(V, sm_scale=0.125))), {2})
    add("sm_scale NaN", h5(dump(attrs={"sm_scale": np.nan})))
    add("sm_scale Inf", h5(dump(attrs={"sm_scale": np.inf})))
    add("sm_scale a string", h5(dump(attrs={"sm_scale": "0.5"})))
    add("sm_scale an array", h5(dump(attrs={"sm_scale": np.array([0.5, 0.25])})))
    add("declared 2^28 elements per tensor", h5(dump(q=declared((1, 1, 1 << 22, 64)),
                                                      k=declared((1, 1, 1 << 22, 64)),
                                                      v=declared((1, 1, 1 << 22, 64)))))
    add("declared 2^33 tokens", h5(dump(q=declared((1, 1, 1 << 33, 4)), k=declared((1, 1, 8, 4)),
                                        v=declared((1, 1, 8, 4)))))
    add("declared 2^31 heads", h5(dump(q=declared((1, 1 << 31, 8, 4)), k=declared((1, 1, 8, 4)),
                                       v=declared((1, 1, 8, 4)))))
    add("no datasets", h5(lambda f: f.attrs.__setitem__("x", 1)))
    add("second layer has NaN", h5(lambda f: (dump(prefix="layer_00")(f), dump(
        prefix="layer_01", q=with_value(Q, (0, 0, 0, 0), np.nan))(f))))
    add("second layer misses k", h5(lambda f: (dump(prefix="layer_00")(f), dump(
        prefix="layer_01", k=None)(f))))
    add("second layer corrupt", make_layers_ck)
    add("HDF5 signature then garbage", raw(b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 8))
    add("random bytes", raw(random.Random(5).randbytes(4096)))
    add("PNG header", raw(b"\x89PNG\r\n\x1a\n" + b"\0" * 100))
    return muts


def wide_strings(width):
    """The method column as never-written strings `width` bytes wide (a tiny file). At 2^32 bytes
    libhdf5 1.10 itself divides by zero (SIGFPE) when it reads them."""
    def fn(f):
        del f["method"]
        t = h5py.h5t.C_S1.copy()
        t.set_size(width)
        h5py.h5d.create(f.id, b"method", t, h5py.h5s.create_simple((2,)))
    return fn


def results_mutations():
    """Mutations of a sweep results file (compare, gate): (name, maker, codes for compare B,
    codes for gate --results)."""
    def edit(fn):
        def make(fx, p):
            shutil.copyfile(fx / "results.h5", p)
            with h5py.File(p, "r+") as f:
                fn(f)
        return make

    def setds(name, data):
        def fn(f):
            del f[name]
            f[name] = data
        return fn

    def delds(name):
        return lambda f: f.__delitem__(name)

    m = []
    for frac in (0.0, 0.1, 0.5, 0.9, -1):
        m.append((f"truncated at {frac}", mutated("results.h5", truncate_at(frac)), {2}, {2}))
    m += [
        ("rel_fro moved", edit(setds("rel_fro", np.array([1.0, 2.0]))), {1}, {0, 1}),
        ("rel_fro NaN", edit(setds("rel_fro", np.array([np.nan, np.nan]))), {1}, {1}),
        ("rel_fro a string column", edit(setds("rel_fro", np.array([b"a", b"b"]))), {1}, {2}),
        ("rel_fro one row short", edit(setds("rel_fro", np.array([0.0]))), {1}, {2}),
        ("rel_fro 2-D", edit(setds("rel_fro", np.zeros((2, 2)))), {1}, {2}),
        ("missing rel_fro", edit(delds("rel_fro")), {1}, {2}),
        ("missing key column method", edit(delds("method")), {1}, {2}),
        ("method column numeric", edit(setds("method", np.array([1, 2]))), {1}, {0, 1, 2}),
        ("duplicate rows", edit(setds("method", np.array([b"golden", b"golden"]))), {1}, {2}),
        ("one row dropped", edit(lambda f: [setds(k, f[k][:1])(f) for k in list(f)
                                            if isinstance(f[k], h5py.Dataset) and
                                            f[k].shape[:1] == (2,)]), {1}, {0, 1}),
        ("complex column", edit(setds("cosine", np.array([1j, 2j]))), {1, 2}, {2}),
        ("declared huge column", edit(lambda f: f.create_dataset(
            "huge", shape=(1 << 34,), dtype="f8", chunks=(1 << 16,))), {2}, {2}),
        ("strings 1 GiB wide", edit(wide_strings(1 << 30)), {2}, {2}),
        ("strings 4 GiB wide (libhdf5 crashes)", edit(wide_strings(1 << 32)), {2}, {2}),
        ("a group linked to itself", edit(lambda f: f.__setitem__("loop", f["/"])), {0}, {0}),
        ("empty file", raw(b""), {2}, {2}),
        ("text file", text("rel_fro = 1\n"), {2}, {2}),
        ("not a results file", copy("dump.h5"), {1}, {2}),
    ]
    return m


SPEC_SIZE_KEYS = ["b", "hq", "hkv", "nq", "nkv", "d", "dv"]


def spec_mutations():
    """Synthetic specs: (spec, codes, require)."""
    out = []
    base = "normal:nq=8,d=4"
    for i, key in enumerate(SPEC_SIZE_KEYS):
        for value in sample(["0", "-1", "1.5", "abc", "", "nan", "inf", "1e400", "-0"], 3, i):
            out.append((f"normal:nq=8,d=4,{key}={value}" if key not in ("nq", "d") else
                        f"normal:{'nq' if key == 'nq' else 'd'}={value}", {2}, ""))
        # Sizes are decimal integers (1e11 is refused for its spelling, below).
        for value in sample(["2147483648", "100000000000", "9000000000000000",
                             "100000000000000000000", "16777217"],
                            2, i):
            # hkv must divide hq: a huge hkv alone is refused for that, rightly.
            out.append((f"normal:{'hq=' + value + ',' if key == 'hkv' else ''}{key}={value}", {2},
                        NAMES_LIMIT))
    out += [
        ("normal:nq=100000,nkv=100000000000", {2}, NAMES_LIMIT),
        ("normal:nq=100000,nkv=100000,d=4096", {2}, NAMES_LIMIT),
        ("normal:b=4096,hq=64,nq=4096,d=128", {2}, NAMES_LIMIT),
        ("normal:nq=8,d=4,causal=2", {2}, ""),
        ("normal:nq=8,d=4,causal=-1", {2}, ""),
        ("normal:nq=8,d=4,causal=0.5", {2}, ""),
        ("normal:nq=8,d=4,seed=-1", {2}, ""),
        ("normal:nq=8,d=4,seed=1.5", {2}, ""),
        ("normal:nq=8,d=4,seed=1e300", {2}, ""),
        ("normal:nq=8,d=4,seed=18446744073709551616", {2}, ""),
        ("normal:nq=8,d=4,sigma=-1", {2}, ""),
        ("normal:nq=8,d=4,sigma=1e39", {2}, ""),
        ("normal:nq=8,d=4,sigma=nan", {2}, ""),
        ("uniform:nq=8,d=4,lo=2,hi=1", {2}, ""),
        ("uniform:nq=8,d=4,lo=-1e39", {2}, ""),
        ("outlier:nq=8,d=4,frac=2", {2}, ""),
        ("outlier:nq=8,d=4,mag=1e38", {2}, ""),
        ("kbias:nq=8,d=4,bias=1e38", {2}, ""),
        ("peaked:nq=8,d=4,sharp=1e38", {2}, ""),
        ("normal:nq=8,d=4,bias=1", {2}, ""),
        ("normal:nq=8,d=4,bogus=1", {2}, ""),
        ("normal:nq=8,nq=16", {2}, ""),
        ("normal:nq=", {2}, ""),
        ("normal:nq", {2}, ""),
        ("normal:=8", {2}, ""),
        ("normal:nq=8:d=4", {2}, ""),
        ("normal:nq=8,hq=3,hkv=2", {2}, ""),
        ("NORMAL:nq=8", {2}, ""),
        ("bogus:nq=8", {2}, ""),
        ("", {2}, ""),
        (":", {2}, ""),
        # Sizes, causal and seed are decimal integers (strtod's other spellings are slips).
        ("normal:nq=0x10", {2}, "decimal"),
        ("normal:nq=1e3", {2}, "decimal integer"),
        ("normal:hq=2.0", {2}, "decimal integer"),
        ("normal:nq=1e11", {2}, "decimal integer"),
        ("normal:nq= 8", {2}, ""),
        ("normal:nq=8\n", {2}, ""),
        (base + ",", {2}, "stray comma"),
        ("normal:nq=8,,d=4", {2}, "stray comma"),
        ("normal:nq=8,d=4,hq=2,hkv=1,b=2,causal=1,seed=3", {0}, ""),
    ]
    return out


METHOD_MUTATIONS = [
    ("", {2}, ""), ("bogus", {2}, ""), ("FLASH", {2}, ""), ("flash:bogus=1", {2}, ""),
    ("flash:qkv=bogus", {2}, ""), ("flash:qkv=bf16,qkv=fp16", {2}, ""), ("flash:bq=0", {2}, ""),
    ("flash:bq=-1", {2}, ""), ("flash:bq=abc", {2}, ""), ("flash:bq=1.5", {2}, ""),
    ("flash:bq=", {2}, ""), ("flash:bq", {2}, ""), ("flash:=bf16", {2}, ""),
    ("flash:bq=99999999999", {2}, NAMES_LIMIT), ("flash:bq=2147483648", {2}, NAMES_LIMIT),
    ("flash:bq=2147483647", {2}, NAMES_LIMIT), ("flash:bk=2147483647", {2}, NAMES_LIMIT),
    ("flash:bq=65536,bk=65536", {2}, NAMES_LIMIT), ("flash:bq=1e3", {2}, ""),
    ("flash:bq=+8", {2}, ""), ("flash:bq= 8", {2}, ""),
    ("flash:q_block=0", {2}, ""), ("flash:pv_promote=2147483647", {0, 2}, ""),
    ("flash:max_offset=nan", {2}, ""), ("flash:max_offset=1e999", {2}, ""),
    ("flash:pv_dot=sm90.wgmma.e4m3.f32", {2}, ""), ("golden:qkv=bf16", {2}, ""),
    ("golden:", {2}, "empty option list"), ("flash:", {2}, "empty option list"),
    ("flash:,", {2}, "empty option list"), ("flash:qkv=bf16,,p=bf16", {2}, "stray comma"),
    ("flash:qkv=bf16,", {2}, "stray comma"), ("golden:causal=top_left", {0}, ""),
    ("golden:causal=diagonal", {2}, ""),
    (":qkv=bf16", {2}, ""),
    ("flash::", {2}, ""), ("flash:qkv=bf16:p=bf16", {2}, ""), ("flash:qkv=bf16\n", {2}, ""),
    ("sage2:arch=bogus", {2}, ""), ("sage2:target=bogus", {2}, ""), ("sage1:smooth_k=2", {2}, ""),
    ("flash:" + ",".join(f"k{i}=1" for i in range(2000)), {2}, ""),
    # A 10,000-character method string is not echoed whole (the message stays short).
    ("x" * 10000, {2}, r"^.{0,400}$"),
    ("flash:qkv=" + "y" * 10000, {2}, r"^.{0,500}$"),
]


SWEEP_CONFIGS = [
    ("syntax: open array", 'methods = ["golden"\n'),
    ("syntax: no value", "methods =\n"),
    ("syntax: no key", "= 3\n"),
    ("syntax: open table header", "[sweep\n"),
    ("syntax: leading zero", "seeds = 01\n"),
    ("syntax: NUL byte", 'methods = ["golden"]\n\0\n'),
    ("syntax: invalid UTF-8", 'methods = ["gold\xff\xfe"]\n'),
    ("syntax: deep nesting", "methods = " + "[" * 5000 + "]" * 5000 + "\n"),
    ("syntax: deep inline tables", "a = " + "{b = " * 3000 + "1" + "}" * 3000 + "\n"),
    ("syntax: bad table header", "[&]\n"),
    ("syntax: [[[1]]]", "[[[1]]]\n"),
    ("syntax: integer overflow", "seeds = 99999999999999999999\n"),
    ("duplicate key", "seeds = 1\nseeds = 2\n"),
    ("duplicate across [sweep]", 'seeds = 1\n[sweep]\nseeds = 2\n'),
    ("both spellings", "allow_nonfinite = true\nallow-nonfinite = false\n"),
    ("unknown key", "bogus = 1\n"),
    ("unknown table", "[other]\nx = 1\n"),
    ("unknown key in [sweep]", "[sweep]\nbogus = 1\n"),
    ("array of tables", "[[sweep]]\nseeds = 1\n"),
    ("sweep not a table", "sweep = 3\n"),
    ("methods a string", 'methods = "golden"\n'),
    ("methods of integers", "methods = [1, 2]\n"),
    ("methods nested", 'methods = [["golden"]]\n'),
    ("methods empty", "methods = []\n"),
    ("methods bogus", 'methods = ["bogus"]\n'),
    ("seeds a string", 'seeds = "3"\n'),
    ("seeds a float", "seeds = 1.5\n"),
    ("seeds zero", "seeds = 0\n"),
    ("seeds negative", "seeds = -1\n"),
    ("seeds beyond int", "seeds = 9223372036854775807\n"),
    ("seeds nan", "seeds = nan\n"),
    ("seeds a date", "seeds = 1979-05-27\n"),
    ("output empty", 'output = ""\n'),
    ("output a number", "output = 3\n"),
    ("allow_nonfinite an integer", "allow_nonfinite = 1\n"),
    ("input missing file", 'input = ["nope.h5"]\n'),
    ("synthetic bad", 'synthetic = ["normal:nq=-1"]\n'),
    ("grid bad", 'grid = ["bk"]\n'),
    ("grid key no method has", 'grid = ["nosuch=1,2"]\n'),
    ("empty file", ""),
    ("only a comment", "# nothing\n"),
    ("huge line", "# " + "x" * (1 << 20) + "\n"),
    ("summary not a metric", 'methods = ["golden"]\nsynthetic = ["normal:nq=8"]\n'
                             'summary = "bogus"\n'),
    ("summary an integer", 'methods = ["golden"]\nsynthetic = ["normal:nq=8"]\nsummary = 3\n'),
    ("skip_unsupported a string", 'methods = ["golden"]\nsynthetic = ["normal:nq=8"]\n'
                                  'skip_unsupported = "yes"\n'),
    # Paths are relative to the config's own directory: "dump.h5" beside a config in sub/ is
    # sub/dump.h5, which does not exist.
    ("input relative to the config's directory", 'methods = ["golden"]\ninput = ["sub/dump.h5"]\n'),
]


GATE_RULES = [
    ("unknown metric [cosin]", "[cosin]\nabs = 0\n", {2}),
    ("unknown metric after a good one", "[rel_fro]\nabs = 0\n[cosin]\nabs = 0\n", {2}),
    ("string metric [method]", "[method]\nabs = 0\n", {2}),
    ("2-D metric [ulp_hist]", "[ulp_hist]\nabs = 0\n", {2}),
    ("negative abs", "[rel_fro]\nabs = -1\n", {2}),
    ("abs a string", '[rel_fro]\nabs = "x"\n', {2}),
    ("abs nan", "[rel_fro]\nabs = nan\n", {2}),
    ("rel inf", "[rel_fro]\nrel = inf\n", {2}),
    ("ulp -1", "[rel_fro]\nulp = -1\n", {2}),
    ("ulp 1.5", "[rel_fro]\nulp = 1.5\n", {2}),
    ("ulp 1e300", "[rel_fro]\nulp = 1e300\n", {2}),
    ("better up", '[rel_fro]\nbetter = "up"\n', {2}),
    ("better an integer", "[rel_fro]\nbetter = 1\n", {2}),
    ("unknown key in a rule", "[rel_fro]\nfoo = 1\n", {2}),
    ("nested table", "[rel_fro.sub]\nabs = 1\n", {2}),
    ("array of tables", "[[rel_fro]]\nabs = 1\n", {2}),
    ("key empty", "key = []\n[rel_fro]\nabs = 0\n", {2}),
    ("key column missing", 'key = ["nosuch"]\n[rel_fro]\nabs = 0\n', {2}),
    ("key a string", 'key = "method"\n[rel_fro]\nabs = 0\n', {2}),
    ("key of integers", "key = [1]\n[rel_fro]\nabs = 0\n", {2}),
    ("key 2-D column", 'key = ["ulp_hist"]\n[rel_fro]\nabs = 0\n', {2}),
    ("key not unique", 'key = ["seed"]\n[rel_fro]\nabs = 0\n', {2}),
    ("unknown top-level key", "top = 1\n[rel_fro]\nabs = 0\n", {2}),
    ("no rules", 'key = ["method"]\n', {2}),
    ("empty file", "", {2}),
    ("syntax error", "[rel_fro\nabs = 0\n", {2}),
    ("duplicate key", "[rel_fro]\nabs = 0\nabs = 1\n", {2}),
    ("duplicate table", "[rel_fro]\nabs = 0\n[rel_fro]\nrel = 1\n", {2}),
    ("NUL byte", "[rel_fro]\nabs = 0\0\n", {2}),
    ("deep nesting", "x = " + "[" * 5000 + "]" * 5000 + "\n[rel_fro]\n", {2}),
    ("valid: empty rule", "[rel_fro]\n", {0}),
    ("valid: integer column as metric", "[seed]\nabs = 0\n", {0}),
]


def path_and_memory_cases(cmd, base, files, in_opt, first_input, outputs=()):
    """Hostile input paths for in_opt, hostile output paths for --out and the --max-memory
    cases of one command, each with the command's valid input files present."""
    cases = input_path_cases(cmd, base, in_opt)
    for c in output_path_cases(cmd, base, "--out", first_input, outputs=outputs):
        c.files = {**files, **c.files}
        cases.append(c)
    cases += [Case(cmd, c.name, c.argv, {**files, **c.files}, c.codes, env=c.env,
                   require=c.require) for c in memory_option_cases(cmd, base)]
    return cases


def dump_command_cases(cmd, make_argv, outputs, long_mode, rng, step=1, phase=0):
    """Every dump mutation as the input of a dump-reading command, without --quiet (a bad input
    must be refused before any of the report is printed)."""
    def argv(f):
        return [a for a in make_argv(f) if a != "--quiet"]

    cases = []
    for name, maker, codes in sample(dump_mutations(), step, phase):
        cases.append(Case(cmd, f"dump: {name}", argv("in.h5"), files={"in.h5": maker},
                          codes=codes, outputs=outputs))
    nflip = 60 if long_mode else 2
    for i in range(nflip):
        seed = rng.randrange(1 << 30)
        n = rng.choice([1, 2, 8, 64])
        src = rng.choice(["synth.h5", "dump.h5"])
        cases.append(Case(cmd, f"dump: {src} {n} byte flips (seed {seed})", argv("in.h5"),
                          files={"in.h5": mutated(src, flip_bytes(seed, n))},
                          codes={0, 2}, outputs=outputs))
    if long_mode:
        for i in range(30):
            frac = rng.random()
            src = rng.choice(["synth.h5", "dump.h5", "layers.h5"])
            cases.append(Case(cmd, f"dump: {src} truncated at {frac:.4f}", argv("in.h5"),
                              files={"in.h5": mutated(src, truncate_at(frac))}, outputs=outputs))
    return cases


def random_spec(rng):
    dist = rng.choice(["normal", "uniform", "kbias", "outlier", "peaked", "bogus", ""])
    keys = SPEC_SIZE_KEYS + ["causal", "seed", "sigma", "lo", "hi", "bias", "frac", "mag", "sharp",
                             "x"]
    values = ["1", "2", "3", "4", "8", "0", "-1", "1.5", "1e9", "2147483648", "nan", "", "abc",
              "1e39", "-1e39", "0.5", "16"]
    items = [f"{rng.choice(keys)}={rng.choice(values)}" for _ in range(rng.randrange(0, 6))]
    items += ["nq=8", "d=4"][:rng.randrange(3)]
    rng.shuffle(items)
    return dist + (":" + ",".join(items) if items or rng.random() < 0.3 else "")


def random_method(rng):
    keys = ["qkv", "q", "k", "v", "p", "out", "acc", "exp", "bq", "bk", "q_quant", "k_gran",
            "q_block", "qk_dot", "pv_dot", "pv_promote", "max_offset", "rescale", "norm", "bogus"]
    values = ["fp32", "bf16", "fp16", "e4m3fn", "s8", "s4", "16", "64", "0", "-1", "abc", "",
              "2147483647", "sm90.wgmma.e4m3.f32", "sage_cuda_int8", "per_thread", "nan", "1"]
    name = rng.choice(["flash", "flash", "golden", "sage1", "sage2", "bogus"])
    items = [f"{rng.choice(keys)}={rng.choice(values)}" for _ in range(rng.randrange(0, 5))]
    return name + (":" + ",".join(items) if items else "")


def random_method_and_spec_cases(rng, cmd, argv, method_option, output, n):
    """n random method strings and n random synthetic specs in place of argv's valid ones:
    each must run (exit 0) or be refused with one line (exit 2)."""
    cases = []
    for _ in range(n):
        method = random_method(rng)
        cases.append(Case(cmd, f"random method {method!r}",
                          replace_value(argv, method_option, method), codes={0, 2},
                          outputs=(output,)))
        spec = random_spec(rng)
        cases.append(Case(cmd, f"random spec {spec!r}", replace_value(argv, "--synthetic", spec),
                          codes={0, 2}, outputs=(output,)))
    return cases


def mutate_text(rng, s):
    b = bytearray(s.encode())
    for _ in range(rng.randrange(1, 6)):
        op = rng.randrange(4)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:
            del b[min(i, len(b) - 1)]
        elif op == 1:
            b[i:i] = bytes([rng.choice(b'[]{}="\',.\n#\\0123456789-+ .e\x00\xff')])
        elif op == 2 and b:
            j = min(len(b), i + rng.randrange(1, 20))
            b[i:i] = b[i:j]
        else:
            b = b[:i]
    return bytes(b)


def mutate_argv(rng, argv):
    a = list(argv)
    for _ in range(rng.randrange(1, 4)):
        op = rng.randrange(5)
        if op == 0 and len(a) > 1:
            del a[rng.randrange(1, len(a))]
        elif op == 1:
            i = rng.randrange(1, len(a) + 1)
            a.insert(i, rng.choice(a[1:] or a))
        elif op == 2 and len(a) > 2:
            i, j = rng.randrange(1, len(a)), rng.randrange(1, len(a))
            a[i], a[j] = a[j], a[i]
        elif op == 3:
            i = rng.randrange(1, len(a)) if len(a) > 1 else 0
            a[i] = rng.choice(["", "-1", "0", "nan", "2147483648", "abc", "--", "-", "=", "a=b",
                               "--out", "odir", "/dev/null", "in.h5"])
        else:
            a.append(rng.choice(["--quiet", "--resume", "--help-all", "--max-memory", "1k"]))
    return a


def build_cases(long_mode, rng):
    global LONG
    LONG = long_mode
    cases = []
    # info, methods, bench: no inputs; bad options only (a valid bench is too slow for the test).
    for cmd in ("info", "methods"):
        cases.append(Case(cmd, "valid", [cmd], codes={0}))
        cases += [Case(cmd, "unknown option", [cmd, "--bogus"]),
                  Case(cmd, "stray argument", [cmd, "stray"])]
    cases += [Case("bench", "unknown option", ["bench", "--bogus"]),
              Case("bench", "stray argument", ["bench", "stray"]),
              Case("bench", "--quick with a value", ["bench", "--quick=maybe"]),
              Case("bench", "--max-memory (not an option)", ["bench", "--max-memory", "1G"])]
    # bench --native on a tiny input is fast: its own options.
    nat = ["bench", "--native", "--quick", "--synthetic", "normal:nq=32,nkv=32,d=16"]
    cases += [Case("bench", "--native valid", nat + ["--method", "flash"], codes={0}),
              Case("bench", "--native bad dtype", nat + ["--dtype", "fp8"]),
              Case("bench", "--native unknown method", nat + ["--method", "bogus"]),
              Case("bench", "--native bad spec", ["bench", "--native", "--synthetic", "normal:nq=0"]),
              Case("bench", "--method without --native", ["bench", "--method", "flash"])]
    cases += [Case("-", "no subcommand", []), Case("-", "unknown subcommand", ["bogus"]),
              Case("-", "two subcommands", ["info", "methods"]),
              Case("-", "option before subcommand", ["--bogus", "info"])]

    # convert
    cv = ["convert", "--to", "e4m3fn", "--overflow", "saturate", "--in", "x.f32", "--out", "y.u8"]
    cvf = {"x.f32": copy("x.f32")}
    cases.append(Case("convert", "valid", cv, cvf, codes={0}, outputs=("y.u8",)))
    dec = ["convert", "--to", "int4", "--decode", "--packed", "--scale", "1", "--in", "c.u8",
           "--out", "y.f32"]
    decf = {"c.u8": copy("codes.u8")}
    cases.append(Case("convert", "valid decode", dec, decf, codes={0}, outputs=("y.f32",)))
    for c in option_cases("convert", cv, ["--to", "--in", "--out"], {},
                          [], {"--to": [], "--round": [], "--overflow": [], "--nan-encoding": [],
                               "--from": []}, ("y.u8",)):
        c.files = {**cvf, **c.files}
        cases.append(c)
    for c in option_cases("convert", dec, [], {"--count": (1, 16)}, ["--scale"], {},
                          ("y.f32",)):
        c.files = {**decf, **c.files}
        cases.append(c)
    iv = ["convert", "--to", "int8", "--overflow", "saturate", "--scale", "0.5", "--in", "x.f32",
          "--out", "y.s8"]
    cases.append(Case("convert", "valid int8", iv, cvf, codes={0}, outputs=("y.s8",)))
    for c in option_cases("convert", iv, [], {}, ["--scale"], {}, ("y.s8",)):
        c.files = {**cvf, **c.files}
        cases.append(c)
    cases.append(Case("convert", "--scale 0 for int8", replace_value(iv, "--scale", "0"), cvf))
    cases.append(Case("convert", "--scale 1e-320 (subnormal) for int8",
                      replace_value(iv, "--scale", "1e-320"), cvf, codes={0, 2},
                      outputs=("y.s8",)))
    cases.append(Case("convert", "NaN into int8", iv,
                      {"x.f32": raw(np.array([1, np.nan], np.float32).tobytes())}))
    for size in (1, 2, 3, 5, 7):
        cases.append(Case("convert", f"input of {size} bytes", cv, {"x.f32": raw(b"\1" * size)}))
    cases.append(Case("convert", "f64 input of 12 bytes", cv + ["--from", "f64"],
                      {"x.f32": raw(b"\1" * 12)}))
    cases.append(Case("convert", "odd-sized u16 decode", ["convert", "--to", "bf16", "--decode",
                                                          "--in", "c.u8", "--out", "y.f32"],
                      {"c.u8": raw(b"\1\2\3")}))
    cases.append(Case("convert", "--count beyond the input", replace_value(dec, "--count", "17"),
                      decf))
    cases.append(Case("convert", "--count 2^64", replace_value(dec, "--count",
                                                               "18446744073709551616"), decf))
    cases.append(Case("convert", "--count without --decode", cv + ["--count", "4"], cvf))
    cases += [Case("convert", n, a, {**cvf, **f}, codes=k, outputs=o) for n, a, f, k, o in [
        ("empty input", cv, {"x.f32": raw(b"")}, {0, 2}, ("y.u8",))]]
    cases += path_and_memory_cases("convert", cv, cvf, "--in", "x.f32")

    # synth
    sy = ["synth", "--synthetic", "normal:nq=8,d=4", "--out", "s.h5"]
    cases.append(Case("synth", "valid", sy, codes={0}, outputs=("s.h5",)))
    cases += option_cases("synth", sy, ["--synthetic", "--out"], {}, [], {}, ("s.h5",))
    for spec, codes, req in sample(spec_mutations(), 2):
        cases.append(Case("synth", f"spec {spec[:60]!r}", replace_value(sy, "--synthetic", spec),
                          codes=codes, outputs=("s.h5",), require=req))
    for c in output_path_cases("synth", sy, "--out", "x.h5"):
        if "input" not in c.name:
            cases.append(c)
    cases += memory_option_cases("synth", sy)

    # sweep
    swf = {"dump.h5": copy("dump.h5")}
    sw = ["sweep", "--methods", "golden,flash", "--input", "dump.h5", "--out", "r.h5", "--quiet"]
    cases.append(Case("sweep", "valid", sw, swf, codes={0}, outputs=("r.h5",)))
    sws = ["sweep", "--methods", "flash", "--synthetic", "normal:nq=8,d=4", "--seeds", "2",
           "--out", "r.h5", "--quiet"]
    cases.append(Case("sweep", "valid synthetic", sws, codes={0}, outputs=("r.h5",)))
    for c in option_cases("sweep", sw, [], {}, [], {"--methods": [], "--grid": []}, ("r.h5",)):
        c.files = {**swf, **c.files}
        cases.append(c)
    cases += option_cases("sweep", sws, [], {"--seeds": (1, 64),
                                            "--max-points": (1, 2 ** 63 - 1)}, [], {},
                          ("r.h5", "r.h5.ckpt.0"))
    cases.append(Case("sweep", "--seeds 2147483647 refused by memory",
                      replace_value(sws, "--seeds", "2147483647"), require=NAMES_LIMIT))
    cases.append(Case("sweep", "--seeds 100000000 refused by memory",
                      replace_value(sws, "--seeds", "100000000"), require=NAMES_LIMIT))
    cases.append(Case("sweep", "--max-points 1 stops (exit 3) and leaves a checkpoint",
                      sws + ["--max-points", "1"], codes={3}, outputs=("r.h5.ckpt.0",)))
    cases.append(Case("sweep", "--max-points without --output",
                      ["sweep", "--methods", "golden", "--synthetic", "normal:nq=8,d=4",
                       "--max-points", "1"]))
    cases.append(Case("sweep", "--resume without --output",
                      ["sweep", "--methods", "golden", "--synthetic", "normal:nq=8,d=4",
                       "--resume"]))
    cases.append(Case("sweep", "--resume with another sweep's checkpoint", sws + ["--resume"],
                      {"r.h5.ckpt.0": text("attnsim-checkpoint\t1\t0123456789abcdef\t4\n")}))
    cases.append(Case("sweep", "--resume with a garbage checkpoint", sws + ["--resume"],
                      {"r.h5.ckpt.0": raw(random.Random(3).randbytes(300))}))
    cases.append(Case("sweep", "--resume with a checkpoint that is a directory",
                      sws + ["--resume"], {"r.h5.ckpt.0": mkdir()}))
    cases.append(Case("sweep", "checkpoint name taken by a directory", sws,
                      {"r.h5.ckpt.0": mkdir()}))
    cases.append(Case("sweep", "checkpoint name taken by a FIFO", sws + ["--resume"],
                      {"r.h5.ckpt.0": fifo()}))
    cases.append(Case("sweep", "no methods", ["sweep", "--synthetic", "normal:nq=8", "--quiet"]))
    cases.append(Case("sweep", "no inputs", ["sweep", "--methods", "golden", "--quiet"]))
    for method, codes, req in sample(METHOD_MUTATIONS, 2, 1):
        cases.append(Case("sweep", f"method {method[:40]!r}", replace_value(sws, "--methods",
                                                                            method),
                          codes=codes, outputs=("r.h5",), require=req))
    for spec, codes, req in spec_mutations()[::3]:
        cases.append(Case("sweep", f"spec {spec[:60]!r}", replace_value(sws, "--synthetic", spec),
                          codes=codes, outputs=("r.h5",), require=req))
    for grid, codes, req in [("bk", {2}, ""), ("bk=", {2}, ""), ("=1", {2}, ""), ("bk=0", {2}, ""),
                             ("bk=16,,32", {2}, ""), ("nosuch=1", {2}, ""),
                             ("qkv=bogus", {2}, ""), ("bk=2147483647", {2}, NAMES_LIMIT),
                             ("bk=99999999999", {2}, NAMES_LIMIT), ("bk=16,16", {0}, "")]:
        cases.append(Case("sweep", f"grid {grid!r}", sws + ["--grid", grid], codes=codes,
                          outputs=("r.h5",), require=req))
    cases.append(Case("sweep", "grid key twice", sws + ["--grid", "bk=16", "--grid", "bk=32"]))
    forty = ",".join(str(i) for i in range(1, 41))
    cases.append(Case("sweep", "grid of 40^4 methods refused by memory",
                      sws + ["--grid", f"bq={forty}", "--grid", f"bk={forty}", "--grid",
                             f"q_block={forty}", "--grid", f"k_block={forty}"],
                      require=NAMES_LIMIT))
    # Resuming: the checkpoint of a stopped sweep is used and then removed (documented).
    stopped = run_first(sws + ["--max-points", "1"], "r.h5.ckpt.0")
    cases.append(Case("sweep", "--resume after --max-points", sws + ["--resume"],
                      {"r.h5.ckpt.0": stopped}, codes={0}, outputs=("r.h5",),
                      may_remove=("r.h5.ckpt.0",)))
    cases.append(Case("sweep", "--resume with a record cut mid-line", sws + ["--resume"],
                      {"r.h5.ckpt.0": lambda fx, p: (stopped(fx, p), p.write_bytes(
                          p.read_bytes()[:-7]))}, codes={0}, outputs=("r.h5",),
                      may_remove=("r.h5.ckpt.0",)))
    cases.append(Case("sweep", "--resume with another sweep's points",
                      replace_value(sws, "--seeds", "3") + ["--resume"],
                      {"r.h5.ckpt.0": stopped}))
    cases.append(Case("sweep", "dump input and bad spec",
                      sw + ["--synthetic", "normal:nq=-1"], swf))
    # Issue 28: causal inputs with rows that see no key, summaries, FILE:GROUP, duplicates.
    more_q = h5(dump(k=K[:, :, :2], v=V[:, :, :2], attrs={"causal": 1}))
    cases.append(Case("sweep", "causal dump with more queries than keys", sw, {"dump.h5": more_q},
                      require="more queries .8. than keys .2.: .* first 6 query rows see no key"))
    cases.append(Case("sweep", "causal spec with more queries than keys",
                      replace_value(sws, "--synthetic", "normal:nq=16,nkv=4,d=4,causal=1"),
                      require="first 12 query rows see no key"))
    cases.append(Case("sweep", "--summary not a metric", sw + ["--summary", "bogus"], swf))
    cases.append(Case("sweep", "--summary rel_l1", sw + ["--summary", "rel_l1"], swf, codes={0},
                      outputs=("r.h5",)))
    cases.append(Case("sweep", "FILE:GROUP input", replace_value(sw, "--input", "layers.h5:layer_01"),
                      {"layers.h5": copy("layers.h5")}, codes={0}, outputs=("r.h5",)))
    cases.append(Case("sweep", "FILE:GROUP of a group that does not exist",
                      replace_value(sw, "--input", "layers.h5:layer_07"),
                      {"layers.h5": copy("layers.h5")}, require="no group 'layer_07'"))
    cases.append(Case("sweep", "method and input twice (warned, run once)",
                      ["sweep", "--methods", "golden,flash,flash:acc=fp32", "--input", "dump.h5",
                       "--input", "./dump.h5", "--out", "r.h5", "--quiet"], swf, codes={0},
                      outputs=("r.h5",)))
    cases.append(Case("sweep", "--skip-unsupported on a refused method",
                      ["sweep", "--methods", "flash,lean", "--input", "dump.h5", "--out", "r.h5",
                       "--quiet", "--skip-unsupported"], swf, codes={0}, outputs=("r.h5",)))
    cases.append(Case("sweep", "a refused method without --skip-unsupported",
                      ["sweep", "--methods", "lean", "--input", "dump.h5", "--out", "r.h5",
                       "--quiet"], swf, require="lean: the input's head_dim 4 is not supported"))
    cases.append(Case("sweep", "good dump then a missing one", sw + ["--input", "nope.h5"], swf))
    cases += dump_command_cases(
        "sweep", lambda f: ["sweep", "--methods", "golden,flash", "--input", "dump.h5",
                            "--input", f, "--out", "r.h5", "--quiet"], ("r.h5",), long_mode, rng,
        step=2, phase=1)
    for c in cases:
        if c.cmd == "sweep" and "dump.h5" in c.argv and "dump.h5" not in c.files:
            c.files = {**swf, **c.files}
    cases += input_path_cases("sweep", sw, "--input")
    cases += input_path_cases("sweep", ["sweep", "--config", "c.toml", "--out", "r.h5", "--quiet"],
                              "--config")
    for c in output_path_cases("sweep", sw, "--out", "dump.h5", outputs=("r.h5",)):
        c.files = {**swf, **c.files}
        cases.append(c)
    swc = ["sweep", "--config", "c.toml", "--out", "r.h5", "--quiet"]
    cases.append(Case("sweep", "valid config", swc, {"c.toml": copy("config.toml")}, codes={0},
                      outputs=("r.h5",)))
    cases.append(Case("sweep", "output is the config", replace_value(swc, "--out", "c.toml"),
                      {"c.toml": copy("config.toml")}))
    for name, body in SWEEP_CONFIGS:
        cases.append(Case("sweep", f"config: {name}", swc,
                          {"c.toml": raw(body.encode("utf-8", "surrogateescape")
                                         if "\xff" not in body else body.encode("latin-1"))}))
    cases.append(Case("sweep", "config: an HDF5 file", swc, {"c.toml": copy("dump.h5")}))
    cases.append(Case("sweep", "config: seeds 2147483647 refused by memory", swc,
                      {"c.toml": text('methods = ["golden"]\nsynthetic = ["normal:nq=8"]\n'
                                      'seeds = 2147483647\n')}, require=NAMES_LIMIT))
    cases.append(Case("sweep", "config: output a directory", ["sweep", "--config", "c.toml",
                                                              "--quiet"],
                      {"c.toml": text('methods = ["golden"]\nsynthetic = ["normal:nq=8"]\n'
                                      'output = "odir"\n'), "odir": mkdir()}))
    cases += memory_option_cases("sweep", sws)
    if long_mode:
        for i in range(60):
            body = mutate_text(rng, 'methods = ["golden", "flash:qkv=bf16"]\n[sweep]\n'
                               'synthetic = ["normal:nq=8,d=4"]\nseeds = 2\ngrid = ["bk=16,32"]\n')
            cases.append(Case("sweep", f"config: random edit {i}", swc, {"c.toml": raw(body)},
                              codes={0, 2}, outputs=("r.h5",)))
        cases += random_method_and_spec_cases(rng, "sweep", sws, "--methods", "r.h5", 40)

    # mma
    mm = ["mma", "--instr", "sm90.hmma.f16.f32", "--m", "16", "--n", "8", "--k", "16", "--a",
          "A.u16", "--b", "B.u16", "--c", "C.f32", "--out", "D.f32"]
    mmf = {"A.u16": copy("A.u16"), "B.u16": copy("B.u16"), "C.f32": copy("C.f32")}
    cases.append(Case("mma", "valid", mm, mmf, codes={0}, outputs=("D.f32",)))
    cases.append(Case("mma", "valid --list", ["mma", "--list"], codes={0}))
    for c in option_cases("mma", mm, [], {"--m": (16, 16), "--n": (8, 8),
                                          "--k": (16, 16), "--batch": (1, 1),
                                          "--promote": (0, 0)},
                          [], {"--instr": []}, ("D.f32",)):
        c.files = {**mmf, **c.files}
        cases.append(c)
    for opt in ("--instr", "--a", "--b", "--c", "--out"):
        cases.append(Case("mma", f"{opt} left out", drop_option(mm, opt), mmf))
    for name, f in [("A one byte short", {"A.u16": raw(b"\0" * 511)}),
                    ("A one byte long", {"A.u16": raw(b"\0" * 513)}),
                    ("B empty", {"B.u16": raw(b"")}), ("C of 3 bytes", {"C.f32": raw(b"\0" * 3)}),
                    ("A huge sparse", {"A.u16": sparse(64 << 30)})]:
        cases.append(Case("mma", name, mm, {**mmf, **f}))
    for name, argv, req in [
            ("--k not a multiple", replace_value(mm, "--k", "24"), ""),
            ("--promote not dividing", mm + ["--promote", "24"], ""),
            ("--promote on an integer instruction",
             replace_value(mm, "--instr", "sm90.imma.s8.s32") + ["--promote", "32"], ""),
            ("sizes refused by memory", replace_value(replace_value(mm, "--m", "100000"), "--n",
                                                      "100000"), NAMES_LIMIT),
            ("--batch refused by memory", replace_value(mm, "--batch", "2147483647"),
             NAMES_LIMIT),
            ("--m beyond int", replace_value(mm, "--m", "3000000000"), NAMES_LIMIT)]:
        cases.append(Case("mma", name, argv, mmf, require=req))
    for opt in ("--a", "--b", "--c"):
        for c in input_path_cases("mma", mm, opt, step=2 if opt == "--a" else 5):
            c.files = {**mmf, **c.files}
            cases.append(c)
    for c in output_path_cases("mma", mm, "--out", "A.u16"):
        c.files = {**mmf, **c.files}
        cases.append(c)
    cases.append(Case("mma", "output is C", replace_value(mm, "--out", "C.f32"), mmf))
    cases += [Case("mma", c.name, c.argv, {**mmf, **c.files}, c.codes, env=c.env,
                   require=c.require) for c in memory_option_cases("mma", mm)]

    # special
    sp = ["special", "--fn", "ex2", "--in", "x.f32", "--out", "y.f32"]
    spf = {"x.f32": copy("x.f32")}
    cases.append(Case("special", "valid", sp, spf, codes={0}, outputs=("y.f32",)))
    for c in option_cases("special", sp, ["--fn", "--in", "--out"], {}, [], {"--fn": []},
                          ("y.f32",)):
        c.files = {**spf, **c.files}
        cases.append(c)
    for size in (1, 3, 6):
        cases.append(Case("special", f"input of {size} bytes", sp, {"x.f32": raw(b"\7" * size)}))
    cases.append(Case("special", "empty input", sp, {"x.f32": raw(b"")}, codes={0, 2},
                      outputs=("y.f32",)))
    cases += path_and_memory_cases("special", sp, spf, "--in", "x.f32")

    # run
    rnf = {"dump.h5": copy("dump.h5")}
    rn = ["run", "--method", "flash", "--input", "dump.h5", "--out", "o.h5", "--quiet"]
    cases.append(Case("run", "valid", rn, rnf, codes={0}, outputs=("o.h5",)))
    rns = ["run", "--method", "flash", "--synthetic", "normal:nq=8,d=4", "--out", "o.h5",
           "--quiet"]
    cases.append(Case("run", "valid synthetic", rns, codes={0}, outputs=("o.h5",)))
    for c in option_cases("run", rn, ["--method"], {}, [], {"--method": [], "--group": []},
                          ("o.h5",)):
        c.files = {**rnf, **c.files}
        cases.append(c)
    cases.append(Case("run", "both --input and --synthetic", rn + ["--synthetic", "normal"], rnf))
    cases.append(Case("run", "neither --input nor --synthetic", drop_option(rn, "--input"), rnf))
    cases.append(Case("run", "--group with --synthetic", rns + ["--group", "layer_00"]))
    cases.append(Case("run", "--group that does not exist", rn + ["--group", "layer_09"], rnf))
    # Issue 28: rows that see no key; messages in the method's own terms and the right source.
    cases.append(Case("run", "causal dump with more queries than keys", rn,
                      {"dump.h5": h5(dump(k=K[:, :, :2], v=V[:, :, :2], attrs={"causal": 1}))},
                      require="first 6 query rows see no key"))
    cases.append(Case("run", "causal spec with more queries than keys",
                      replace_value(rns, "--synthetic", "normal:nq=256,nkv=64,d=8,causal=1"),
                      require="first 192 query rows see no key"))
    cases.append(Case("run", "nested group blocks/3 runs", rn,
                      {"dump.h5": h5(dump(prefix="blocks/3"))}, codes={0}, outputs=("o.h5",)))
    cases.append(Case("run", "splitkv on head_dim 200 names splitkv and no flag",
                      replace_value(replace_value(rns, "--method", "splitkv"), "--synthetic",
                                    "normal:nq=8,d=200"),
                      require=r"^attnsim: error: splitkv: (?!.*--head-dim)"))
    cases.append(Case("run", "kivi decode on a non-causal dump names kivi",
                      replace_value(rn, "--method", "kivi:mode=decode,group=2,residual=4"), rnf,
                      require=r"^attnsim: error: kivi decode"))
    cases.append(Case("run", "sm_scale -1e-9 echoed as -1e-09", rn,
                      {"dump.h5": h5(dump(attrs={"sm_scale": -1e-9}))}, require=r"-1e-09"))
    cases.append(Case("run", "limit from ATTNSIM_MAX_MEMORY named as such", rns,
                      env={"ATTNSIM_MAX_MEMORY": "1k"}, require=r"\(ATTNSIM_MAX_MEMORY\)$"))
    cases.append(Case("run", "limit from --max-memory named as such", rns + ["--max-memory", "1k"],
                      require=r"\(--max-memory\)$"))
    cases.append(Case("run", "a trivial run fits in 40M (no 256 MiB floor)",
                      rns + ["--max-memory", "40M"], codes={0}, outputs=("o.h5",)))
    for method, codes, req in sample(METHOD_MUTATIONS, 2):
        cases.append(Case("run", f"method {method[:40]!r}", replace_value(rns, "--method", method),
                          codes=codes, outputs=("o.h5",), require=req))
    for spec, codes, req in spec_mutations()[1::3]:
        cases.append(Case("run", f"spec {spec[:60]!r}", replace_value(rns, "--synthetic", spec),
                          codes=codes, outputs=("o.h5",), require=req))
    beyond_int = h5(dump(q=declared((1, 1, 2 ** 31 + 1, 1)), k=declared((1, 1, 8, 1)),
                         v=declared((1, 1, 8, 1))))
    for cmd, argv in (("run", rn), ("sweep", sw), ("quantize", ["quantize", "--input", "dump.h5"]),
                      ("attribute", ["attribute", "--method", "flash", "--input", "dump.h5"])):
        # A limit this high lets the estimate pass: the reader itself must refuse the shape before
        # it reads 8 GiB of zeros.
        cases.append(Case(cmd, "dump dimension beyond int under a 1T memory limit", argv,
                          {"dump.h5": beyond_int}, env={"ATTNSIM_MAX_MEMORY": "1T"},
                          require=NAMES_LIMIT))
    # A failed run leaves an existing output as it was.
    for cmd, argv, out in (("run", replace_value(rn, "--input", "nope.h5"), "o.h5"),
                           ("synth", replace_value(sy, "--synthetic", "normal:nq=-1"), "s.h5"),
                           ("sweep", replace_value(sw, "--methods", "bogus"), "r.h5"),
                           ("convert", cv, "y.u8")):
        cases.append(Case(cmd, "existing output kept when the run fails", argv,
                          {out: text("precious\n"), "dump.h5": copy("dump.h5"),
                           "x.f32": raw(b"\1\2\3")}))
    cases += dump_command_cases("run", lambda f: replace_value(rn, "--input", f), ("o.h5",),
                                long_mode, rng, step=2, phase=0)
    cases += path_and_memory_cases("run", rn, rnf, "--input", "dump.h5", ("o.h5",))
    if long_mode:
        cases += random_method_and_spec_cases(rng, "run", rns, "--method", "o.h5", 40)

    # compare
    cmf = {"a.h5": copy("results.h5"), "b.h5": copy("results.h5")}
    cm = ["compare", "a.h5", "b.h5"]
    cases.append(Case("compare", "valid (same)", cm, cmf, codes={0}))
    cases.append(Case("compare", "valid (differ)", ["compare", "a.h5", "d.h5"],
                      {**cmf, "d.h5": copy("dump.h5")}, codes={1}))
    for c in option_cases("compare", cm, [], {"--max-report": (0, 2 ** 31 - 1)},
                          ["--tol", "--rtol"], {}, ()):
        c.files = {**cmf, **c.files}
        if c.name.startswith("required"):
            continue
        cases.append(c)
    cases.append(Case("compare", "one file", ["compare", "a.h5"], cmf))
    cases.append(Case("compare", "three files", cm + ["a.h5"], cmf))
    for name, maker, codes, _ in results_mutations():
        cases.append(Case("compare", f"B: {name}", cm, {**cmf, "b.h5": maker}, codes=codes))
    for name, maker, codes in dump_mutations():
        if name.startswith(("truncated", "h5py dump truncated", "HDF5 signature", "random bytes",
                            "declared")):
            cases.append(Case("compare", f"A: dump {name}", cm, {**cmf, "a.h5": maker},
                              codes=codes))
    nflip = 60 if long_mode else 2
    for i in range(nflip):
        seed, n = rng.randrange(1 << 30), rng.choice([1, 4, 32])
        cases.append(Case("compare", f"B: {n} byte flips (seed {seed})", cm,
                          {**cmf, "b.h5": mutated("results.h5", flip_bytes(seed, n))},
                          codes={0, 1, 2}))
    cases += input_path_cases("compare", cm, "b.h5")
    cases += [Case("compare", c.name, c.argv, {**cmf, **c.files}, c.codes, env=c.env,
                   require=c.require) for c in memory_option_cases("compare", cm)]

    # gate
    gtf = {"base.h5": copy("results.h5"), "new.h5": copy("results.h5"),
           "rules.toml": copy("rules.toml")}
    gt = ["gate", "--baseline", "base.h5", "--results", "new.h5", "--rules", "rules.toml"]
    cases.append(Case("gate", "valid (pass)", gt, gtf, codes={0}))
    for c in option_cases("gate", gt, ["--baseline", "--results", "--rules"], {}, [], {}, ()):
        c.files = {**gtf, **c.files}
        cases.append(c)
    for name, body, codes in GATE_RULES:
        cases.append(Case("gate", f"rules: {name}", gt, {**gtf, "rules.toml": text(body)},
                          codes=codes))
    cases.append(Case("gate", "rules: an HDF5 file", gt, {**gtf, "rules.toml": copy("results.h5")}))
    for name, maker, _, codes in results_mutations():
        cases.append(Case("gate", f"results: {name}", gt, {**gtf, "new.h5": maker}, codes=codes))
        if LONG or len(name) % 2:
            cases.append(Case("gate", f"baseline: {name}", gt, {**gtf, "base.h5": maker},
                              codes=codes))
    for opt in ("--baseline", "--results", "--rules"):
        for c in input_path_cases("gate", gt, opt, step=2 if opt == "--rules" else 5):
            c.files = {**gtf, **c.files}
            cases.append(c)
    cases += [Case("gate", c.name, c.argv, {**gtf, **c.files}, c.codes, env=c.env,
                   require=c.require) for c in memory_option_cases("gate", gt)]
    if long_mode:
        base_rules = ('key = ["method", "input", "seed"]\n[rel_fro]\nrel = 1e-6\n'
                      'better = "lower"\n[cosine]\nabs = 1e-9\n')
        for i in range(60):
            cases.append(Case("gate", f"rules: random edit {i}", gt,
                              {**gtf, "rules.toml": raw(mutate_text(rng, base_rules))},
                              codes={0, 1, 2}))
        for i in range(30):
            seed, n = rng.randrange(1 << 30), rng.choice([1, 4, 32])
            cases.append(Case("gate", f"results: {n} byte flips (seed {seed})", gt,
                              {**gtf, "new.h5": mutated("results.h5", flip_bytes(seed, n))},
                              codes={0, 1, 2}))

    # repro
    rp = ["repro", "flash-formats", "--quick", "--samples", "1", "--out", "t.csv", "--quiet"]
    cases.append(Case("repro", "valid", rp, codes={0}, outputs=("t.csv",)))
    cases.append(Case("repro", "valid --list", ["repro", "--list"], codes={0}))
    cases += option_cases("repro", rp, [], {"--samples": (1, 1)}, [], {}, ("t.csv",))
    for value in TEXT_VALUES[1:]:
        cases.append(Case("repro", f"name {value[:12]!r}", ["repro", value, "--quick"]))
    cases.append(Case("repro", "no name", ["repro"]))
    cases.append(Case("repro", "unknown name", ["repro", "bogus"]))
    cases.append(Case("repro", "--out without a known extension",
                      replace_value(rp, "--out", "t.txt")))
    cases.append(Case("repro", "--samples refused by memory",
                      replace_value(rp, "--samples", "2147483647"), require=NAMES_LIMIT))
    cases += [c for c in output_path_cases("repro", rp, "--out", "t.csv",
                                           outputs=("t.csv",))
              if "input" not in c.name]
    cases += memory_option_cases("repro", rp)

    # quantize
    qzf = {"dump.h5": copy("dump.h5")}
    qz = ["quantize", "--input", "dump.h5", "--out", "q.h5", "--quiet"]
    cases.append(Case("quantize", "valid", qz, qzf, codes={0}, outputs=("q.h5",)))
    for c in option_cases("quantize", qz, ["--input"], {},
                          [], {"--tensor": [], "--quantizers": [], "--granularities": [],
                               "--smooth": [], "--group": []}, ("q.h5",)):
        c.files = {**qzf, **c.files}
        cases.append(c)
    for gran in ["per_block:0", "per_block:-1", "per_block:abc", "per_block:2147483648",
                 "per_block:2147483647", "per_block:", "per_block", "per_block:1:2", "bogus"]:
        cases.append(Case("quantize", f"granularity {gran!r}",
                          qz + ["--granularities", gran], qzf, codes={0, 2}
                          if gran == "per_block:2147483647" else {2}, outputs=("q.h5",)))
    cases.append(Case("quantize", "quantizers empty item", qz + ["--quantizers", "e4m3fn,,e5m2"],
                      qzf, codes={0, 2}, outputs=("q.h5",)))
    cases += dump_command_cases("quantize", lambda f: replace_value(qz, "--input", f), ("q.h5",),
                                long_mode, rng, step=3, phase=1)
    cases += path_and_memory_cases("quantize", qz, qzf, "--input", "dump.h5", ("q.h5",))

    # attribute
    atf = {"dump.h5": copy("dump.h5")}
    at = ["attribute", "--method", "flash:qkv=bf16", "--input", "dump.h5", "--out", "a.csv",
          "--quiet"]
    cases.append(Case("attribute", "valid", at, atf, codes={0}, outputs=("a.csv",)))
    ats = ["attribute", "--method", "flash:qkv=bf16", "--synthetic", "normal:nq=8,d=4", "--out",
           "a.h5", "--quiet"]
    cases.append(Case("attribute", "valid synthetic", ats, codes={0}, outputs=("a.h5",)))
    for c in option_cases("attribute", at, ["--method"], {}, [], {"--method": [], "--group": []},
                          ("a.csv",)):
        c.files = {**atf, **c.files}
        cases.append(c)
    cases.append(Case("attribute", "golden has no stages",
                      replace_value(ats, "--method", "golden")))
    cases.append(Case("attribute", "--out without a known extension",
                      replace_value(ats, "--out", "a.txt")))
    for method, codes, req in METHOD_MUTATIONS[::2]:
        cases.append(Case("attribute", f"method {method[:40]!r}",
                          replace_value(ats, "--method", method),
                          codes=codes if not method.startswith("golden") else {2},
                          outputs=("a.h5",), require=req))
    for spec, codes, req in spec_mutations()[2::3]:
        cases.append(Case("attribute", f"spec {spec[:60]!r}",
                          replace_value(ats, "--synthetic", spec), codes=codes,
                          outputs=("a.h5",), require=req))
    cases += dump_command_cases("attribute", lambda f: replace_value(at, "--input", f),
                                ("a.csv",), long_mode, rng, step=3, phase=2)
    cases += path_and_memory_cases("attribute", at, atf, "--input", "dump.h5", ("a.csv",))

    # Argument-list edits of every valid invocation (long mode).
    if long_mode:
        valid = [c for c in cases if c.name.startswith("valid") and c.codes == {0}]
        for i in range(300):
            c = rng.choice(valid)
            argv = mutate_argv(rng, c.argv)
            if "--help-all" in argv or "--help" in argv:
                continue
            # Whatever file the edited command line names may be written by a run that succeeds.
            named = tuple(a for a in argv if a and "/" not in a)
            cases.append(Case(c.cmd, f"argv edit {argv!r}"[:120], argv, dict(c.files),
                              codes=doc_codes(c.cmd), outputs=c.outputs + named))

    cases += interrupt_cases(long_mode)
    return cases


def interrupt_cases(long_mode):
    """Runs stopped by a signal while computing or writing: the process ends by that signal
    (or finishes first), and leaves no temp file, no partial output and no empty checkpoint."""
    synth = ["synth", "--synthetic", "normal:hq=8,nq=4096,d=128", "--out", "s.h5"]
    run = ["run", "--method", "flash", "--synthetic", "normal:nq=4096,d=64", "--out", "o.h5",
           "--quiet"]
    sweep = ["sweep", "--methods", "golden,flash", "--synthetic", "normal:nq=1024,d=64",
             "--seeds", "8", "--out", "r.h5", "--quiet"]
    plan = [("synth", synth, ("s.h5",), signal.SIGINT, 0.3),
            ("synth", synth, ("s.h5",), signal.SIGTERM, 1.2),
            ("run", run, ("o.h5",), signal.SIGINT, 0.5),
            ("run", run, ("o.h5",), signal.SIGTERM, 1.6),
            ("sweep", sweep, ("r.h5",), signal.SIGINT, 0.05),
            ("sweep", sweep, ("r.h5",), signal.SIGTERM, 0.9),
            ("sweep", sweep, ("r.h5",), signal.SIGHUP, 0.5)]
    if long_mode:
        plan += [(c, a, o, s, d) for c, a, o, _, _ in plan[::2]
                 for s in (signal.SIGINT, signal.SIGTERM) for d in (0.1, 0.7, 1.4, 1.9)]
    cases = [Case(cmd, f"interrupted by {signal.Signals(sig).name} after {delay}s", argv,
                  codes={0}, outputs=outputs, sig=sig, delay=delay)
             for cmd, argv, outputs, sig, delay in plan]
    # An existing output stays as it was when the run that would replace it is interrupted.
    for cmd, argv, out in (("synth", synth, "s.h5"), ("run", run, "o.h5")):
        cases.append(Case(cmd, "interrupted by SIGTERM after 0.8s, existing output kept", argv,
                          {out: text("precious\n")}, codes={0}, outputs=(out,),
                          sig=signal.SIGTERM, delay=0.8))
    return cases


# ---- running a case ------------------------------------------------------------------------------


def child_env(extra=None):
    env = dict(os.environ)
    env.update({"ATTNSIM_MAX_MEMORY": MEMORY_LIMIT, "CI": "1", "OMP_NUM_THREADS": "2",
                "LC_ALL": "C"})
    env.update(extra or {})
    return env


def snapshot(root):
    """Every entry under root: kind, and content digest (size and mtime for huge files)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            elif stat.S_ISREG(st.st_mode):
                if st.st_size > (64 << 20):
                    out[rel] = ("file", st.st_size, st.st_mtime_ns)
                else:
                    try:
                        with open(p, "rb") as f:
                            out[rel] = ("file", hashlib.sha1(f.read()).hexdigest())
                    except OSError:
                        out[rel] = ("file", st.st_size, st.st_mtime_ns)
            else:
                out[rel] = ("special", stat.S_IFMT(st.st_mode))
    return out


def checkpoint_has_points(path):
    try:
        lines = Path(path).read_bytes().split(b"\n")
    except OSError:
        return False
    return len([l for l in lines[1:] if l]) >= 1 and lines[0].startswith(b"attnsim-checkpoint")


@dataclass
class Result:
    case: Case
    rc: int = 0
    problems: list = field(default_factory=list)
    seconds: float = 0.0
    rss_kib: int = 0
    stderr: str = ""


def run_case(exe, fixtures, work, index, case):
    res = Result(case)
    d = Path(work) / f"c{index:05d}"
    d.mkdir()
    try:
        for name, maker in case.files.items():
            maker(fixtures, d / name)
    except Exception as e:  # a case this platform cannot build
        res.problems.append(f"setup failed: {e!r}")
        return res
    argv = [a.replace("{case}", d.name) for a in case.argv]
    before = snapshot(d)
    out_path, err_path = Path(work) / f"o{index:05d}", Path(work) / f"e{index:05d}"
    t0 = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        p = subprocess.Popen([exe, *argv], cwd=d, env=child_env(case.env), stdout=out, stderr=err,
                             stdin=subprocess.DEVNULL)
    timed_out = []

    def kill():
        timed_out.append(True)
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(case.timeout, kill)
    timer.start()
    if case.sig:
        time.sleep(case.delay)
        try:
            os.kill(p.pid, case.sig)
        except ProcessLookupError:
            pass
    _, status, usage = os.wait4(p.pid, 0)
    timer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    res.seconds = time.monotonic() - t0
    res.rc = p.returncode
    res.rss_kib = usage.ru_maxrss
    stdout = out_path.read_bytes().decode("utf-8", "replace")
    stderr = err_path.read_bytes().decode("utf-8", "replace")
    res.stderr = stderr
    after = snapshot(d)
    bad = res.problems.append

    if timed_out:
        bad(f"did not finish within {case.timeout:.0f} s (killed)")
    elif case.sig and res.rc == -case.sig:
        pass  # ended by the signal it was sent: the documented behaviour
    elif res.rc < 0:
        bad(f"died by signal {signal.Signals(-res.rc).name}")
    elif res.rc in (134, 139):
        bad(f"exit {res.rc} (abort or crash)")
    elif res.rc not in doc_codes(case.cmd) and case.cmd != "-":
        bad(f"exit {res.rc}, not an exit code {case.cmd} documents")
    elif res.rc not in case.allowed():
        bad(f"exit {res.rc}, expected {sorted(case.allowed())}")
    if res.rss_kib > RSS_BOUND_KIB:
        bad(f"peak RSS {res.rss_kib / 1024:.0f} MiB > {RSS_BOUND_KIB / 1024:.0f} MiB")
    for word in FORBIDDEN:
        if word in stderr:
            bad(f"stderr shows {word!r}")
    lines = stderr.splitlines()
    if res.rc == 2:
        if len(lines) != 1 or not stderr.startswith(ERROR_PREFIX) or not stderr.endswith("\n"):
            bad(f"stderr is not one line 'attnsim: error: ...' ({len(lines)} lines)")
        if stdout:
            bad(f"stdout not empty on error: {stdout[:120]!r}")
        if case.require and not re.search(case.require, stderr, re.I):
            bad(f"error does not name the size and the limit (/{case.require}/)")
    elif res.rc in (1, 3) and (len(lines) != 1 or not stderr.startswith("attnsim: ")):
        bad(f"exit {res.rc} but stderr is not one line 'attnsim: ...'")

    # Files: inputs unchanged, nothing new but documented outputs of a run that succeeded.
    may_create = set()
    if res.rc in (0, 1, 3) and not timed_out:
        may_create = set(case.outputs)
    for rel, sig in after.items():
        if rel in before:
            if before[rel] != sig and rel not in may_create:
                bad(f"'{rel}' was modified")
            continue
        if rel in may_create:
            continue
        if case.sig and case.cmd == "sweep" and re.fullmatch(r"r\.h5\.ckpt\.\d+", rel) and \
                checkpoint_has_points(d / rel):
            continue  # an interrupted sweep keeps its completed points for --resume
        bad(f"left '{rel}'")
    for rel in before:
        if rel not in after and not (res.rc == 0 and rel in case.may_remove):
            bad(f"'{rel}' was removed")
    for leftover in Path("/dev").glob("null.tmp*"):
        bad(f"left {leftover}")
    for f in (out_path, err_path):
        f.unlink()
    return res


def cleanup(path):
    for dirpath, dirnames, _ in os.walk(path):
        for name in dirnames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, 0o755)
    shutil.rmtree(path, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("exe")
    ap.add_argument("--long", action="store_true", help="many more random mutations (fuzz_cli)")
    ap.add_argument("--seed", type=int, default=None, help="seed of the random mutations")
    ap.add_argument("--only", default="", help="comma-separated subcommands")
    ap.add_argument("--match", default="", help="only cases whose name contains this")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--verbose", action="store_true", help="print every case")
    args = ap.parse_args()
    global EXE
    exe = EXE = os.path.abspath(args.exe)
    if not os.access(exe, os.X_OK):
        print(f"usage: bad_inputs_test.py ATTNSIM_EXE; '{exe}' is not executable")
        return 2
    seed = args.seed if args.seed is not None else (int(time.time()) if args.long else 10)
    rng = random.Random(seed)
    cases = build_cases(args.long, rng)
    only = set(filter(None, args.only.split(",")))
    cases = [c for c in cases if (not only or c.cmd in only) and args.match in c.name]
    if args.list:
        for c in cases:
            print(f"{c.cmd:10s} {c.name}")
        return 0
    root = ", running as root: unreadable-file and read-only-directory cases skipped"
    print(f"bad_inputs_test: {len(cases)} cases, seed {seed}{' (--long)' if args.long else ''}, "
          f"ATTNSIM_MAX_MEMORY={MEMORY_LIMIT}, RSS bound {RSS_BOUND_KIB // 1024} MiB"
          f"{root if IS_ROOT else ''}")
    # Thousands of small files and fsync'd outputs: on tmpfs unless TMPDIR says otherwise.
    shm = "/dev/shm" if "TMPDIR" not in os.environ and os.access("/dev/shm", os.W_OK) else None
    work = tempfile.mkdtemp(prefix="attnsim_bad_inputs_", dir=shm)
    t0 = time.monotonic()
    try:
        fixtures = Path(work) / "fixtures"
        fixtures.mkdir()
        make_fixtures(exe, fixtures)
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(lambda ic: run_case(exe, fixtures, work, *ic),
                                    enumerate(cases)))
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            cleanup(work)
    failures = [r for r in results if r.problems]
    summary = {}
    for r in results:
        s = summary.setdefault(r.case.cmd, {"cases": 0, "codes": {}, "failed": 0, "seconds": 0.0,
                                            "rss": 0})
        s["cases"] += 1
        key = f"sig{-r.rc}" if r.rc < 0 else str(r.rc)
        s["codes"][key] = s["codes"].get(key, 0) + 1
        s["failed"] += bool(r.problems)
        s["seconds"] += r.seconds
        s["rss"] = max(s["rss"], r.rss_kib)
        if args.verbose:
            print(f"  {'FAIL' if r.problems else 'ok  '} {r.case.cmd:9s} rc={r.rc:3d} "
                  f"{r.case.name[:70]}  {r.stderr.strip()[:110]}")
    print(f"{'command':10s} {'cases':>6s} {'failed':>6s} {'max RSS':>8s} {'seconds':>8s}  "
          "exit codes")
    for cmd in sorted(summary, key=lambda c: (COMMANDS + ["-"]).index(c)):
        s = summary[cmd]
        hist = " ".join(f"{k}:{v}" for k, v in sorted(s["codes"].items()))
        print(f"{cmd:10s} {s['cases']:6d} {s['failed']:6d} {s['rss'] / 1024:6.0f}Mi "
              f"{s['seconds']:8.1f}  {hist}")
    print(f"total {len(results)} cases, {len(failures)} failed, {time.monotonic() - t0:.1f} s")
    for r in failures:
        print(f"FAIL {r.case.cmd} [{r.case.name}] argv={r.case.argv!r}"[:400])
        for p in r.problems:
            print(f"     {p}")
        if r.stderr:
            print(f"     stderr: {r.stderr.strip()[:300]!r}")
    if failures:
        print(f"(replay: bad_inputs_test.py EXE{' --long' if args.long else ''} --seed {seed} "
              f"--only CMD --match NAME --verbose)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
