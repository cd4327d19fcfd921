"""attnsim.llamacpp and e2e's llama.cpp columns: llama-perplexity --kl-divergence statistics,
chunking and the --kl-divergence-base file (ggml-org/llama.cpp tools/perplexity/perplexity.cpp).

The oracles: the statistics against formulas written out here (mean ± sqrt(var/(n-1)), the
covariance of the two NLLs, llama.cpp's percentile position and median) on numbers whose answers
are known; the base file's bytes against a file assembled here with struct from the layout
(magic, int32 n_ctx n_vocab n_chunk, int32 tokens, per scored position float32 scale and minimum
then uint16 values padded to an even count), so that a wrong offset, order or padding fails; the
compression on a row whose quantized values are worked out by hand; a chunked run's chunk 0
against a single-window run over the same tokens, chunk 1 against a forward driven here; a file
written by attnsim read back (golden against its own file: KL at the quantization's level, the
same top tokens), and refusals of files that do not match the run."""
import math
import struct

import numpy as np
import pytest

import attnsim
from conftest import e2e_cli
from attnsim import llamacpp as lc

e2e = pytest.importorskip("attnsim.e2e")
pd = pytest.importorskip("pandas")

BAD = "sage2:arch=paper,smooth_k=0,smooth_q=0"  # INT4 Q/K without smoothing
CTX, CHUNKS = 16, 2


# --- statistics (no model) ----------------------------------------------------------------------

def test_statistics_formulas():
    rng = np.random.default_rng(1)
    n = 200
    nll_b = rng.uniform(0.5, 4.0, n)
    nll = nll_b + rng.normal(0, 0.2, n)
    kld = rng.exponential(0.01, n)
    dp = rng.normal(0, 0.05, n)
    same = rng.random(n) < 0.9
    st = lc.statistics(nll, nll_b, kld, dp, same)
    assert list(st) == list(lc.COLUMNS)

    def mu(x):  # mean and its standard error as llama.cpp defines them
        m = sum(x) / n
        return m, math.sqrt((sum(v * v for v in x) / n - m * m) / (n - 1))

    a, b = mu(nll), mu(nll_b)
    cov = (sum(nll * nll_b) / n - a[0] * b[0]) / (n - 1)
    assert st["kld_n"] == n
    assert st["ppl_q"] == pytest.approx(math.exp(a[0]), rel=1e-13)
    assert st["ppl_q_unc"] == pytest.approx(math.exp(a[0]) * a[1], rel=1e-9)
    assert st["ppl_base"] == pytest.approx(math.exp(b[0]), rel=1e-13)
    assert st["ln_ppl_ratio"] == pytest.approx(a[0] - b[0], rel=1e-10)
    unc = math.sqrt(a[1] ** 2 + b[1] ** 2 - 2 * cov)
    assert st["ln_ppl_ratio_unc"] == pytest.approx(unc, rel=1e-7)
    assert st["ppl_ratio_unc"] == pytest.approx(math.exp(a[0] - b[0]) * unc, rel=1e-7)
    assert st["ppl_cor"] == pytest.approx(100 * cov / (a[1] * b[1]), rel=1e-7)
    # The covariance makes the ratio's uncertainty far smaller than the two added in quadrature.
    assert st["ln_ppl_ratio_unc"] < 0.5 * math.hypot(a[1], b[1])
    k = mu(kld)
    assert st["kld_mean"] == pytest.approx(k[0], rel=1e-13)
    assert st["kld_mean_unc"] == pytest.approx(k[1], rel=1e-9)
    ks = np.sort(kld)
    assert st["kld_max"] == ks[-1] and st["kld_min"] == ks[0]
    assert st["kld_median"] == pytest.approx(0.5 * (ks[99] + ks[100]), rel=1e-15)
    p = np.float32(np.float32(0.99) * np.float32(n - 1))  # 197.01: between sorted[197] and [198]
    w = float(p) - 197
    assert st["kld_p99"] == pytest.approx((1 - w) * ks[197] + w * ks[198], rel=1e-6)
    m2 = mu(dp * dp)
    assert st["rms_dp"] == pytest.approx(100 * math.sqrt(m2[0]), rel=1e-12)
    assert st["rms_dp_unc"] == pytest.approx(100 * 0.5 / math.sqrt(m2[0]) * m2[1], rel=1e-9)
    assert st["dp_mean"] == pytest.approx(100 * dp.mean(), rel=1e-9)
    q = same.mean()
    assert st["same_top_p"] == pytest.approx(100 * q, rel=1e-14)
    assert st["same_top_p_unc"] == pytest.approx(100 * math.sqrt(q * (1 - q) / (n - 1)), rel=1e-12)


