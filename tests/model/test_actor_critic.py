import copy
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from sample_factory.algo.distributions import CategoricalDist, DiagGaussianDist
from sample_factory.config import parse_cfg
from sample_factory.config.env_defaults import channels_last_frames
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.runtime.shared_buffers import SharedWeights

CARTPOLE_OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
CARTPOLE_ACT = gym.spaces.Discrete(2)
BOX_OBS = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
BOX_ACT = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
RNN = ["--use_rnn=True", "--rnn_size=16", "--encoder_mlp_layers=8,8"]
B = 6


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Tiny tensors: intra-op threads only add contention (seconds on a loaded 2-core machine).
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _cfg(*extra):
    return parse_cfg(["--env=CartPole-v1", "--num_workers=1", *extra])


def _model(*extra, obs_space=CARTPOLE_OBS, action_space=CARTPOLE_ACT):
    return ActorCritic(_cfg(*extra), obs_space, action_space)


def _obs(*shape):
    return torch.randn(*shape)


@pytest.mark.parametrize("share", [True, False])
def test_forward_step_shapes_without_rnn(share):
    m = _model(f"--actor_critic_share_weights={share}")
    assert not m.recurrent and m.rnn_state_size == 0
    assert len(m.towers) == (1 if share else 2)
    params, values, state = m.forward_step(_obs(B, 4), None)
    assert params.shape == (B, 2)
    assert values.shape == (B,)
    assert state is None


@pytest.mark.parametrize("share, state_size", [(True, 16), (False, 32)])
def test_forward_step_shapes_with_rnn(share, state_size):
    m = _model(*RNN, f"--actor_critic_share_weights={share}")
    assert m.recurrent and m.rnn_state_size == state_size
    params, values, state = m.forward_step(_obs(B, 4), torch.zeros(B, state_size))
    assert params.shape == (B, 2)
    assert values.shape == (B,)
    assert state.shape == (B, state_size)
    assert state.abs().sum() > 0  # the core did update the state
    # The state carries information: another input state gives other outputs.
    params2, _, state2 = m.forward_step(_obs(B, 4), torch.randn(B, state_size))
    assert not torch.allclose(state, state2)


def test_rnn_layers_stack_in_state():
    m = _model(*RNN, "--rnn_num_layers=2")
    assert m.rnn_state_size == 32
    _, _, state = m.forward_step(_obs(B, 4), torch.zeros(B, 32))
    assert state.shape == (B, 32)


def test_encoder_layer_sizes_from_cfg():
    m = _model(*RNN)
    linears = [mod for mod in m.towers[0].encoder.modules() if isinstance(mod, torch.nn.Linear)]
    assert [(lin.in_features, lin.out_features) for lin in linears] == [(4, 8), (8, 8)]
    assert m.towers[0].core.cells[0].input_size == 8
    assert m.policy_head.in_features == 16 and m.value_head.in_features == 16


def test_separate_towers_keep_actor_and_critic_apart():
    """With --actor_critic_share_weights=False the first half of the state drives the policy, the second the value."""
    m = _model(*RNN, "--actor_critic_share_weights=False")
    obs = _obs(B, 4)
    h = torch.randn(B, 32)
    params, values, new_h = m.forward_step(obs, h)
    h_critic = h.clone()
    h_critic[:, 16:] = torch.randn(B, 16)
    p2, v2, new_h2 = m.forward_step(obs, h_critic)
    torch.testing.assert_close(p2, params)
    assert not torch.allclose(v2, values)
    torch.testing.assert_close(new_h2[:, :16], new_h[:, :16])
    h_actor = h.clone()
    h_actor[:, :16] = torch.randn(B, 16)
    p3, v3, _ = m.forward_step(obs, h_actor)
    assert not torch.allclose(p3, params)
    torch.testing.assert_close(v3, values)


