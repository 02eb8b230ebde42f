"""How a task is sized: the lengths it tests, from ``max_seq_lengths`` (lm-eval's own key), a preset's lengths or
the evaluated model's window, mapped to the task's own settings by one function of each task; where each value came
from is recorded (``longctx_settings.runtime.sizing``).

Which value a sized setting takes, first that applies: the setting given (``--metadata``, the YAML); the value
``max_seq_lengths`` given maps it to; the preset's own value for it; the value the preset's lengths or the model's
window map it to; the papers' value (the ``paper`` preset's), when the window is not known.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .. import errors
from ..engine.window import ClaimedWindow, claimed_window
from ..harness import evaluated_model
from ..settings import DEFAULT, GIVEN, preset_source

log = logging.getLogger("lm_eval_longctx")

LENGTHS_KEY = "max_seq_lengths"
WINDOW_SOURCE = "the model's window"
PAPER_SOURCE = "preset paper"
# longctx_settings.runtime.sizing: what sized the task
SIZING_KEY = "sizing"


@dataclass(frozen=True)
class Window:
    """The evaluated model's window: the smaller of what its config claims (``engine/window.py``, as the audit reads
    it) and the maximum length lm-eval serves it at (``--model_args max_length``, else the config)."""

    tokens: int
    claimed: dict | None = None  # ClaimedWindow.record()
    max_length: int | None = None

    def record(self) -> dict:
        return {"tokens": self.tokens, "claimed": self.claimed, "max_length": self.max_length}


def _config_window(model_settings: Mapping) -> ClaimedWindow | None:
    """The window the config of ``pretrained`` (the model_args) claims; None when it cannot be read here."""
    name = model_settings.get("pretrained")
    if not isinstance(name, str) or not name:
        return None
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(
            name,
            revision=model_settings.get("revision"),
            trust_remote_code=bool(model_settings.get("trust_remote_code", False)),
        )
        return claimed_window(config)
    except Exception as err:  # noqa: BLE001  (offline, gated, no window: the task falls back to the papers' sizes)
        log.debug("lm_eval_longctx: the window of %s is not known here (%s)", name, err)
        return None


def model_window(model: evaluated_model.EvaluatedModel | None, model_settings: Mapping) -> Window | None:
    """The evaluated model's window (``Window``), from the model lm-eval evaluates or, outside a run (or before the
    model loads), from the config of the model_args' ``pretrained``; None when neither says."""
    window = model.claimed_window() if model is not None else _config_window(model_settings)
    max_length = model.max_length if model is not None else model_settings.get("max_length")
    known = [n for n in (window.tokens if window is not None else None, max_length) if n]
    if not known:
        return None
    return Window(min(known), window.record() if window is not None else None, max_length)


def window_ladder(tokens: int, rungs: int = 4) -> list[int]:
    """W/8, W/4, W/2, W (the audit's ladder), the rungs below 1 token left out."""
    return sorted({tokens >> k for k in range(rungs) if tokens >> k >= 1})


@dataclass
class Sizing:
    """What sized a task: the preset, the lengths tested and where they came from, the model's window, and where
    each sized setting's value came from (``settings_from``), with notes on what was adapted or overridden."""

    preset: str
    lengths: list[int] | None
    lengths_from: str
    window: Window | None
    settings_from: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # the notes that say a length or size asked for is not run (said when the task is built: ``say_dropped``)
    dropped: list[str] = field(default_factory=list)

    def record(self) -> dict:
        return {
            "preset": self.preset,
            "lengths": self.lengths,
            "lengths_from": self.lengths_from,
            "window": self.window.record() if self.window is not None else None,
            "settings_from": dict(self.settings_from),
            "notes": list(self.notes),
            "dropped": list(self.dropped),
        }

    def drop(self, note: str) -> None:
        """Record that a length or size asked for is not run, and why."""
        self.notes.append(note)
        self.dropped.append(note)


