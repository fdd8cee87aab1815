"""torch.compile of the encoders (model/compile.py): same parameters, same function, same gradients; failures at
torch.compile time, at the first call or in the backend fall back to eager with one log line; real errors are not
hidden; the warm-up pass changes no weight."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from sample_factory.config import parse_cfg
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.model.compile import GuardedCompile, compile_encoders, compile_for_role, warm_up

OBS = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)


def make_model(*flags: str) -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(parse_cfg(["--env=CartPole-v1", *flags]), OBS, gym.spaces.Discrete(3))


def loss_and_grads(model: ActorCritic, obs: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    params, values, _ = model.forward_step(obs, None)
    loss = params.logsumexp(-1).sum() + values.pow(2).sum()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def test_compiled_model_keeps_its_parameters_outputs_and_gradients():
    eager, compiled = make_model(), make_model()
    lines: list[str] = []
    guards = compile_encoders(compiled, lines.append, backend="aot_eager")  # dynamo + autograd, no C++ build
    assert len(guards) == len(compiled.towers)
    assert list(compiled.state_dict()) == list(eager.state_dict())  # checkpoints and weight publishing unchanged
    obs = torch.randn(5, 6)
    loss_e, grads_e = loss_and_grads(eager, obs)
    loss_c, grads_c = loss_and_grads(compiled, obs)
    assert torch.allclose(loss_e, loss_c, atol=1e-5)
    for ge, gc in zip(grads_e, grads_c, strict=True):
        assert torch.allclose(ge, gc, atol=1e-5)
    assert guards[0].calls == 1 and not guards[0].failed and lines == []
    compiled.load_state_dict(eager.state_dict())  # loading weights keeps the compiled forward
    assert compiled.towers[0].encoder.forward is guards[0]


def test_a_backend_that_fails_falls_back_to_eager_with_one_line():
    def broken_backend(gm, example_inputs):
        raise RuntimeError("no compiler on this machine")

    model, reference = make_model(), make_model()
    lines: list[str] = []
    (guard,) = compile_encoders(model, lines.append, backend=broken_backend)
    obs = torch.randn(3, 6)
    for _ in range(3):
        out, _, _ = model.forward_step(obs, None)
    assert torch.allclose(out, reference.forward_step(obs, None)[0])
    assert guard.failed and guard.calls == 0
    assert len(lines) == 1 and "torch.compile of encoder 0" in lines[0] and "running it eagerly" in lines[0]


def test_an_unknown_backend_fails_at_the_first_call_not_at_construction():
    model = make_model()
    lines: list[str] = []
    (guard,) = compile_encoders(model, lines.append, backend="not_a_backend")  # torch.compile raises here
    model.forward_step(torch.randn(2, 6), None)
    assert guard.failed and "InvalidBackend" in lines[0]


def test_an_error_that_eager_also_raises_is_not_hidden():
    def compiled(x):
        raise RuntimeError("compiled")

    def eager(x):
        raise ValueError("real bug")

    guard = GuardedCompile(eager, compiled, "enc", lambda line: None)
    with pytest.raises(ValueError, match="real bug"):
        guard(torch.zeros(1))


def test_once_failed_the_compiled_function_is_never_called_again():
    calls = {"compiled": 0}

    def compiled(x):
        calls["compiled"] += 1
        raise RuntimeError("boom")

    guard = GuardedCompile(lambda x: x + 1, compiled, "enc", lambda line: None)
    assert [int(guard(torch.tensor(i))) for i in range(3)] == [1, 2, 3]
    assert calls["compiled"] == 1


@pytest.mark.parametrize("rnn", [False, True])
def test_warm_up_changes_no_weight_and_leaves_no_gradient(rnn):
    model = make_model(f"--use_rnn={rnn}")
    compile_encoders(model, print, backend="aot_eager")
    before = copy.deepcopy(model.state_dict())
    warm_up(model, OBS, torch.device("cpu"), rows=8, train=True)
    warm_up(model, OBS, torch.device("cpu"), rows=8, train=False)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


def test_dict_observations_warm_up():
    space = gym.spaces.Dict({"a": OBS, "b": gym.spaces.Box(0, 255, (3, 36, 36), np.uint8)})
    torch.manual_seed(0)
    model = ActorCritic(parse_cfg(["--env=CartPole-v1"]), space, gym.spaces.Discrete(3))
    (guard,) = compile_encoders(model, print, backend="aot_eager")
    warm_up(model, space, torch.device("cpu"), rows=4, train=True)
    assert guard.calls == 1 and not guard.failed


def test_options_select_the_role():
    cfg = parse_cfg(["--env=CartPole-v1", "--torch_compile_learner=True", "--torch_compile_dynamo_backend=aot_eager"])
    learner_model, worker_model = make_model(), make_model()
    assert len(compile_for_role(learner_model, cfg, "learner", print)) == 1
    assert compile_for_role(worker_model, cfg, "worker", print) == []
    assert "forward" not in vars(worker_model.towers[0].encoder)  # untouched: the class's forward