@pytest.mark.parametrize("share", [True, False])
def test_forward_sequence_without_rnn_equals_steps(share):
    m = _model(f"--actor_critic_share_weights={share}")
    L = 5
    obs = _obs(B, L, 4)
    is_first = torch.rand(B, L) < 0.3
    params, values = m.forward_sequence(obs, None, is_first, recurrence=1)
    assert params.shape == (B, L, 2) and values.shape == (B, L)
    for t in range(L):
        p, v, _ = m.forward_step(obs[:, t], None)
        torch.testing.assert_close(params[:, t], p)
        torch.testing.assert_close(values[:, t], v)


def _manual_sequence(m, obs, stored, is_first, recurrence):
    """Reference: step forward_step by hand, restarting from the stored state every `recurrence` steps and
    zeroing the state where an episode starts."""
    L = obs.shape[1]
    ps, vs = [], []
    h = None
    for t in range(L):
        if t % recurrence == 0:
            h = stored[:, t].clone()
        h = torch.where(is_first[:, t].unsqueeze(-1), torch.zeros_like(h), h)
        p, v, h = m.forward_step(obs[:, t], h)
        ps.append(p)
        vs.append(v)
    return torch.stack(ps, 1), torch.stack(vs, 1)


def _sequence_inputs(L, H):
    obs = _obs(B, L, 4)
    stored = torch.randn(B, L, H)  # garbage where not used: any use of it shows in the outputs
    is_first = torch.rand(B, L) < 0.25
    is_first[0, 0] = True  # an episode starting at position 0 ...
    is_first[1, 0] = False  # ... and one continuing from the stored state
    is_first[2, 3] = True  # an episode starting mid-sequence
    return obs, stored, is_first


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
@pytest.mark.parametrize("share", [True, False])
def test_forward_sequence_rnn_full_bptt_equals_manual_steps(share, rnn_type):
    m = _model(*RNN, f"--actor_critic_share_weights={share}", f"--rnn_type={rnn_type}")
    L = 8
    obs, stored, is_first = _sequence_inputs(L, m.rnn_state_size)
    params, values = m.forward_sequence(obs, stored, is_first, recurrence=L)
    assert params.shape == (B, L, 2) and values.shape == (B, L)
    ref_p, ref_v = _manual_sequence(m, obs, stored, is_first, recurrence=L)
    torch.testing.assert_close(params, ref_p)
    torch.testing.assert_close(values, ref_v)

    # With recurrence == L only the state at position 0 is read.
    stored2 = stored.clone()
    stored2[:, 1:] = torch.randn(B, L - 1, m.rnn_state_size)
    p2, v2 = m.forward_sequence(obs, stored2, is_first, recurrence=L)
    torch.testing.assert_close(p2, params)
    torch.testing.assert_close(v2, values)

    # Where is_first[:, 0] the stored state at 0 is ignored too; elsewhere it matters.
    stored3 = stored.clone()
    stored3[:, 0] = torch.randn(B, m.rnn_state_size)
    _, v3 = m.forward_sequence(obs, stored3, is_first, recurrence=L)
    torch.testing.assert_close(v3[0], values[0])
    assert not torch.allclose(v3[1, 0], values[1, 0])


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
@pytest.mark.parametrize("recurrence", [1, 2, 4])
@pytest.mark.parametrize("share", [True, False])
def test_forward_sequence_rnn_restarts_from_stored_states(recurrence, share, rnn_type):
    m = _model(*RNN, f"--actor_critic_share_weights={share}", f"--rnn_type={rnn_type}")
    L = 8
    obs, stored, is_first = _sequence_inputs(L, m.rnn_state_size)
    is_first[1, recurrence] = False  # make sure env 1 really continues from the stored state at the restart
    params, values = m.forward_sequence(obs, stored, is_first, recurrence=recurrence)
    ref_p, ref_v = _manual_sequence(m, obs, stored, is_first, recurrence=recurrence)
    torch.testing.assert_close(params, ref_p)
    torch.testing.assert_close(values, ref_v)

    # The full-BPTT result differs: the stored states at restarts are really used.
    full_p, full_v = m.forward_sequence(obs, stored, is_first, recurrence=L)
    torch.testing.assert_close(full_v[:, :recurrence], values[:, :recurrence])
    assert not torch.allclose(full_v[1, recurrence], values[1, recurrence])


