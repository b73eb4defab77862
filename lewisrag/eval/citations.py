"""A rule-based citation checker: string matching only, deterministic, free, fast.

Each sentence goes through five checks, in this order, and gets the status of the first that fails:

1. MISSING_CITATION  the sentence cites nothing ([n]).
2. BAD_ID            a cited id is not one of this answer's retrieved contexts (or has no text).
3. QUOTE_NOT_FOUND   a quoted string (「...」 or 『...』, citations inside it removed) is not in
                     any one cited document, compared after NFKC, case folding and removing all
                     whitespace and format characters (zero-width spaces); the stops that end it
                     (「用户名或密码错误。」) are typography, not part of what must be found, and so is
                     Markdown inside it (「`is invalid`」, 「**用户名或密码错误**」). Only these
                     quotes claim to be verbatim (the specification's QUOTE = 「([^」]+)」): “...” and
                     "..." report speech or name a term in other words as often, so they are
                     ordinary text, whose numbers and Latin words the next check reads.
4. TOKEN_NOT_FOUND   a number or a Latin word of the sentence (citations removed) is in none of
                     the cited documents (English function words such as "the" and clitics such
                     as the possessive 's and n't are not checked: "doesn't" is "does", "won't"
                     "will"; accented letters belong to their word); numbers are compared whole
                     and by value ("3.5" is not "5.3"; "1,000" is "1000"; "5.00" is "5"; "01" is "1":
                     "2024-01-05" backs "1 月 5 日"; "-12" is not "12"; the Chinese "，" separates:
                     "401，403" is 401 and 403, `list_commas`), in digits or in Chinese numerals and with
                     their magnitude ("三十分钟" is 30 minutes, "一九九九年" 1999, "3000 万" and "三千万"
                     30,000,000): the lexical judge's reading of numbers (`lewisrag.eval.numbers`), so
                     that the two agree on what a number is.
5. UNVERIFIABLE      the sentence has no quote, no number and no Latin word: nothing a rule can test.
Otherwise PASS.

The first three mean exactly what they say, so they can gate every commit (`HARD_GATE_STATUSES`).
The last ones only approximate "the cited documents support this sentence": a cited document that
shares the numbers of the sentence but talks about something else passes (missed), and a correct
paraphrase that adds a word such as "HTTP" fails (false block). Semantic support needs a judge.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from lewisrag.eval.numbers import NUMBER_RE, number_value, scaled_numbers, zh_numbers
from lewisrag.eval.statements import (
    VERBATIM_QUOTE_RES,
    Statement,
    citation_ids,
    quotes_in,
    sentence_spans,
    strip_citations,
    sub_citations,
    to_statement,
)
from lewisrag.scoring.markers import CITATION_RE

PASS = "PASS"
MISSING_CITATION = "MISSING_CITATION"
BAD_ID = "BAD_ID"
QUOTE_NOT_FOUND = "QUOTE_NOT_FOUND"
TOKEN_NOT_FOUND = "TOKEN_NOT_FOUND"
UNVERIFIABLE = "UNVERIFIABLE"
STATUSES = (PASS, MISSING_CITATION, BAD_ID, QUOTE_NOT_FOUND, TOKEN_NOT_FOUND, UNVERIFIABLE)
HARD_GATE_STATUSES = (MISSING_CITATION, BAD_ID, QUOTE_NOT_FOUND)  # must be 0 on every commit

_WHITESPACE_RE = re.compile(r"\s+")
# A number is whole: "5.3" is one token (its digits alone would let "3.5" pass against it), thousands
# separators go ("1,000" is "1000"), and "1,2,3" stays three numbers. Chinese never groups digits with
# its comma "，", which NFKC makes ",": it is read as "、" first (`list_commas`), so "401，403" is two numbers.
# A Latin word keeps its accented letters ("são" was "s" and "o") and its apostrophe; an English
# clitic after it ('s, 'll, n't, ...) is dropped, as "Tesla's" says no more than "Tesla" checks, and so
# is a negation's whole n't: "doesn't" was the word "doesn", in no document that says "does not".
_LATIN = "a-z\u00df-\u00f6\u00f8-\u00ff\u0100-\u024f\u1e00-\u1eff"  # after case folding: ASCII, Latin-1, Extended A/B, Additional
_TOKEN_RE = re.compile(rf"[{_LATIN}]+(?:['\u2019][{_LATIN}]+)*|{NUMBER_RE}")
_CLITIC_RE = re.compile(r"n['\u2019]t$|['\u2019](?:s|d|ll|re|ve|m)$")
# the stems n't leaves of the negations that change their verb: "won't" is "will not", not "wo"
_NEGATED_STEMS = {"won't": "will", "can't": "can", "shan't": "shall"}
# Words that carry no checkable fact; without this list every English paraphrase would fail.
_FUNCTION_WORDS = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been being it its "
    "this that these those there their they them he she his her we our you your i not no so than then "
    "when which who what where how do does did has have had can could will would should may might must "
    "also only into onto over under after before about".split()
)


_QUOTE_END = ".,;:!?。，、；：！？…"  # after NFKC: a full-width ． or ！ is already ASCII
# Markdown a quote is formatted with, which the reader never sees: a code span's backticks, and paired
# emphasis markers (** __ * _), an underscore only outside a word as in CommonMark ("user_name" keeps its _)
_BACKTICKS_RE = re.compile(r"`+")
_EMPHASIS_RE = re.compile(r"(\*\*|\*)(?=\S)(.+?)(?<=\S)\1|(?<![^\W_])(__|_)(?=\S)(.+?)(?<=\S)\3(?![^\W_])")
# "，" but inside a number written in full-width forms ("１，０００", whose NFKC is "1,000", as scoring.qa reads it)
_LIST_COMMA_RE = re.compile(r"(?<![０-９])，|，(?![０-９])")


@dataclass(frozen=True)
class Check:
    status: str  # one of STATUSES
    detail: str = ""  # why, for a human: the bad ids, the missing quote or tokens


def _visible(text: str) -> str:
    """NFKC and case folding, without format characters (zero-width spaces and joiners, a BOM):
    invisible, so a copy that holds one still says the same thing."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf") if not text.isascii() else text