def test_percentiles_median_and_small_counts():
    v = np.arange(11, dtype=np.float64)  # sorted 0..10: percentile f sits at 10 f
    assert lc.percentile(v, 0.9) == pytest.approx(9.0, abs=1e-5)
    assert lc.percentile(v, 0.95) == pytest.approx(9.5, abs=1e-5)
    assert lc.percentile(v, 0.0) == 0.0 and lc.percentile(v, 1.0) == 10.0
    assert lc.median(np.array([1.0, 2.0, 4.0, 8.0])) == 3.0
    assert lc.median(np.array([1.0, 2.0, 4.0])) == 2.0
    # n <= 10: llama.cpp reports no uncertainty; n < 10: no covariance.
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    st = lc.statistics(x, x + 1, x, x / 10, x > 2)
    assert st["kld_mean_unc"] == 0.0 and st["ppl_q_unc"] == 0.0 and st["ln_ppl_ratio_unc"] == 0.0
    assert st["kld_median"] == 3.0 and st["same_top_p"] == 60.0
    with pytest.raises(ValueError, match="same number"):
        lc.statistics(x, x[:3], x, x, x > 0)


# --- the base file (no model) -------------------------------------------------------------------

def _hand_file(n_ctx, n_vocab, tokens, chunks_rows):
    """A base file from the layout: chunks_rows[c] = [(scale, min_log_prob, [q...]), ...]."""
    b = b"_logits_" + struct.pack("<iii", n_ctx, n_vocab, len(chunks_rows))
    b += struct.pack(f"<{len(tokens)}i", *tokens)
    for rows in chunks_rows:
        for scale, mn, q in rows:
            b += struct.pack("<ff", scale, mn) + struct.pack(f"<{len(q)}H", *q)
            if n_vocab % 2:
                b += b"\0\0"
    return b


def _rows(rng, count, n_vocab):
    return [(float(np.float32(rng.uniform(1e-4, 1e-3))), float(np.float32(-rng.uniform(10, 20))),
             [int(x) for x in rng.integers(0, 65536, n_vocab)]) for _ in range(count)]


def test_hand_built_file_is_read(tmp_path):
    rng = np.random.default_rng(2)
    n_ctx, n_vocab = 6, 5  # 2 scored positions per chunk (6 - 1 - 3); odd vocabulary: padded
    tokens = [7, 1, 2, 3, 4, 0, 9, 8, 7, 6, 5, 4]
    chunks = [_rows(rng, 2, n_vocab), _rows(rng, 2, n_vocab)]
    path = tmp_path / "base.kld"
    path.write_bytes(_hand_file(n_ctx, n_vocab, tokens, chunks))
    f = lc.BaseFile(path)
    assert (f.n_ctx, f.n_vocab, f.n_chunk, f.nv, f.scored) == (6, 5, 2, 10, 2)
    assert list(f.tokens) == tokens
    for c in range(2):
        lp = lc.dequantize(f.rows(c), n_vocab)
        for i, (scale, mn, q) in enumerate(chunks[c]):
            want = np.float32(scale) * np.asarray(q, np.float32) + np.float32(mn)
            np.testing.assert_array_equal(lp[i], want)
    # The writer produces the same bytes from the same rows.
    out = tmp_path / "written.kld"
    with lc.BaseWriter(out, n_ctx, n_vocab, tokens) as w:
        for rows in chunks:
            a = np.zeros((2, 10), np.uint16)
            for i, (scale, mn, q) in enumerate(rows):
                a[i, :4] = np.frombuffer(struct.pack("<ff", scale, mn), "<u2")
                a[i, 4:9] = q
            w.add(a)
    assert out.read_bytes() == path.read_bytes()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".kld-")] == []