def test_forward_sequence_rnn_gradients_flow_through_time():
    m = _model(*RNN)
    L = 4
    obs, stored, is_first = _sequence_inputs(L, m.rnn_state_size)
    is_first[:] = False
    obs.requires_grad_(True)
    _, values = m.forward_sequence(obs, stored, is_first, recurrence=L)
    values[:, -1].sum().backward()
    assert obs.grad[:, 0].abs().sum() > 0  # BPTT reaches the first step
    obs.grad = None
    _, values = m.forward_sequence(obs, stored, is_first, recurrence=1)
    values[:, -1].sum().backward()
    assert obs.grad[:, 0].abs().sum() == 0  # truncated every step


def test_discrete_distribution_log_prob_shapes():
    m = _model(*RNN)
    params, _, _ = m.forward_step(_obs(B, 4), torch.zeros(B, 16))
    dist = m.distribution(params)
    assert isinstance(dist, CategoricalDist)
    actions = dist.sample()
    assert actions.shape == (B,) and actions.dtype == torch.int64
    lp = dist.log_prob(actions)
    assert lp.shape == (B,)
    assert torch.all(lp <= 0)
    # Sequence params flattened to [B*L, P] give [B*L] log-probs.
    seq_p, _ = m.forward_sequence(_obs(B, 3, 4), torch.zeros(B, 3, 16), torch.zeros(B, 3, dtype=torch.bool), 3)
    flat = seq_p.reshape(B * 3, -1)
    assert m.distribution(flat).log_prob(torch.zeros(B * 3, dtype=torch.long)).shape == (B * 3,)
    # Policy head starts near-uniform (small gain).
    torch.testing.assert_close(dist.probs, torch.full((B, 2), 0.5), atol=0.05, rtol=0)


@pytest.mark.parametrize("use_rnn", [False, True])
def test_box_action_space(use_rnn):
    cfg = _cfg(*RNN, f"--use_rnn={use_rnn}", "--initial_stddev=0.5")
    m = ActorCritic(cfg, BOX_OBS, BOX_ACT)
    assert m.log_std is not None and m.log_std.shape == (3,)
    torch.testing.assert_close(m.log_std.detach(), torch.full((3,), math.log(0.5)))
    assert any(p is m.log_std for p in m.parameters())  # trained with the rest
    h = torch.zeros(B, m.rnn_state_size) if use_rnn else None
    params, values, _ = m.forward_step(_obs(B, 5), h)
    assert params.shape == (B, 3) and values.shape == (B,)
    dist = m.distribution(params)
    assert isinstance(dist, DiagGaussianDist)
    actions = dist.sample()
    assert actions.shape == (B, 3)
    lp = dist.log_prob(actions)
    assert lp.shape == (B,)
    ref = torch.distributions.Normal(params, torch.full_like(params, 0.5)).log_prob(actions).sum(-1)
    torch.testing.assert_close(lp, ref)


def test_discrete_model_has_no_log_std():
    assert _model().log_std is None


def test_unsupported_observation_space():
    with pytest.raises(ValueError, match="no encoder"):
        _model(obs_space=gym.spaces.Box(0, 1, (2, 3, 4, 5), np.float32))


def test_lstm_state_holds_h_and_c_per_layer():
    m = _model(*RNN, "--rnn_type=lstm", "--rnn_num_layers=2")
    assert m.rnn_state_size == 2 * 2 * 16  # (h, c) x layers x size
    obs = torch.randn(B, 4)
    _, _, h1 = m.forward_step(obs, torch.zeros(B, m.rnn_state_size))
    _, _, h2 = m.forward_step(obs, h1)
    assert h1.shape == (B, m.rnn_state_size) and not torch.allclose(h1, h2)  # the state carries memory


