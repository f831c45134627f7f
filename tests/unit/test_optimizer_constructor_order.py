"""Keras 3.15.1's optimizer constructors: parameter order and default names.

TF's values, recorded with Keras 3.15.1 (TF 2.21)::

    keras.optimizers.Adam(0.001, 0.9, 0.999, 1e-7, False, 0.1).weight_decay  # 0.1
    [keras.optimizers.SGD().name, keras.optimizers.SGD().name]  # ['sgd', 'sgd_1']
    keras.optimizers.RMSprop().name, keras.optimizers.AdamW().name  # 'rm_sprop', 'adam_w'
    class MyOpt(keras.optimizers.SGD): ...
    [MyOpt().name, MyOpt().name, MyOpt(name=None).name]  # ['my_opt', 'my_opt_1', 'my_opt_2']
"""

from __future__ import annotations

import re

import pytest

from mwms_mpi import metrics, optimizers
from mwms_mpi._naming import agreed_name


@pytest.mark.parametrize(
    ("cls", "args"),
    [
        (optimizers.SGD, (0.01, 0.0, False)),
        (optimizers.Adam, (0.001, 0.9, 0.999, 1e-7, False)),
        (optimizers.RMSprop, (0.001, 0.9, 0.0, 1e-7, False)),
        (optimizers.Adagrad, (0.001, 0.1, 1e-7)),
    ],
)
def test_base_arguments_follow_the_own_ones_positionally(cls: type, args: tuple) -> None:
    """After its own arguments, the next positional one is ``weight_decay`` (Keras), then
    ``clipnorm``; before, ours took it as the name."""
    opt = cls(*args, 0.1, 2.0)
    assert (opt.weight_decay, opt.clipnorm) == (0.1, 2.0)


def test_adamw_positional_order() -> None:
    """AdamW: ``weight_decay`` second, then Adam's own, then ``clipnorm`` (Keras)."""
    opt = optimizers.AdamW(0.01, 0.2, 0.8, 0.9, 1e-6, True, 3.0)
    assert (opt.weight_decay, opt.beta_1, opt.beta_2, opt.epsilon, opt.amsgrad) == (
        0.2, 0.8, 0.9, 1e-6, True,
    )  # fmt: skip
    assert opt.clipnorm == 3.0


def test_default_names_are_keras_auto_names() -> None:
    class MyOpt(optimizers.SGD):
        pass

    assert [MyOpt().name, MyOpt().name, MyOpt(name=None).name] == ["my_opt", "my_opt_1", "my_opt_2"]
    assert MyOpt(name="x").name == "x"
    for cls, base in [
        (optimizers.SGD, "sgd"),
        (optimizers.Adam, "adam"),
        (optimizers.AdamW, "adam_w"),
        (optimizers.RMSprop, "rm_sprop"),
        (optimizers.Adagrad, "adagrad"),
    ]:
        assert re.fullmatch(rf"{base}(_\d+)?", cls().name)


def test_metrics_and_optimizers_share_keras_name_counter() -> None:
    """Keras 3.15.1 counts every automatic name in one table::

    class SharedName(keras.metrics.Metric): ...   # m = SharedName()
    class SharedName(keras.optimizers.SGD): ...
    m.name, SharedName().name, SharedName().name  # shared_name shared_name_1 shared_name_2
    """

    class SharedName(metrics.Metric):
        def update_state(self, *args: object) -> None:
            pass

        def result(self) -> float:
            return 0.0

    m = SharedName()

    class SharedName2(optimizers.SGD):
        pass

    SharedName2.__name__ = "SharedName"
    assert [m.name, SharedName2().name, SharedName2().name] == [
        "shared_name", "shared_name_1", "shared_name_2",
    ]  # fmt: skip


def test_agreed_names_drop_only_the_numbers_auto_name_made() -> None:
    """The agreement of a variable's creation compares ``agreed_name``: Keras's numbers count
    this rank's own objects, a user's ``layer_1`` is the user's."""

    class AgreedOpt(optimizers.SGD):
        pass

    first, second = AgreedOpt().name, AgreedOpt().name
    assert (first, second) == ("agreed_opt", "agreed_opt_1")
    assert agreed_name(f"{second}/iteration") == "agreed_opt/iteration"
    assert agreed_name("agreed_opt/iteration") == "agreed_opt/iteration"
    assert agreed_name("layer_1/kernel") == "layer_1/kernel"
    assert agreed_name("agreed_opt_7/iteration") == "agreed_opt_7/iteration"  # never made here
