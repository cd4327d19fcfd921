"""The package's command line: ``python3 -m attnsim e2e ...`` (end-to-end model evaluation).

    python3 -m attnsim e2e --model smollm2 --method sage2:arch=sm90 --tokens 1024 --output e2e.csv
    python3 -m attnsim e2e --layers '0-5=sage2:arch=sm90,qk=int4' --default sage2:arch=sm90
    python3 -m attnsim e2e --methods flash,sage1,sage2:arch=sm80 --tokens 256
    python3 -m attnsim e2e --sensitivity --method sage2:arch=paper --tokens 256
    python3 -m attnsim e2e --select 1e-3 --select 1e-2 --methods 'sage2:arch=paper,sage2:arch=sm90'
    python3 -m attnsim e2e --method golden --ctx 512 --chunks 4 --kl-divergence-base-out base.kld
    python3 -m attnsim e2e --method flash --kl-divergence-base base.kld     # llama.cpp's columns
    python3 -m attnsim e2e --passkey --lengths 2048 --depths 0.1,0.5,0.9 --methods flash,sage2

One row per run, the columns of ``attnsim.e2e.run`` (kl_mean kl_median kl_p99 kl_max top1 ppl_ref
ppl ppl_ratio ... for SmolLM2, embedding_cosine_mean ... for MiniLM) and the provenance columns,
as CSV (stdout, or --output written whole through a temporary file). Bad input, output paths
included: one line on stderr, exit code 2, before any forward. On a terminal, a progress line on
stderr while the forwards run (not with --quiet).
"""
from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
import tempfile


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's usage block is left out)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def _parser() -> argparse.ArgumentParser:
    top = _Parser(prog="python3 -m attnsim", description="attnsim's Python command line")
    sub = top.add_subparsers(dest="command", parser_class=_Parser)
    p = sub.add_parser("e2e", prog="python3 -m attnsim e2e",
                       help="a real model with simulated attention, against FP64 golden attention",
                       description="A real model's forward pass with the attention of chosen layers "
                                   "computed by a method, teacher-forced over a text, against the "
                                   "same forward with FP64 golden attention (experiments/README.md, "
                                   "'End to end').")
    p.add_argument("--model", default="smollm2",
                   help="smollm2 (default), minilm, or a Hugging Face checkpoint directory or .gguf "
                        "file (Llama, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3)")
    p.add_argument("--method", action="append", default=[],
                   help="a method string (repeatable: one run each)")
    p.add_argument("--methods", default=None,
                   help="comma-separated methods (a comma followed by key=value continues a method's "
                        "options); with --select: the candidates, cheapest first")
    p.add_argument("--default", default=None,
                   help="the method of every layer --layers does not name (same as one --method)")
    p.add_argument("--layers", default=None,
                   help="layers running the method (e.g. 0-5,29; others golden), or per-layer "
                        "methods SET=METHOD joined by ';' (e.g. '0-5=sage2:qk=int4')")
    p.add_argument("--tokens", type=int, default=None,
                   help="SmolLM2: tokens of the text, teacher-forced (default 1024, at most the "
                        "text's); MiniLM: token budget of the sentences embedded")
    p.add_argument("--text", default=None,
                   help="a UTF-8 text file (default: Debian's /usr/share/common-licenses/GPL-3)")
    p.add_argument("--generate", type=int, default=0,
                   help="SmolLM2: greedy tokens after the text; greedy_diverge is the first that "
                        "differs (N when none; empty without --generate)")
    p.add_argument("--sensitivity", action="store_true",
                   help="per method, one row per layer with the method in that layer alone")
    p.add_argument("--select", type=float, action="append", default=[], metavar="BUDGET",
                   help="per-layer choice among --methods (cheapest first) keeping the metric "
                        "within BUDGET (repeatable; one row each)")
    p.add_argument("--metric", default=None,
                   help="the metric --select bounds (default kl_mean; MiniLM: embedding_distance_mean)")
    p.add_argument("--no-layer-errors", action="store_true",
                   help="skip the per-layer attention error (one golden call less per layer)")
    p.add_argument("--threads", type=int, default=None, help="threads of the kernels (default: all)")
    p.add_argument("--output", default=None, help="CSV file of the rows (default: stdout)")
    p.add_argument("--per-token", default=None,
                   help="CSV of the last run's per-token (SmolLM2) or per-sentence (MiniLM) table")
    p.add_argument("--per-layer", default=None, help="CSV of every run's per-layer errors")
    p.add_argument("--quiet", action="store_true",
                   help="nothing on stderr but errors (no progress line, no summary per run)")
    # llama.cpp's llama-perplexity --kl-divergence conventions (attnsim.llamacpp)
    p.add_argument("--ctx", type=int, default=None, metavar="N",
                   help="SmolLM2: score as llama-perplexity does: chunks of N tokens (its -c; "
                        "default 512 when --chunks or a base file is given), each from an empty "
                        "context, the second half of each scored (not --tokens)")
    p.add_argument("--chunks", type=int, default=None, metavar="N",
                   help="SmolLM2: the first N chunks of --ctx tokens (default: all that fit)")
    p.add_argument("--kl-divergence-base", default=None, metavar="PATH",
                   help="score against a llama.cpp --kl-divergence-base logits file (its n_ctx, "
                        "n_vocab and tokens must be the run's) instead of the golden reference")
    p.add_argument("--kl-divergence-base-out", default=None, metavar="PATH",
                   help="write the FP64 golden reference's logits as llama.cpp's "
                        "--kl-divergence-base file (chunked as --ctx/--chunks)")
    # long-context retrieval (attnsim.passkey)
    p.add_argument("--passkey", action="store_true",
                   help="SmolLM2: the passkey retrieval table (golden and each method) instead "
                        "of runs over the text")
    p.add_argument("--lengths", default=None,
                   help="--passkey: comma-separated context lengths (default 2048,4096,8192)")
    p.add_argument("--depths", default=None,
                   help="--passkey: comma-separated needle depths in 0-1 (default 0.1,0.5,0.9)")
    p.add_argument("--trials", type=int, default=1, help="--passkey: trials per cell (default 1)")
    p.add_argument("--seed", type=int, default=0, help="--passkey: seed of the pass keys")
    p.add_argument("--template", default="plain", choices=("plain", "chat"),
                   help="--passkey: prompt template (default plain)")
    return top


