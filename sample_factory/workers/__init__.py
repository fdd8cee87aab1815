"""The three roles of a run: actor workers step envs, policy workers batch inference, one learner per policy trains
(through the algorithm interface); plus how agents are mapped to policies."""
