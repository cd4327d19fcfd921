"""Compatibility shim: the results readers moved into the package, `attnsim.results` (pip install
the repository: `pip install .`). Scripts that put experiments/python on sys.path and import
attnsim_results keep working; new code imports attnsim.results."""
from attnsim.results import *  # noqa: F401,F403
from attnsim.results import (_column, _split_input, _table, attnsim_exe, decode_all,  # noqa: F401
                             derive_dump, file_attrs, find_repo, load_per_head, load_quantize,
                             load_sweep, load_ulp_hist, read_dump)