class _OutputError(Exception):
    """An output file that could not be written after the runs (disk full, directory gone): one
    line and exit 1, not a traceback. What can be checked up front is (_check_outputs: exit 2)."""


def _in_place(path: str) -> bool:
    """An existing device, FIFO or /dev/stdout-like name: written as it is. A temporary file
    renamed over it would replace /dev/null itself (as root) or the link /dev/stdout."""
    return os.path.exists(path) and (path.startswith(("/dev/", "/proc/"))
                                     or not os.path.isfile(path))


def _check_outputs(a) -> None:
    """Every output path, before anything runs: an hour of forwards must not end in an unwritable
    file. Each is a file name (not a directory) in an existing directory where this process can
    create the temporary file _write_csv renames over it; no two flags name the same file."""
    seen: dict = {}
    for name in ("output", "per_token", "per_layer"):
        path, flag = getattr(a, name), "--" + name.replace("_", "-")
        if path is None or path == "-":
            continue
        if not path:
            raise ValueError(f"{flag}: empty file name (give a file, or - for stdout)")
        if os.path.isdir(path):
            raise ValueError(f"{flag}: {path} is a directory (give a file name in it)")
        if _in_place(path):
            try:  # opened as the end will open it (a FIFO would wait here for its reader)
                if not stat.S_ISFIFO(os.stat(path).st_mode):
                    open(path, "a").close()
                elif not os.access(path, os.W_OK):
                    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
            except OSError as e:
                raise ValueError(f"{flag}: cannot write {path}: {e.strerror or e}") from None
            continue
        real = os.path.realpath(path)  # a link is followed: its target is the file replaced
        d = os.path.dirname(real)
        if not os.path.exists(d):
            raise ValueError(f"{flag}: no such directory: {d}")
        if not os.path.isdir(d):
            raise ValueError(f"{flag}: not a directory: {d}")
        if os.path.exists(path) and not os.access(path, os.W_OK):
            raise ValueError(f"{flag}: {path} is not writable")
        try:  # what _write_csv does first; os.access does not see read-only mounts, root, ACLs
            fd, tmp = tempfile.mkstemp(prefix=".e2e-", suffix=".csv", dir=d)
            os.close(fd)
            os.unlink(tmp)
        except OSError as e:
            raise ValueError(f"{flag}: cannot write in {d}: {e.strerror or e}") from None
        if real in seen:
            raise ValueError(f"{seen[real]} and {flag} name the same file: {path}")
        seen[real] = flag


