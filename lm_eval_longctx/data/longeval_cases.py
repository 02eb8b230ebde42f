"""LongEval "lines" test cases (LongChat, ``longeval/evaluation/lines``): generate them, or load LongChat's files.

A test case is a record of ``N`` lines, each holding a number, and a question about one of them:

* prompt = ``HEADER`` + ``N`` lines ``line {name}: REGISTER_CONTENT is <{value}>\\n`` + ``QUESTION``,
  with names adjective-noun pairs ("tender-clause") and values uniform in 1..50000;
* the answer is the value of the asked line; the reference response (LongPPL paper, section 2.1)
  is ``The <REGISTER_CONTENT> in line {name} is <{value}>.``, whose answer tokens are those of the number.

LongChat's files have the fields ``random_idx`` = [name, 0-based position], ``expected_number``,
``num_lines``, ``correct_line`` and ``prompt`` (the 200-680 files also ``token_size`` and
``prompt_length``, counts of other tokenizers, which are not used). Their prompts for 200-680 lines
end with a space after "I need the number." (an older generator); 700-1350 do not.

Generation (``generate_case``) reproduces that format exactly and is deterministic: case ``i`` of the
``N``-line configuration depends only on (seed, N, i), through numpy's legacy ``RandomState``, whose
streams numpy keeps unchanged across versions. Within a prompt no adjective and no noun is used twice,
as LongChat draws them (see ``longeval_words``); past the size of a word list, distinct (adjective,
noun) pairs are drawn instead, so names stay unique. Whether the prompt ends with a space follows
the reference files by default (``N <= 680``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .. import errors, output_dirs
from ..settings import SettingsError
from . import documents, longeval_words

log = logging.getLogger("lm_eval_longctx")

HEADER = (
    "Below is a record of lines I want you to remember. Each line begins with 'line <line index>' and "
    "contains a '<REGISTER_CONTENT>' at the end of the line as a numerical value. For each line index, "
    "memorize its corresponding <REGISTER_CONTENT>. At the end of the record, I will ask you to retrieve "
    "the corresponding <REGISTER_CONTENT> of a certain line index. Now the record start:\n\n"
)
LINE_TEMPLATE = "line {name}: REGISTER_CONTENT is <{value}>\n"
QUESTION_TEMPLATE = (
    "\nNow the record is over. Tell me what is the <REGISTER_CONTENT> in line {name}? I need the number."
)
RESPONSE_TEMPLATE = "The <REGISTER_CONTENT> in line {name} is <{value}>."

# LongChat's configurations (1350 lines is about 32k Llama tokens) and cases per configuration
DEFAULT_NUM_LINES = (200, 300, 400, 500, 600, 680, 700, 800, 900, 1000, 1100, 1200, 1350)
DEFAULT_NUM_CASES = 50
MIN_VALUE, MAX_VALUE = 1, 50000
# The reference files for up to 680 lines end with "I need the number. " (trailing space).
TRAILING_SPACE_MAX_LINES = 680
GENERATOR_VERSION = 1

LINE_RE = re.compile(r"line (?P<name>[^\n]+?): REGISTER_CONTENT is <(?P<value>\d+)>")
QUESTION_RE = re.compile(
    r"\nNow the record is over\. Tell me what is the <REGISTER_CONTENT> in line (?P<name>[^\n]+)\? "
    r"I need the number\.(?P<trailing>\s*)"
)
_FORBIDDEN_IN_NAMES = re.compile(r"[:?<>\n\d]")


@dataclass(frozen=True)
class TestCase:
    """One LongEval "lines" case; ``to_record()`` gives LongChat's JSON fields."""

    num_lines: int
    case_index: int  # position within its configuration (file order for loaded files)
    prompt: str
    name: str  # the asked line's name (random_idx[0])
    position: int  # its 0-based position among the lines (random_idx[1])
    expected_number: int
    correct_line: str
    source: str  # "generated" or the file it came from

    __test__ = False  # not a pytest test class

    def to_record(self) -> dict:
        return {
            "random_idx": [self.name, self.position],
            "expected_number": self.expected_number,
            "num_lines": self.num_lines,
            "correct_line": self.correct_line,
            "prompt": self.prompt,
        }

    def response(self) -> tuple[str, int, int]:
        """(reference response, start, end): the answer number is ``response[start:end]``."""
        return reference_response(self.name, self.expected_number)


