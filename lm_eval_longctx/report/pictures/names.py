"""What the pictures and the report card call a model: its name as the user knows it.

One rule for every picture (forgetting curve, retrieval-gain map, LongEval) and the report card's run labels:

* a hub id stays as it is (``Qwen/Qwen2-7B``, ``org/run/checkpoint-1200``);
* the packaged demo model (``.../lm_eval_longctx/demo/assets/model``) is ``demo model (lm_eval_longctx)``;
* any other local folder is its name; a checkpoint folder (``checkpoint-1000``, ``step500``, ...) keeps its parent,
  the training run, so that checkpoints of two runs are not taken for one series (``run_a/checkpoint-1000``).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path, PureWindowsPath

from ..results import model_name

DEMO_MODEL_NAME = "demo model (lm_eval_longctx)"
# the packaged demo model's folder, as the package lays it out (any install: a site-packages copy, another machine)
_DEMO_MODEL_PARTS = ("lm_eval_longctx", "demo", "assets", "model")
_DEMO_MODEL_DIR = Path(__file__).resolve().parents[2].joinpath(*_DEMO_MODEL_PARTS[1:])
_CHECKPOINT_FOLDER = re.compile(r"(?i)(?:checkpoint|ckpt|global[-_]?step|step|iter(?:ation)?)[-_=]?\d+")


def is_local_path(name: str) -> bool:
    """A path as the user typed it (absolute, ``./``, ``~``, a Windows path); a bare ``org/model`` is a hub id."""
    return name.startswith(("/", ".", "~")) or "\\" in name or re.match(r"^[A-Za-z]:[\\/]", name) is not None


def display_name(name: str) -> str:
    """The model's name on a picture or page, from the name the harness recorded (see the module's rule)."""
    name = name.strip()
    if not name or not is_local_path(name):
        return name
    parts = (PureWindowsPath(name) if "\\" in name else Path(name)).parts
    if tuple(parts[-len(_DEMO_MODEL_PARTS) :]) == _DEMO_MODEL_PARTS or _resolves_to_demo_model(name):
        return DEMO_MODEL_NAME
    folders = [p for p in parts if p not in ("/", "\\", ".", "..", "~") and not p.endswith((":\\", ":/"))]
    if not folders:
        return name
    if _CHECKPOINT_FOLDER.fullmatch(folders[-1]) and len(folders) > 1:
        return "/".join(folders[-2:])
    return folders[-1]


def _resolves_to_demo_model(name: str) -> bool:
    try:
        return Path(name).expanduser().resolve() == _DEMO_MODEL_DIR
    except (OSError, RuntimeError):  # a path this machine cannot resolve is not the package's folder
        return False


def model_label(results: dict, default: str = "model") -> str:
    """The model's display name from a results dict (``model_name``, else ``pretrained=`` of
    ``config.model_args``), else ``default``."""
    name = model_name(results)
    return display_name(name) if name else default


def plain_text(figure_function):
    """Build a figure with matplotlib's mathtext off: a ``$`` in a model or metric name read from a results file is
    drawn as text, not parsed as a formula (``acc$^$`` would stop the drawing)."""

    @functools.wraps(figure_function)
    def with_plain_text(*args, **kwargs):
        try:
            import matplotlib
        except ImportError:  # the figure function says how to install it
            return figure_function(*args, **kwargs)
        with matplotlib.rc_context({"text.parse_math": False}):
            return figure_function(*args, **kwargs)

    return with_plain_text


def wrap_label(label: str, width: int) -> str:
    """``label`` in lines of at most ``width`` characters where it can break (after a space or a "/"; a longer
    piece is cut), so that a long run label stays inside its panel.

    Example:
        >>> print(wrap_label("models/SmolLM2-135M-Instruct [exp1/out]", 30))
        models/SmolLM2-135M-Instruct
        [exp1/out]
        >>> wrap_label("short", 30)
        'short'
    """
    pieces = [p for p in re.findall(r"[^/\s]*(?:/|\s+|$)", label) if p]
    lines: list[str] = []
    line = ""
    for piece in pieces:
        while len(piece) > width:  # a piece longer than a line: cut
            if line:
                lines.append(line.rstrip())
                line = ""
            lines.append(piece[:width])
            piece = piece[width:]
        if line and len(line) + len(piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        line += piece
    if line.strip():
        lines.append(line.rstrip())
    return "\n".join(lines)