@pytest.mark.parametrize("arch", ["convnet_simple", "convnet_nature", "resnet_impala"])
def test_conv_encoders_take_uint8_frames(arch):
    frames = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    cfg = parse_cfg(
        ["--env=SomeCustomEnv-v0", "--num_workers=1", "--use_rnn=False", f"--encoder_conv_architecture={arch}"]
    )
    m = ActorCritic(cfg, frames, gym.spaces.Discrete(6))
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    params, values, _ = m.forward_step(obs, None)
    assert params.shape == (3, 6) and values.shape == (3,) and torch.isfinite(params).all()
    # uint8 frames are scaled to [0, 1] inside the encoder (buffers and queues carry the raw bytes)
    enc = m.towers[0].encoder
    torch.testing.assert_close(enc(obs), enc.mlp(enc.convs(obs.float() / 255.0)), atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("arch", ["convnet_simple", "resnet_impala"])
def test_conv_weights_are_channels_last_and_compute_the_same(arch):
    """Conv weights are kept in NHWC (faster on oneDNN and cuDNN); the function is that of the NCHW net, and a
    checkpoint's state_dict loads either way."""
    frames = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    cfg = parse_cfg(["--env=SomeCustomEnv-v0", "--use_rnn=False", f"--encoder_conv_architecture={arch}"])
    m = ActorCritic(cfg, frames, gym.spaces.Discrete(6))
    enc = m.towers[0].encoder
    convs = [c for c in enc.convs.modules() if isinstance(c, torch.nn.Conv2d)]
    assert convs and all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs)
    obs = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    nchw = copy.deepcopy(enc.convs).to(memory_format=torch.contiguous_format)
    expected = enc.mlp(nchw(obs.float() / 255.0))
    torch.testing.assert_close(enc(obs), expected, atol=1e-4, rtol=1e-3)
    fresh = ActorCritic(cfg, frames, gym.spaces.Discrete(6))
    fresh.load_state_dict({k: v.contiguous() for k, v in m.state_dict().items()})  # e.g. an older checkpoint
    torch.testing.assert_close(fresh.towers[0].encoder(obs), enc(obs))
    assert all(
        c.weight.is_contiguous(memory_format=torch.channels_last)
        for c in fresh.towers[0].encoder.convs.modules()
        if isinstance(c, torch.nn.Conv2d)
    )


def test_conv_encoders_infer_in_bf16_close_to_fp32():
    """--inference_precision=bf16: the policy worker's copy computes its conv encoders in bf16 (weights converted
    as published weights load) and hands fp32 features to the heads; actions' logits and values stay close to the
    fp32 model's. MLP-only models have nothing to convert."""
    frames = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    cfg = parse_cfg(["--env=SomeCustomEnv-v0", "--use_rnn=False"])
    m = ActorCritic(cfg, frames, gym.spaces.Discrete(6)).eval()
    weights = SharedWeights.for_model(m)
    weights.publish(m, version=3)
    inference = ActorCritic(cfg, frames, gym.spaces.Discrete(6)).eval()
    assert inference.run_conv_encoders_in(torch.bfloat16)
    assert weights.load_into(inference) == 3
    enc = inference.towers[0].encoder
    convs = [c for c in enc.convs.modules() if isinstance(c, torch.nn.Conv2d)]
    assert all(c.weight.dtype == torch.bfloat16 for c in convs)
    # on a CPU the first conv reads NCHW frames (no transpose of the uint8 input), the later ones stay NHWC
    assert convs[0].weight.is_contiguous() and not enc.channels_last
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs[1:])
    assert inference.policy_head.weight.dtype == torch.float32  # heads stay fp32
    obs = torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8)
    before = obs.clone()
    with torch.inference_mode():
        params, values, _ = inference.forward_step(obs, None)
        ref_params, ref_values, _ = m.forward_step(obs, None)
    assert params.dtype == values.dtype == torch.float32
    assert torch.equal(obs, before)
    torch.testing.assert_close(params, ref_params, atol=0.02, rtol=0.05)
    torch.testing.assert_close(values, ref_values, atol=0.02, rtol=0.05)
    assert not torch.equal(params, ref_params)  # bf16 really ran
    # float frames with the fp32 weights: scaled out of place, the caller's tensor untouched
    floats = obs.float()
    m.towers[0].encoder(floats)
    assert torch.equal(floats, before.float())
    assert not _model().run_conv_encoders_in(torch.bfloat16)