def _write_csv(df, path) -> None:
    """The whole file or none: a temporary file beside it (beside a link's target), renamed over
    it."""
    if path is None or path == "-":
        df.to_csv(sys.stdout, index=False)
        return
    try:
        if _in_place(path):
            with open(path, "w", newline="") as f:
                df.to_csv(f, index=False)
            return
        target = os.path.realpath(path)
        fd, tmp = tempfile.mkstemp(prefix=".e2e-", suffix=".csv", dir=os.path.dirname(target))
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would outlive the rename
            with os.fdopen(fd, "w", newline="") as f:
                df.to_csv(f, index=False)
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        raise _OutputError(f"cannot write {path}: {e.strerror or e}") from None


def _summary(quiet: bool, r) -> None:
    if quiet:
        return
    keys = ("kl_mean", "top1", "ppl_ratio") if "kl_mean" in r else (
        "embedding_cosine_mean", "similarity_spearman")
    vals = " ".join(f"{k}={r[k]:.6g}" for k in keys)
    sys.stderr.write(f"{r['model']} {r['layers']}: {vals} ({r['time_s']:.1f} s; reference "
                     f"{r['ref_time_s']:.1f} s)\n")


class _Line:
    """The progress line of _runs' calls on a terminal (stderr, not --quiet; nothing in a log or
    a pipe): one TerminalLine per call, cleared before the call's summary line is printed."""

    def __init__(self, quiet: bool, e2e):
        self.on = not quiet and sys.stderr.isatty()
        self.e2e, self.line = e2e, None

    def __call__(self, prefix: str):
        if not self.on:
            return None
        self.close()
        self.line = self.e2e.TerminalLine(sys.stderr, prefix)
        return self.line

    def close(self) -> None:
        if self.line is not None:
            self.line.close()
            self.line = None


def e2e_main(a) -> int:
    import pandas as pd

    from . import e2e, set_num_threads

    _check_outputs(a)
    if a.threads is not None:
        set_num_threads(a.threads)
    methods = list(a.method)
    if a.methods is not None:
        methods += e2e.split_method_list(a.methods)
    if a.default is not None:
        if methods:
            raise ValueError("--default is the method of the unnamed layers: give it or --method, "
                             "not both")
        methods = [a.default]
    if not methods:
        raise ValueError("give a method (--method, --methods or --default; "
                         "python3 -c 'import attnsim; print(attnsim.methods())' lists them)")
    e2e._check_model(a.model)
    if a.passkey:
        return _passkey(a, e2e, methods)
    for flag in ("lengths", "depths"):
        if getattr(a, flag) is not None:
            raise ValueError(f"--{flag} applies to --passkey")
    for flag, default in (("trials", 1), ("seed", 0), ("template", "plain")):
        if getattr(a, flag) != default:
            raise ValueError(f"--{flag} applies to --passkey")
    chunked = any(x is not None for x in (a.ctx, a.chunks, a.kl_divergence_base,
                                          a.kl_divergence_base_out))
    if chunked and (a.sensitivity or a.select):
        raise ValueError("--ctx, --chunks and the --kl-divergence-base files apply to runs, "
                         "not --sensitivity or --select")
    if a.kl_divergence_base_out is not None and a.output not in (None, "-") and \
            os.path.realpath(a.output) == os.path.realpath(a.kl_divergence_base_out):
        raise ValueError("--output and --kl-divergence-base-out name the same file")
    if a.sensitivity and (a.per_token or a.per_layer):
        raise ValueError("--per-token and --per-layer write a run's tables; a --sensitivity table "
                         "has one row per layer (--output): they would not be written")
    if a.select:
        if a.sensitivity or a.layers is not None:
            raise ValueError("--select chooses the layers' methods itself: no --sensitivity or --layers")
    else:
        for m in methods:  # every method and layer spec checked before the model loads
            e2e.layer_methods(a.model, m, a.layers)
    a.base = None
    if chunked:
        s, a.base = e2e._chunked_session(a.model, a.tokens, a.text, a.ctx, a.chunks,
                                         a.kl_divergence_base, a.kl_divergence_base_out,
                                         generate=a.generate)
        s._check_chunks(a.ctx, a.chunks, a.base)  # the base file against the text, up front
    else:
        s = e2e.session(a.model, a.tokens, a.text)
    for m in methods:  # a method that refuses the model's shape fails before the first run
        s.check(m, None if a.select else a.layers)
    rows, per_layer = [], []
    line = _Line(a.quiet, e2e)
    try:
        last = _runs(a, s, methods, line, rows, per_layer)
    finally:
        line.close()
    _write_csv(pd.DataFrame(rows), a.output)
    if a.per_token and last is not None:
        _write_csv(last.per_token, a.per_token)
    if a.per_layer and per_layer:
        _write_csv(pd.concat(per_layer, ignore_index=True), a.per_layer)
    return 0


