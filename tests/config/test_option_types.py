"""The declaration format of options: `name: type = opt(default, help)` in an OptionGroup; the annotation gives the
parser, and the group keeps no class-level values (argparse would not set the defaults on a Config otherwise)."""

import pytest

from sample_factory.config.option_types import (
    ConvArchitecture,
    Number,
    Option,
    OptionGroup,
    _num,
    conv_architecture,
    int_list,
    opt,
    str2bool,
    str_list,
)


def test_a_group_turns_its_annotated_attributes_into_options_in_declaration_order():
    class Example(OptionGroup, title="Example"):
        """Not an option: the docstring."""

        steps: Number = opt(1e6, "A count typed 1e6.")
        name: str | None = opt(None, "A name.", aliases=("nm",))
        flag: bool = opt(False, "A flag.")
        layers: list[int] = opt([64, 64], "Sizes.")
        keys: list[str] = opt([], "Keys.")
        arch: ConvArchitecture = opt("convnet_simple", "A net.", choices=("convnet_simple", "resnet_impala"))
        mode: str = opt("a", "A mode.", choices=("a", "b"))
        plain_class_value = 3  # not declared with opt: left alone

    assert Example.group_title == "Example"
    assert [o.name for o in Example.group_options] == ["steps", "name", "flag", "layers", "keys", "arch", "mode"]
    by_name = {o.name: o for o in Example.group_options}
    assert by_name["steps"] == Option("steps", _num, 1e6, "A count typed 1e6.")
    assert by_name["steps"].type_name == "number"
    assert by_name["name"].type is str and by_name["name"].flags == ("--name", "--nm")
    assert by_name["flag"].type is str2bool and by_name["flag"].is_bool
    assert by_name["layers"].type is int_list and by_name["keys"].type is str_list
    assert by_name["arch"].type is conv_architecture and by_name["arch"].choices == ("convnet_simple", "resnet_impala")
    for o in Example.group_options:
        assert not hasattr(Example, o.name), o.name
    assert Example.plain_class_value == 3


def test_merged_groups_keep_each_groups_options():
    class A(OptionGroup, title="A"):
        a: int = opt(1, "a")

    class B(OptionGroup, title="B"):
        b: float = opt(2.0, "b")

    class Both(A, B):
        """No options of its own: not a group, just the merge."""

    assert [o.name for o in A.group_options] == ["a"] and [o.name for o in B.group_options] == ["b"]
    assert not hasattr(Both(), "a")


def test_bad_declarations_fail_at_import_with_the_fix():
    with pytest.raises(TypeError, match="exactly when its default is None"):

        class Optional(OptionGroup, title="x"):
            n: int = opt(None, "no | None")

    with pytest.raises(TypeError, match="exactly when its default is None"):

        class NotOptional(OptionGroup, title="x"):
            n: int | None = opt(3, "| None with a default")

    with pytest.raises(TypeError, match="no parser"):

        class Unknown(OptionGroup, title="x"):
            n: dict[str, int] = opt({}, "no parser for dicts")

    with pytest.raises(TypeError, match="has no annotation"):

        class Unannotated(OptionGroup, title="x"):
            n = opt(1, "no type")

    with pytest.raises(TypeError, match="give it a title="):

        class Untitled(OptionGroup):
            n: int = opt(1, "no title")
