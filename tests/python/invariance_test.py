"""`attnsim.schedule`, `attnsim.invariance` and `attention(launch=)`: the same answers
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
    lambda: attnsim.invariance(FA2, "1:10", "1:10x2", heads=8, head_dim=64, seed=3),
    lambda: attnsim.attention(np.zeros((1, 8, 1, 64), np.float32),
                              np.zeros((1, 8, 10, 64), np.float32),
                              np.zeros((1, 8, 10, 64), np.float32), FA2, sms=100),
    lambda: attnsim.attention(np.zeros((2, 8, 1, 64), np.float32),
                              np.zeros((2, 8, 10, 64), np.float32),
                              np.zeros((2, 8, 10, 64), np.float32), FA2, launch="1:10"),
])
def test_bad_input_raises_one_line(call):
    with pytest.raises(ValueError) as e:
        call()
    assert "\n" not in str(e.value)


def _varlen(seqs, hq=8, hkv=2, d=64, seed=4):
    rng = np.random.default_rng(seed)
    tq, tk = sum(a for a, _ in seqs), sum(b for _, b in seqs)
    q = rng.standard_normal((1, hq, tq, d), dtype=np.float32)
    k = rng.standard_normal((1, hkv, tk, d), dtype=np.float32)
    v = rng.standard_normal((1, hkv, tk, d), dtype=np.float32)
    cu_q = np.cumsum([0] + [a for a, _ in seqs])
    cu_k = np.cumsum([0] + [b for _, b in seqs])
    return q, k, v, cu_q, cu_k


def test_varlen_batch_runs_each_sequence_inside_the_launch(exe, tmp_path):
    import h5py
    seqs = [(1, 300), (1, 120), (5, 5), (1, 77)]
    q, k, v, cu_q, cu_k = _varlen(seqs, d=128)
    r = attnsim.attention(q, k, v, "vllm_triton", causal=True, cu_seqlens_q=cu_q,
                          cu_seqlens_k=cu_k)
    assert r.o.shape == (1, 8, 8, 128)
    # Sequence s alone with the launch of all (s first): the same bits.
    for s, (lq, lk) in enumerate(seqs):
        rest = "+".join(f"{a}:{b}" for i, (a, b) in enumerate(seqs) if i != s)
        one = attnsim.attention(q[:, :, cu_q[s]:cu_q[s + 1]], k[:, :, cu_k[s]:cu_k[s + 1]],
                                v[:, :, cu_k[s]:cu_k[s + 1]], "vllm_triton", causal=True,
                                launch=f"{lq}:{lk}+{rest}")
        assert np.array_equal(one.o.view(np.uint16),
                              r.o[:, :, cu_q[s]:cu_q[s + 1]].view(np.uint16)), s
    # The 5-token prefill puts the launch on the 2D kernel: the first sequence alone takes 3D.
    alone = attnsim.attention(q[:, :, :1], k[:, :, :300], v[:, :, :300], "vllm_triton",
                              causal=True)
    assert not np.array_equal(alone.o.view(np.uint16), r.o[:, :, :1].view(np.uint16))
    # The command line on the same dump: one row per sequence, o packed, the same bits.
    dump, out = tmp_path / "varlen.h5", tmp_path / "o.h5"
    with h5py.File(dump, "w") as f:
        f["q"], f["k"], f["v"] = q, k, v
        f["cu_seqlens_q"], f["cu_seqlens_k"] = cu_q, cu_k
        f.attrs["causal"] = 1
    p = subprocess.run([exe, "run", "--method", "vllm_triton", "--input", str(dump), "--out",
                        str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("#seq") == 4
    with h5py.File(out) as f:
        assert np.array_equal(f["o"][:], r.o.view(np.uint16))
    # invariance on the dump's first sequence: alone (3D) against its launch (2D), computed.
    p = subprocess.run([exe, "invariance", "--method", "vllm_triton", "--input", str(dump),
                        "--seq", "0", "1:300", "1:300+1:120+5:5+1:77"],
                       capture_output=True, text=True)
    assert p.returncode == 1, p.stderr
    assert "computed: 0 of 8 rows bit-identical" in p.stdout, p.stdout
    # verify on the varlen dump: every sequence judged on its rows of the packed output.
    p = subprocess.run([exe, "verify", "--input", str(dump), "--kernel-output", str(out),
                        "--method", "vllm_triton"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("verdict: bit-identical") == 4
    # The first sequence's rows as it computes alone (the 3D kernel): no longer bit-identical.
    with h5py.File(out, "a") as f:
        o = f["o"][:]
        o[:, :, :1] = alone.o.view(np.uint16)
        f["o"][...] = o
    p = subprocess.run([exe, "verify", "--input", str(dump), "--kernel-output", str(out),
                        "--method", "vllm_triton"], capture_output=True, text=True)
    assert p.returncode in (1, 3), p.stdout + p.stderr
    assert p.stdout.count("verdict: bit-identical") == 3


@pytest.mark.parametrize("cu_q,cu_k", [
    ([0, 1, 2], [0, 10]),        # unequal counts
    ([1, 2], [0, 10]),           # not from 0
    ([0, 3], [0, 2]),            # more queries than keys
    ([0, 1, 1], [0, 5, 10]),     # an empty sequence
    ([0, 1], [0, 9]),            # totals that do not match q, k
])
def test_bad_cu_seqlens_raise(cu_q, cu_k):
    q, k, v, _, _ = _varlen([(1, 5), (1, 5)])
    with pytest.raises(ValueError) as e:
        attnsim.attention(q, k, v, "flex", cu_seqlens_q=np.array(cu_q), cu_seqlens_k=np.array(cu_k))
    assert "\n" not in str(e.value)


def test_marked_target_sizes_the_synthetic_tokens():
    # The target is the '*' part (4,096 keys), not the first: the synthetic target is that long.
    r = attnsim.invariance("lean:mblocks=all", "1:100+*1:4096", "1:4096", heads="32/8",
                           head_dim=128, ulp=True)
    assert r["computed"] and r["rows"] == 32 and r["positions"] == (4095, 4096)
