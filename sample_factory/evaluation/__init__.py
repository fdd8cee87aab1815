"""Using trained policies: enjoy.py, the policy API, ONNX export and periodic evaluation during training."""