def _runs(a, s, methods, line, rows, per_layer):
    """The runs the arguments ask for, into rows (one per run) and per_layer (their tables);
    returns the last run's Result (None for sensitivity tables)."""
    import pandas as pd

    def head(i, n, what):  # the progress line's prefix: which call of how many
        return f"{what} [{i + 1}/{n}] " if n > 1 else f"{what} "

    last = None
    if a.select:
        for i, budget in enumerate(a.select):
            sel = s.select(methods, budget, metric=a.metric,
                           progress=line(head(i, len(a.select), f"select {budget:g}")))
            line.close()
            _summary(a.quiet, sel.result)
            rows.append(dict(sel))
            per_layer.append(sel.result.per_layer.assign(select_budget=budget))
            last = sel.result
    elif a.sensitivity:
        for i, m in enumerate(methods):
            t = s.sensitivity(m, a.layers, generate=a.generate,
                              progress=line(head(i, len(methods), f"sensitivity {m}")))
            line.close()
            if not a.quiet:
                sys.stderr.write(f"{a.model} {m}: sensitivity of {len(t)} layers\n")
            rows.extend(t.to_dict("records"))
    else:
        for i, m in enumerate(methods):
            if getattr(a, "base", None) is not None or any(
                    x is not None for x in (a.ctx, a.chunks, a.kl_divergence_base_out)):
                # llama.cpp's chunks; the base file is written once, with the first run.
                r = s.run_chunked(m, a.layers, ctx=a.ctx, chunks=a.chunks, kl_base=a.base,
                                  base_out=a.kl_divergence_base_out if i == 0 else None,
                                  layer_errors=not a.no_layer_errors,
                                  progress=line(head(i, len(methods), m)))
            else:
                r = s.run(m, a.layers, generate=a.generate, layer_errors=not a.no_layer_errors,
                          progress=line(head(i, len(methods), m)))
            line.close()
            _summary(a.quiet, r)
            rows.append(dict(r))
            per_layer.append(r.per_layer.assign(run=len(rows) - 1, label=r["label"]))
            last = r
            if a.output not in (None, "-") and len(methods) > 1:
                # The rows so far, whole, after each run (a long list interrupted keeps them).
                _write_csv(pd.DataFrame(rows), a.output)
    return last


def _numbers(text: str, flag: str, kind):
    try:
        out = [kind(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"{flag}: {text!r} is not a comma-separated list of "
                         f"{'integers' if kind is int else 'numbers'}") from None
    return out


def _passkey(a, e2e, methods) -> int:
    """--passkey: the retrieval table (attnsim.e2e.passkey) as CSV."""
    bad = [f for f, v in (("--sensitivity", a.sensitivity), ("--select", a.select),
                          ("--ctx", a.ctx is not None), ("--chunks", a.chunks is not None),
                          ("--kl-divergence-base", a.kl_divergence_base is not None),
                          ("--kl-divergence-base-out", a.kl_divergence_base_out is not None),
                          ("--per-token", a.per_token), ("--per-layer", a.per_layer),
                          ("--generate", a.generate), ("--tokens", a.tokens is not None),
                          ("--text", a.text is not None)) if v]
    if bad:
        raise ValueError(f"--passkey builds its own prompts: {bad[0]} does not apply")
    lengths = (2048, 4096, 8192) if a.lengths is None else _numbers(a.lengths, "--lengths", int)
    depths = (0.1, 0.5, 0.9) if a.depths is None else _numbers(a.depths, "--depths", float)
    from . import passkey as pk
    pk.check_args(lengths, depths, a.trials, a.seed, a.template)
    for m in methods:
        e2e.layer_methods(a.model, m, a.layers)
    line = _Line(a.quiet, e2e)
    try:
        df = e2e.passkey(a.model, methods, lengths, depths, a.trials, a.seed,
                         template=a.template, layers=a.layers, progress=line("passkey "))
    finally:
        line.close()
    if not a.quiet:
        for r in df.itertuples():
            sys.stderr.write(f"passkey {r.label} length {r.length} depth {r.depth:g}: "
                             f"{r.correct}/{r.trials}\n")
    _write_csv(df, a.output)
    return 0


def main(argv=None) -> int:
    parser = _parser()
    a = parser.parse_args(argv)
    if a.command is None:
        parser.error("give a command: e2e")
    try:
        return e2e_main(a)
    except ValueError as e:
        sys.stderr.write(f"python3 -m attnsim e2e: error: {e}\n")
        return 2
    except _OutputError as e:  # the runs are done; their file could not be written
        sys.stderr.write(f"python3 -m attnsim e2e: error: {e}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
