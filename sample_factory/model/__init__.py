"""The model: the actor-critic network, its observation encoders, activations, precision and running normalizers."""