@pytest.mark.parametrize("arch", ["convnet_simple", "convnet_nature", "resnet_impala"])
@pytest.mark.parametrize("bf16", [False, True])
def test_hwc_frames_give_the_output_of_their_chw_transpose(arch, bf16):
    """gymnasium's image envs (CarRacing, renders, most custom envs) give [H, W, C] frames; the encoder reads them as
    a view of [C, H, W] (no copy), so the model is the one a [C, H, W] env of the same frames would train."""
    cfg = parse_cfg(["--env=SomeCustomEnv-v0", "--use_rnn=False", f"--encoder_conv_architecture={arch}"])
    hwc = ActorCritic(cfg, gym.spaces.Box(0, 255, (40, 48, 3), np.uint8), gym.spaces.Discrete(4)).eval()
    chw = ActorCritic(cfg, gym.spaces.Box(0, 255, (3, 40, 48), np.uint8), gym.spaces.Discrete(4)).eval()
    chw.load_state_dict(hwc.state_dict())  # same parameter shapes: the channels are 3 in both
    assert hwc.towers[0].encoder.hwc and not chw.towers[0].encoder.hwc
    if bf16:
        assert hwc.run_conv_encoders_in(torch.bfloat16) and chw.run_conv_encoders_in(torch.bfloat16)
    frames = torch.randint(0, 256, (5, 40, 48, 3), dtype=torch.uint8)
    with torch.inference_mode():
        out = hwc.forward_step(frames, None)[0]
        expected = chw.forward_step(frames.permute(0, 3, 1, 2).contiguous(), None)[0]
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    # the 4 stacked 84x84 frames of Atari stay [C, H, W]
    atari = ActorCritic(cfg, gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(6))
    assert not atari.towers[0].encoder.hwc


def test_which_image_shapes_are_read_channels_last():
    hwc = [(96, 96, 3), (210, 160, 3), (84, 84, 4), (10, 10, 4), (8, 8, 111), (40, 48, 12)]
    chw = [(4, 84, 84), (3, 210, 160), (3, 72, 128), (111, 8, 8), (4, 4, 4), (12, 40, 48)]
    assert all(channels_last_frames(s) for s in hwc) and not any(channels_last_frames(s) for s in chw)


def test_frames_smaller_than_the_conv_net_takes_are_refused_with_the_way_out():
    """MinAtar-size frames (10x10) do not fit the Atari nets' 8x8 stride-4 first layer: a line that names the
    architecture that fits, not torch's kernel-size error from inside the model."""
    small = gym.spaces.Box(0, 1, (10, 10, 4), bool)
    for arch in ("convnet_simple", "convnet_nature"):
        cfg = parse_cfg(["--env=SomeCustomEnv-v0", "--use_rnn=False", f"--encoder_conv_architecture={arch}"])
        with pytest.raises(ValueError, match=rf"frames of 10x10 .*{arch} .*at least 36x36.*resnet_impala"):
            ActorCritic(cfg, small, gym.spaces.Discrete(3))
    cfg = parse_cfg(["--env=SomeCustomEnv-v0", "--use_rnn=False", "--encoder_conv_architecture=resnet_impala"])
    m = ActorCritic(cfg, small, gym.spaces.Discrete(3))
    params, values, _ = m.forward_step(torch.rand(2, 10, 10, 4) < 0.2, None)  # bool frames
    assert params.shape == (2, 3) and torch.isfinite(values).all()
    # 36x36 is the smallest the Atari nets take
    cfg = parse_cfg(["--env=SomeCustomEnv-v0", "--use_rnn=False"])
    assert ActorCritic(cfg, gym.spaces.Box(0, 255, (36, 36, 3), np.uint8), gym.spaces.Discrete(3))