def reference_response(name: str, value: int) -> tuple[str, int, int]:
    """``The <REGISTER_CONTENT> in line {name} is <{value}>.`` and the character span of the number
    (the digits only, without the angle brackets)."""
    response = RESPONSE_TEMPLATE.format(name=name, value=value)
    start = response.rindex(f"<{value}>") + 1
    return response, start, start + len(str(value))


# ------------------------------------------------------------------ generation


def uses_trailing_space(num_lines: int, trailing_space: bool | str | None = "reference") -> bool:
    """Whether a generated prompt ends with a space: ``"reference"`` (or None) follows LongChat's files."""
    if trailing_space is None or (isinstance(trailing_space, str) and trailing_space.lower() == "reference"):
        return num_lines <= TRAILING_SPACE_MAX_LINES
    if isinstance(trailing_space, str):
        lowered = trailing_space.lower()
        if lowered in ("1", "true", "yes"):
            return True
        if lowered in ("0", "false", "no"):
            return False
        raise ValueError(f"trailing_space must be 'reference', true or false, got {trailing_space!r}")
    return bool(trailing_space)


def _rng(seed: int, num_lines: int, case_index: int) -> np.random.RandomState:
    # RandomState streams are frozen by numpy's compatibility policy: the cases never change.
    return np.random.RandomState([int(seed), int(num_lines), int(case_index)])