def fold(text: str) -> str:
    """NFKC, case folding, no whitespace and no format characters: the form quotes are compared in.

    >>> fold("Is  Invalid\\u3000ＡＢＣ\\u200b")
    'isinvalidabc'
    """
    return _WHITESPACE_RE.sub("", _visible(text))


def unmarked(quote: str) -> str:
    """`quote` as Markdown shows it: no backticks, no paired emphasis markers.

    >>> unmarked("「`is invalid`」 or **用户名或密码错误** for *user_name*, __id__")
    '「is invalid」 or 用户名或密码错误 for user_name, id'
    """
    text = _BACKTICKS_RE.sub("", quote)
    while True:  # nested emphasis (***a***, **_a_**) loses one pair a round
        out = _EMPHASIS_RE.sub(lambda m: m.group(2) if m.group(2) is not None else m.group(4), text)
        if out == text:
            return out
        text = out


def checkable_tokens(text: str) -> frozenset[str]:
    """Numbers and Latin words after NFKC and case folding, function words left out; Chinese numerals
    that count something are numbers (`zh_numbers`), and a number with its magnitude is one.

    >>> sorted(checkable_tokens("服务端用 HTTP ４２２ 拒绝 the login"))
    ['422', 'http', 'login']
    >>> sorted(checkable_tokens("年利率 5.3%，共 1,000 人，第 1,2 条。"))
    ['1', '1000', '2', '5.3']
    >>> sorted(checkable_tokens("未登录返回 401，无权限返回 403，即 401，403")), sorted(checkable_tokens("共１，０００人"))
    (['401', '403'], ['1000'])
    >>> sorted(checkable_tokens("Tesla's plant in São Paulo doesn't close; O'Neill’s won’t needn't"))
    ['close', 'need', "o'neill", 'paulo', 'plant', 'são', 'tesla']
    >>> sorted(checkable_tokens("发布于 2024-01-05 09:05，共 007 人，0.50 元"))
    ['0.5', '1', '2024', '5', '7', '9']
    >>> sorted(checkable_tokens("锁定三十分钟，成立于一九九九年，人口约 3000 万，第一，-12 度与 10-12 页"))
    ['-12', '10', '12', '1999', '30', '30000000']
    """
    return frozenset(t for t in _tokens(text, quantities=True) if t not in _FUNCTION_WORDS)


