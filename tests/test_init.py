"""sample_factory/__init__.py: the user API under the package's name, each name the object of its home module, and
`import sample_factory` cheap (no torch until a name is used)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import sample_factory


@pytest.mark.parametrize("name", sample_factory.__all__)
def test_exported_name_is_the_home_modules_object(name):
    module, attr = sample_factory._EXPORTS[name]
    assert getattr(sample_factory, name) is getattr(importlib.import_module(module), attr)


def test_the_user_api_is_exported():
    assert set(sample_factory.__all__) == set(sample_factory._EXPORTS)
    for name in ("register_env", "register_encoder", "Callbacks", "register_callbacks", "load_policy", "train_main"):
        assert name in sample_factory.__all__


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        sample_factory.nope  # noqa: B018


@pytest.mark.process
def test_import_does_not_load_torch():
    code = "import sys, sample_factory; assert 'torch' not in sys.modules; print(len(sample_factory.__all__))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
