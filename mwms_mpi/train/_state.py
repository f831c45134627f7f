"""The ``checkpoint`` state file: which checkpoints of a directory exist, in TF's text format.

TF's ``CheckpointState`` text format, so TF tools read it::

    model_checkpoint_path: "ckpt-4"
    all_model_checkpoint_paths: "ckpt-3"
    all_model_checkpoint_paths: "ckpt-4"
    all_model_checkpoint_timestamps: 1795374864.9890506
    all_model_checkpoint_timestamps: 1795374865.000747
    last_preserved_timestamp: 1795374863.9205492

Paths inside the directory are stored relative to it, as TF's ``save_relative_paths=True``.

Reading follows TF 2.21's ``get_checkpoint_state``: a state file that cannot be parsed is logged
as a warning and ignored ("Checkpoint ignored": there is no checkpoint), and one without a
``model_checkpoint_path`` raises TF's ``ValueError``. Two additions: undecodable (non-UTF-8)
bytes are a parse error like any other (TF 2.21 raises ``UnicodeDecodeError``), and a state file
naming a checkpoint that does not resolve inside its directory (``..``, an absolute path
elsewhere, a symlink out) is ignored the same way, so neither restoring nor
``CheckpointManager``'s deletion of old checkpoints ever reaches outside the directory.
"""

from __future__ import annotations

import codecs
import glob
import logging
import os
import re
from dataclasses import dataclass, field

from mwms_mpi.train._format import TEMP_GLOB, atomic_write, is_inside, sweep

STATE_FILENAME = "checkpoint"
_LOG = logging.getLogger(__name__)
_LINE = re.compile(r'^\s*(\w+)\s*:\s*(?:"((?:[^"\\]|\\.)*)"|(\S+))\s*$')
_PATHS = ("model_checkpoint_path", "all_model_checkpoint_paths")
_TIMES = ("all_model_checkpoint_timestamps", "last_preserved_timestamp")


@dataclass
class CheckpointState:
    """TF's ``CheckpointState`` proto: the latest checkpoint and the ones still kept."""

    model_checkpoint_path: str = ""
    all_model_checkpoint_paths: list[str] = field(default_factory=list)
    all_model_checkpoint_timestamps: list[float] = field(default_factory=list)
    last_preserved_timestamp: float | None = None


def state_path(directory: str, latest_filename: str | None = None) -> str:
    """The state file of ``directory`` (``checkpoint`` unless ``latest_filename`` is given)."""
    return os.path.join(directory, latest_filename or STATE_FILENAME)


def _quote(text: str) -> str:
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _relative(path: str, directory: str) -> str:
    """``path`` relative to ``directory`` when it is below it (``sub/ckpt-1`` too), as TF's
    ``save_relative_paths``; else as given."""
    directory = directory or os.curdir
    if os.path.isabs(path) != os.path.isabs(directory):
        path, directory = os.path.abspath(path), os.path.abspath(directory)
    relative = os.path.relpath(path, directory)
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return path
    return relative


def write_state(directory: str, state: CheckpointState, latest_filename: str | None = None) -> None:
    """Atomically writes ``state`` (paths made relative to ``directory`` where inside it).

    Temporary files that killed writes of the same state file left behind are removed after.
    """
    lines = [f"model_checkpoint_path: {_quote(_relative(state.model_checkpoint_path, directory))}"]
    lines += [
        f"all_model_checkpoint_paths: {_quote(_relative(path, directory))}"
        for path in state.all_model_checkpoint_paths
    ]
    lines += [
        f"all_model_checkpoint_timestamps: {t!r}" for t in state.all_model_checkpoint_timestamps
    ]
    if state.last_preserved_timestamp is not None:
        lines.append(f"last_preserved_timestamp: {state.last_preserved_timestamp!r}")
    text = ("\n".join(lines) + "\n").encode("ascii")
    path = state_path(directory, latest_filename)
    atomic_write(path, lambda file: file.write(text))
    sweep(directory, [f".{glob.escape(os.path.basename(path))}{TEMP_GLOB}"])


def read_state(directory: str, latest_filename: str | None = None) -> CheckpointState | None:
    """The state of ``directory`` with paths joined to it, or ``None`` if there is none.

    A state file that cannot be read, parsed or trusted (a path outside ``directory``) is
    logged as a warning and ignored, as TF ignores one it cannot parse.

    Raises:
      ValueError: if the state file parses but names no ``model_checkpoint_path`` (TF's
        "Invalid checkpoint state loaded from ...").
    """
    path = state_path(directory, latest_filename)
    try:
        with open(path, "rb") as file:
            raw = file.read()
        state = _parse(raw, directory)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        _LOG.warning("%s: %s: %s", path, type(exc).__name__, exc)
        _LOG.warning("%s: Checkpoint ignored", path)
        return None
    if not state.model_checkpoint_path:
        raise ValueError(f"Invalid checkpoint state loaded from {directory}")
    return state


def _parse(raw: bytes, directory: str) -> CheckpointState:
    """Parses the text of a state file; ValueError (naming the line) for anything unexpected."""
    paths: dict[str, list[str]] = {}
    times: dict[str, list[float]] = {}
    for number, line in enumerate(raw.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        match = _LINE.match(line)
        name, quoted, bare = match.groups() if match else ("", None, None)
        if name in _PATHS and quoted is not None:
            text = bytes(codecs.escape_decode(quoted.encode("utf-8"))[0]).decode("utf-8")
            joined = os.path.join(directory, text)
            if not is_inside(joined, directory):
                raise ValueError(f"line {number} names {text!r}, which is outside {directory}")
            paths.setdefault(name, []).append(joined)
        elif name in _TIMES and bare is not None:
            times.setdefault(name, []).append(float(bare))
        else:
            raise ValueError(f"line {number} is not a CheckpointState text line: {line!r}")
    preserved = times.get("last_preserved_timestamp")
    return CheckpointState(
        (paths.get("model_checkpoint_path") or [""])[-1],
        paths.get("all_model_checkpoint_paths", []),
        times.get("all_model_checkpoint_timestamps", []),
        preserved[-1] if preserved else None,
    )