def line_names(
    rng: np.random.RandomState,
    n: int,
    adjectives: Sequence[str] = longeval_words.ADJECTIVES,
    nouns: Sequence[str] = longeval_words.NOUNS,
) -> list[str]:
    """``n`` distinct "adjective-noun" names.

    Up to the size of both lists, adjectives and nouns are each drawn without replacement and paired
    in draw order (LongChat's scheme: no word repeats within a prompt). Beyond that, distinct
    (adjective, noun) pairs are drawn uniformly, so words repeat but names do not.
    """
    if n < 1:
        raise ValueError(f"a record needs at least one line, got {n}")
    if n <= min(len(adjectives), len(nouns)):
        adj = rng.permutation(len(adjectives))[:n]
        noun = rng.permutation(len(nouns))[:n]
        pairs: Iterable[tuple[int, int]] = zip(adj.tolist(), noun.tolist())
    else:
        total = len(adjectives) * len(nouns)
        if n > total:
            raise ValueError(f"only {total} distinct adjective-noun names exist, {n} lines asked for")
        flat: list[int] = []
        seen: set[int] = set()
        while len(flat) < n:  # rejection sampling: n is far below the number of pairs
            for k in rng.randint(0, total, size=n - len(flat)).tolist():
                if k not in seen:
                    seen.add(k)
                    flat.append(k)
        pairs = ((k // len(nouns), k % len(nouns)) for k in flat)
    names = [f"{adjectives[a]}-{nouns[b]}" for a, b in pairs]
    # hyphenated words could in principle make two pairs spell one name ("a-b" + "c" vs "a" + "b-c")
    if len(set(names)) != n:
        raise ValueError("the word lists produce colliding names; remove the ambiguous words")
    return names


def build_prompt(names: Sequence[str], values: Sequence[int], asked: int, trailing_space: bool) -> str:
    if len(names) != len(values):
        raise ValueError(f"{len(names)} names for {len(values)} values")
    # the f-string is LINE_TEMPLATE (kept literal here: format() dominated the cost of building the defaults)
    lines = "".join([f"line {nm}: REGISTER_CONTENT is <{int(v)}>\n" for nm, v in zip(names, values)])
    return HEADER + lines + QUESTION_TEMPLATE.format(name=names[asked]) + (" " if trailing_space else "")


def generate_case(
    num_lines: int, case_index: int, seed: int = 0, trailing_space: bool | str | None = "reference"
) -> TestCase:
    """Case ``case_index`` of the ``num_lines`` configuration (a function of (seed, num_lines, case_index) only)."""
    rng = _rng(seed, num_lines, case_index)
    names = line_names(rng, num_lines)
    values = rng.randint(MIN_VALUE, MAX_VALUE + 1, size=num_lines).tolist()
    asked = int(rng.randint(0, num_lines))
    prompt = build_prompt(names, values, asked, uses_trailing_space(num_lines, trailing_space))
    return TestCase(
        num_lines=int(num_lines),
        case_index=int(case_index),
        prompt=prompt,
        name=names[asked],
        position=asked,
        expected_number=int(values[asked]),
        correct_line=LINE_TEMPLATE.format(name=names[asked], value=int(values[asked])),
        source="generated",
    )


def generate_cases(
    num_lines: Iterable[int] = DEFAULT_NUM_LINES,
    num_cases: int = DEFAULT_NUM_CASES,
    seed: int = 0,
    trailing_space: bool | str | None = "reference",
) -> list[TestCase]:
    """Every configuration's cases, configuration-major (see ``interleave`` for the harness order)."""
    return [generate_case(n, i, seed, trailing_space) for n in num_lines for i in range(num_cases)]


def write_jsonl(cases: Iterable[TestCase], path: str | Path) -> None:
    """Write cases in LongChat's file format (one JSON record per line)."""
    with output_dirs.atomic_file(path, "w") as f:
        for case in cases:
            f.write(json.dumps(case.to_record()) + "\n")


# ------------------------------------------------------------------ parsing and loading


@dataclass(frozen=True)
class ParsedPrompt:
    header: str
    names: list[str]
    values: list[int]
    asked_name: str
    trailing: str  # whatever follows "I need the number." (" " in the older files)


class TestCaseFormatError(ValueError):
    __test__ = False


def parse_prompt(prompt: str) -> ParsedPrompt:
    """Split a prompt into header, lines and question; a prompt of another shape is an error."""
    start = prompt.find("\n\nline ")
    q = QUESTION_RE.search(prompt)
    if start < 0 or q is None or q.end() != len(prompt):
        raise TestCaseFormatError("not a LongEval lines prompt (header, 'line ...' records, question)")
    header = prompt[: start + 2]
    body = prompt[start + 2 : q.start()]
    if not body.endswith("\n"):
        raise TestCaseFormatError("the last record line does not end with a newline")
    names, values = [], []
    for k, line in enumerate(body[:-1].split("\n")):
        m = LINE_RE.fullmatch(line)
        if m is None:
            raise TestCaseFormatError(
                f"record line {k} does not match 'line NAME: REGISTER_CONTENT is <N>': {line[:80]!r}"
            )
        names.append(m.group("name"))
        values.append(int(m.group("value")))
    return ParsedPrompt(header, names, values, q.group("name"), q.group("trailing"))


def case_from_record(record: dict, case_index: int, source: str) -> TestCase:
    """Check a LongChat record against its own prompt and turn it into a TestCase.

    Every field must agree with the prompt (the asked line's position, name and number, the line
    count, the correct line): a disagreement would score against a wrong answer, so it is an error.
    """
    where = f"{source}, case {case_index}"
    try:
        name, position = record["random_idx"]
        expected = int(record["expected_number"])
        num_lines = int(record["num_lines"])
        prompt = record["prompt"]
    except (KeyError, TypeError, ValueError) as err:
        raise TestCaseFormatError(
            f"{where}: missing or malformed field ({err!r}); expected LongChat's "
            "random_idx, expected_number, num_lines, correct_line, prompt"
        ) from err
    try:
        parsed = parse_prompt(prompt)
    except TestCaseFormatError as err:
        raise TestCaseFormatError(f"{where}: {err}") from err
    position = int(position)
    problems = []
    if len(parsed.names) != num_lines:
        problems.append(f"num_lines is {num_lines} but the prompt has {len(parsed.names)} lines")
    if not 0 <= position < len(parsed.names):
        problems.append(f"random_idx position {position} is outside the record")
    else:
        if parsed.names[position] != name:
            problems.append(f"line {position} is {parsed.names[position]!r}, not {name!r}")
        if parsed.values[position] != expected:
            problems.append(f"line {position} holds {parsed.values[position]}, not expected_number {expected}")
    if parsed.asked_name != name:
        problems.append(f"the question asks for {parsed.asked_name!r}, not {name!r}")
    if parsed.names.count(name) != 1:
        problems.append(f"{name!r} names {parsed.names.count(name)} lines")
    correct_line = record.get("correct_line", LINE_TEMPLATE.format(name=name, value=expected))
    if correct_line != LINE_TEMPLATE.format(name=name, value=expected):
        problems.append(f"correct_line {correct_line!r} disagrees with the name and number")
    if problems:
        raise TestCaseFormatError(f"{where}: " + "; ".join(problems))
    if parsed.header != HEADER:
        log.warning("%s: the prompt's header differs from LongChat's; scored as it is", where)
    return TestCase(num_lines, case_index, prompt, name, position, expected, correct_line, source)


def _is_url(location: str) -> bool:
    return "://" in location


def read_text(location: str) -> str:
    """A local file, or a URL the user gave (http(s) with urllib, other schemes through fsspec)."""
    try:
        return _read_text(location)
    except UnicodeDecodeError as err:
        raise TestCaseFormatError(
            f"{location}: not UTF-8 text ({err.reason} at byte {err.start}); expected "
            "LongChat's {N}_lines.jsonl, one JSON record per line"
        ) from None
    except OSError as err:  # includes urllib's URLError: no network, 404, a missing file
        raise errors.ResourceUnavailableError(
            f"LongEval test cases {location} cannot be read: {errors.first_line(err)}. Ways out: a local copy of "
            'LongChat\'s files (--metadata \'{"testcases": "DIR"}\'), or generated cases (leave testcases '
            "unset)"
        ) from None


def _read_text(location: str) -> str:
    if not _is_url(location):
        path = Path(location).expanduser()
        if path.exists():  # a folder or a FIFO is refused without being opened (a missing file: the OSError below)
            documents.check_regular_file(path, "testcases", "LongChat's {N}_lines.jsonl files or a folder of them")
        return path.read_text(encoding="utf-8")
    if location.startswith(("http://", "https://")):
        import urllib.request

        with urllib.request.urlopen(location, timeout=60) as resp:  # noqa: S310 (the user's own URL)
            return resp.read().decode("utf-8")
    import fsspec

    with fsspec.open(location, "rt", encoding="utf-8") as f:
        return f.read()


def load_testcases_file(location: str, max_cases: int | None = None) -> list[TestCase]:
    """LongChat's ``{N}_lines.jsonl`` (path or URL): the first ``max_cases`` records, checked."""
    cases: list[TestCase] = []
    # JSON lines are separated by "\n" only: a JSON string may hold U+2028, U+2029 or U+0085 unescaped
    for k, line in enumerate(read_text(location).split("\n")):
        line = line.removesuffix("\r")
        if not line.strip(" \t\r"):
            continue
        if max_cases is not None and len(cases) >= max_cases:
            break
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise TestCaseFormatError(f"{location}, line {k + 1}: not JSON ({err})") from err
        cases.append(case_from_record(record, len(cases), str(location)))
    if not cases:
        raise TestCaseFormatError(f"{location}: no test cases")
    return cases


def testcase_locations(testcases: str | Sequence[str], num_lines: Iterable[int]) -> list[str]:
    """Files to read: a list of files/URLs as given, one ``.jsonl`` file/URL, or a folder/URL prefix
    holding LongChat's ``{N}_lines.jsonl`` for every configured N."""
    if not isinstance(testcases, str):
        return [str(x) for x in testcases]
    if testcases.endswith(".jsonl"):
        return [testcases]
    base = testcases.rstrip("/")
    return [f"{base}/{n}_lines.jsonl" for n in num_lines]


def load_testcases(
    testcases: str | Sequence[str], num_lines: Iterable[int] = DEFAULT_NUM_LINES, max_cases: int | None = None
) -> list[TestCase]:
    """Load LongChat files (see ``testcase_locations``), at most ``max_cases`` per file."""
    out = []
    for location in testcase_locations(testcases, num_lines):
        out.extend(load_testcases_file(location, max_cases))
    return out


# ------------------------------------------------------------------ order and provenance


def interleave(cases: Sequence[TestCase]) -> list[TestCase]:
    """Case-major order (case 0 of every configuration, then case 1, ...), configurations ascending,
    so ``--limit k`` takes the first cases of every configuration."""
    return sorted(cases, key=lambda c: (c.case_index, c.num_lines))


def provenance(cases: Sequence[TestCase]) -> dict:
    """What identifies the data: cases per configuration and a SHA-256 over the prompts."""
    h = hashlib.sha256()
    for c in cases:
        h.update(c.prompt.encode("utf-8"))
        h.update(b"\0")
    counts: dict[int, int] = {}
    for c in cases:
        counts[c.num_lines] = counts.get(c.num_lines, 0) + 1
    return {"cases_per_num_lines": {str(k): counts[k] for k in sorted(counts)}, "prompts_sha256": h.hexdigest()}


def wordlist_fingerprint() -> str:
    h = hashlib.sha256()
    for words in (longeval_words.ADJECTIVES, longeval_words.NOUNS):
        h.update("\n".join(words).encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def check_word_lists() -> None:
    """Words must not break the prompt format (colons, question marks, angle brackets, digits, newlines)."""
    bad = [w for w in (*longeval_words.ADJECTIVES, *longeval_words.NOUNS) if not w or _FORBIDDEN_IN_NAMES.search(w)]
    if bad:
        raise ValueError(f"word lists hold words that break the prompt format: {bad[:5]}")


# ------------------------------------------------------------------ answers


_INTEGER = re.compile(r"\d+")


def last_integer(text: str) -> int | None:
    """The last integer in a model's output, as LongChat parses it (``re.findall(r"\\d+")[-1]``;
    Unicode digits count, signs do not); None when there is none."""
    found = _INTEGER.findall(text)
    return int(found[-1]) if found else None


def to_doc(case: TestCase, doc_id: int) -> dict:
    """The harness document of a case (plain JSON types)."""
    response, start, end = case.response()
    d = asdict(case)
    d.update(doc_id=doc_id, response=response, answer_start=start, answer_end=end)
    return d


# ------------------------------------------------------------------ the cases of a run, and their sizes

# Two sizes whose prompts fit a line's tokens (prompt tokens = a + b N)
FIT_NUM_LINES = (16, 64)


def num_lines_for_lengths(
    lengths: list[int], prompt_tokens: Callable[[int], int], room: int, drop_short: bool = False
) -> tuple[list[int], list[str]]:
    """The number of lines N whose prompt is about each length L with ``room`` tokens left for the answer: prompt
    tokens grow as a + b N (``prompt_tokens(N)``: the most tokens of a prompt of N lines, measured at two sizes), N =
    floor((L - room - a) / b), lowered while ``prompt_tokens(N)`` is over L - room. A length with no room for a line
    is an error, or (``drop_short``: lengths not given by the user) left out with a note."""
    lo, hi = FIT_NUM_LINES
    tokens_lo, tokens_hi = prompt_tokens(lo), prompt_tokens(hi)
    per_line = max((tokens_hi - tokens_lo) / (hi - lo), 1e-9)
    base = tokens_lo - per_line * lo
    out, notes = set(), []
    for length in lengths:
        budget = length - room
        n = int((budget - base) // per_line)
        while n >= 1 and (over := prompt_tokens(n) - budget) > 0:
            n -= max(1, math.ceil(over / per_line))
        if n >= 1:
            out.add(n)
            continue
        why = (
            f"a length of {length} tokens holds no line: the prompt's header and question take about {round(base)} "
            f"tokens and {room} are left for the answer"
        )
        if not drop_short:
            raise SettingsError(f"longeval_lines: {why}; raise max_seq_lengths or give num_lines")
        notes.append(f"{why}: left out")
    if not out:
        raise SettingsError(f"longeval_lines: no length of {list(lengths)} holds a line; {notes[-1]}")
    return sorted(out), notes


@functools.lru_cache(maxsize=4096)
def generated_case(num_lines: int, case_index: int, seed: int, trailing_space) -> TestCase:
    # both tasks of the group, and the checks of the evaluated cases, read the same cases: each generated once
    return generate_case(num_lines, case_index, seed, trailing_space)


def case_reader(
    testcases: str | Sequence[str] | None, num_lines: Sequence[int], num_cases: int, seed: int, trailing_space
) -> tuple[int, Callable[[int], TestCase]]:
    """The number of cases and case ``i`` in the harness order (``interleave``: case 0 of every
    configuration, then case 1, ...). Generated cases are generated when read, so that ``--limit k`` generates k;
    LongChat's files (``testcases``) are read whole."""
    if testcases:
        cases = interleave(load_testcases(testcases, num_lines, max_cases=num_cases))
        return len(cases), cases.__getitem__
    check_word_lists()
    configurations = sorted(num_lines)

    def case(i: int) -> TestCase:
        case_index, k = divmod(i, len(configurations))
        return generated_case(configurations[k], case_index, seed, trailing_space)

    return num_cases * len(configurations), case
