"""`python3 -m attnsim e2e` around its runs: the output paths checked before any forward (one line,
exit 2), files written whole and in place where a rename would not do, the progress line on a
terminal (stderr, rewritten with \\r, cleared; nothing in a log or with --quiet); and the
`attnsim` executable after set-up: .ci/setup.sh's link onto PATH (its last block, run here on a
fake build) and attnsim.results.attnsim_exe() outside a checkout."""
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

import attnsim
from conftest import REPO

cli = pytest.importorskip("attnsim.__main__")
pd = pytest.importorskip("pandas")

# The quickest real run: MiniLM over the text's first sentences that fit 64 tokens.
QUICK = ["--model", "minilm", "--method", "flash", "--tokens", "64"]


def _need_minilm():
    from attnsim.realmodels import sources
    try:
        sources.minilm_files()
    except sources.SourceError as e:
        pytest.skip(str(e))


def _env():
    # The package this test imported, whatever the working directory (PYTHONPATH may be relative).
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(attnsim.__file__)))
    return dict(os.environ, PYTHONPATH=os.pathsep.join([pkg, os.environ.get("PYTHONPATH", "")]))


def _cli(*args, cwd=None, stderr=subprocess.PIPE):
    return subprocess.run([sys.executable, "-m", "attnsim", "e2e", *map(str, args)],
                          stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=cwd, env=_env())


# --- output paths -------------------------------------------------------------------------------

@pytest.fixture
def no_forward(monkeypatch):
    """The command line in process, failing the test if it gets as far as loading a model."""
    import attnsim.e2e

    def session(*a, **k):
        raise AssertionError("a model was loaded before the output paths were checked")
    monkeypatch.setattr(attnsim.e2e, "session", session)


