"""Word lists for LongEval "lines" line names (adjective-noun pairs such as ``tender-clause``).

Where the words come from:

* ``REFERENCE_ADJECTIVES`` (910) and ``NOUNS`` (5270): every adjective and noun of the line names in
  LongChat's ``200_lines.jsonl`` (DachengLi1/LongChat at 4b5faa5, ``longeval/evaluation/lines/testcases/``,
  Apache-2.0; LongChat drew them with the ``wonderwords`` package, MIT). A name is split into its
  adjective and noun at its first hyphen, except after the hyphenated adjectives in
  ``HYPHENATED_ADJECTIVES`` ("wide-eyed-offering" is wide-eyed + offering, "furtive-mother-in-law" is
  furtive + mother-in-law). With that split no prompt of the file uses an adjective or a noun twice,
  which is how LongChat draws them (without replacement within a prompt). 50 prompts of 200 draws
  see (almost surely) every adjective LongChat's list had: about 910, fewer than the 1350 lines of
  the largest configuration. (LongChat's newer 700-1350 files therefore pair two words of any part of
  speech, e.g. "fiddle-brainy"; this project keeps adjective-noun names at every size.)
* ``EXTRA_ADJECTIVES`` (1224): common English adjectives written for this project (not in the
  reference list), so that a 1350-line prompt still gets distinct adjectives.

The lists are the files of ``data/words/`` (one word a line, shipped with the package). They keep the
reference's spelling, including entries with spaces or capitals ("ad hoc", "creme brulee", "TV"). Words never
contain ``:``, ``?``, ``<``, ``>``, digits or newlines (the prompt format relies on that; ``longeval_data`` checks
it). Changing a list changes every generated prompt: bump ``WORDLIST_VERSION``.
"""

from __future__ import annotations

from importlib import resources

WORDLIST_VERSION = 1

HYPHENATED_ADJECTIVES = ("blue-eyed", "flipped-out", "high-pitched", "old-fashioned", "teeny-tiny", "wide-eyed", "x-rated")


def _words(name: str) -> tuple[str, ...]:
    # one word a line, in the list's order
    text = resources.files("lm_eval_longctx.data").joinpath(f"words/{name}.txt").read_text(encoding="utf-8")
    return tuple(text.splitlines())


REFERENCE_ADJECTIVES = _words("reference_adjectives")
EXTRA_ADJECTIVES = _words("extra_adjectives")
NOUNS = _words("nouns")

# sorted, no duplicates: the order is part of what a seed reproduces
ADJECTIVES = tuple(sorted(set(REFERENCE_ADJECTIVES) | set(EXTRA_ADJECTIVES)))