@pytest.mark.parametrize("share", [True, False])
def test_sde_params_carry_the_per_state_std_and_act_adds_the_held_matrix_noise(share):
    from sample_factory.algo.base import Algorithm
    from sample_factory.algo.sde import sde_log_std

    cfg = _cfg("--use_sde=True", "--use_rnn=False", "--encoder_mlp_layers=8", f"--actor_critic_share_weights={share}")
    m = ActorCritic(cfg, BOX_OBS, BOX_ACT)
    assert m.log_std is None and m.sde_shape == (8, 3)
    assert any(p is m.sde_log_sigma for p in m.parameters())
    obs = _obs(B, 5)
    params, values, _ = m.forward_step(obs, None)
    assert params.shape == (B, 6) and values.shape == (B,)
    feats, _ = m.features(obs, None)
    dist = m.distribution(params)
    torch.testing.assert_close(dist.log_std, sde_log_std(feats[0], m.sde_log_sigma))
    eps = torch.randn(B, 8, 3)
    with torch.no_grad():
        out = Algorithm.act(cfg, m, {"obs": obs}, None, None, deterministic=False, sde_eps=eps)
        torch.testing.assert_close(out.actions, dist.mean + m.sde_noise(feats[0], eps))
        torch.testing.assert_close(out.log_probs, dist.log_prob(out.actions))
        again = Algorithm.act(cfg, m, {"obs": obs}, None, None, deterministic=False, sde_eps=eps)
        torch.testing.assert_close(again.actions, out.actions)  # the same matrix: the same action in a state
        det = Algorithm.act(cfg, m, {"obs": obs}, None, None, deterministic=True, sde_eps=eps)
        torch.testing.assert_close(det.actions, dist.mean)
        plain = Algorithm.act(cfg, m, {"obs": obs}, None, None, deterministic=False)  # no matrices: per-step draws
        assert plain.actions.shape == (B, 3) and not torch.equal(plain.actions, out.actions)
    # training scores the stored actions with the per-state Gaussian, and its gradient reaches sigma
    m.distribution(m.forward_step(obs, None)[0]).log_prob(out.actions).sum().backward()
    assert m.sde_log_sigma.grad is not None and m.sde_log_sigma.grad.abs().sum() > 0


class _NoBiasEncoder(torch.nn.Module):
    """A custom encoder as register_encoder documents it, with a layer that has no bias."""

    def __init__(self, cfg, obs_space, out_size=8):
        super().__init__()
        self.net = torch.nn.Linear(int(np.prod(obs_space.shape)), 8, bias=False)
        if out_size is not None:
            self.out_size = out_size

    def forward(self, obs):
        return self.net(obs)


@pytest.fixture
def custom_encoders(monkeypatch):
    from sample_factory.model import encoders

    monkeypatch.setattr(encoders, "_CUSTOM_ENCODERS", {})
    encoders.register_encoder("no_bias", _NoBiasEncoder)
    encoders.register_encoder("no_out_size", lambda cfg, space: _NoBiasEncoder(cfg, space, out_size=None))
    encoders.register_encoder("float_out_size", lambda cfg, space: _NoBiasEncoder(cfg, space, out_size=8.0))


@pytest.mark.parametrize("init", ["orthogonal", "xavier_uniform"])
def test_a_custom_encoder_without_biases_is_initialized(custom_encoders, init):
    m = _model("--encoder_custom=no_bias", f"--policy_initialization={init}")
    params, values, _ = m.forward_step(_obs(B, 4), None)
    assert params.shape == (B, 2) and values.shape == (B,)


@pytest.mark.parametrize("name, shown", [("no_out_size", "None"), ("float_out_size", "8.0")])
def test_a_custom_encoder_needs_an_int_out_size(custom_encoders, name, shown):
    with pytest.raises(TypeError, match=f"_NoBiasEncoder has out_size {shown}: it needs an int"):
        _model(f"--encoder_custom={name}")