@pytest.mark.parametrize("flag", ["--per-layer", "--per-token"])
def test_run_tables_with_a_sensitivity_table_are_refused(flag, tmp_path, capsys, no_forward):
    # They were silently not written: a sensitivity table has one row per layer.
    out = tmp_path / "t.csv"
    assert cli.main(["e2e", *QUICK, "--sensitivity", flag, str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "would not be written" in err[0]
    assert not out.exists()


@pytest.mark.parametrize("flag", ["--output", "--per-layer", "--per-token"])
def test_output_is_a_directory(flag, tmp_path, capsys, no_forward):
    # This once ran the whole forward, then ended in a traceback (IsADirectoryError).
    assert cli.main(["e2e", *QUICK, flag, str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"python3 -m attnsim e2e: error: {flag}: {tmp_path} is a directory "
                   f"(give a file name in it)"]
    assert list(tmp_path.iterdir()) == []


def test_output_directory_on_the_command_line(tmp_path):
    p = _cli(*QUICK, "--per-layer", ".", cwd=tmp_path)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        "python3 -m attnsim e2e: error: --per-layer: . is a directory (give a file name in it)"]


@pytest.mark.parametrize("make, args, message", [
    (None, ["--per-token", "missing/x.csv"], "--per-token: no such directory: {tmp}/missing"),
    ("file", ["--output", "file/x.csv"], "--output: not a directory: {tmp}/file"),
    (None, ["--output", ""], "--output: empty file name"),
    (None, ["--output", "a.csv", "--per-layer", "./a.csv"],
     "--output and --per-layer name the same file: ./a.csv"),
])
def test_bad_output_paths(make, args, message, tmp_path, monkeypatch, capsys, no_forward):
    if make:
        (tmp_path / make).write_text("x")
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.iterdir())
    assert cli.main(["e2e", *QUICK, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python3 -m attnsim e2e: error: ")
    assert message.format(tmp=tmp_path) in err[0]
    assert sorted(tmp_path.iterdir()) == before


def test_unwritable_directory(tmp_path, monkeypatch, capsys, no_forward):
    # As _write_csv would meet it at the end (root passes os.access; a read-only mount does not).
    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(cli.tempfile, "mkstemp", refuse)
    assert cli.main(["e2e", *QUICK, "--output", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"python3 -m attnsim e2e: error: --output: cannot write in {tmp_path}: "
                   f"Permission denied"]


def test_outputs_through_a_link_and_a_fifo(tmp_path):
    # A link's target is replaced (the link stays); a FIFO (as /dev/null or /dev/stdout) is written
    # where it is: a file renamed over it would replace it. Off a terminal: no progress line.
    _need_minilm()
    (tmp_path / "real.csv").write_text("old\n")
    (tmp_path / "link.csv").symlink_to("real.csv")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so that the writer's open returns
    try:
        p = _cli(*QUICK, "--output", "link.csv", "--per-layer", "fifo", cwd=tmp_path)
        data = os.read(r, 1 << 20).decode()
    finally:
        os.close(r)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "link.csv").is_symlink() and fifo.is_fifo()
    assert pd.read_csv(tmp_path / "real.csv")["label"].tolist() == ["flash"]
    assert data.splitlines()[0] == "layer,method,attn_rel_fro,resid_rel_fro,run,label"
    assert "\r" not in p.stderr and len(p.stderr.splitlines()) == 1  # the run's summary
    assert sorted(x.name for x in tmp_path.iterdir()) == ["fifo", "link.csv", "real.csv"]


# --- progress on a terminal ---------------------------------------------------------------------

def _on_a_terminal(*args, cwd):
    """stderr of the command line on a pseudo-terminal (stdout a pipe), as bytes."""
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "attnsim", "e2e", *map(str, args)], cwd=cwd,
                         env=_env(), stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    out = b""
    while True:  # read while it runs: a full terminal buffer would stop it
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the terminal's other end is closed
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert p.wait() == 0, out.decode(errors="replace")
    return out.decode()


def test_progress_line_on_a_terminal(tmp_path):
    _need_minilm()
    err = _on_a_terminal(*QUICK, "--method", "sage1", "--output", "e2e.csv", cwd=tmp_path)
    lines = err.split("\r\n")  # the terminal's newlines
    assert lines[-1] == "" and len(lines) == 3
    for i, (line, label) in enumerate(zip(lines, ["flash", "sage1"])):
        # Rewritten in place, the last step at 100 %, then cleared before the run's summary.
        updates = line.split("\r")
        assert updates[0] == "" and updates[1].startswith(f"{label} [{i + 1}/2] ")
        assert "100%" in updates[-3] and updates[-2].strip() == ""
        assert updates[-1].startswith(f"minilm 0-5={label}: embedding_cosine_mean=")
    assert pd.read_csv(tmp_path / "e2e.csv")["label"].tolist() == ["flash", "sage1"]
    assert _on_a_terminal(*QUICK, "--quiet", "--output", "q.csv", cwd=tmp_path) == ""


# --- `attnsim` on PATH --------------------------------------------------------------------------

def _link_block() -> str:
    """The block at the end of .ci/setup.sh that links the build's attnsim onto PATH."""
    text = (REPO / ".ci/setup.sh").read_text()
    marker = "\n# --- `attnsim` on PATH"
    assert marker in text, ".ci/setup.sh does not link attnsim onto PATH"
    return text[text.index(marker):]


def _setup_link(tmp_path, bin_dir, path):
    """Runs that block in a fake checkout whose build/experiments/attnsim prints its arguments."""
    repo = tmp_path / "repo"
    exe = repo / "build/experiments/attnsim"
    if not exe.exists():
        exe.parent.mkdir(parents=True)
        exe.write_text('#!/bin/sh\necho "fake attnsim $*"\n')
        exe.chmod(0o755)
    env = {"HOME": str(tmp_path / "home"), "PATH": path}
    if bin_dir is not None:
        env["ATTNSIM_BIN_DIR"] = str(bin_dir)
    p = subprocess.run(["bash", "-c", "set -euo pipefail\n" + _link_block()], cwd=repo, env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return exe, p.stderr.splitlines()


def test_setup_links_attnsim_onto_path(tmp_path):
    bin_dir = tmp_path / "bin"
    path = f"{bin_dir}:/usr/bin:/bin"
    exe, err = _setup_link(tmp_path, bin_dir, path)
    assert err == [f"attnsim setup: linked {bin_dir}/attnsim -> {exe}"]
    assert os.readlink(bin_dir / "attnsim") == str(exe)
    p = subprocess.run(["bash", "-c", "attnsim verify x"], env={"PATH": path},
                       capture_output=True, text=True)
    assert p.stdout == "fake attnsim verify x\n"
    # Again: nothing changes, nothing is said.
    assert _setup_link(tmp_path, bin_dir, path)[1] == []
    # A link to another checkout's build is replaced, and said so.
    (bin_dir / "attnsim").unlink()
    (bin_dir / "attnsim").symlink_to("/elsewhere/attnsim")
    assert _setup_link(tmp_path, bin_dir, path)[1] == [
        f"attnsim setup: linked {bin_dir}/attnsim -> {exe} (was -> /elsewhere/attnsim)"]


def test_setup_link_notes(tmp_path):
    # A directory off PATH: linked, with how to add it; someone else's attnsim: left alone.
    off = tmp_path / "off"
    exe, err = _setup_link(tmp_path, off, "/usr/bin:/bin")
    assert len(err) == 1 and f"linked {off}/attnsim -> {exe}; {off} is not on PATH" in err[0]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "attnsim").write_text("someone else's\n")
    assert _setup_link(tmp_path, mine, f"{mine}:/usr/bin:/bin")[1] == [
        f"attnsim setup: {mine}/attnsim is not a link: left alone (run {exe} by its path)"]
    assert (mine / "attnsim").read_text() == "someone else's\n"


@pytest.mark.skipif(os.access("/usr/local/bin", os.W_OK),
                    reason="/usr/local/bin is writable: the block links there, not in ~/.local/bin")
def test_setup_link_falls_back_to_local_bin(tmp_path):
    local = tmp_path / "home/.local/bin"
    exe, err = _setup_link(tmp_path, None, f"{local}:/usr/bin:/bin")
    assert err == [f"attnsim setup: linked {local}/attnsim -> {exe}"]


# --- attnsim.results.attnsim_exe() --------------------------------------------------------------

@pytest.fixture
def results(monkeypatch, tmp_path):
    ar = pytest.importorskip("attnsim.results")
    monkeypatch.delenv("ATTNSIM_EXE", raising=False)
    monkeypatch.chdir(tmp_path)  # outside any checkout
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return ar


def test_attnsim_exe_outside_the_checkout(results):
    # The package of a checkout's build finds that build's executable from any directory.
    built = REPO / "build/experiments/attnsim"
    if not (REPO in Path(results.__file__).resolve().parents and built.is_file()):
        pytest.skip("the package is not this checkout's, or it has no build")
    assert results.attnsim_exe() == str(built)


def test_attnsim_exe_on_path(results, monkeypatch, tmp_path):
    def no_checkout(start=None):
        raise FileNotFoundError("no checkout")
    monkeypatch.setattr(results, "find_repo", no_checkout)  # an installed package, say
    with pytest.raises(FileNotFoundError) as e:
        results.attnsim_exe()
    msg = str(e.value)
    assert "\n" not in msg and "bash .ci/main" in msg and "ATTNSIM_EXE" in msg
    (tmp_path / "empty/attnsim").write_text("#!/bin/sh\n")
    (tmp_path / "empty/attnsim").chmod(0o755)
    assert results.attnsim_exe() == str(tmp_path / "empty/attnsim")
    # ATTNSIM_EXE names one: a wrong one is an error, not a reason to run another.
    monkeypatch.setenv("ATTNSIM_EXE", str(tmp_path / "nosuch"))
    with pytest.raises(FileNotFoundError, match=f"ATTNSIM_EXE={tmp_path}/nosuch"):
        results.attnsim_exe()
