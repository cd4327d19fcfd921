"""Every command line a README shows runs (issue 28: READMEs are contracts).

Usage: readme_commands_test.py ATTNSIM_EXE [--long] [--list] [--only README]

Scans every README (`*.md` under the repository, build trees and .git left out) for fenced code
blocks. A block holds command lines when its language is `sh`, `bash` or `python`, or when an
unlabeled block has a line starting with a command (`attnsim`, `$B`, `./build/`, `bash`,
`python3`, `ctest`, `cmake`, `srun`, ...); output listings, grammars and pseudo-code are not
commands. Each command block must run, unless the HTML comment on the line before it says
otherwise:

    <!-- readme-test: long -->              run only with --long (CTest label `docs_long`)
    <!-- readme-test: synopsis -->          a usage synopsis with placeholders (CFG, FILE, [...])
    <!-- readme-test: skip: REASON -->      not runnable here, and why (a GPU, Slurm, the CI
                                            entry points themselves)

An unmarked command block that is not runnable fails the test: a README cannot show a command
nobody runs. The blocks of one README run in order (a later block may read what an earlier one
wrote) in a scratch directory that looks like the repository root: `data/`, `experiments/`,
`tests/`, `tools/`, `sim/`, `numerics/`, `formats/`, `cuda_check/` and `build/` are links to the real
ones, except `data/results/`, which is a copy (`make_results.sh` rewrites it); `attnsim` is on
PATH and the build's Python package (build/python) on PYTHONPATH. `sh`/`bash` blocks run under
`bash -euo pipefail`, `python` blocks under this Python. A
block fails on a non-zero exit or after its timeout; outputs it writes stay in the scratch
directory, which is removed afterwards.

Fixtures the README blocks may read: `results/main.h5` (a small sweep with every results column,
for the "read the results" snippets, when no block of the README made it).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMAND_START = re.compile(
    r"^(attnsim|\$B\b|B=|\./build/|build/|bash\s|python3\s|ctest\s|cmake\s|srun\s|mpirun\s|"
    r"jupyter\s|git\s|g\+\+\s|/tmp/)")
MARKER = re.compile(r"<!--\s*readme-test:\s*(long|synopsis|skip:\s*(.+?))\s*-->")
LINKED = ["experiments", "tests", "tools", "sim", "numerics", "formats", "cuda_check", ".ci",
          "CMakeLists.txt", "CMakePresets.json", "README.md"]
TIMEOUT = {"run": 600, "long": 1800}


def readmes():
    """The repository's own READMEs: tracked by git where this is a checkout (an untracked copy
    of another project's sources, say a kernel carried to a GPU machine, must not have its
    README's commands run here), and never under a hidden or build folder."""
    skip = {"build", "build-debug", "build-nocuda", "node_modules"}
    tracked = None
    try:
        r = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", "*.md"],
                           capture_output=True, check=True)
        tracked = {ROOT / f for f in r.stdout.decode().split("\0") if f}
    except (OSError, subprocess.CalledProcessError):
        pass  # not a checkout (an unpacked archive): every README below the root
    out = []
    for p in sorted(ROOT.rglob("*.md")):
        rel = p.relative_to(ROOT)
        if (rel.parts[0] in skip or rel.parts[0].startswith("build")
                or any(part.startswith(".") for part in rel.parts[:-1])):
            continue
        if tracked is not None and p not in tracked:
            continue
        out.append(p)
    return out


