"""Declared settings: one declaration per task (or tool) says each setting's name, type, allowed values,
default and meaning; parsing, validation, the record in the results and the settings tables of the docs
all come from it (no lm-eval import).

Parsing is strict, because a typo or a wrong type must never give a different number with exit 0:

* ``--metadata`` reaches every task of a run, so "known" means a setting of some task of this package, a key
  lm-eval itself puts into the metadata (the YAML's ``version``, the ``--model_args`` keys, registered by the
  harness), or a key the user names in ``other_tasks_keys``. Any other key is an error, naming it and the
  known key it resembles, only when it looks like a misspelling of one of ours (:func:`misspelling_of`);
  otherwise it is left to the other tasks of the run (a stock task's, such as RULER's ``num_samples``), with one
  log line naming it (lm-eval's own length key, ``max_seq_lengths``, is a setting of every task of this suite). In a
  run whose every task is of this suite no other task could take it: there it is an error before the model loads
  (:func:`refuse_unused_keys`, asked by the discovery hook);
* a value of the wrong type, out of range, NaN or infinite is an error naming the key, the value and
  what is allowed; counts must be whole numbers (``2.5`` and ``True`` are not counts);
* a count or length above its declared upper bound (``integer(lo, hi)``, ``integer_list(lo, hi, max_items)``) is an
  error that names the bound, raised when the settings are parsed: before any case or sample is built.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import errors

# Keys lm-eval writes into every task's metadata besides the model_args: the YAML's version and
# (lm-eval 0.4.13, tasks/_factory.py) where the config came from; and our own records of the settings and of the
# task's report-card section.
LM_EVAL_METADATA_KEYS = frozenset(
    {"version", "config_source", "config", "_metadata", "longctx_settings", "longctx_report"}
)
# The escape hatch for keys meant for tasks of other suites in the same run (e.g. RULER's
# num_samples): listed here, they are accepted and ignored.
OTHER_TASKS_KEYS = "other_tasks_keys"
# Keys of the evaluated model's --model_args that our tasks read from the metadata (the forgetting curve's and the
# gain map's tokenizer and maximum length): a misspelling of one of them is refused like one of a setting.
MODEL_KEYS_READ = ("pretrained", "revision", "trust_remote_code", "max_length")
_NONE_WORDS = ("", "none", "null")

log = logging.getLogger("lm_eval_longctx")


class SettingsError(ValueError):
    """A setting that is unknown, of the wrong type or out of range."""


# ------------------------------------------------------------------ value kinds
# A kind turns a raw value (from JSON, YAML or lm-eval's k=v parsing) into the value used, or raises
# ValueError with what is allowed. ``describe`` is the "allowed" column of the docs table.


@dataclass(frozen=True)
class Kind:
    describe: str
    convert: Callable[[Any], Any]
    # the largest value (a list's largest entry) a whole-number kind allows; None: no upper bound
    upper_bound: int | None = None


class AboveBoundError(ValueError):
    """A whole number, or a list of them, above its declared upper bound (what is allowed is the message)."""


def _is_integral(x: float) -> bool:
    return math.isfinite(x) and float(x).is_integer()


def _to_int(value) -> int:
    if isinstance(value, bool):
        raise ValueError("a whole number, not true/false")
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not _is_integral(value):
            raise ValueError("a whole number")
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            pass
        try:
            as_float = float(text)
        except ValueError:
            raise ValueError("a whole number") from None
        if not _is_integral(as_float):
            raise ValueError("a whole number")
        return int(as_float)
    raise ValueError("a whole number")


def _to_float(value) -> float:
    if isinstance(value, bool):
        raise ValueError("a number, not true/false")
    try:
        x = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise ValueError("a number") from None
    if not math.isfinite(x):
        raise ValueError("a finite number (not NaN or infinity)")
    return x


def _bounds_text(lo, hi, lo_open: bool) -> str:
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_open else '>='} {lo}")
    if hi is not None:
        parts.append(f"<= {hi}")
    return " and ".join(parts)


def integer(lo: int | None = None, hi: int | None = None) -> Kind:
    bounds = _bounds_text(lo, hi, False)

    def convert(value):
        x = _to_int(value)
        if hi is not None and x > hi:
            raise AboveBoundError(f"a whole number {bounds}")
        if lo is not None and x < lo:
            raise ValueError(f"a whole number {bounds}")
        return x

    return Kind(f"whole number {bounds}".strip(), convert, hi)


def number(lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> Kind:
    bounds = _bounds_text(lo, hi, lo_open)

    def convert(value):
        x = _to_float(value)
        if lo is not None and (x <= lo if lo_open else x < lo):
            raise ValueError(f"a finite number {bounds}")
        if hi is not None and x > hi:
            raise ValueError(f"a finite number {bounds}")
        return x

    return Kind(f"finite number {bounds}".strip(), convert)


_TRUE = ("1", "true", "yes")
_FALSE = ("0", "false", "no")


def _to_bool(value) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError("true or false")


BOOLEAN = Kind("true / false", _to_bool)


def _to_text(value) -> str:
    if isinstance(value, (bool, int, float)) or not isinstance(value, str):
        raise ValueError("a string")
    return value


TEXT = Kind("string", _to_text)


def choice(*values: str, aliases: Mapping[str, str] | None = None) -> Kind:
    """One of ``values``; ``aliases`` map other spellings (lower-cased; true/false as such) to a value."""
    aliases = {str(k).lower(): v for k, v in (aliases or {}).items()}

    def convert(value):
        key = str(value).lower() if isinstance(value, bool) else value
        if isinstance(key, str):
            if key in values:
                return key
            if key.strip().lower() in aliases:
                return aliases[key.strip().lower()]
        raise ValueError(f"one of {', '.join(values)}")

    described = " / ".join(values) + (f" (also {', '.join(sorted(aliases))})" if aliases else "")
    return Kind(described, convert)


def integer_list(lo: int | None = None, hi: int | None = None, max_items: int | None = None) -> Kind:
    """A list of whole numbers (JSON list, or comma-separated), returned sorted without duplicates; ``hi`` bounds
    each entry and ``max_items`` their number."""
    element = integer(lo, hi)
    described = f"list of {f'at most {max_items} ' if max_items else ''}whole numbers {_bounds_text(lo, hi, False)}"
    allowed = "a " + described.strip()

    def convert(value):
        items: list
        if isinstance(value, str):
            items = [v for v in value.replace(";", ",").split(",") if v.strip()]
        elif isinstance(value, (list, tuple)):
            items = list(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            items = [value]
        else:
            raise ValueError(allowed)
        if not items:
            raise ValueError("a non-empty list of whole numbers")
        if max_items is not None and len(items) > max_items:
            raise AboveBoundError(f"{allowed} (it has {len(items)})")
        try:
            return sorted({element.convert(v) for v in items})
        except AboveBoundError:
            raise AboveBoundError(allowed) from None
        except ValueError:
            raise ValueError(allowed) from None

    return Kind(described.strip(), convert, hi)


def _to_text_or_list(value):
    if isinstance(value, str) and value:
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) and v for v in value):
        return list(value)
    raise ValueError("a string or a list of strings")


TEXT_OR_LIST = Kind("string or list of strings", _to_text_or_list)

# The file-system limits of Linux (NAME_MAX, PATH_MAX), checked here so that an absurd value is an error naming
# the key rather than an OSError "File name too long" from wherever it is first opened.
NAME_MAX_BYTES = 255
PATH_MAX_BYTES = 4096
_LOCATION_RULE = (
    f"without NUL characters, each '/'-separated part at most {NAME_MAX_BYTES} bytes and the whole at most "
    f"{PATH_MAX_BYTES} bytes in UTF-8"
)


def _is_location(value) -> bool:
    if not isinstance(value, str) or not value or "\x00" in value:
        return False
    encoded = value.encode("utf-8", errors="surrogatepass")
    return len(encoded) <= PATH_MAX_BYTES and all(len(part) <= NAME_MAX_BYTES for part in encoded.split(b"/"))


def _to_location(value) -> str:
    if not _is_location(value):
        raise ValueError(f"a non-empty path, folder or hub name {_LOCATION_RULE}")
    return value


def _to_location_or_list(value):
    if _is_location(value):
        return value
    if isinstance(value, (list, tuple)) and value and all(_is_location(v) for v in value):
        return list(value)
    raise ValueError(f"a non-empty path, folder or URL, or a non-empty list of them, {_LOCATION_RULE}")


LOCATION = Kind("path, folder or hub name", _to_location)
LOCATION_OR_LIST = Kind("path, folder or URL, or list of them", _to_location_or_list)


def _to_mapping(value) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError('a JSON object such as {"0": "70GiB", "cpu": "100GiB"}') from None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ValueError('a JSON object such as {"0": "70GiB", "cpu": "100GiB"}')
    return dict(value)


MAPPING = Kind("JSON object", _to_mapping)


# ------------------------------------------------------------------ declarations


@dataclass(frozen=True)
class Setting:
    """One setting. ``optional``: None (or "none") is allowed and means "use the default behaviour"
    described in ``doc``. ``affects_numbers=False`` marks settings that only change speed, memory or
    where files go (recorded under ``runtime``, not compared between runs)."""

    name: str
    kind: Kind
    default: Any
    doc: str
    optional: bool = False
    affects_numbers: bool = True

    def parse(self, value, owner: str):
        if self.optional and (value is None or (isinstance(value, str) and value.strip().lower() in _NONE_WORDS)):
            return None
        if value is None:
            raise SettingsError(f"{owner}: setting {self.name!r} cannot be null; allowed: {self.kind.describe}")
        try:
            return self.kind.convert(value)
        except ValueError as err:
            allowed = str(err) + (" (or null)" if self.optional else "")
            shown = repr(value)
            if len(shown) > 200:  # a 5000-character value would bury the message
                shown = f"{shown[:120]}... ({len(shown)} characters)"
            if isinstance(err, AboveBoundError):
                raise SettingsError(
                    f"{owner}: setting {self.name!r} = {shown} is above its upper bound; it must be {allowed}. The "
                    "bound lies far beyond any real run and stops a mistyped value before any work: give "
                    f"{self.name} a value within it (a larger run is several runs)."
                ) from None
            raise SettingsError(
                f"{owner}: setting {self.name!r} = {shown} is not allowed; it must be {allowed}"
            ) from None


class Settings(dict):
    """Parsed settings (a dict), plus which keys the user gave explicitly and where each value came from
    (``sources``: ``GIVEN``, ``preset NAME`` or ``DEFAULT``; a task that sizes a setting says so there)."""

    explicit: frozenset = frozenset()
    sources: dict

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sources = {}


# Where a setting's value came from (``Settings.sources``)
GIVEN = "given"
DEFAULT = "default"
# The declared setting that picks a declaration's preset (``Declaration.presets``)
PRESET = "preset"


def preset_source(name: str) -> str:
    return f"preset {name}"


# Every declaration registers here, so the unknown-key check knows the settings of all our tasks.
DECLARATIONS: dict[str, Declaration] = {}
# Keys that lm-eval puts into the metadata, by source, declared once (lm-eval's own; the hf backend's arguments).
EXTERNAL_KEYS: dict[str, frozenset] = {"lm-eval": LM_EVAL_METADATA_KEYS}
# The --model_args keys of the evaluation running in this context (lm-eval merges them into every task's metadata).
_MODEL_ARGS_GIVEN: contextvars.ContextVar[frozenset] = contextvars.ContextVar("model_args_given", default=frozenset())


def add_external_keys(source: str, keys: Iterable[str]) -> None:
    """Accept ``keys`` as known metadata keys wherever they come from (``source``: a name for them)."""
    EXTERNAL_KEYS[source] = frozenset(str(k) for k in keys)


@contextlib.contextmanager
def model_args_given(keys: Iterable[str]):
    """Accept the ``--model_args`` keys of the evaluation running inside this block as known metadata keys."""
    token = _MODEL_ARGS_GIVEN.set(frozenset(str(k) for k in keys))
    try:
        yield
    finally:
        _MODEL_ARGS_GIVEN.reset(token)


def known_setting_names() -> set[str]:
    return {name for d in DECLARATIONS.values() if d.metadata_keys for name in d.names()}


def _edit_distance(a: str, b: str) -> int:
    """Insertions, deletions, substitutions and swaps of two neighbours (optimal string alignment)."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