def test_bad_files_are_refused(tmp_path):
    rng = np.random.default_rng(3)
    good = _hand_file(6, 5, list(range(12)), [_rows(rng, 2, 5), _rows(rng, 2, 5)])
    cases = {"short": good[:-2], "long": good + b"\0\0", "magic": b"_logitz_" + good[8:],
             "header": good[:10]}
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(ValueError) as e:
            lc.BaseFile(p)
        assert "\n" not in str(e.value) and str(p) in str(e.value)
    with pytest.raises(ValueError, match="cannot read"):
        lc.BaseFile(tmp_path / "none")
    p = tmp_path / "ok"
    p.write_bytes(good)
    f = lc.BaseFile(p)
    with pytest.raises(ValueError, match="n_vocab=5, the model 49152"):
        f.check(49152, 6, np.arange(12), 2)
    with pytest.raises(ValueError, match="n_ctx=6, the run ctx=8"):
        f.check(5, 8, np.arange(12), 2)
    with pytest.raises(ValueError, match="differ from the run's at token 4"):
        f.check(5, 6, np.r_[0, 1, 2, 3, 99, 5:12], 2)
    f.check(5, 6, np.arange(12), 2)
    f.check(5, 6, np.r_[0:6, 99, 99], 1)  # one chunk asked for: only its tokens compared


def test_compression_by_hand():
    # max 0, min clamped to -16, scale 16/65535: -4 sits at 12/16 of the range -> 49151.25 -> 49151;
    # -16 and below are 0. min_log_prob = -16 - log(1 + e^-4 + e^-16 + e^-20).
    z = np.array([[0.0, -4.0, -16.0, -20.0, 3.0 - 3.0]], np.float32)
    lp = attnsim.modelmath.log_softmax(z)
    row = lc.compress(z, lp)
    assert row.shape == (1, lc.row_words(5)) == (1, 10)
    scale, mn = struct.unpack("<ff", row[0, :4].tobytes())
    assert scale == np.float32(np.float32(16) / np.float32(65535))
    lse = math.log(2 + math.exp(-4) + math.exp(-16) + math.exp(-20))
    assert mn == pytest.approx(-16 - lse, abs=2e-6)
    assert list(row[0, 4:9]) == [65535, 49151, 0, 0, 65535] and row[0, 9] == 0
    back = lc.dequantize(row, 5)[0]
    np.testing.assert_allclose(back[[0, 1, 4]], lp[0, [0, 1, 4]], atol=scale)
    # The KL skips entries at or below -16 (llama.cpp's cut), here the clamped two.
    lq = np.log(np.full((1, 5), 0.2))
    kl = lc.kld_rows(back[None], lq)[0]
    keep = back > -16
    want = sum(math.exp(back[i]) * (back[i] - lq[0, i]) for i in range(5) if keep[i])
    assert keep.sum() == 3 and kl == pytest.approx(want, rel=1e-12)


# --- with the model -----------------------------------------------------------------------------

def _need_weights():
    from attnsim.realmodels import sources
    try:
        sources.smollm2_files()
    except sources.SourceError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    _need_weights()
    path = tmp_path_factory.mktemp("kld") / "golden.kld"
    r = e2e.run("smollm2", "golden", ctx=CTX, chunks=CHUNKS, base_out=path)
    return path, r


