"""Every environment variable the package reads is checked, and a bad value's error names it.

Issue 23, item 11: ``MWMS_MPI_STALL_WARNING=abc`` raised ``could not convert string to float``
(no variable named), ``MWMS_MPI_ABORT_ON_ERROR=maybe`` was taken as on, ``MWMS_MPI_LOG_LEVEL``
took any word as ``WARNING``, ``MWMS_MPI_RUN_INIT_TIMEOUT`` and ``MWMS_MPI_TIMELINE_WAIT`` fell
back to their defaults in silence. Each reader is driven here through the function the package
itself calls; ``mwms_mpi/_env.py`` is the one home of the rules, and the last tests check that
no module reads the environment around it and that every variable is documented.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwms_mpi import _env, _lifecycle, _logging, run, testing
from mwms_mpi.cluster import launcher, mpiexec, tfconfig
from mwms_mpi.collective import cuda_aware, stall, timeline, trace_file, transport
from tests.support.launch import REPO_ROOT

PACKAGE = REPO_ROOT / "mwms_mpi"
ENV_PAGE = REPO_ROOT / "docs" / "launching.md"


# -- the helpers: one rule per kind of value ------------------------------------------------


@pytest.mark.parametrize("word", ["1", "true", "TRUE", "Yes", "on", " On "])
def test_bool_words_for_yes(word: str) -> None:
    assert _env.env_bool("X", False, environ={"X": word}) is True


@pytest.mark.parametrize("word", ["0", "false", "False", "NO", "off"])
def test_bool_words_for_no(word: str) -> None:
    assert _env.env_bool("X", True, environ={"X": word}) is False


@pytest.mark.parametrize("word", ["maybe", "2", "-1", "y", "n", "enable", "truee", "0.0"])
def test_any_other_bool_word_is_an_error_naming_the_variable_and_the_words(word: str) -> None:
    with pytest.raises(ValueError) as caught:
        _env.env_bool("X_FLAG", True, environ={"X_FLAG": word})
    assert str(caught.value) == (
        f"Environment variable X_FLAG={word!r} is not a boolean: 1, 0, true, false, yes, no, "
        "on or off, in any case"
    )


@pytest.mark.parametrize("value", [None, "", "   "])
def test_unset_or_blank_is_the_default(value: str | None) -> None:
    env = {} if value is None else {"X": value}
    assert _env.env_bool("X", None, environ=env) is None
    assert _env.env_int("X", 7, environ=env) == 7
    assert _env.env_float("X", 2.5, environ=env) == 2.5
    assert _env.env_choice("X", ("a", "b"), "a", environ=env) == "a"
    assert _env.env_path("X", environ=env) is None


def test_integers_are_decimal_and_bounded() -> None:
    assert _env.env_int("N", 0, environ={"N": " +12 "}) == 12
    assert _env.env_int("N", 0, minimum=-5, environ={"N": "-5"}) == -5
    for text in ["1_000", "0x10", "1.0", "ten", "\uff13", "9" * 5000]:  # fullwidth 3, huge
        with pytest.raises(ValueError, match=r"^Environment variable N='.*' is not an integer"):
            _env.env_int("N", 0, environ={"N": text})
    with pytest.raises(ValueError, match=r"^Environment variable N='0' is not an integer >= 1$"):
        _env.env_int("N", 1, minimum=1, environ={"N": "0"})
    with pytest.raises(ValueError, match=r"N='9' is not an integer in \[0, 8\] \(a digit\)$"):
        _env.env_int("N", 1, minimum=0, maximum=8, what="a digit", environ={"N": "9"})


def test_numbers_are_finite_and_bounded() -> None:
    assert _env.env_float("S", 0.0, environ={"S": "1e1"}) == 10.0
    for text in ["abc", "nan", "inf", "-inf", "1_0", "1,5"]:
        with pytest.raises(ValueError, match=r"^Environment variable S='.*' is not a number >= 0"):
            _env.env_float("S", 0.0, minimum=0, environ={"S": text})
    with pytest.raises(ValueError, match=r"S='-1' is not a number >= 0 \(seconds\)$"):
        _env.env_float("S", 0.0, minimum=0, what="seconds", environ={"S": "-1"})


def test_choices_in_any_case_give_the_canonical_name() -> None:
    assert _env.env_choice("C", ("always", "first"), "always", environ={"C": "FIRST"}) == "first"
    with pytest.raises(ValueError, match=r"C='sometimes' is not one of always, first \(in any"):
        _env.env_choice("C", ("always", "first"), "always", environ={"C": "sometimes"})


def test_a_path_that_names_a_directory_is_refused(tmp_path: Path) -> None:
    assert _env.env_path("P", environ={"P": str(tmp_path / "t.json")}) == tmp_path / "t.json"
    for text in [str(tmp_path), str(tmp_path / "new") + "/", ".", "/"]:
        with pytest.raises(ValueError, match=r"^Environment variable P='.*' is not a file path"):
            _env.env_path("P", environ={"P": text})


# -- each reader of the package ---------------------------------------------------------------


def test_stall_warning_abc_names_the_variable() -> None:
    with pytest.raises(ValueError) as caught:
        stall.seconds_from_env({stall.STALL_ENV: "abc"})
    assert str(caught.value) == (
        "Environment variable MWMS_MPI_STALL_WARNING='abc' is not a number >= 0 (seconds a "
        "collective may wait before it is named; 0 turns the warning off)"
    )
    with pytest.raises(ValueError, match="MWMS_MPI_STALL_WARNING='-5' is not a number >= 0"):
        stall.seconds_from_env({stall.STALL_ENV: "-5"})


@pytest.fixture
def no_abort_hook(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """install_abort_hook as on a fresh import: not installed yet; sys.excepthook restored."""
    monkeypatch.setattr(_lifecycle, "_hook_installed", False)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    yield


@pytest.mark.usefixtures("no_abort_hook")
def test_abort_on_error_maybe_is_an_error_not_on(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = sys.excepthook
    monkeypatch.setenv(_lifecycle.ABORT_ENV, "maybe")
    with pytest.raises(ValueError, match=r"MWMS_MPI_ABORT_ON_ERROR='maybe' is not a boolean"):
        _lifecycle.install_abort_hook()
    assert sys.excepthook is hook and not _lifecycle._hook_installed


@pytest.mark.usefixtures("no_abort_hook")
@pytest.mark.parametrize(("word", "installed"), [("off", False), ("false", False), ("ON", True)])
def test_abort_on_error_takes_every_bool_word(
    monkeypatch: pytest.MonkeyPatch, word: str, installed: bool
) -> None:
    hook = sys.excepthook
    monkeypatch.setenv(_lifecycle.ABORT_ENV, word)
    _lifecycle.install_abort_hook()
    assert (sys.excepthook is not hook) == installed == _lifecycle._hook_installed


def test_log_level_nonsense_names_the_variable_and_the_levels() -> None:
    with pytest.raises(ValueError) as caught:
        _logging.level_from_env({_logging.LEVEL_ENV: "nonsense"})
    assert str(caught.value) == (
        "Environment variable MWMS_MPI_LOG_LEVEL='nonsense' is not a level: one of CRITICAL, "
        "ERROR, WARNING, INFO, DEBUG, NOTSET (also FATAL, WARN; in any case) or an integer >= 0"
    )
    with pytest.raises(ValueError, match="MWMS_MPI_LOG_LEVEL='-1' is not a level"):
        _logging.level_from_env({_logging.LEVEL_ENV: "-1"})


def test_the_runner_refuses_a_bad_init_timeout_before_the_program_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The timeout is needed on the failure path, where an error of its own would leave the
    # other ranks waiting: so it is checked first, and the program does not start.
    marker = tmp_path / "ran"
    script = tmp_path / "prog.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.setenv(run.INIT_TIMEOUT_VARIABLE, "soon")
    assert run.main([str(script)]) == run.USAGE_STATUS
    assert not marker.exists()
    err = capsys.readouterr().err
    assert "Environment variable MWMS_MPI_RUN_INIT_TIMEOUT='soon' is not a number >= 1" in err
    monkeypatch.setenv(run.INIT_TIMEOUT_VARIABLE, "5")
    assert run.main([str(script)]) == 0 and marker.exists()


def test_timeline_wait_is_checked_when_the_trace_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(trace_file.WAIT_ENV, "x")
    path = tmp_path / "trace.json"
    trace = None
    with pytest.raises(ValueError, match=r"MWMS_MPI_TIMELINE_WAIT='x' is not a number >= 0"):
        trace = trace_file.TraceFile(path, 0, 1, "host", lambda r: [], lambda: [])
    if trace is not None:  # (before the fix: it started, and would have waited 10 s at exit)
        trace.close()
    assert not trace_file.rank_path(path, 0).exists()


def test_timeline_path_must_not_be_a_directory(tmp_path: Path) -> None:
    # MWMS_MPI_TIMELINE=/tmp wrote /tmp.rank<r> into / and then failed to merge into /tmp.
    for text in [str(tmp_path), str(tmp_path / "sub") + "/"]:
        with pytest.raises(ValueError, match=r"MWMS_MPI_TIMELINE='.*' is not a file path"):
            timeline.trace_path({timeline.TIMELINE_ENV: text})
    assert timeline.trace_path({timeline.TIMELINE_ENV: " t.json "}) == Path("t.json")
    assert timeline.trace_path({}) is None


def test_transport_tuning_names_the_variable() -> None:
    with pytest.raises(
        ValueError, match=r"^Environment variable MWMS_MPI_CUDA_MPI_MIN_BYTES='lots"
    ):
        transport.tuning_from_env({transport.MIN_DEVICE_BYTES_ENV: "lots"})
    with pytest.raises(
        ValueError, match=r"MWMS_MPI_STAGING_CHUNK_BYTES='0' is not an integer >= 1"
    ):
        transport.tuning_from_env({transport.CHUNK_BYTES_ENV: "0"})
    tuning = transport.tuning_from_env({transport.PIPELINE_BYTES_ENV: "0"})
    assert tuning == (transport.DEFAULT_MIN_DEVICE_BYTES, transport.DEFAULT_CHUNK_BYTES, 0)


def test_cuda_aware_is_a_bool_or_unset() -> None:
    assert cuda_aware.user_word({}) is None
    assert cuda_aware.user_word({cuda_aware.CUDA_AWARE_ENV: "yes"}) is True
    assert cuda_aware.user_word({cuda_aware.CUDA_AWARE_ENV: "0"}) is False
    with pytest.raises(ValueError, match=r"MWMS_MPI_CUDA_AWARE='maybe' is not a boolean"):
        cuda_aware.user_word({cuda_aware.CUDA_AWARE_ENV: "maybe"})
    said_no = cuda_aware.CudaSupport("libmpi.so", 1, False)
    assert not said_no.aware and "MWMS_MPI_CUDA_AWARE=0 says no" in said_no.describe()
    assert cuda_aware.CudaSupport(None, None, True).aware
    assert cuda_aware.CudaSupport(None, 1, None).aware


def test_launcher_sizes_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"OMPI_COMM_WORLD_SIZE='-3' is not an integer >= 1"):
        launcher.detect_launcher({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "-3"})
    with pytest.raises(ValueError, match=r"PMI_RANK='-1' is not an integer >= 0"):
        launcher.detect_launcher({"PMI_RANK": "-1"})


def test_mpiexec_family_is_a_choice() -> None:
    assert mpiexec.family_of("", "OpenMPI") is mpiexec.OPEN_MPI  # any case
    with pytest.raises(ValueError, match=r"MWMS_MPIEXEC_FAMILY='lam' is not one of intel, mpich"):
        mpiexec.family_from_env({mpiexec.FAMILY_VARIABLE: "lam"})
    assert mpiexec.family_from_env({mpiexec.FAMILY_VARIABLE: "MPICH"}) == "mpich"


def test_pytest_plugin_variables_name_themselves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MWMS_TEST_MAX_EXAMPLES", "many")
    with pytest.raises(ValueError, match=r"MWMS_TEST_MAX_EXAMPLES='many' is not an integer >= 1"):
        testing.register_hypothesis_profile()
    with pytest.raises(ValueError, match=r"MWMS_TEST_AGREE_TIMEOUT='-' is not a number"):
        testing.agree_timeout({testing.AGREE_TIMEOUT_ENV: "-"})
    with pytest.raises(ValueError, match=r"MWMS_TEST_WORLD_SIZE='two' is not an integer >= 1"):
        testing.expected_world_size(None, {testing.WORLD_SIZE_ENV: "two"})
    assert testing.expected_world_size(4, {testing.WORLD_SIZE_ENV: "two"}) == 4  # the option wins


def test_tf_config_errors_keep_tfs_types_and_name_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # TF 2.21 raises json.JSONDecodeError, TypeError and ValueError here, on use (its texts are
    # pinned in test_resolvers.py); ours are the same types and say which variable it was.
    resolver = tfconfig.TFConfigClusterResolver()
    monkeypatch.setenv("TF_CONFIG", "{bad")
    with pytest.raises(json.JSONDecodeError, match=r"^Environment variable TF_CONFIG is not JSON"):
        resolver.cluster_spec()
    monkeypatch.setenv("TF_CONFIG", "5")
    with pytest.raises(TypeError, match=r"^Environment variable TF_CONFIG='5' is not a JSON obj"):
        _ = resolver.task_type
    monkeypatch.setenv("TF_CONFIG", '{"task": {"type": "worker", "index": "x"}}')
    with pytest.raises(ValueError, match=r"TF_CONFIG task index 'x': invalid literal for int"):
        _ = resolver.task_id


# -- one home, and documented -----------------------------------------------------------------

# Reads of the environment that configure nothing, and where they are:
NOT_CONFIGURATION = {
    ("cli/bench.py", "environment"): "sets variables for a block and restores them",
    ("cluster/mpiexec.py", "main"): "hands the whole environment on to execve",
    ("cluster/slurm.py", "cluster_spec"): "writes CUDA_VISIBLE_DEVICES (auto_set_gpu, as TF)",
}


def _environment_reads() -> Iterator[tuple[str, str, int, str]]:
    """(module, function, line, text) of every read of os.environ or of an env mapping."""
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module == "_env.py":
            continue
        tree = ast.parse(path.read_text())
        functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"):
                is_os = isinstance(node.value, ast.Name) and node.value.id == "os"
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                target = node.func.value
                is_os = node.func.attr == "get" and (
                    isinstance(target, ast.Name) and target.id in ("env", "environ")
                )
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                is_os = isinstance(node.value, ast.Name) and node.value.id in ("env", "environ")
            else:
                continue
            if not is_os:
                continue
            owner = [f.name for f in functions if f.lineno <= node.lineno <= (f.end_lineno or 0)]
            yield module, owner[-1] if owner else "", node.lineno, ast.unparse(node)


def test_every_environment_read_goes_through_env() -> None:
    found = [
        f"mwms_mpi/{module}:{line} in {function}(): {text}"
        for module, function, line, text in _environment_reads()
        if (module, function) not in NOT_CONFIGURATION
    ]
    assert found == [], "read these through mwms_mpi._env:\n" + "\n".join(found)


def _variables() -> set[str]:
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        names.update(re.findall(r"\"(MWMS_[A-Z0-9_]+)\"", path.read_text()))
    return names


def test_every_variable_is_documented_with_its_values() -> None:
    text = ENV_PAGE.read_text()
    section = text[text.index("## Environment variables") :]
    rows = {m[1]: m[2] for m in re.finditer(r"^\| `(MWMS_[A-Z0-9_]+)` \|([^\n]*)$", section, re.M)}
    names = _variables()
    assert len(names) >= 15, names
    assert sorted(names - set(rows)) == [], "undocumented in docs/launching.md"
    for name in names:
        assert rows[name].count("|") >= 2, f"{name}: its row needs the allowed values and default"