# A leading clause that only says where the answer comes from ("According to the documents [1], ...", "Based
# on the provided context, ...", "根据提供的上下文，...", "据资料显示，...") claims nothing about the world: its
# words are in no context: they cost a correct sentence its support (the lexical judge) and were "not in the
# cited documents" (the checker). It is set aside when it names the sources and nothing else: the retrieved
# text by one of the words below with determiners and participles ("the provided", "上述", "检索到的"), or only
# by citations, with their markers or without them ("According to [1] and [2], ..." reaches the judge as
# "According to and, ..."). "According to the CEO, ..." names someone, whose support is still needed.
_CITED = rf"(?:\s*{CITATION_RE.pattern}|\s+(?:and|or)\b|\s*[,、&和与及或])*"
_ATTRIBUTION_RE = re.compile(
    r"\s*(?:(?:according\s+to|based\s+on)"
    r"(?:\s+(?:the|these|those|provided|given|retrieved|cited|supplied|available|above|following))*"
    r"(?:\s+(?:context|contexts|documents?|passages?|sources?|texts?|materials?|references?|evidence|information"
    r"|search\s+results))?(?:\s+(?:provided|given|retrieved|cited|supplied|above))?"
    r"|(?:根据|依据|按照|基于|据)(?:上述|上面|以上|以下|下面|下列|现有|相关|这些|该|此|各|参考|所?(?:提供|给出|给定|检索到|引用|列出)的)*"
    r"(?:上下文|文档|资料|段落|材料|文献|文段|来源)?(?:中|里|内|的?内容|的?信息|所述|所示|显示|可知|来看)*)"
    rf"{_CITED}\s*[,，、:：]",
    re.IGNORECASE)


def unattributed(statement: str) -> str:
    """`statement` without a leading clause that only names the sources it comes from (`_ATTRIBUTION_RE`),
    where something follows it: a sentence that is only "根据文档：" stays as it is.

    >>> unattributed("According to the provided documents [1], login returns 422.")
    'login returns 422.'
    >>> unattributed("根据提供的上下文，登录失败返回 422。"), unattributed("According to, it is 5.")
    ('登录失败返回 422。', 'it is 5.')
    >>> unattributed("According to the CEO, revenue rose."), unattributed("根据规定，退款需七天。")
    ('According to the CEO, revenue rose.', '根据规定，退款需七天。')
    """
    m = _ATTRIBUTION_RE.match(statement)
    rest = statement[m.end():].lstrip() if m else ""
    return rest if any(c.isalnum() for c in rest) else statement


def list_commas(text: str) -> str:
    """`text` with the Chinese comma "，" written as "、", which NFKC keeps: NFKC's "," would make "401，403"
    the number 401403, and Chinese never groups digits with "，". A number written wholly in full-width
    forms keeps it ("１，０００" is NFKC's "1,000"). For reading numbers only: quotes are compared as written.

    >>> list_commas("返回 401，403，共１，０００次")
    '返回 401、403、共１，０００次'
    """
    return _LIST_COMMA_RE.sub("、", text) if "，" in text else text


def _tokens(text: str, quantities: bool) -> list[str]:
    """The numbers and Latin words of `text` as compared (`_token`). A number with its magnitude (3000万,
    3 million) is one token of its value, its digits and magnitude word none of their own; a Chinese
    numeral is a number (`zh_numbers`: with `quantities`, only one that counts something, as the lexical
    judge reads a statement's; without, every one, as it reads what a premise holds)."""
    text = _visible(list_commas(text))
    scaled = scaled_numbers(text)
    tokens = [_token(m[0]) for m in _TOKEN_RE.finditer(text) if not any(a <= m.start() < b for a, b, _ in scaled)]
    return tokens + [v for *_, v in zh_numbers(text, quantities)] + [v for *_, v in scaled]


def _token(t: str) -> str:
    """A token as compared: a number by its value (`number_value`), a word without its clitic."""
    if not t[0].isalpha():
        return number_value(t)
    return _NEGATED_STEMS.get(t.replace("\u2019", "'")) or _CLITIC_RE.sub("", t)


@lru_cache(maxsize=4096)
def _prepared(doc: str) -> tuple[str, frozenset[str]]:
    """A document's folded text and its tokens; cached because one answer cites the same few
    documents many times and a benchmark reuses them across answers."""
    return fold(doc), frozenset(_tokens(doc, quantities=False))


