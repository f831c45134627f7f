"""``name_scope``, ``get_current_name_scope`` and ``Module.name_scope`` against TF 2.21.

Every expected value is what TF 2.21 printed for the same program (eager, MirroredStrategy over
two logical CPUs for "M2", one for "M1"); TF is not imported.
"""

from __future__ import annotations

from typing import Any

import pytest

import mwms_mpi as tfm
from mwms_mpi import distribute, optimizers


@pytest.fixture
def m2() -> Any:
    return distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


def test_scope_names_and_variable_names() -> None:
    assert tfm.get_current_name_scope() == ""
    with tfm.name_scope("m") as entered:
        assert (entered, tfm.get_current_name_scope()) == ("m/", "m")
        assert tfm.Variable(1.0, name="v").name == "m/v:0"
        with tfm.name_scope("n"):
            assert tfm.Variable(1.0).name == "m/n/Variable:0"
        with tfm.name_scope("b/"):  # a trailing slash: a whole scope
            assert (tfm.get_current_name_scope(), tfm.Variable(1.0, name="x").name) == (
                "b",
                "b/x:0",
            )
        with tfm.name_scope(""):  # the root
            assert (tfm.get_current_name_scope(), tfm.Variable(1.0, name="x").name) == ("", "x:0")
        names = ["", "a:b", "a b", "p//q", "/p", "p/", "p/q"]
        got = [tfm.Variable(1.0, name=n).name for n in names]
        assert got == [":0", "m/a:b:0", "m/a b:0", "m/p//q:0", "m//p:0", "p:0", "m/p/q:0"]
    assert tfm.get_current_name_scope() == ""


def test_scope_object_reentered_and_restored_after_an_error() -> None:
    scope = tfm.name_scope("zz")
    assert scope.name == "zz"
    with scope as a, scope as b:
        assert (a, b, tfm.get_current_name_scope()) == ("zz/", "zz/zz/", "zz/zz")
    with pytest.raises(KeyError), tfm.name_scope("q"):
        raise KeyError("x")
    assert tfm.get_current_name_scope() == ""


@pytest.mark.parametrize("bad", [None, 1])
def test_scope_name_must_be_a_string(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"^name for name_scope must be a string\.$"):
        tfm.name_scope(bad)


def test_mirrored_components_and_replica_threads(m2: Any) -> None:
    seen: list[tuple[str, str]] = []

    def fn() -> int:
        seen.append(("replica", tfm.get_current_name_scope()))
        with tfm.name_scope("k"):
            seen.append(("replica k", tfm.get_current_name_scope()))

            def merge_fn(_: Any) -> None:
                seen.append(("merge", tfm.get_current_name_scope()))

            distribute.get_replica_context().merge_call(merge_fn)
        return 1

    with tfm.name_scope("m"):
        with m2.scope():
            v = tfm.Variable(1.0, name="v")
            assert [x.name for x in v.values] == ["m/v:0", "m/v/replica_1:0"]
            assert [x.name for x in tfm.Variable(1.0).values] == [
                "m/Variable:0",
                "m/Variable/replica_1:0",
            ]
            assert [x.name for x in tfm.Variable(1.0, name="p/").values] == [
                "p:0",
                "p/replica_1:0",
            ]
            assert [x.name for x in tfm.Variable(1.0, name="").values] == [":0", "/replica_1:0"]
        m2.run(fn)
        # TF's replica threads start at the root; the merge function runs in the caller's scope
        assert seen == [
            ("replica", ""),
            ("replica k", "k"),
            ("replica", ""),
            ("replica k", "k"),
            ("merge", "m"),
        ]
        with m2.scope():
            made = m2.run(lambda: tfm.Variable(2.0, name="w"))
            assert [x.name for x in m2.experimental_local_results(made)] == [
                "w:0",
                "w/replica_1:0",
            ]

            def scoped() -> Any:
                with tfm.name_scope("in"):
                    return tfm.Variable(2.0, name="w")

            made = m2.run(scoped)
            assert made.name == "in/w:0"
            assert [x.name for x in m2.experimental_local_results(made)] == [
                "in/w:0",
                "in/w/replica_1:0",
            ]


def test_one_replica_runs_at_the_root_and_merges_in_the_callers_scope() -> None:
    """One local replica runs ``fn`` in the calling thread here; TF runs it in a thread."""

    def fn() -> tuple[str, str]:
        def merge_fn(_: Any) -> str:
            return tfm.get_current_name_scope()

        merged = distribute.get_replica_context().merge_call(merge_fn)
        return tfm.get_current_name_scope(), merged

    m1 = distribute.MirroredStrategy(["/cpu:0"])
    with tfm.name_scope("m"):
        assert m1.run(fn) == ("", "m")
        with m1.scope():
            assert m1.run(lambda: tfm.Variable(2.0, name="w")).name == "w:0"
        assert distribute.get_strategy().run(fn) == ("m", "m")  # the default: no thread
        assert tfm.get_current_name_scope() == "m"


class _Model(tfm.Module):
    def __init__(self, name: str | None = None) -> None:
        super().__init__(name=name)
        with self.name_scope:
            self.v = tfm.Variable(1.0, name="v")

    @tfm.Module.with_name_scope
    def call(self) -> tuple[str, str]:
        return tfm.Variable(2.0, name="c").name, tfm.get_current_name_scope()


def test_module_name_scope() -> None:
    with tfm.name_scope("outer"):
        model = _Model()
    # TF's snake case of "_Model" is "__model"
    assert (model.name, model.name_scope.name, model.v.name) == (
        "__model",
        "outer/__model/",
        "outer/__model/v:0",
    )
    assert model.call() == ("outer/__model/c:0", "outer/__model")
    assert _Model.call.__name__ == "call"
    assert [v.name for v in model.variables] == ["outer/__model/v:0"]
    assert _Model(name="m").name_scope.name == "m/"


def test_module_made_in_a_modules_scope() -> None:
    class Inner(tfm.Module):
        pass

    class Outer(tfm.Module):
        def __init__(self) -> None:
            super().__init__()
            with self.name_scope:
                self.inner = Inner()
                self.w = tfm.Variable(0.0, name="w")

    outer = Outer()
    assert (outer.name, outer.name_scope.name, outer.inner.name_scope.name, outer.w.name) == (
        "outer",
        "outer/",
        "outer/inner/",
        "outer/w:0",
    )


def test_optimizer_variables_in_a_scope() -> None:
    """The step counter is named in the scope as TF names Keras's backing variable
    (``x/adam/iteration:0``); a slot takes its variable's name, scope included, once."""
    with tfm.name_scope("x"):
        kv = tfm.Variable([1.0], name="k")
        opt = optimizers.Adam(0.1, name="adam")
        opt.build([kv])
    assert [w.name for w in opt.variables] == [
        "x/adam/iteration:0",
        "x/k/momentum:0",
        "x/k/velocity:0",
    ]