def refuse_unused_keys(md: Mapping) -> None:
    """A run whose every task is of this suite: a metadata key none of them takes (and lm-eval does not put there)
    is an error, naming it and the way out; in a run with another suite's tasks it is left to them
    (``Declaration.check_unknown_keys``)."""
    unused = sorted(unknown_keys(md, known_setting_names() | set(MODEL_KEYS_READ)))
    if unused:
        raise SettingsError(
            f"metadata key(s) {', '.join(repr(k) for k in unused)}: no task of this run takes them (every task is "
            "of lm_eval_longctx, and none has such a setting: docs/running-on-your-model.md lists them). Remove "
            f"them, or list them in --metadata '{{\"{OTHER_TASKS_KEYS}\": [...]}}' if they are meant to be ignored."
        )


def unknown_keys(md: Mapping, known: set[str]) -> list[str]:
    """The keys of ``md`` that are not in ``known``, not put there by lm-eval or the model's arguments
    (``EXTERNAL_KEYS``) and not listed in ``other_tasks_keys`` (a list of keys, or one comma-separated string)."""
    other = md.get(OTHER_TASKS_KEYS) or []
    if isinstance(other, str):
        other = [k for k in other.split(",") if k.strip()]
    if not isinstance(other, (list, tuple)) or not all(isinstance(k, str) for k in other):
        raise SettingsError(f"{OTHER_TASKS_KEYS} must be a list of metadata keys, got {other!r}")
    known = known | {OTHER_TASKS_KEYS} | {k.strip() for k in other}
    for keys in EXTERNAL_KEYS.values():
        known |= keys
    known |= _MODEL_ARGS_GIVEN.get()
    return [str(k) for k in md if k not in known]