def test_chunked_scoring(written):
    _, r = written
    scored = CTX - 1 - CTX // 2
    assert r["n_pred"] == r["kld_n"] == CHUNKS * scored
    assert (r["ctx"], r["chunks"], r["scored_from"], r["tokens"]) == (CTX, CHUNKS, CTX // 2,
                                                                      CTX * CHUNKS)
    t = r.per_token
    assert list(t["chunk"]) == [0] * scored + [1] * scored
    assert list(t["position"]) == list(range(CTX // 2, CTX - 1)) * 2
    assert r["kl_mean"] == 0 and r["same_top_p"] == 100 and r["rms_dp"] == 0
    # Chunk 0 is the first CTX tokens from an empty context: a single-window run's positions.
    one = e2e.Session("smollm2", CTX).run("golden").per_token
    for c in ("target", "nll_ref", "top_ref"):
        np.testing.assert_array_equal(t[c].to_numpy()[:scored], one[c].to_numpy()[CTX // 2:])
    # Chunk 1 from an empty context too (SmolLM2 adds no BOS): a forward driven here.
    s = e2e._SESSION[0][1]
    ids = s.chunk_tokens()[CTX:2 * CTX]
    assert len(s.chunk_tokens()) == len(s.ids)  # no BOS for SmolLM2 (its GGUF says so)

    def attend(li, q, k, v):
        q4, k4, v4 = (np.ascontiguousarray(a, np.float32)[None] for a in (q, k, v))
        return np.asarray(attnsim.golden(q4, k4, v4, True, 0.125).o[0], np.float32)

    _, logits = s.m.net.forward(ids, want_logits=True, attention=attend)
    lp = attnsim.modelmath.log_softmax(logits[CTX // 2:CTX - 1])
    nll = -lp[np.arange(scored), ids[CTX // 2 + 1:]]
    np.testing.assert_array_equal(t["nll_ref"].to_numpy()[scored:], nll)


def test_written_file_layout(written):
    path, r = written
    data = path.read_bytes()
    n_vocab, scored, nv = 49152, CTX - 1 - CTX // 2, 49152 + 4
    assert data[:8] == b"_logits_"
    assert struct.unpack("<iii", data[8:20]) == (CTX, n_vocab, CHUNKS)
    s = e2e._SESSION[0][1]
    toks = struct.unpack(f"<{CTX * CHUNKS}i", data[20:20 + 4 * CTX * CHUNKS])
    assert list(toks) == [int(x) for x in s.ids[:CTX * CHUNKS]]
    off = 20 + 4 * CTX * CHUNKS
    assert len(data) == off + CHUNKS * scored * nv * 2
    t = r.per_token
    for i in range(CHUNKS * scored):
        row = data[off + i * nv * 2: off + (i + 1) * nv * 2]
        scale, mn = struct.unpack("<ff", row[:8])
        q = np.frombuffer(row[8:], "<u2")
        assert 0 < scale < 16 / 65535 * 1.01 and mn < 0 and q.max() == 65535
        lp_target = scale * float(q[t["target"].iloc[i]]) + mn
        assert lp_target == pytest.approx(-t["nll_ref"].iloc[i], abs=scale)
        assert int(np.argmax(q)) == t["top_ref"].iloc[i]


def test_scoring_against_the_file(written):
    path, r = written
    g = e2e.run("smollm2", "golden", kl_base=path)  # ctx and chunks from the file
    assert g["kl_base"] == str(path) and len(g["kl_base_sha256"]) == 64
    assert (g["ctx"], g["chunks"], g["n_pred"]) == (CTX, CHUNKS, r["n_pred"])
    assert 0 < g["kld_mean"] < 1e-4 and g["same_top_p"] == 100  # the file's rounding only
    assert abs(g["ln_ppl_ratio"]) < 1e-3
    bad_file = e2e.run("smollm2", BAD, kl_base=path)
    bad_mem = e2e.run("smollm2", BAD, ctx=CTX, chunks=CHUNKS)
    assert bad_mem["kl_base"] == "golden" and bad_mem["kld_mean"] > 1e-2
    assert bad_file["kld_mean"] == pytest.approx(bad_mem["kld_mean"], rel=1e-2)
    assert bad_file["same_top_p"] == bad_mem["same_top_p"]
    np.testing.assert_array_equal(bad_file.per_token["nll"], bad_mem.per_token["nll"])


def test_mismatched_files_are_refused(written, tmp_path):
    path, _ = written
    with pytest.raises(ValueError, match="n_ctx=16, the run ctx=8"):
        e2e.run("smollm2", "golden", kl_base=path, ctx=8)
    with pytest.raises(ValueError, match="has 2 chunks, the run asks for 3"):
        e2e.run("smollm2", "golden", kl_base=path, chunks=3)
    other = tmp_path / "other.kld"
    data = bytearray(path.read_bytes())
    data[20 + 4 * 20:20 + 4 * 21] = struct.pack("<i", 12345)  # token 20 changed
    other.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="differ from the run's at token 20"):
        e2e.run("smollm2", "golden", kl_base=other)
    vocab = tmp_path / "vocab.kld"
    vocab.write_bytes(_hand_file(CTX, 5, list(range(CTX)), [_rows(np.random.default_rng(0),
                                                                   CTX - 1 - CTX // 2, 5)]))
    with pytest.raises(ValueError, match="n_vocab=5, the model 49152"):
        e2e.run("smollm2", "golden", kl_base=vocab)
    for kw, msg in [(dict(ctx=2), "ctx must be an integer >= 3"),
                    (dict(chunks=0), "chunks must be an integer >= 1"),
                    (dict(ctx=512, chunks=100), "chunks fit"),
                    (dict(ctx=16, tokens=32), "give ctx and chunks, not tokens"),
                    (dict(ctx=16, generate=2), "generate"),
                    (dict(base_out=tmp_path / "no" / "x.kld"), "no such directory")]:
        with pytest.raises(ValueError, match=msg):
            e2e.run("smollm2", "golden", **kw)
    with pytest.raises(ValueError, match="causal"):
        e2e.run("minilm", "golden", ctx=16)


def test_default_run_columns(written):
    r = e2e.Session("smollm2", 24).run("flash")
    t = r.per_token
    assert (r["ctx"], r["chunks"], r["scored_from"], r["kl_base"]) == (24, 1, 0, "golden")
    assert r["kld_n"] == r["n_pred"] == 23
    assert r["kl_mean"] == float(np.mean(t["kl"]))  # attnsim's own columns as before
    assert r["kld_mean"] == pytest.approx(r["kl_mean"], rel=1e-12)
    assert r["kld_max"] == r["kl_max"]
    dp = t["p_target"] - t["p_ref_target"]
    assert r["rms_dp"] == pytest.approx(100 * math.sqrt(float(np.mean(dp * dp))), rel=1e-12)


# --- the command line ---------------------------------------------------------------------------

_cli = e2e_cli  # conftest: python3 -m attnsim e2e on the imported package


@pytest.mark.parametrize("args, message", [
    (["--method", "flash", "--ctx", "x"], "invalid int value"),
    (["--method", "flash", "--ctx", "2"], "ctx must be an integer >= 3"),
    (["--method", "flash", "--chunks", "0"], "chunks must be an integer >= 1"),
    (["--method", "flash", "--ctx", "16", "--tokens", "32"], "not tokens"),
    (["--method", "flash", "--kl-divergence-base", "/nonexistent.kld"], "cannot read"),
    (["--method", "flash", "--kl-divergence-base-out", "/nonexistent/dir/x.kld"],
     "no such directory"),
    (["--method", "flash", "--ctx", "16", "--sensitivity"], "apply to runs"),
    (["--model", "minilm", "--method", "flash", "--ctx", "16"], "causal"),
])
def test_cli_bad_input(args, message, tmp_path):
    p = _cli(*args, tmp=tmp_path)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "error" in lines[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.long  # two CLI forwards in subprocesses; the API's round trip is tested above
def test_cli_base_file_round_trip(tmp_path):
    _need_weights()
    base = tmp_path / "base.kld"
    p = _cli("--method", "golden", "--ctx", CTX, "--chunks", 1, "--kl-divergence-base-out", base,
             "--output", tmp_path / "a.csv", "--quiet")
    assert p.returncode == 0, p.stderr
    assert base.stat().st_size == 20 + 4 * CTX + (CTX - 1 - CTX // 2) * (49152 + 4) * 2
    p = _cli("--method", "flash", "--kl-divergence-base", base, "--output", tmp_path / "b.csv",
             "--quiet")
    assert p.returncode == 0, p.stderr
    df = pd.read_csv(tmp_path / "b.csv")
    for c in lc.COLUMNS:
        assert c in df.columns
    assert df["kl_base"].iloc[0] == str(base) and df["same_top_p"].iloc[0] == 100
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.csv", "b.csv", "base.kld"]
