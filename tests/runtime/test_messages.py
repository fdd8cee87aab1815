"""Message formats: plain tuples on the wire, read back by field name."""

from __future__ import annotations

import pickle
import typing

import pytest

from sample_factory.runtime import messages as m

# One sender call per kind, with every field given by name: the field order of `wire` must match the record's.
SENT = [
    (m.Request, dict(actor_idx=1, split_idx=2, slot=3, t=4, has_truncations=True, gen=5, seq=6)),
    (m.ActionsReady, dict(splits=[(0, 7), (1, 8)], gen=2, policy_id=3, worker=4)),
    (m.Rollout, dict(actor_idx=1, slot=9, gen=2)),
    (m.FreeSlots, dict(slots=[4, 5], gen=1)),
    (m.SaveBest, dict(metric_value=12.5)),
    (m.SaveNow, {}),
    (m.PbtUpdate, dict(hyperparams={"learning_rate": 1e-4}, source_policy=None)),
    (m.SetRewardShaping, dict(policy_id=1, coefficients={"alive_bonus": 0.5})),
    (m.Resend, {}),
    (m.Report, dict(role="policy", index=(0, 1), report_kind="heartbeat", payload="inference")),
    (m.Stop, {}),
    (m.RankWork, dict(slots=[2], columns=[[0, 1]], rows=4, version=7, env_frames=1024)),
    (m.RankDone, {}),
    (m.ParkAfter, dict(iteration=3)),
]


@pytest.mark.parametrize("record,fields", SENT, ids=[r.__name__ for r, _ in SENT])
def test_wire_is_a_plain_tuple_read_back_by_name(record, fields):
    sent = record.wire(**fields)
    assert type(sent) is tuple  # a NamedTuple would pickle its class path too
    received = m.decode(pickle.loads(pickle.dumps(sent)))
    assert type(received) is record
    assert received._asdict() == {"kind": sent[0], **fields}


def test_every_kind_has_one_record():
    kinds = [record.wire(**fields)[0] for record, fields in SENT]
    assert sorted(kinds) == list(range(len(SENT)))


@pytest.mark.parametrize("record,fields", SENT, ids=[r.__name__ for r, _ in SENT])
def test_kind_annotation_is_the_kind_sent(record, fields):
    """`kind: Literal[N]` lets the type checker narrow `msg.kind == KIND` to the record: N must be what is sent."""
    assert typing.get_args(typing.get_type_hints(record)["kind"]) == (record.wire(**fields)[0],)


def test_reporter_sends_a_report():
    sent: list = []
    channel = type("Channel", (), {"put": lambda self, msg, timeout=0: sent.append(msg)})()
    m.Reporter(channel, "learner", 0)("train", {"version": 3})
    assert m.decode(sent[0]) == m.Report(m.REPORT, "learner", 0, "train", {"version": 3})
