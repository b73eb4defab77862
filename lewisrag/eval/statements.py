"""Split an answer into statements: a deterministic sentence splitter for Chinese and English.

Every metric that counts statements depends on how an answer is cut: the same hallucinated answer
scores 33.3% faithfulness as 3 sentences, 16.7% as 6 atomic facts and 0% as one block. So the
splitter has a name and a version (`SPLITTER_NAME`, `SPLITTER_VERSION`) that go into every result,
and any change to the rules below must bump the version.

Rules of version "15":

- A citation is a number in brackets: [1], the full-width ［１］ or 【1】, a Markdown footnote [^1],
  several ids in one marker ([1, 2], [1，2], [1; 2], [1、2]), a range ([1-3], [1–3], ［１～３］ cite
  1, 2 and 3). Ids are read as numbers: [01] and ［１］ cite "1". A range that runs backwards or
  spans more than MAX_RANGE ids ([1990-2020]) cites its two ends.
- A line that defines a Markdown footnote ("[^1]: REQ-AUTH-03 登录需求文档", "［^1］：...", outside
  code) names a source: it is no sentence. A reference list's "[1] ..." line is still a sentence
  citing 1.
- A Markdown ATX heading line ("## Answer", "### 结论": up to three spaces, one to six #, then a space
  or the end of the line; outside code) titles what follows: it is no sentence, and its citations
  with it. "#hashtag", "####### seven" and a "# comment" inside a fenced block are text.
- A label line names what follows and states nothing (`_label_lines`): a line in strong emphasis alone
  ("**结论**", "**Answer:**"), a short lead-in ending in a colon ("Sources:", "答案如下：", "Here is the
  answer:"), a Markdown table's header row. When it holds no number and no full stop, is followed by
  something and leads into no fenced block, it is no sentence, and its citations with it, as a heading's
  (RAG-Token's implicit citations cite it as a line of its own): "Note: the API returns 422." is a
  sentence, and so is "**Ana Kel**" ending an answer. The "1." of a one-item list ("答案如下：\n1. 瓦尔...")
  is no sentence either (`_first_item_number`). A last line naming the sources and holding nothing but
  markers ("Source: [1]", "**Sources:** [1], [2]", "来源：【1】") is no sentence: its markers go with the
  sentence before it (`markers.source_line`), as the stitched system's reply parser reads them.
- Two markers joined by a range's dash or tilde ([1]-[3], 【1】～【3】) are one range, as [1-3].
- Nothing inside Markdown code (`arr[0]`, ``x[1]``, a ``` or ~~~ fenced block) is a citation, and
  no sentence ends inside it, not even at a newline (`os.exit(1). [2]` is code): an answer about
  code indexes arrays. A fenced block belongs to the sentence before it, across the stop or the
  newline that ends that sentence and any blank lines ("Install it [1]:\n```\npip install foo\n```"
  is one sentence, and a citation after the closing fence, on its line or the next, is that
  sentence's); one opening the text goes with the sentence after it.
- A sentence ends at 。！？｡ (always), at . ! ? ． when followed by whitespace, the end of the text, a
  CJK character or a citation, and at every newline. An ellipsis (… …… ⋯⋯, and "..." alike: NFKC
  makes "…" "...") mostly trails off inside a sentence, so it ends one only where a new one begins
  (`_ellipsis_ends_sentence`): at the end of the text or line, before a citation (the sentence's
  before it), right after a citation on its line (a cited sentence trailing off: in "返回 422
  [1]……然后 ..." and "It returns 422 [1]… then ..." what follows must cite on its own), or before a space and a
  capitalised word that is not all capitals ("Wait... What?", "It returns 422… Then ..."). So
  "香蕉……还有橙子", "犹豫了一下……最后", "JSON, XML… and YAML", "Wait... what?" and "JSON… XML support"
  are one sentence each; and never before 等, 之类 or 什么的 (香蕉……等水果) or after a comma ("A, B, …
  and Z").
- Nothing splits inside 「」 『』 “” or "..." quotes (a newline still does). “ and " are closed by
  either " or ” ('提示“用户名或密码错误"'); a " right after a digit is an inch mark, no quote (27"
  wide); a quote still open at the end of its line (a stray mark, '“...“') is no quote, and the line
  splits as if its marks were not there, so one stray mark cannot join a line's claims under one
  citation. A quote (those, or ’ and ') whose last character before the mark is a stop ends the
  sentence when the mark is followed by the end of the line, by citations (which belong to the
  sentence it ends), or by a space, unless a small letter, a comma or a dash comes next:
  '“用户名或密码错误。”[1]账户会被删除。' and 'The error is "Invalid credentials." [1] It is red [2].'
  are two sentences each; 'He said "Stop." and left', '"Stop!" he said' and 「错误。」列表 (a character
  right after the mark) are one.
- A dot between digits (3.5), inside a word (example.com) or after an abbreviation (e.g., i.e.,
  Dr., Mt., ca., initials: "J. Smith", "J.K. Rowling", "由J.K.罗琳创作"; "No." only before a number;
  "etc.", "a.m.", "p.m.", "Jan." (and the other months), "Ph.D.", "min." unless a capital letter or a
  CJK character follows, past any citations after the dot: "etc. [1] It", "at 5 p.m. The office") does
  not end a sentence. Any other word's dot does, even before a small letter: an answer written in small
  letters ("it returns 422. it locks") still has its sentences.
- Citations right after the full stop belong to the sentence before it, across any spaces but a
  newline (no-break and thin spaces too): "... 422。[1]" and "... 422. [1][2]" are one sentence
  each with citations ("1",) and ("1", "2"). But when that sentence cites already and text follows
  them on the line, they open the next one: "[1] 指出 A。[1] 还指出 B。" is two sentences citing [1].
- Quotes are read with the citations inside them removed: 「is invalid [1]」 quotes "is invalid". A
  quote mark inside Markdown code opens no quote (`print("a")` quotes nothing), as in the splitting.
  `Statement.quotes` holds every style; the citation checker holds only 「」 and 『』 to the letter
  (`VERBATIM_QUOTE_RES`): “” and "..." report speech or name a term in other words as often.
- A piece holding nothing but citations and punctuation (a "[3]" on a line of its own) gives its
  citations to the sentence before it (to the one after it at the start of the text); a text with
  no letters or digits outside citations has no sentences.
- In a numbered list (two lines or more opening with "1. ", "2) ", "3、", "4）", "（5）" or "(6)", a
  number written as one character, "①", "⑴", "⒈", or a Chinese numeral, "一、", "（二）", after any
  indentation; "1." and "2)" also right before a CJK character, "1.登录失败", as Chinese lists are
  written) the marker's dot ends nothing: an item is one sentence, not "1." and its text. A
  list marker opening a sentence (those in such a list; "- ", "* ", "• " anywhere) is not part of
  it: its number is no claim to check. A lone "42. It is ..." keeps its number.

Version "14" read a label line ("**结论**", "答案如下：", "Sources:", a table's header row) and the "1." of a
one-item list as sentences: over a cited answer each was an uncited, unsupported statement (a
MISSING_CITATION the gate fails on, faithfulness 0.5), and "**结论**" over "知识库中没有相关信息。" made the
answer no refusal.
Version "13" read a Markdown heading line as a sentence: "## Answer" over a cited answer was an uncited
statement (a MISSING_CITATION the gate fails on) and an unsupported one (faithfulness 0.5).
Version "12" read "1." and "2)" as list markers only before a space, so a Chinese list written without
one ("1.登录失败返回 422 [1]\n2.锁定 15 分钟 [2]", "一.", "１.") split each item into an uncited "1." and
its text (MISSING_CITATION, faithfulness 0.5), and "1)登录失败" kept its number, a token the cited context
had to hold (TOKEN_NOT_FOUND).
Version "11" never closed a quote opened with “ and closed with ", or opened at an inch mark (27" wide),
so the rest of its line was one sentence, its uncited claims sharing the quote's citation; and ended a
sentence at "a.m.", "Jan.", "Ph.D.", "min.", "Mt.", "Gen." and the like before a small letter or a
number, leaving "at 9 a.m." an uncited sentence (a MISSING_CITATION the gate fails on).
Version "10" read a footnote definition line as a sentence (checked and judged as a statement:
faithfulness and citation recall 0.5 for an answer whose one claim was supported), and "[1]-[3]" as
citing 1 and 3, its "-" left in the sentence.
Version "9" read the "[" of a citation after a dot as what followed it, so "It reads XML, etc. [1] It
caches them [2]." was one sentence citing both (RAG-Token's implicit citations went before the dot of
"etc." for it); and took a citation ending a line for one right before an ellipsis opening the next,
so in "in the U.S. [1]\n… 然后他离开了 [2]" the "…" was a sentence of its own, dropped.
Version "8" ended a sentence at initials ("由J.K.罗琳创作[1]。" left "由J.K." an uncited sentence: a
MISSING_CITATION the gate fails on); read only digits as a list's numbers, so "①" (which NFKC makes
"1") was a number the cited context had to hold and "二、" stayed in its item; and the citation
checker held “” and "..." quotes to the letter too, so '系统会提示“密码不对”[2]。' paraphrasing the
message was a QUOTE_NOT_FOUND, a hard-gate status.
Version "8" as first written (the same day, unreleased) ended a sentence at every ellipsis before a
space or a CJK character, so "香蕉……还有橙子[1]" and "JSON, XML… and YAML [1]" left an uncited first
piece; "..." before a space ended one in every version before ("wait... what" was two).
Version "7" ended nothing at a closing quote, so an uncited claim after '“用户名或密码错误。”[1]'
shared the quote's citation; read "…" and "……" as no sentence end (NFKC makes "…" the "..." that
was one); read a ~~~ fence as text; and made a ``` fenced block opening a line a sentence of its
own, uncited (a MISSING_CITATION the gate fails on), and read a quote mark inside code as a quote.
Version "6" never ended a sentence at "etc.",
so "It reads JSON, XML, etc. It caches them [1]." was one sentence, its first claim sharing the second's citation. Version "5" gave a citation after a
full stop to the sentence before it even when that one cited already, so in "[1] 指出 A。[1] 还指出
B。" the second sentence cited nothing (a MISSING_CITATION the gate fails on), and read only "1. ", "2) " and "3、" as list markers ("（1）" stayed a number the cited
context had to hold). (The evaluator's other rules that changed with version "6", so that scores of the
two are not compared: a sentence beside a refusal phrase is excused from citing only when it states
nothing, `refusals.declines_only`; the citation checker compares numbers whole.) Version "4" read `arr[0]` as a citation of context 0 (a BAD_ID the gate fails on) and ended
sentences inside code. Version "3" did not read ranges: "[1-3]", which language models write for three passages, left its
sentence uncited (a bracketed scale such as "[1-5]" now cites contexts 1 to 5, which the citation
checker then finds unsupported or missing: the rarer error in a RAG answer). Version "2" read "1." opening a line as a sentence of its own, so an answer written as a numbered
list had half its statements uncited. Version "1" also read only ASCII [n] markers (with any
script's digits, as text: [01] was not [1]), did not end a sentence at ｡ or ．, joined a citation
to the sentence before it across spaces, tabs and U+3000 only, never ended a sentence at "no.",
and kept citations inside quotes.

`Statement.text` is the sentence with its citation markers removed (what a judge should read);
`Statement.citations` holds the cited ids in order; `Statement.quotes` the quoted strings.
`sentence_spans` returns the sentences as written, markers included, for the citation checker.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from lewisrag.scoring.markers import (  # noqa: F401 - the citation markers' rules, shared with rag_model.stitched
    CITATION_RE,
    MAX_RANGE,
    _code_spans,
    _in_code,
    _marker_ids,
    blank_footnote_definitions,
    citation_ids,
    citation_markers,
    source_line,
    sub_citations,
)
# where sentences end: in scoring, so that RAG-Token's implicit citations (rag_model) cut answers with it too
from lewisrag.scoring.text import is_cjk, sentence_bounds

SPLITTER_NAME = "sentences"
SPLITTER_VERSION = "15"
ATOMIC_SPLITTER_NAME = "atomic"  # --splitter atomic: the llm judge decomposes the whole answer (judge.decompose)

_HSPACE = r"[^\S\n]"  # any space but a newline: no-break and thin spaces too
# a Markdown ATX heading line (CommonMark: up to three spaces, one to six #, a space or the line's end)
_HEADING_RE = re.compile(r"^ {0,3}#{1,6}(?:[ \t][^\n]*)?$", re.M)
# a line in strong emphasis and nothing else ("**结论**", "__Answer:__"), a title as Markdown writers make one
_BOLD_LINE_RE = re.compile(r"[^\S\n]*(\*\*|__)((?:(?!\1)[^\n])+)\1[^\S\n]*[:：]?[^\S\n]*")
# words that lead into what follows ("Here is the answer:", "答案如下："), beside which a longer line is a lead-in too
_LEAD_IN_RE = re.compile(r"\b(?:as follows|following|below|here(?: is| are|'s))\b|如下|以下|下面|下列", re.I)
# a Markdown table's delimiter row ("|---|:---:|"), under its header row
_TABLE_RULE_RE = re.compile(r"[^\S\n]*\|?(?:[^\S\n]*:?-+:?[^\S\n]*\|)+(?:[^\S\n]*:?-+:?[^\S\n]*)?")
_STOP_RE = re.compile(r"[.!?。！？｡．:：;；]")  # in a label's text: a sentence, or a label and its claim ("结论：...")
_WORD_RE = re.compile(r"[^\W_]+")
MAX_LABEL_WORDS = 4  # a lead-in's words ("Here is the answer:"), a CJK character counting half: "答案如下：" is 2
MAX_LEAD_IN_WORDS = 10  # with a word that leads in: "Based on the context, here is what I found:"
MAX_TITLE_WORDS = 8  # a bold title's: "**Summary of the login errors**"
_FIRST_ITEM_RE = re.compile(r"[1１一][.．]")  # a one-item list's number: "答案如下：\n1. 瓦尔多利亚..."
# the lookbehind starts a match only at the first space of a run: without it, every space of a long
# run was tried to the run's end (100,000 spaces took 10 s)
_CITATION_WITH_SPACE_RE = re.compile(rf"(?<!{_HSPACE}){_HSPACE}*" + CITATION_RE.pattern)
QUOTE_RES = (
    re.compile(r"「([^「」]+)」"),
    re.compile(r"『([^『』]+)』"),
    re.compile(r"“([^“”]+)”"),
    re.compile(r'"([^"\n]+)"'),
)
# The quotes a citation checker holds to the letter: 「」 and its nested form 『』, as the specification's
# checker (QUOTE = 「([^」]+)」). “” and "..." also report speech, name a term or scare-quote a word
# ("系统会提示“密码不对”" paraphrases the message): ordinary text, whose numbers and words are checked.
VERBATIM_QUOTE_RES = QUOTE_RES[:2]


@dataclass(frozen=True)
class Statement:
    text: str  # the statement without citation markers, e.g. "登录失败时接口返回 422。"
    citations: tuple[str, ...]  # cited ids in order of appearance, without duplicates, e.g. ("1", "3")
    quotes: tuple[str, ...]  # strings quoted with 「」 『』 “” or "", e.g. ("422",)


def canonical_citations(text: str) -> str:
    """Every citation marker written as plain [n] markers, one id each, as numbers.

    >>> canonical_citations("安娜·凯尔【2】，见［１、3］ and [^04].")
    '安娜·凯尔[2]，见[1][3] and [4].'
    """
    return sub_citations(text, lambda m: "".join(f"[{i}]" for i in _marker_ids(m)))


def strip_citations(text: str) -> str:
    """Remove [n] markers and the spaces before them.

    >>> strip_citations("It returns 422 [1]. 返回 422 [2][3]。")
    'It returns 422. 返回 422。'
    """
    return sub_citations(text, "", _CITATION_WITH_SPACE_RE).strip()


def quotes_in(text: str, styles: tuple[re.Pattern, ...] = QUOTE_RES) -> tuple[str, ...]:
    """Quoted strings in order of the quote style: 「」, 『』, “”, then straight double quotes (`styles`:
    `VERBATIM_QUOTE_RES` for only 「」 and 『』). A quote mark inside Markdown code opens no quote:
    `print("a")` is code, not a quotation of a source.

    >>> quotes_in('错误是「is invalid」, key "email"')
    ('is invalid', 'email')
    >>> quotes_in('错误是「is invalid」, key "email"', VERBATIM_QUOTE_RES)
    ('is invalid',)
    >>> quotes_in('Run `print("hi")` to print "hi"')
    ('hi',)
    """
    code = _code_spans(text)
    if not code:
        return tuple(q for pattern in styles for q in pattern.findall(text) if q.strip())
    masked = list(text)  # code hidden, positions kept: a quote around `x` is read as written
    for a, b in code:
        masked[a:b] = "\0" * (b - a)
    masked = "".join(masked)
    return tuple(text[m.start(1):m.end(1)] for pattern in styles for m in pattern.finditer(masked)
                 if text[m.start(1):m.end(1)].strip())


def blank_headings(text: str) -> str:
    """`text` with each Markdown ATX heading line outside code ("## Answer", "### 结论") and each label line
    (`_label_lines`: "**结论**", "答案如下：", a table's header row) written as spaces, so that no sentence is
    made of it and every other character keeps its index; a last line naming the sources ("Source: [1]",
    `markers.source_line`) keeps its markers alone, which then go with the sentence before it.

    >>> blank_headings("## Answer\\nIt returns 422 [1].\\n#hashtag").splitlines()
    ['         ', 'It returns 422 [1].', '#hashtag']
    >>> blank_headings("**结论**\\n返回 422【1】。\\nNote: it locks [2].").splitlines()
    ['      ', '返回 422【1】。', 'Note: it locks [2].']
    >>> blank_headings("Ana Kel leads it.\\n来源：【1】、【2】").splitlines()
    ['Ana Kel leads it.', '   【1】 【2】']
    """
    if "#" in text:
        text = sub_citations(text, lambda m: " " * len(m.group()), _HEADING_RE)  # outside code, as markers are read
    if (sources := source_line(text)) is not None:
        start, markers = sources
        keep = {i for a, b in markers for i in range(a, b)}
        text = text[:start] + "".join(c if i in keep or c == "\n" else " " for i, c in enumerate(text[start:], start))
    labels = _label_lines(text)
    if not labels:
        return text
    out, last = [], 0
    for a, b in labels:
        out += [text[last:a], " " * (b - a)]
        last = b
    return "".join(out) + text[last:]


def _label_lines(text: str) -> list[tuple[int, int]]:
    """Where the label lines of `text` are: lines that name what follows and state nothing of their own, so
    that a supported answer under one was half uncited and half unfaithful. Read without its citations (which
    go with it, as a heading's), a label holds no number and no sentence, stands outside code and has
    something after it (a bold line ending an answer may be the answer: "**Ana Kel**"). It is a line in
    strong emphasis alone (`_BOLD_LINE_RE`: "**结论**", "**Answer:**", up to MAX_TITLE_WORDS words); a
    lead-in ending in a colon, up to MAX_LABEL_WORDS words ("Sources:", "答案如下：") or MAX_LEAD_IN_WORDS
    with a word that leads in (`_LEAD_IN_RE`: "Based on the context, here is the answer:"), while "Note: the
    API returns 422." holds a claim after its colon; or a Markdown table's header row, over its delimiter
    row (which holds no words, so no sentence)."""
    if not any(mark in text for mark in (":", "：", "**", "__", "|")):
        return []
    last_word = next((i for i in range(len(text) - 1, -1, -1) if text[i].isalnum()), -1)
    lines = [(m.start(), m.end()) for m in re.finditer(r"[^\n]+", text) if not m.group().isspace()]
    out = []
    for n, (a, b) in enumerate(lines):
        line = CITATION_RE.sub("", text[a:b])  # RAG-Token's implicit citations cite a label as a line of its own
        if last_word < b or "`" in line or any(c.isdigit() for c in line):
            continue
        below = text[lines[n + 1][0]:lines[n + 1][1]].strip() if n + 1 < len(lines) else ""
        if "|" in line and "|" in below and _TABLE_RULE_RE.fullmatch(below):
            out.append((a, b))
            continue
        if below.startswith(("```", "~~~")):
            continue  # "Run this:" and the fenced block it leads into are one sentence, which must cite
        bold = _BOLD_LINE_RE.fullmatch(line)
        if bold:
            label, limit = bold.group(2).strip().rstrip(":："), MAX_TITLE_WORDS
        else:
            label = line.strip().rstrip("*_ \t")
            if not label.endswith((":", "：")):
                continue
            label = label[:-1].strip("*_ \t")
            limit = MAX_LEAD_IN_WORDS if _LEAD_IN_RE.search(label) else MAX_LABEL_WORDS
        if label and not _STOP_RE.search(label) and _words(label) <= limit:
            out.append((a, b))
    code = _code_spans(text) if out else []  # last: a long answer has few labels and maybe many code spans
    return [(a, b) for a, b in out if not _in_code(a, code)]


def _words(text: str) -> float:
    """How many words `text` holds, a CJK character counting half (a Chinese word is about two)."""
    cjk = sum(is_cjk(c) for c in text)
    return len(_WORD_RE.findall("".join(" " if is_cjk(c) else c for c in text))) + cjk / 2


def sentence_spans(text: str) -> list[str]:
    """The sentences of `text` as written (citation markers kept), stripped, empty ones dropped; a
    Markdown footnote definition line ("[^1]: REQ-AUTH-03 ..."), heading line ("## Answer") or label line
    ("**结论**", "Two facts:") outside code is no sentence.

    >>> sentence_spans("返回 422。[1] 前端显示「错误。」列表 [1]！Version 3.5 is out, e.g. today. Done")
    ['返回 422。[1]', '前端显示「错误。」列表 [1]！', 'Version 3.5 is out, e.g. today.', 'Done']
    >>> sentence_spans("Two facts:\\n1. It returns 422 [1].\\n2. It locks [2]\\n3、锁定 15 分钟 [2]。")
    ['It returns 422 [1].', 'It locks [2]', '锁定 15 分钟 [2]。']
    >>> sentence_spans("返回 422[^1]。\\n\\n[^1]: REQ-AUTH-03 登录需求文档")
    ['返回 422[^1]。']
    >>> sentence_spans("### 结论\\n登录失败返回 422 [1]。")
    ['登录失败返回 422 [1]。']
    """
    text = blank_headings(blank_footnote_definitions(text))  # a source's name, a title: not statements
    bounds = sentence_bounds(text)
    starts = [a for a, _ in bounds[1:]] + [-1]  # where the sentence after each begins
    return _merge_bare_citations([text[a:b] for (a, b), after in zip(bounds, starts)
                                  if not _first_item_number(text, a, b, after)])


def _first_item_number(text: str, a: int, b: int, next_start: int) -> bool:
    """Whether the sentence text[a:b] is only the number of a one-item list ("答案如下：\\n1. 瓦尔多利亚..."): a
    "1." opening its line with the next sentence on the same line. One item is no numbered list (two lines
    or more), so its dot ended a sentence of nothing but a number, uncited. "42. It is ..." keeps its number."""
    return (bool(_FIRST_ITEM_RE.fullmatch(CITATION_RE.sub("", text[a:b]).replace(" ", "")))
            and not text[text.rfind("\n", 0, a) + 1:a].strip() and a < next_start and "\n" not in text[b:next_start])


def _fence_only(span: str) -> bool:
    """Whether `span` holds nothing but citations, punctuation and code blocks fenced with ``` or ~~~."""
    if "```" not in span and "~~~" not in span:
        return False
    out, last = [], 0
    for a, b in sorted(_code_spans(span)):
        if span.startswith(("```", "~~~"), a):
            out.append(span[last:a])
            last = b
    return last > 0 and not any(c.isalnum() for c in sub_citations("".join(out) + span[last:], ""))


def _merge_bare_citations(spans: list[str]) -> list[str]:
    """Attach a span that holds only citations and punctuation to the span before it (or, at the
    start of the text, to the span after it); drop one without citations. A span that is a fenced
    code block (with only citations and punctuation beside it) goes to the sentence before it too (at
    the start of the text, to the one after it; alone, it stays a sentence, which must cite)."""
    out: list[str] = []
    pending = ""  # citations (and fenced blocks) seen before the first real sentence
    fenced = False  # pending holds a fenced block
    for span in spans:
        bare = not any(c.isalnum() for c in sub_citations(span, ""))
        if not bare and _fence_only(span):
            if out:
                out[-1] = f"{out[-1]}\n{span}"
            else:
                pending, fenced = f"{pending}\n{span}".strip(), True
        elif not bare:
            out.append(f"{pending}\n{span}" if fenced else f"{pending} {span}" if pending else span)
            pending, fenced = "", False
        elif citation_markers(span):
            if out:
                out[-1] = f"{out[-1]} {span}"
            else:
                pending = f"{pending} {span}".strip()
    if fenced:  # an answer that is only code: one sentence, which must cite like any other
        out.append(pending)
    return out


def to_statement(span: str) -> Statement:
    """One written sentence as a Statement.

    >>> to_statement("密码错误时接口返回「422」[3]。")
    Statement(text='密码错误时接口返回「422」。', citations=('3',), quotes=('422',))
    """
    text = strip_citations(span)
    return Statement(text, citation_ids(span), quotes_in(text))


def split_sentences(text: str) -> list[Statement]:
    """Split an answer into sentence statements (splitter "sentences", `SPLITTER_VERSION`).

    >>> [s.text for s in split_sentences("登录失败返回 422 [1]。前端弹出 toast。")]
    ['登录失败返回 422。', '前端弹出 toast。']
    >>> split_sentences("It returns 422. [1][2]")[0].citations
    ('1', '2')
    """
    return [to_statement(span) for span in sentence_spans(text)]


def split_atomic(text: str, decompose: Callable[[str], list[str]]) -> list[Statement]:
    """Split into sentences, then each sentence into atomic statements with `decompose`.

    `decompose` gets a sentence without citation markers (an LLM call, a lookup table, ...) and
    returns its atomic statements; each keeps the citations of its sentence, and its own quotes.
    A sentence the decomposer returns nothing for contributes no statements.

    >>> split_atomic("前端弹出 toast，3 秒后消失 [1]。", lambda s: ["前端弹出 toast", "3 秒后消失"])
    [Statement(text='前端弹出 toast', citations=('1',), quotes=()), Statement(text='3 秒后消失', citations=('1',), quotes=())]
    """
    out: list[Statement] = []
    for sentence in split_sentences(text):
        pieces = decompose(sentence.text)
        if not isinstance(pieces, list) or not all(isinstance(p, str) for p in pieces):
            raise TypeError(f"decompose must return a list of strings, got {pieces!r}")
        for piece in pieces:
            if piece.strip():
                out.append(Statement(piece.strip(), sentence.citations, quotes_in(piece)))
    return out
