"""sample_factory.evaluation.export_onnx: onnxruntime gives what torch gives (atol 1e-5) on the same random inputs, for
a trained Discrete MLP (through the CLI), a recurrent model with separate actor/critic towers and 2 GRU layers
(state in and out), and a Box action model."""

from __future__ import annotations

import re
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from sample_factory.config.extras import install_hint
from sample_factory.evaluation.export_onnx import export_policy, import_onnx
from sample_factory.evaluation.export_onnx import main as export_main
from sample_factory.evaluation.policy_api import Policy, load_policy
from tests.policy_helpers import fake_experiment, one_torch_thread, train_tiny

onnx, ort = pytest.importorskip("onnx"), pytest.importorskip("onnxruntime")  # `make venv` installs the [onnx] extra
# a tracer warning means the exported graph fixed a Python-side decision (a size test, a branch) at the traced input
pytestmark = pytest.mark.filterwarnings("error::torch.jit.TracerWarning")

CARTPOLE = (gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))
PENDULUM = (gym.spaces.Box(-8.0, 8.0, (3,), np.float32), gym.spaces.Box(-2.0, 2.0, (1,), np.float32))


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_torch_thread():
        yield


def run_both(policy: Policy, path, batch: int, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(onnxruntime outputs, torch outputs) for the same random obs (and state), torch through the Policy API."""
    rng = np.random.default_rng(seed)
    obs = (rng.standard_normal((batch, *policy.obs_shape)) * 2).astype(np.float32)
    feeds = {"obs": obs}
    state = None
    if policy.recurrent:
        state = rng.standard_normal((batch, policy.rnn_state_size)).astype(np.float32)
        feeds["rnn_state"] = state
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    got = sess.run(None, feeds)
    actions, new_state = policy.act_batch(obs, state, deterministic=True)
    want = [actions, policy.value(obs, state)] + ([new_state] if policy.recurrent else [])
    assert names == ["actions", "values"] + (["new_rnn_state"] if policy.recurrent else [])
    return got, want


def assert_same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if np.issubdtype(w.dtype, np.integer):
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)


def graph_io(path) -> dict[str, list]:
    model = onnx.load(str(path))
    return {
        v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in list(model.graph.input) + list(model.graph.output)
    }


def test_trained_discrete_mlp_via_cli(tmp_path, capsys):
    train_tiny(tmp_path, "mlp")
    assert export_main(["--experiment=mlp", f"--train_dir={tmp_path}"]) == 0
    path = tmp_path / "mlp" / "policy_p0.onnx"  # the default output
    assert path.is_file() and "max |onnxruntime - torch|" in capsys.readouterr().out
    assert graph_io(path) == {"obs": ["batch", 4], "actions": ["batch"], "values": ["batch"]}
    policy = load_policy("mlp", train_dir=tmp_path)
    for batch in (1, 7):  # exported with batch 2: the batch axis must really be dynamic
        got, want = run_both(policy, path, batch)
        assert got[0].dtype == np.int64
        assert_same(got, want)


def test_recurrent_state_in_and_out(tmp_path):
    flags = ["--env=CartPole-v1", "--use_rnn=True", "--rnn_size=8", "--rnn_num_layers=2"]
    flags += ["--actor_critic_share_weights=False", "--encoder_mlp_layers=16"]
    fake_experiment(tmp_path, "rnn", flags, *CARTPOLE)
    policy = load_policy("rnn", train_dir=tmp_path)
    assert policy.rnn_state_size == 2 * 2 * 8  # two towers x two layers x 8
    path = export_policy(policy, tmp_path / "out" / "rnn.onnx")
    assert graph_io(path)["rnn_state"] == ["batch", 32] and graph_io(path)["new_rnn_state"] == ["batch", 32]
    got, want = run_both(policy, path, batch=5)
    assert_same(got, want)
    # Roll the exported graph forward a few steps feeding its own state back: it stays with torch.
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    state_onnx = state_torch = policy.initial_state(3)
    for _ in range(4):
        obs = rng.standard_normal((3, 4)).astype(np.float32)
        actions, _, state_onnx = sess.run(None, {"obs": obs, "rnn_state": state_onnx})
        want_actions, state_torch = policy.act_batch(obs, state_torch, deterministic=True)
        np.testing.assert_array_equal(actions, want_actions)
        np.testing.assert_allclose(state_onnx, state_torch, rtol=0, atol=1e-5)


@pytest.mark.parametrize("sde", [False, True], ids=["log_std", "gsde"])  # gsde: the params hold the std per state too
def test_box_actions_are_the_mean(tmp_path, sde):
    flags = ["--env=Pendulum-v1", "--use_rnn=False", "--encoder_mlp_layers=32,32", f"--use_sde={sde}"]
    _, model = fake_experiment(tmp_path, "pend", flags, *PENDULUM)
    policy = load_policy("pend", train_dir=tmp_path)
    path = export_policy(policy, tmp_path / "pend.onnx")
    got, want = run_both(policy, path, batch=6)
    assert got[0].shape == (6, 1) and got[0].dtype == np.float32
    assert_same(got, want)
    obs = np.array([[0.0, 0.0, 0.0], [5.0, -5.0, 5.0]], np.float32)
    with torch.no_grad():  # the mean is the raw policy-head output, clipped to Pendulum's [-2, 2] (--action_bounds)
        mean, _, _ = model.forward_step(torch.from_numpy(obs), None)
    out = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["actions"], {"obs": obs})[0]
    np.testing.assert_allclose(out, mean[:, :1].clamp(-2.0, 2.0).numpy(), rtol=0, atol=1e-5)


def test_missing_extra_names_the_install_command(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` raise ImportError
    with pytest.raises(ImportError, match=re.escape(install_hint("onnx"))):
        import_onnx()
    assert export_main(["--experiment=x", f"--train_dir={tmp_path}"]) == 1
    assert install_hint("onnx") in capsys.readouterr().err


def test_missing_experiment_is_one_line(tmp_path, capsys):
    assert export_main(["--experiment=nope", f"--train_dir={tmp_path}"]) == 1
    assert "no experiment folder" in capsys.readouterr().err
