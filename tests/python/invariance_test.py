"""`attnsim.schedule`, `attnsim.invariance` and `attention(launch=)` (issue 40): the same answers
as the command line, a table over batch sizes with the first n that breaks invariance, the
target computed inside a launch equal to the same sequence inside a real dense batch, and bad
input raising the command's one-line error."""
import subprocess

import numpy as np
import pytest

import attnsim

FA2 = "sdpa:backend=flash,dtype=bf16"


def test_schedule_names_fa2_splits_and_rule():
    s = attnsim.schedule(FA2, "1:4096x16", heads="32/8", head_dim=128)
    items = {k: (v, arith) for k, v, arith, _ in s["items"]}
    assert items["splits"] == ("2", True)
    assert items["blocks"][1] is False          # a work count, not arithmetic
    assert "splitkv" in s["kernel"]
    assert "num_splits_heuristic" in s["text"]


def test_table_matches_the_command_line(exe):
    t = attnsim.invariance(FA2, "1:4096", "1:4096x{n}", heads=(32, 8), head_dim=128,
                           n=range(1, 65))
    assert t["first_break"] == 2
    assert [r["n"] for r in t["table"]] == list(range(1, 65))
    # From batch 27 the unsplit kernel: one arithmetic for every larger batch.
    keys = {r["n"]: r["schedule_b"]["arithmetic_key"] for r in t["table"]}
    assert len({keys[n] for n in range(27, 65)}) == 1
    assert keys[26] != keys[27]
    out = subprocess.run([exe, "invariance", "--method", FA2, "--heads", "32/8", "--head-dim",
                          "128", "1:4096", "1:4096x{n}", "--range", "1..64"],
                         capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stdout == t["text"]


def test_computed_rows_and_launch_equal_a_dense_batch():
    rng = np.random.default_rng(3)
    b = 30
    q = rng.standard_normal((b, 8, 1, 64), dtype=np.float32)
    k = rng.standard_normal((b, 2, 700, 64), dtype=np.float32)
    v = rng.standard_normal((b, 2, 700, 64), dtype=np.float32)
    dense = attnsim.attention(q, k, v, FA2)
    one = attnsim.attention(q[:1], k[:1], v[:1], FA2, launch=f"1:700x{b}")
    alone = attnsim.attention(q[:1], k[:1], v[:1], FA2)
    assert np.array_equal(one.o.view(np.uint16), dense.o[:1].view(np.uint16))
    # The same sequence alone runs another split count: the invariance question, computed.
    r = attnsim.invariance(FA2, "1:700", f"1:700x{b}", q=q[:1], k=k[:1], v=v[:1])
    same = np.array_equal(alone.o.view(np.uint16), one.o.view(np.uint16))
    assert r["computed"] and (r["identical_rows"] == r["rows"]) == same
    assert r["rows"] == 8 and len(r["per_row"]) == 8


def test_vllm_neighbour_prefill_and_batch_invariant_mode():
    a, b = "1:500+1:300x3", "1:500+1:300x3+2:2"
    r = attnsim.invariance("vllm_triton", a, b, heads="8/2", head_dim=128, causal=True, ulp=True)
    assert not r["predicted_identical"] and r["identical_rows"] < r["rows"]
    bi = attnsim.invariance("vllm_triton:batch_invariant=1", a, b, heads="8/2", head_dim=128,
                            causal=True, ulp=True)
    assert bi["predicted_identical"] and bi["identical_rows"] == bi["rows"] == 8


@pytest.mark.parametrize("call", [
    lambda: attnsim.invariance("flash", "1:10", "1:10x2", heads=8, head_dim=64),
    lambda: attnsim.invariance(FA2, "1:10", "1:10x0", heads=8, head_dim=64),
    lambda: attnsim.invariance(FA2, "1:10", "1:10x{n}", heads=8, head_dim=64),
    lambda: attnsim.schedule(FA2, "1:10+1:20", heads=8, head_dim=64),
    lambda: attnsim.attention(np.zeros((2, 8, 1, 64), np.float32),
                              np.zeros((2, 8, 10, 64), np.float32),
                              np.zeros((2, 8, 10, 64), np.float32), FA2, launch="1:10"),
])
def test_bad_input_raises_one_line(call):
    with pytest.raises(ValueError) as e:
        call()
    assert "\n" not in str(e.value)
