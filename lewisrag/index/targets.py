"""Answer strings for regex-answered training questions (CuratedTrec's), as the RAG paper made them.

CuratedTrec answers each question with regular expressions, and a generator trains on a string. The
RAG paper (appendix, CuratedTrec) retrieved each training question's top 1,000 documents and took
"the answer that most frequently matches the regex pattern" as its target; where none matched, a
heuristic string spelled out of the pattern. `target_for` is that rule over passage texts, `spell`
the spelling (`spell_best` the best of a question's patterns), `make_targets` the pass over a file's
questions that `lewisrag index targets` runs.

Matching is DPR's retrieval check (`scoring.qa.regex_search`): NFD texts, `compile_answer_pattern`'s
flags (case ignored), here `finditer` to collect every match and not only whether there is one.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence

from lewisrag.data.records import QAExample
from lewisrag.scoring.qa import compile_answer_pattern, is_regex_answered, normalize_answer, regex_match

try:  # Python's own regex parser: re._parser from 3.11, sre_parse before
    from re import _parser as sre_parse
except ImportError:  # pragma: no cover
    import sre_parse  # type: ignore[no-redef]

re_error = sre_parse.error
_C = sre_parse  # the opcodes (LITERAL, IN, ...) are importable from the parser module in every version
_REPEATS = {_C.MAX_REPEAT, _C.MIN_REPEAT, *([_C.POSSESSIVE_REPEAT] if hasattr(_C, "POSSESSIVE_REPEAT") else [])}
_SPELLED_CATEGORY = {_C.CATEGORY_DIGIT: "0", _C.CATEGORY_SPACE: " ", _C.CATEGORY_WORD: "a"}
BATCH = 32  # questions per search: 32 x 1,000 hits' texts stay a few tens of MB


def spell(pattern: str) -> str | None:
    """A string that `pattern` matches, spelled out of its parse: literals as written, the first
    branch of `a|b`, each repeat its least number of times (`?` and `*` none, `+` once, `{2,3}`
    twice), a character class its first member (a range its first character, `\\d` "0", `\\s` a
    space, `\\w` "a"), anchors and word boundaries dropped; the result stripped. None where it cannot
    be spelled (a backreference, a lookaround, a negated class or `.` that a repeat does not skip, or
    nothing left but spaces).

    >>> spell("Ozzie (Ozzy )?Osbourne"), spell("(C|c)hurchill"), spell(r"\\d+ years?"), spell(r"^Winston\\s+Churchill$")
    ('Ozzie Osbourne', 'Churchill', '0 year', 'Winston Churchill')
    >>> spell(r"(a)\\1"), spell("(?<=Sir )Winston")
    (None, None)
    """
    spelled = _spelling(pattern)
    return None if spelled is None else spelled[0]


def spell_best(patterns: Sequence[str]) -> str | None:
    """The best string spelled out of any of `patterns` (`spell`), None if none can be: one that needs
    no guess, else the fewest guesses, then the shortest; ties to the pattern listed first.

    A guess is a character the pattern does not write: `\\d` spelled "0", `\\w` "a", a range `[A-Z]`
    its first character. Spelling only the first pattern made "0 years" of `\\d+ years?` beside a
    second pattern `(about )?forty years`, which writes its answer out: a target the model is trained
    to say should be an answer as written, and a guessed digit or letter almost never is. Between
    spellings that guess, the shorter holds fewer characters that may be wrong. Without guesses the
    file's order decides (its first pattern is its main answer: "Ozzie Osbourne" before "Osbourne").
    A spelling is kept only if the scorer accepts it against its own pattern (`scoring.qa.regex_match`,
    what `train rag` scores its dev answers by): stripping can break one (`" Churchill"` spelled
    "Churchill" does not match from its start), and a target its own pattern refuses would be trained
    on to be scored wrong.

    >>> spell_best([r"\\d+ years?", "(about )?forty years"]), spell_best([r"[A-Z]\\d", r"\\d\\d\\d"])
    ('forty years', 'A0')
    >>> spell_best(["Ozzie (Ozzy )?Osbourne", "Osbourne"]), spell_best([" Churchill", "Winston"]), spell_best([r"(a)\\1"])
    ('Ozzie Osbourne', 'Winston', None)
    """
    best = None
    for i, pattern in enumerate(patterns):
        spelled = _spelling(pattern)
        if spelled is None or not regex_match(spelled[0], [pattern]):
            continue
        text, guesses = spelled
        key = (guesses, len(text) if guesses else 0, i)
        if best is None or key < best[0]:
            best = (key, text)
    return None if best is None else best[1]


def _spelling(pattern: str) -> tuple[str, int] | None:
    """`spell`'s string and how many characters of it were guessed (`spell_best`), or None."""
    try:
        spelled = _spell(sre_parse.parse(pattern))
    except re_error:  # the readers refuse a bad pattern first (qa_formats.check_pattern)
        return None
    if spelled is None or not spelled[0].strip():
        return None
    return spelled[0].strip(), spelled[1]


