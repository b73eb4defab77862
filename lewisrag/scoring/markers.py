"""Citation markers: the [n] an answer cites a passage with, read one way for every reader.

The evaluator (`lewisrag.eval.statements`, its splitter and citation checker) and the stitched
system (`lewisrag.rag_model.stitched.cited_ids`, which reports what an answer cites) read markers
with these rules, so the ids a stitched answer is said to cite are the ids its citations are
checked against:

- a number in brackets: [1], the full-width ［１］ or 【1】, a Markdown footnote [^1], several ids
  in one marker ([1, 2], [1，2], [1; 2], [1、2]), a range ([1-3], [1–3], ［１～３］ cite 1, 2 and 3),
  also written as two markers joined by the range's dash or tilde ([1]-[3], 【1】～【3】: one marker,
  the same range; it was read as citing 1 and 3, its "-" left in the sentence);
  ids are read as numbers ([01] and ［１］ cite "1"), ASCII or full-width digits only ([٢] is no
  citation); a range that runs backwards or spans more than MAX_RANGE ids cites its two ends;
- nothing inside Markdown code (`arr[0]`, a ``` or ~~~ fenced block) is a citation;
- a line that defines a Markdown footnote ("[^1]: REQ-AUTH-03 登录需求文档", outside code) names a
  source and states nothing: `blank_footnote_definitions` hides it from the sentence splitters.

Here, below `eval` and `rag_model` both (tests/test_package.py: the model never imports the evaluator).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

# [1], [1][2] (two matches), [1, 2], [1，2], [1; 2], [1、2], ［１］, 【1】, [^1], ranges [1-3], [1–3], [1～3]
# and [1]-[3] (group 2: the range's end, after a dash on the same line);
# ASCII or full-width digits only (Python's \d would take any script's digits, which no id is written in)
_NUMBER = r"[0-9０-９]+"
_RANGE_SEP = r"[-‐‑–—~～－]"  # hyphens, en and em dashes, tildes (ASCII and full-width)
_ID = rf"{_NUMBER}(?:\s*{_RANGE_SEP}\s*{_NUMBER})?"
_RANGE_END = rf"(?:[^\S\n]*{_RANGE_SEP}[^\S\n]*[\[［【]\^?\s*({_NUMBER})\s*[\]］】])?"  # [1]-[3]: the "-[3]"
CITATION_RE = re.compile(rf"[\[［【]\^?\s*({_ID}(?:\s*[,，;；、]\s*{_ID})*)\s*[\]］】]{_RANGE_END}")  # [^1]: a Markdown footnote
_RANGE_SEP_RE = re.compile(rf"\s*{_RANGE_SEP}\s*")
MAX_RANGE = 20  # a range of more ids than this ([1990-2020]) cites its two ends, not every number between
_ID_SEP_RE = re.compile(r"\s*[,，;；、]\s*")
# Markdown code: a run of backticks, then anything, then a run of the same length (CommonMark's code
# span; a ``` fence is one too, across its lines). An unclosed run opens nothing.
_CODE_RE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
# a ~~~ fence (CommonMark): three tildes or more opening a line, closed by a line of at least as many
_TILDE_FENCE_RE = re.compile(r"^[^\S\n]*(~{3,})[^\n]*\n.*?^[^\S\n]*\1~*[^\S\n]*$", re.M | re.S)
# a Markdown footnote's definition: "[^1]: source" opening a line (full-width brackets and colon too)
_FOOTNOTE_DEFINITION_RE = re.compile(rf"^[^\S\n]*[\[［【]\^{_NUMBER}[\]］】][^\S\n]*[:：][^\n]*", re.M)


def citation_ids(text: str) -> tuple[str, ...]:
    """The ids cited with [n] markers, in order, each once.

    >>> citation_ids("返回 422 [1][3]，见 [1, 2]。"), citation_ids("见【01】［２］")
    (('1', '3', '2'), ('1', '2'))
    >>> citation_ids("Both [2-4]; 见［５～６］ and [1990–2020].")
    ('2', '3', '4', '5', '6', '1990', '2020')
    >>> citation_ids("返回 422 [1]-[3]，见【5】～【6】。")
    ('1', '2', '3', '5', '6')
    """
    seen: dict[str, None] = {}
    for m in citation_markers(text):
        for i in _marker_ids(m):
            seen.setdefault(i, None)
    return tuple(seen)

def _code_spans(text: str) -> list[tuple[int, int]]:
    spans = [m.span(1)[:1] + m.span()[1:] for m in _TILDE_FENCE_RE.finditer(text)] if "~~~" in text else []
    if "`" in text:
        spans.extend(m.span() for m in _CODE_RE.finditer(text) if not _in_code(m.start(), spans))
    return spans

def _fence_starts(text: str, code: list[tuple[int, int]]) -> frozenset[int]:
    """Where the fenced code blocks of `text` open: code spans across lines opened by a run of three
    backticks or tildes or more."""
    return frozenset(a for a, b in code if text.startswith(("```", "~~~"), a) and "\n" in text[a:b])

def _in_code(i: int, code: list[tuple[int, int]]) -> bool:
    return any(a <= i < b for a, b in code)

def citation_markers(text: str, pattern: re.Pattern = CITATION_RE) -> list[re.Match]:
    """The citation markers of `text` (matches of `pattern`) outside Markdown code.

    >>> [m.group() for m in citation_markers("Use `arr[0]` or ```\\nx[1]\\n``` [2]")]
    ['[2]']
    """
    code = _code_spans(text)
    return [m for m in pattern.finditer(text) if not _in_code(m.start(), code)]

def sub_citations(text: str, repl: str | Callable[[re.Match], str], pattern: re.Pattern = CITATION_RE) -> str:
    """`pattern.sub(repl, text)` for the matches outside Markdown code: the citation markers by default, a
    footnote definition or heading line too (`blank_footnote_definitions`, `statements.blank_headings`)."""
    code = _code_spans(text)
    if not code:
        return pattern.sub(repl, text)
    return pattern.sub(lambda m: m.group() if _in_code(m.start(), code) else (repl if isinstance(repl, str) else repl(m)),
                       text)


def blank_footnote_definitions(text: str) -> str:
    """`text` with each Markdown footnote definition line outside code ("[^1]: REQ-AUTH-03 登录需求文档")
    written as spaces, so that no sentence is made of it and every other character keeps its index.
    A reference list's "[1] ..." line is left as it is.

    >>> blank_footnote_definitions("返回 422[^1]。\\n[^1]: REQ-AUTH-03\\n[2] BUG-7").splitlines()
    ['返回 422[^1]。', '                 ', '[2] BUG-7']
    """
    if "^" not in text:
        return text
    return sub_citations(text, lambda m: " " * len(m.group()), _FOOTNOTE_DEFINITION_RE)


# a last line naming the answer's sources ("Source: [2]", "**Sources:** [1], [2]", "来源：【1】"): its markers are
# the answer's citations, its label no statement (`source_line`)
_SOURCE_LINE_RE = re.compile(r"\n[^\S\n]*[*_]*(?:sources?|references?|citations?|来源|出处)[*_]*[^\S\n]*[:：]([^\n]*)\s*\Z",
                             re.IGNORECASE)
# what a source line may hold besides its markers: separators, emphasis, "and", "passage"
_SOURCE_FILLER_RE = re.compile(r"(?:\band\b|\bpassages?\b|和|[\s,;，；、.。*_&])*", re.IGNORECASE)


def source_line(text: str) -> tuple[int, list[tuple[int, int]]] | None:
    """Where the last line of `text` begins (after its newline) and where its citation markers are, if it
    names the answer's sources and holds nothing but them ("Source: [1]", "来源：【1】"); else None. The
    prompt-stitching system's reply parser writes its markers onto the answer's last line
    (`experiments.stitched_llm.parse_reply`) and the evaluator's splitter blanks its label
    (`eval.statements.blank_headings`): read as a sentence, "Source:" was the one citing, the claim uncited.

    >>> source_line("Ana Kel leads it.\\nSources: [1], [2]"), source_line("Ana Kel.\\nSource: the manual [1]")
    ((18, [(27, 30), (32, 35)]), None)
    """
    if (m := _SOURCE_LINE_RE.search(text)) is None:
        return None
    markers = citation_markers(m.group(1))
    if not markers or not _SOURCE_FILLER_RE.fullmatch(sub_citations(m.group(1), " ")):
        return None
    return m.start() + 1, [(m.start(1) + k.start(), m.start(1) + k.end()) for k in markers]


def _marker_ids(m: re.Match) -> list[str]:
    """The ids of one citation marker, read as numbers: [01] and ［１］ cite "1", [2-4] and [2]-[4] cite 2, 3 and 4.

    A range that runs backwards ([3-1]) or spans more than MAX_RANGE ids cites its two ends.
    """
    ids: list[str] = []
    body = m.group(1) if m.group(2) is None else f"{m.group(1)}-{m.group(2)}"  # [1]-[3] reads as [1-3]
    for item in _ID_SEP_RE.split(body):
        # as strings without leading zeros, not int(): Python refuses to read a number of 4,300 digits
        ends = [unicodedata.normalize("NFKC", n).lstrip("0") or "0" for n in _RANGE_SEP_RE.split(item)]
        lo, hi = (int(e) if len(e) < 10 else None for e in (ends[0], ends[-1]))
        span = range(lo, hi + 1) if lo is not None and hi is not None and lo <= hi < lo + MAX_RANGE else ends
        ids.extend(str(i) for i in span)
    return ids