def check_sentence(sentence: str, docs: dict[str, str], context_ids: set[str]) -> Check:
    """Check one written sentence (with its [n] markers) against the documents it cites.

    `docs` maps a citation id to the document text; `context_ids` are the ids retrieved for this
    answer. Citations must be among them.

    >>> docs = {"1": "登录失败返回 422，errors 为 {\\"email or password\\": [\\"is invalid\\"]}。",
    ...         "3": "注册时用户名已被占用返回 422。"}
    >>> check_sentence("登录失败时返回 422 [1]。", docs, {"1", "3"}).status
    'PASS'
    >>> check_sentence("服务端用 HTTP 422 拒绝登录 [1]。", docs, {"1", "3"})
    Check(status='TOKEN_NOT_FOUND', detail='not in the cited documents: http')
    >>> check_sentence("密码错误时返回「422」[3]。", docs, {"1", "3"}).status  # passes, though [3] is off
    'PASS'
    >>> check_sentence("错误列表显示在表单上方 [1]。", docs, {"1"}).status
    'UNVERIFIABLE'
    """
    if isinstance(context_ids, (str, bytes)):  # `in` on a string matched "1" inside "12": a citation of 1 passed
        raise TypeError(f"context_ids: expected a set of id strings, got the string {context_ids!r}")
    ids = citation_ids(sentence)
    if not ids:
        return Check(MISSING_CITATION, "no [n] citation")
    bad = [i for i in ids if i not in context_ids or i not in docs]
    if bad:
        return Check(BAD_ID, "cited ids not among the retrieved contexts: " + ", ".join(f"[{i}]" for i in bad))
    for i in ids:
        if not isinstance(docs[i], str):
            raise TypeError(f"docs[{i!r}]: expected the document's text as a string, got {type(docs[i]).__name__}")
    empty = [i for i in ids if not docs[i].strip()]
    if empty:  # a context with no text backs nothing (the module's rule 1)
        return Check(BAD_ID, "cited contexts have no text: " + ", ".join(f"[{i}]" for i in empty))
    cited = [_prepared(docs[i]) for i in ids]
    quotes = quotes_in(strip_citations(sentence), VERBATIM_QUOTE_RES)  # 「is invalid [1]」 quotes "is invalid"
    for quote in quotes:
        # a quoted sentence's own stop is typography, not a word: “用户名或密码错误。” quotes 用户名或密码错误;
        # so is its Markdown (「`is invalid`」), unless the document is Markdown too and holds it as written
        forms = {q for q in (fold(quote).rstrip(_QUOTE_END), fold(unmarked(quote)).rstrip(_QUOTE_END)) if q}
        if forms and not any(q in folded for q in forms for folded, _ in cited):
            return Check(QUOTE_NOT_FOUND, f"quote not in the cited documents: {quote!r}")
    # `arr[0]` keeps its 0; a leading "According to [1], ..." names where the sentence comes from, no claim
    tokens = checkable_tokens(sub_citations(unattributed(sentence), " "))
    missing = sorted(tokens.difference(*(toks for _, toks in cited)))
    if missing:
        return Check(TOKEN_NOT_FOUND, "not in the cited documents: " + ", ".join(missing))
    if not quotes and not tokens:
        return Check(UNVERIFIABLE, "no quote, number or Latin word to check")
    return Check(PASS, "")


def check_answer(answer: str, docs: dict[str, str], context_ids: set[str]) -> list[tuple[Statement, Check]]:
    """Split an answer into sentences and check each.

    >>> [c.status for _, c in check_answer("返回 422 [1]。前端显示红色列表。", {"1": "返回 422"}, {"1"})]
    ['PASS', 'MISSING_CITATION']
    """
    if isinstance(context_ids, (str, bytes)):
        raise TypeError(f"context_ids: expected a set of id strings, got the string {context_ids!r}")
    context_ids = set(context_ids)
    return [(to_statement(span), check_sentence(span, docs, context_ids)) for span in sentence_spans(answer)]


def status_counts(checks: Iterable[Check | tuple[Statement, Check]]) -> dict[str, int]:
    """How many checks have each status; all six statuses are present, zeros included.

    Accepts Checks or the (Statement, Check) pairs of `check_answer`.

    >>> status_counts([Check(PASS), Check(BAD_ID, "[9]"), Check(PASS)])
    {'PASS': 2, 'MISSING_CITATION': 0, 'BAD_ID': 1, 'QUOTE_NOT_FOUND': 0, 'TOKEN_NOT_FOUND': 0, 'UNVERIFIABLE': 0}
    """
    counts = Counter(c[1].status if isinstance(c, tuple) else c.status for c in checks)
    unknown = set(counts) - set(STATUSES)
    if unknown:
        raise ValueError(f"unknown citation statuses {sorted(unknown)}; expected one of {STATUSES}")
    return {s: counts.get(s, 0) for s in STATUSES}