def misspelling_of(key: str, names: Iterable[str]) -> str | None:
    """The name ``key`` looks like a misspelling of, or None. A misspelling differs only in case and separators
    (``Trunc-Len``), or by at most 2 edits (1 for names of up to 5 characters: ``aplha``, ``trunc_lenn``,
    ``max_lenght``), or is very close as difflib sees it (ratio >= 0.85: ``trunc_length``). Other suites' keys stay
    clear of these rules: ``num_samples``, ``canonical_task``, ``seq_lengths``."""
    plain = key.strip().lower().replace("-", "_").replace(" ", "_")
    best: tuple[float, str] | None = None
    for name in names:
        distance = _edit_distance(plain, name)
        ratio = difflib.SequenceMatcher(None, plain, name).ratio()
        score = (distance - ratio, name)  # the closest one, when several qualify
        if (distance <= (1 if len(name) <= 5 else 2) or ratio >= 0.85) and (best is None or score < best):
            best = score
    return None if best is None else best[1]


@dataclass
class Declaration:
    """The settings of one task (``metadata_keys=True``: read from the harness metadata) or tool."""

    owner: str
    settings: list[Setting]
    metadata_keys: bool = True
    # preset name -> the values it gives settings the user did not give (the ``preset`` setting picks one)
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    by_name: dict[str, Setting] = field(init=False)

    def __post_init__(self):
        self.by_name = {}
        for s in self.settings:
            if s.name in self.by_name:
                raise ValueError(f"{self.owner}: setting {s.name!r} declared twice")
            self.by_name[s.name] = s
        for name, values in self.presets.items():
            unknown = sorted(set(values) - set(self.by_name) - {PRESET})
            if PRESET not in self.by_name or unknown:
                raise ValueError(f"{self.owner}: preset {name!r} names undeclared settings {unknown or [PRESET]}")
            self.by_name[PRESET].parse(name, self.owner)  # a preset the `preset` setting allows
            for key, value in values.items():  # a preset's values pass the checks a given value passes
                self.by_name[key].parse(value, f"{self.owner} preset {name}")
        DECLARATIONS[self.owner] = self

    def names(self) -> list[str]:
        return list(self.by_name)

    def defaults(self) -> dict:
        return {s.name: s.default for s in self.settings}

    def parse(self, metadata: Mapping | None, check_unknown: bool = True) -> Settings:
        md = dict(metadata or {})
        if check_unknown:
            self.check_unknown_keys(md)
        out = Settings()
        preset_setting = self.by_name.get(PRESET)
        preset = {}
        if preset_setting is not None:
            chosen = preset_setting.parse(md[PRESET], self.owner) if PRESET in md else preset_setting.default
            preset = dict(self.presets.get(chosen, {}))
        for s in self.settings:
            if s.name in md:
                out[s.name], out.sources[s.name] = s.parse(md[s.name], self.owner), GIVEN
            elif s.name in preset:
                out[s.name] = s.parse(preset[s.name], self.owner)
                out.sources[s.name] = preset_source(out[PRESET])
            else:
                out[s.name], out.sources[s.name] = s.default, DEFAULT
        out.explicit = frozenset(k for k in md if k in self.by_name)
        return out

    def check_unknown_keys(self, md: Mapping) -> None:
        """Refuse a key that looks like a misspelling of one we know; leave any other unknown key to the other tasks
        of the run (stock tasks ignore keys they do not know, and ours must not stop a mixed run), saying so once."""
        declared = known_setting_names() | set(self.by_name)
        unknown = unknown_keys(md, declared)
        targets = sorted(declared | {OTHER_TASKS_KEYS, *MODEL_KEYS_READ})
        for key in unknown:
            meant = misspelling_of(key, targets)
            if meant is not None:
                raise SettingsError(
                    f"{self.owner}: unknown setting {key!r} in the task metadata (--metadata, the YAML or "
                    "--model_args; in Python, the metadata given to TaskManager or simple_evaluate). "
                    f"Did you mean {meant!r}? Known settings of this task: {', '.join(self.names())}. "
                    f"If the key is meant for a task of another suite in the same run, list it in --metadata "
                    f'\'{{"{OTHER_TASKS_KEYS}": ["{key}"]}}\'.'
                )
        ignored = sorted(unknown)
        # one line per evaluation and set of keys, not one per task of the run
        if ignored and errors.first_time(("metadata keys left to other tasks", tuple(ignored))):
            log.warning(
                "lm_eval_longctx: metadata key(s) %s: not a setting of any lm_eval_longctx task, so left to the other "
                "tasks of the run (list them in %s to silence this line)",
                ", ".join(ignored),
                OTHER_TASKS_KEYS,
            )

    def record(self, values: Mapping) -> dict:
        """The settings as used: those that change numbers at the top level, the others under ``runtime``."""
        rec = {s.name: values[s.name] for s in self.settings if s.affects_numbers and s.name in values}
        rec["runtime"] = {s.name: values[s.name] for s in self.settings if not s.affects_numbers and s.name in values}
        return rec

    def markdown_table(self) -> str:
        """The docs' table: a row per setting, with a column per preset (its value where it gives one)."""
        presets = list(self.presets)
        head = ["setting", "allowed", "default", *(f"preset `{p}`" for p in presets), "meaning"]
        rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        for s in self.settings:
            allowed = s.kind.describe + (", or null" if s.optional else "")
            default = "null" if s.default is None else json.dumps(s.default)
            by_preset = [
                f"`{json.dumps(self.presets[p][s.name])}`" if s.name in self.presets[p] else "" for p in presets
            ]
            meaning = s.doc + ("" if s.affects_numbers else " (speed, memory or files only)")
            cells = [f"`{s.name}`", allowed, f"`{default}`", *by_preset, meaning.replace("|", "/")]
            rows.append("| " + " | ".join(cells) + " |")
        return "\n".join(rows)


def add_arguments(parser, declaration: Declaration, names: Iterable[str], defaults: Mapping | None = None) -> None:
    """Command-line options ``--trunc-len`` etc. for the named settings, parsed and checked by the declaration
    (the scripts take their settings from the same place as the tasks)."""
    import argparse

    defaults = dict(defaults or {})
    for name in names:
        setting = declaration.by_name[name]

        def convert(value, _s=setting):
            try:
                return _s.parse(value, declaration.owner)
            except SettingsError as err:
                raise argparse.ArgumentTypeError(str(err)) from None

        default = defaults.get(name, setting.default)
        flag = "--" + name.replace("_", "-")
        if setting.kind is BOOLEAN and not default:
            parser.add_argument(flag, dest=name, action="store_true", help=setting.doc)
        else:
            parser.add_argument(
                flag,
                dest=name,
                type=convert,
                default=default,
                help=f"{setting.doc} ({setting.kind.describe}; default: {default})",
            )