def _spell(items) -> tuple[str, int] | None:
    out, guesses = [], 0
    for op, arg in items:
        part = _spell_item(op, arg)
        if part is None:
            return None
        out.append(part[0])
        guesses += part[1]
    return "".join(out), guesses


def _spell_item(op, arg) -> tuple[str, int] | None:
    if op == _C.LITERAL:
        return chr(arg), 0
    if op == _C.AT:  # ^, $, \b, \A: they match no character
        return "", 0
    if op == _C.IN:
        return _spell_class(arg)
    if op in _REPEATS:
        low, _, sub = arg
        if low == 0:  # `.*`, `(?<=x)?`: what is repeated no times need not be spellable
            return "", 0
        one = _spell(sub)
        return None if one is None else (one[0] * low, one[1] * low)
    if op == _C.SUBPATTERN:
        return _spell(arg[-1])
    if op == _C.BRANCH:
        return _spell(arg[1][0])
    if getattr(_C, "ATOMIC_GROUP", None) == op:
        return _spell(arg)
    return None  # GROUPREF, GROUPREF_EXISTS, ASSERT, ASSERT_NOT, NOT_LITERAL, ANY: no one string to write


def _spell_class(members) -> tuple[str, int] | None:
    """A class's first member, and whether it is a guess: a literal (`[Ss]`, `(C|c)`) is written in the
    pattern, a range's first character or a category's stand-in is not (a space for `\\s` is the one
    space there is)."""
    op, arg = members[0]
    if op == _C.LITERAL:
        return chr(arg), 0
    if op == _C.RANGE:
        return chr(arg[0]), 1
    if op == _C.CATEGORY and arg in _SPELLED_CATEGORY:
        return _SPELLED_CATEGORY[arg], int(arg != _C.CATEGORY_SPACE)
    return None  # NEGATE ([^...]) and the negated categories (\D, \S, \W)


def matches_in(patterns: Sequence[str], text: str) -> list[str]:
    """Every non-empty match of each of `patterns` in `text`, pattern by pattern and each left to
    right, as DPR's regex check reads a passage (NFD, `compile_answer_pattern`), each match given back
    composed (NFC) and stripped of surrounding spaces.

    >>> matches_in(["(C|c)hurchill", "Winston"], "Winston Churchill met churchill's wife.")
    ['Churchill', 'churchill', 'Winston']
    """
    text = unicodedata.normalize("NFD", text)
    found = []
    for p in patterns:
        for m in compile_answer_pattern(p).finditer(text):
            s = unicodedata.normalize("NFC", m.group(0)).strip()
            if s:  # `(Ozzy )?` alone matches everywhere, and an empty string is no answer
                found.append(s)
    return found


def most_frequent_match(patterns: Sequence[str], texts: Sequence[str]) -> str | None:
    """The most frequent match of `patterns` over `texts` (passages in rank order), None if none.

    Matches are counted by `normalize_answer`: the patterns ignore case, so "CHURCHILL" and
    "Churchill" are one answer to them, and exact match (what the target is trained for) counts them
    as one too; split, a rarer answer could win over a frequent one written two ways. Of the winning
    answer the spelling seen most often is the target. Ties (between answers, then between
    spellings) go to the one found first: by rank, then pattern, then position in the passage.

    >>> most_frequent_match(["(C|c)hurchill", "Attlee"], ["Attlee.", "CHURCHILL", "Churchill", "Churchill or Attlee"])
    'Churchill'
    >>> most_frequent_match(["Attlee|Churchill"], ["Churchill and Attlee", "Attlee and Churchill"])  # 2 and 2
    'Churchill'
    """
    counts: dict[str, dict[str, int]] = {}  # normalized answer -> spelling -> count, in the order first found
    for text in texts:
        for s in matches_in(patterns, text):
            key = normalize_answer(s)
            if key:  # a match of articles or punctuation alone ("The") normalizes to nothing
                spellings = counts.setdefault(key, {})
                spellings[s] = spellings.get(s, 0) + 1
    if not counts:
        return None
    best = max(counts.values(), key=lambda sp: sum(sp.values()))  # max keeps the first of equals
    return max(best, key=best.get)