def blocks(path):
    """(line, language, body, marker) of every fenced block."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        lang, start = m.group(1), i
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        marker = None
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        if k >= 0:
            mm = MARKER.search(lines[k])
            if mm:
                marker = mm.group(1).split(":")[0]  # long, synopsis or skip (its reason after)
        found.append((start + 1, lang, "\n".join(lines[start + 1:j]) + "\n", marker))
        i = j + 1
    return found


def is_command_block(lang, body):
    if lang in ("sh", "bash", "python"):
        return True
    if lang:
        return False
    return any(COMMAND_START.match(l.strip()) for l in body.splitlines()
               if l.strip() and not l.strip().startswith("#"))


def scratch(exe):
    d = Path(tempfile.mkdtemp(prefix="attnsim_readme_"))
    for name in LINKED:
        if (ROOT / name).exists():
            (d / name).symlink_to(ROOT / name)
    (d / "data").mkdir()
    for sub in (ROOT / "data").iterdir():
        if sub.name == "results":
            shutil.copytree(sub, d / "data" / "results")
        else:
            (d / "data" / sub.name).symlink_to(sub)
    build = Path(exe).resolve().parents[1]  # build/experiments/attnsim
    (d / "build").symlink_to(build)
    (d / "bin").mkdir()
    (d / "bin" / "attnsim").symlink_to(Path(exe).resolve())
    return d


def make_results_fixture(exe, d, env):
    (d / "results").mkdir(exist_ok=True)
    if not (d / "results" / "main.h5").exists():
        subprocess.run([str(exe), "sweep", "--methods", "golden,flash,flash:qkv=bf16,p=bf16",
                        "--synthetic", "normal:nq=64,d=32", "--input", "data/bundled/kbias_gqa.h5",
                        "--output", "results/main.h5", "--quiet"], cwd=d, env=env, check=True,
                       capture_output=True)


def run_block(d, env, lang, body, timeout):
    if lang == "python":
        cmd = [sys.executable, "-c", body]
    else:
        cmd = ["bash", "-euo", "pipefail", "-c", body]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = -1, "", f"timed out after {timeout} s"
    # A Python snippet that prints bytes (b'...') shows strings it did not decode: attnsim's
    # string columns are fixed-length (kind "S"), and a snippet must turn them into str.
    if rc == 0 and lang == "python" and re.search(r"\bb'", out):
        rc, err = 1, "prints bytes (b'...'): decode the string columns (.asstr())\n" + out[-2000:]
    return rc, err, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exe")
    ap.add_argument("--long", action="store_true", help="run the blocks marked long instead")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--only", default="", help="one README (path relative to the repository)")
    args = ap.parse_args()
    exe = Path(args.exe).resolve()
    failures, ran = [], 0
    for path in readmes():
        rel = path.relative_to(ROOT).as_posix()
        if args.only and rel != args.only:
            continue
        todo = []
        for line, lang, body, marker in blocks(path):
            if not is_command_block(lang, body):
                continue
            if args.list:
                print(f"{rel}:{line} {lang or '-'} {marker or 'run'}")
            if marker in ("synopsis", "skip"):
                continue
            if marker not in (None, "long"):
                failures.append(f"{rel}:{line}: unknown readme-test marker {marker!r}")
                continue
            if (marker == "long") == args.long:
                todo.append((line, lang, body, marker))
        if args.list or not todo:
            continue
        d = scratch(exe)
        env = dict(os.environ, PATH=f"{d / 'bin'}:{os.environ.get('PATH', '')}", CI="1",
                   OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"),
                   ATTNSIM_EXE=str(exe), MPLBACKEND="Agg",
                   # `import attnsim`: the package the build made, as the tests use it.
                   PYTHONPATH=os.pathsep.join(
                       x for x in (str(exe.parents[1] / "python"), os.environ.get("PYTHONPATH"))
                       if x))
        try:
            make_results_fixture(exe, d, env)
            for line, lang, body, marker in todo:
                rc, err, secs = run_block(d, env, lang, body, TIMEOUT["long" if marker else "run"])
                ran += 1
                status = "ok" if rc == 0 else f"FAIL (exit {rc})"
                print(f"{rel}:{line} {lang or '-'} {status} {secs:.1f} s", flush=True)
                if rc != 0:
                    failures.append(f"{rel}:{line}: exit {rc}\n{err[-3000:]}")
        finally:
            shutil.rmtree(d, ignore_errors=True)
    if args.list:
        return 0
    # Every command block that is not marked must have run: the unmarked non-runnable ones fail
    # above (their exit code); blocks the marker keeps out are listed with --list.
    for f in failures:
        print("FAIL", f)
    print(f"readme_commands_test: {ran} blocks run, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
