import numpy as np
import torch

from sample_factory.config import parse_cfg
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.model.normalization import RunningMeanStd
from sample_factory.runtime.shared_buffers import SharedWeights
from tests.model.test_actor_critic import BOX_ACT as BOX
from tests.model.test_actor_critic import BOX_OBS as OBS_SPACE


def test_running_mean_std_matches_numpy_over_batches():
    rng = np.random.default_rng(0)
    data = rng.normal(loc=[3.0, -2.0, 0.5], scale=[1.0, 10.0, 0.1], size=(1000, 3))
    rms = RunningMeanStd((3,))
    for chunk in np.array_split(data, [1, 7, 300, 301, 650]):  # uneven batches, one of a single sample
        rms.update(torch.as_tensor(chunk))
    np.testing.assert_allclose(rms.mean.numpy(), data.mean(axis=0), rtol=1e-9)
    np.testing.assert_allclose(rms.var.numpy(), data.var(axis=0), rtol=1e-9)
    assert float(rms.count) == 1000
    out = rms(torch.as_tensor(data, dtype=torch.float32))
    np.testing.assert_allclose(out.mean(0).numpy(), 0.0, atol=1e-4)
    np.testing.assert_allclose(out.std(0).numpy(), 1.0, atol=1e-2)
    assert float(rms(torch.full((1, 3), 1e6)).max()) == 5.0  # clipped


def test_normalizer_stats_travel_with_published_weights_and_state_dict():
    cfg = parse_cfg(["--env=SomeCustomEnv-v0", "--num_workers=1", "--use_rnn=False", "--normalize_input=True"])
    learner_model, worker_model = ActorCritic(cfg, OBS_SPACE, BOX), ActorCritic(cfg, OBS_SPACE, BOX)
    learner_model.update_normalizers(torch.randn(64, *OBS_SPACE.shape) * 4 + 2)
    w = SharedWeights.for_model(learner_model)
    w.publish(learner_model, 1)
    w.load_into(worker_model)
    torch.testing.assert_close(
        worker_model.obs_normalizers["obs"].mean, learner_model.obs_normalizers["obs"].mean, atol=1e-6, rtol=1e-6
    )
    obs = torch.randn(5, *OBS_SPACE.shape)
    torch.testing.assert_close(worker_model.forward_step(obs, None)[1], learner_model.forward_step(obs, None)[1])
    assert "obs_normalizers.obs.mean" in learner_model.state_dict()


def test_returns_normalizer_round_trip_and_identity_when_off():
    cfg_on = parse_cfg(["--env=SomeCustomEnv-v0", "--num_workers=1", "--use_rnn=False", "--normalize_returns=True"])
    cfg_off = parse_cfg(["--env=SomeCustomEnv-v0", "--num_workers=1", "--use_rnn=False"])
    on, off = ActorCritic(cfg_on, OBS_SPACE, BOX), ActorCritic(cfg_off, OBS_SPACE, BOX)
    returns = torch.randn(500) * 30 + 100
    on.update_returns_normalizer(returns)
    normalized = on.normalize_values(returns)
    assert abs(float(normalized.mean())) < 1e-3 and abs(float(normalized.std()) - 1) < 1e-2
    torch.testing.assert_close(on.denormalize_values(normalized), returns)
    v = torch.randn(7)
    assert torch.equal(off.normalize_values(v), v) and torch.equal(off.denormalize_values(v), v)
    assert "returns_normalizer.var" in on.state_dict()


def test_masked_update_equals_the_update_on_the_selected_rows():
    """update(x, mask) gives the statistics of update(x[mask]) without indexing (no host read on a GPU); an empty
    selection leaves them unchanged, also before any data."""
    torch.manual_seed(0)
    a, b = RunningMeanStd((3,)), RunningMeanStd((3,))
    for _ in range(3):
        x = torch.randn(40, 3) * 4 + 1
        mask = torch.rand(40) < 0.6
        a.update(x[mask])
        b.update(x, mask)
        for name in ("mean", "var", "count"):
            assert torch.allclose(getattr(a, name), getattr(b, name), rtol=1e-10, atol=1e-12)
    state = {k: v.clone() for k, v in b.state_dict().items()}
    b.update(torch.randn(10, 3), torch.zeros(10, dtype=torch.bool))
    assert all(torch.equal(v, state[k]) for k, v in b.state_dict().items())
    fresh = RunningMeanStd(())
    fresh.update(torch.randn(5), torch.zeros(5, dtype=torch.bool))
    assert (float(fresh.mean), float(fresh.var), float(fresh.count)) == (0.0, 1.0, 0.0)