def target_for(patterns: Sequence[str], texts: Sequence[str]) -> tuple[str | None, str | None]:
    """`(target, source)` for a question answered by `patterns`, its retrieved passages' `texts` in
    rank order: the most frequent match in them ("retrieved"), else the best string spelled out of
    its patterns (`spell_best`: "pattern"), else `(None, None)`: the question gets no target.

    >>> target_for(["(C|c)hurchill"], ["Churchill spoke.", "no one"]), target_for(["Ozzie (Ozzy )?Osbourne"], ["no one"])
    (('Churchill', 'retrieved'), ('Ozzie Osbourne', 'pattern'))
    """
    if not patterns:
        raise ValueError("a regex-answered question needs at least one pattern")
    found = most_frequent_match(patterns, texts)
    if found is not None:
        return found, "retrieved"
    spelled = spell_best(patterns)
    return (spelled, "pattern") if spelled is not None else (None, None)


def target_record(ex: QAExample, target: str, source: str) -> dict:
    """`ex`'s record in lewisrag's QA format with `target` as its one answer. `answer_match` "text" is
    written although it is the default: a file named like DPR's CuratedTrec files (`curatedtrec-*`)
    reads as regex-answered unless its records say otherwise (`qa_formats.is_curatedtrec`)."""
    rec = ex.to_dict()
    return {**rec, "answers": [target], "answer_match": "text", "target_source": source}


def make_targets(examples: Sequence[QAExample], search: Callable[[list[str], int], list], n_docs: int,
                 progress: Callable[[str, int, int], None] = lambda stage, done, total: None,
                 scored_only: bool = False) -> tuple[list[dict], dict]:
    """The target records of `examples`' regex-answered questions and a summary of how each got its
    target; `search(questions, k)` gives each question's ranked hits (objects with `.text` and
    `.score`), such as `index.open_retriever(...).search`. With `scored_only` (BM25) a hit scoring 0
    or less is no retrieved passage: BM25 fills its top k with passages holding no word of the
    question, in the index's order, and a match in one of those once outvoted the passages that
    ranked (`fewer_hits` counts the questions left with fewer than `n_docs`). Examples with answer
    strings pass through as they are (`target_source` "given"); a question without a target is left
    out and counted, the first named."""
    records, summary = [], {"questions": len(examples), "given": 0, "retrieved": 0, "pattern": 0, "left_out": 0,
                            "first_left_out": None, "n_docs": n_docs, "fewer_hits": 0}
    todo = [ex for ex in examples if is_regex_answered(ex) and ex.answers]
    done: dict[str, tuple[str | None, str | None]] = {}
    for start in range(0, len(todo), BATCH):
        batch = todo[start:start + BATCH]
        for ex, hits in zip(batch, search([ex.question for ex in batch], n_docs)):
            ranked = [h for h in hits if h.score > 0] if scored_only else list(hits)
            summary["fewer_hits"] += len(ranked) < n_docs
            done[ex.id] = target_for(ex.answers, [h.text for h in ranked])
        progress("search", start + len(batch), len(todo))
    for ex in examples:
        if ex.id not in done:
            # answer_match written: in a file named curatedtrec-* it would read back as a pattern (target_record)
            records.append({**ex.to_dict(), "answer_match": ex.answer_match, "target_source": "given"})
            summary["given"] += 1
            continue
        target, source = done[ex.id]
        if target is None:
            summary["left_out"] += 1
            summary["first_left_out"] = summary["first_left_out"] or {"id": ex.id, "pattern": ex.answers[0]}
            continue
        records.append(target_record(ex, target, source))
        summary[source] += 1
    regex = len(todo)
    summary["matched_share"] = round(summary["retrieved"] / regex, 4) if regex else None
    return records, summary