def say_dropped(task: str, sizing: Sizing | None) -> None:
    """One warning line per length or size asked for that ``task`` does not run (its reason recorded as well)."""
    for note in sizing.dropped if sizing is not None else ():
        errors.notice(f"{task} runs fewer lengths than asked: {note}")


def size(
    s,
    window: Window | None,
    for_lengths: Callable[[list[int]], dict],
    for_window: Callable[[int], dict],
    paper: Mapping,
    knobs: tuple[str, ...] = (),
) -> Sizing:
    """Size a task's settings ``s`` (``settings.Settings``, changed in place): ``for_lengths(lengths)``
    maps lengths in tokens to the task's settings (the task's one function for ``max_seq_lengths``),
    ``for_window(W)`` gives its defaults from the model's window, ``paper`` the papers' values (used when no window
    is known under the ``model`` preset). When every setting of ``knobs`` is given, nothing is mapped (a length
    the task's function would refuse is then no error)."""
    sources = getattr(s, "sources", {})
    preset = s["preset"]
    lengths_given = sources.get(LENGTHS_KEY) == GIVEN
    notes: list[str] = []
    lengths: list[int] | None = None
    cut = ""
    if knobs and all(sources.get(knob) == GIVEN for knob in knobs):
        if lengths_given:
            notes.append(f"{', '.join(knobs)} given: {'wins' if len(knobs) == 1 else 'win'} over {LENGTHS_KEY}")
        out = Sizing(preset, s[LENGTHS_KEY], LENGTHS_KEY if lengths_given else GIVEN, window, notes=notes)
        out.settings_from.update({name: src for name, src in sources.items() if src.startswith("preset ")})
        out.settings_from.update(dict.fromkeys(knobs, GIVEN))
        return out
    if s[LENGTHS_KEY]:
        lengths = list(s[LENGTHS_KEY])
        source = LENGTHS_KEY if lengths_given else f"{LENGTHS_KEY} of {preset_source(preset)}"
        if not lengths_given and window is not None and max(lengths) > window.tokens:
            # a preset's lengths stop at the model's window (given lengths are the user's: beyond is their call)
            kept = [n for n in lengths if n <= window.tokens] or [window.tokens]
            cut = f"{source}: lengths {lengths} cut to {kept}, within the model's window of {window.tokens}"
            lengths = kept
        derived = for_lengths(lengths)
    elif preset == "model" and window is not None:
        source, derived = WINDOW_SOURCE, for_window(window.tokens)
    else:
        source, derived = PAPER_SOURCE, dict(paper)
        if preset == "model":
            notes.append("the model's window is not known here (no model, no readable config): the papers' sizes")
    out = Sizing(preset, lengths, source, window, notes=notes)
    if cut:
        out.drop(cut)
    # a preset's own values: recorded with where they came from, as the sized ones
    out.settings_from.update({name: src for name, src in sources.items() if src.startswith("preset ")})
    for knob, value in derived.items():
        src = sources.get(knob, DEFAULT)
        keep = src == GIVEN or (src.startswith("preset ") and not lengths_given)
        if keep:
            if s[knob] != value:
                out.notes.append(f"{knob} = {s[knob]!r} ({src}) wins over {value!r} from {source}")
        else:
            s[knob] = value
            src = source
            sources[knob] = src
        out.settings_from[knob] = src
    return out


def sized(sizing: Sizing, name: str) -> bool:
    """Whether setting ``name`` took a value from lengths or the window (a task may adapt it further to its data),
    not one given, a preset's own or the papers'."""
    source = sizing.settings_from.get(name)
    return source is not None and source != GIVEN and not source.startswith("preset ")


def record(rec: dict, sizing: Sizing | None) -> None:
    """Put a task's sizing into its settings record, under ``runtime`` (where a value came from changes no number;
    the values themselves are recorded at the top level)."""
    if sizing is not None:
        rec.setdefault("runtime", {})[SIZING_KEY] = sizing.record()
