"""Answer-string metrics of open-domain QA: EM, token F1, ROUGE-L, BLEU-1, provenance-aware EM; and
regular-expression answers (CuratedTrec's), matched as DrQA and DPR match them (`regex_match`,
`regex_search`), with `answer_exact_match` choosing between EM and regex match by the example; and
whether a passage holds an answer (`has_answer`, DPR's test of a retrieved passage).

ASCII text normalizes exactly as SQuAD's script does, which DPR and RAG score with: lowercase, drop
ASCII punctuation and the articles a, an, the, collapse whitespace. Text with any non-ASCII
character, English as much as Chinese, is folded further, which SQuAD's script does not do: NFKC
("ﬁ" is "fi", "x²" "x2", full-width forms their ASCII ones), every Unicode punctuation mark deleted
inside a word and spaced elsewhere ("don’t" is "don't", "“Hello”" "Hello", "Jean–Paul" "Jean-Paul"),
every currency sign dropped as SQuAD's $ is ("￥100", "€5" and "£100" are "100", "5" and "100"),
format characters (zero-width spaces, a BOM) deleted, and the spaces next to CJK characters
dropped. On such text EM is therefore a little more lenient than SQuAD's: it counts as equal some
pairs that differ only in those forms (a curly apostrophe, a pound sign), which SQuAD scores 0. CJK
text is compared one character per token; Latin words and numbers inside it stay whole words (a
non-ASCII mark between two of them separates them as a space would: Chinese writes "Paris，France"
with no space after its comma), except between two single Latin letters, one of them "a", where it
is deleted as SQuAD deletes "&" in "A&M" ("A·B" and "Ａ＆Ｍ" are "ab" and "am", the initial no article),
a full-width form of ASCII punctuation between two digits, which is its ASCII form inside a
number ("３．５", "１，０００", "10：30" are "3.5", "1,000", "10:30", and normalize as those do), and a
full-width full stop "．" between two letters or digits, which is a dot inside a word as its ASCII
form is ("J．K．罗琳", "Ｎｏ．１", "Ｕ．Ｓ．Ａ．" normalize as "J.K.罗琳", "No.1", "U.S.A." do). An
answer that normalizes to nothing ("€", ".", "The The") is compared as written, stripped and
case-folded, so that an empty prediction never matches it. `has_answer` normalizes passage and answer
so too, but with every punctuation mark a space first (`normalize_passage`), as DPR's tokenizer
makes each mark a token: "Lincoln" is in "Lincoln's assassination".
ROUGE-L is rouge-score's scorer fed with our tokenizer: rouge-score's own keeps only [a-z0-9], so
it scores every Chinese answer 0; ours agrees with it on English and keeps CJK. Long-form answers
(the paper's MS MARCO columns) are scored as MS MARCO's evaluation scores them, on the same tokens:
`msmarco_rouge_l` (coco-caption's ROUGE-L: beta 1.2, precision and recall each at its best
reference) and `msmarco_bleu_1` (corpus BLEU-1).
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from lewisrag.scoring.text import is_cjk, split_cjk

_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
# "the 长城", "长城 the": before their spaces go; "A 型血" keeps its letter
_WORD_ARTICLES_RE = re.compile(r"\b(an|the)(\s|$)")
_ASCII_PUNCT = frozenset(string.punctuation)


# Marks written inside a word, deleted like their ASCII forms ("Jean–Paul" as "Jean-Paul", "don’t" as
# "don't"); every other non-ASCII punctuation mark separates words, as a space would: Chinese puts
# no space after ，、：· ("Paris，France" is two words, as "Paris, France" is).
_WORD_JOINERS = frozenset("\u2018\u2019\u02bc\uff07")


# a full-width or small form of an ASCII punctuation mark or symbol between two digits: NFKC'd before
# the marks are spaced, so "３．５" is "3.5" (then "35", as SQuAD writes it) and not the words "3 5"
_NUMBER_MARK_RE = re.compile(r"(?<=[0-9０-９])[\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff5e\ufe50-\ufe6b](?=[0-9０-９])")


def _fold_number_mark(m: re.Match) -> str:
    return unicodedata.normalize("NFKC", m.group())


# a full-width full stop between two letters or digits: a dot inside a word, as in "J．K．罗琳", "Ｎｏ．１",
# "Ｕ．Ｓ．Ａ．", so its ASCII form, which is deleted there; spaced, it split "J．K．" into two words
# and "Ｕ．Ｓ．Ａ．" into "u sa" (the second mark deleted beside the initial "a"). The mark first, as in
# `_LATIN_MARK_RE` below
_WORD_DOT_RE = re.compile(r"\uff0e(?<=[^\W_]\uff0e)(?=[^\W_])")


# a non-ASCII mark between two single Latin letters, one of them "a" ("A·B", "Ａ＆Ｍ"): deleted, not
# spaced, as SQuAD deletes "&" in "A&M" ("am"); spaced, the initial "a" went as an article, and "Ａ＆Ｍ"
# matched the answer "M". A word of more letters beside the mark keeps the spacing: "Tom，a cat" is
# "tom cat", the article a real one. The mark first in the pattern, so that the search skips to the
# marks (a leading lookbehind made it 3x slower, 20% of the normalization of a Chinese passage)
_LATIN_MARK_RE = re.compile(r"[^\w\s](?<=[a-zA-Zａ-ｚＡ-Ｚ].)(?=[a-zA-Zａ-ｚＡ-Ｚ])")


def _unspaced_article_mark(m: re.Match) -> str:
    mark, text, i = m.group(), m.string, m.start()
    lone = (i < 2 or not _is_word_char(text[i - 2])) and (i + 2 >= len(text) or not _is_word_char(text[i + 2]))
    letters = unicodedata.normalize("NFKC", text[i - 1] + text[i + 1]).lower()
    return "" if lone and "a" in letters and unicodedata.category(mark)[0] == "P" else mark


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _spaced(ch: str) -> str:
    if ch.isascii() or not unicodedata.category(ch).startswith("P"):
        return ch
    return "" if ch in _WORD_JOINERS or unicodedata.category(ch) == "Pd" else " "


def _is_punct(ch: str) -> bool:
    # SQuAD drops string.punctuation (which includes symbols such as $ and +); we add every
    # Unicode punctuation mark, so 。，、「」 and the like go too, and every currency sign (Sc): SQuAD
    # drops $ only because it is ASCII, and ￥ (NFKC: ¥), € or £ kept made "￥100" miss "100" where
    # "$100" matched it. Other symbols (° ± ×) stay: they are not punctuation and can carry meaning.
    return ch in _ASCII_PUNCT or unicodedata.category(ch)[0] == "P" or unicodedata.category(ch) == "Sc"


class _CharTable(dict):
    """A `str.translate` table that asks `rule(ch) -> str` once per distinct character, then keeps
    the answer: the rules look up Unicode categories, and asked of every character of every text
    they cost 0.4 ms a 100-word passage (`index cut` checks millions of passages for answers)."""

    def __init__(self, rule):
        super().__init__()
        self.rule = rule

    def __missing__(self, code: int) -> str:
        out = self[code] = self.rule(chr(code))
        return out


_SPACED = _CharTable(_spaced)
# ASCII punctuation deleted, not spaced (SQuAD): "1,000" -> "1000"; format characters (zero-width
# spaces, a BOM) are invisible
_DROPPED = _CharTable(lambda ch: "" if _is_punct(ch) or unicodedata.category(ch) == "Cf" else ch)


def _drop_spaces_near_cjk(text: str) -> str:
    """Collapse whitespace; drop it next to a CJK character (Chinese is written without spaces)."""
    if text.isascii():  # no CJK character: whitespace collapsed only
        return " ".join(text.split())
    out = ""
    for word in text.split():
        if out and not (is_cjk(out[-1]) or is_cjk(word[0])):
            out += " "
        out += word
    return out


@lru_cache(maxsize=65536)
def normalize_answer(text: str) -> str:
    """SQuAD/DPR normalization, extended to CJK text.

    >>> normalize_answer("The  Eiffel Tower!")
    'eiffel tower'
    >>> normalize_answer("返回 ４２２ 状态码。")
    '返回422状态码'
    >>> normalize_answer("A 型血"), normalize_answer("A型血\\u200b"), normalize_answer("the 长城")
    ('a型血', 'a型血', '长城')
    >>> normalize_answer("Paris，France"), normalize_answer("Tom·Hanks"), normalize_answer("Jean–Paul")
    ('paris france', 'tom hanks', 'jeanpaul')
    >>> normalize_answer("３．５％"), normalize_answer("１，０００人"), normalize_answer("10：30")
    ('35', '1000人', '1030')
    >>> normalize_answer("$100"), normalize_answer("￥100元"), normalize_answer("€5")  # as SQuAD's $
    ('100', '100元', '5')
    """
    if not text.isascii():
        # a full-width mark inside a number is its ASCII form ("３．５" is "3.5"), as is a full stop inside
        # a word ("J．K．"); every other non-ASCII mark is spaced before NFKC turns a full-width comma
        # into an ASCII one ("Paris，France")
        text = _NUMBER_MARK_RE.sub(_fold_number_mark, text)
        if "\uff0e" in text:
            text = _WORD_DOT_RE.sub(".", text)
        text = _LATIN_MARK_RE.sub(_unspaced_article_mark, text).translate(_SPACED)
    text = unicodedata.normalize("NFKC", text).lower()
    text = text.translate(_DROPPED)
    # the spaces next to CJK go next: "A 型血" and "A型血" are one answer, and the article rule
    # (words between word boundaries) then leaves a letter written against a CJK character alone;
    # "an" and "the", never a label, go first, so "the 长城" does not become the word "the长城"
    text = _drop_spaces_near_cjk(_WORD_ARTICLES_RE.sub(" ", text))
    return _drop_spaces_near_cjk(_ARTICLES_RE.sub(" ", text))


def answer_tokens(text: str) -> list[str]:
    """Tokens for EM/F1: the normalized answer, one token per CJK character, other words whole.

    >>> answer_tokens("HTTP 422 登录失败")
    ['http', '422', '登', '录', '失', '败']
    """
    return [piece for word in normalize_answer(text).split() for piece in split_cjk(word)]


def _folded(text: str) -> str:
    """`text` stripped, its whitespace collapsed, case-folded: how an answer that normalizes to "" is
    compared ("The The" is a band, "€" a symbol). Normalized, it would equal an empty prediction."""
    return " ".join(text.split()).casefold()


def _check_answers(answers: Sequence[str], name: str) -> None:
    # a list or tuple only: a str is a list of its characters, and a generator was used up by this check,
    # leaving exact_match 0.0 and max() over nothing; refused rather than copied, so every metric reads
    # `answers` as given. Every item: a None raised AttributeError, or scored 1.0 where an earlier one matched
    if not isinstance(answers, list | tuple) or not answers or not all(isinstance(a, str) for a in answers):
        raise ValueError(f"{name} must be a non-empty list of strings, got {answers!r}")


def _check_prediction(prediction: str) -> None:
    if not isinstance(prediction, str):
        raise ValueError(f"prediction must be a string, got {prediction!r}")


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    """1.0 if the normalized prediction equals any normalized answer, else 0.0. An answer that
    normalizes to "" is compared as written (`_folded`): an empty prediction does not match it.

    >>> exact_match("the Eiffel Tower.", ["Eiffel Tower", "Tour Eiffel"])
    1.0
    >>> exact_match("返回 422。", ["返回422"]), exact_match("422", ["返回 422"])
    (1.0, 0.0)
    >>> exact_match("", ["The The"]), exact_match("the the", ["The The"]), exact_match("", ["€"])
    (0.0, 1.0, 0.0)
    """
    _check_answers(answers, "answers")
    _check_prediction(prediction)
    pred = normalize_answer(prediction)
    return float(any(_same(prediction, pred, a) for a in answers))


def _same(prediction: str, pred: str, answer: str) -> bool:
    """Whether `prediction` (`pred` normalized) is `answer` by exact match."""
    gold = normalize_answer(answer)
    return pred == gold if gold else _folded(prediction) == _folded(answer)


# DrQA's and DPR's flags (drqa/reader/utils.py regex_match_score, dpr/data/qa_validation.py regex_match);
# data.qa_formats.PATTERN_FLAGS, with which the readers refuse a bad pattern, is the same
REGEX_FLAGS = re.IGNORECASE | re.UNICODE | re.MULTILINE


@lru_cache(maxsize=65536)
def compile_answer_pattern(pattern: str) -> re.Pattern:
    """`pattern` compiled as DrQA and DPR compile an answer pattern: NFD first (both normalize patterns
    and texts so), then `REGEX_FLAGS`. Raises `re.error` for a bad one, which the readers refuse
    (`data.qa_formats.check_pattern`)."""
    return re.compile(unicodedata.normalize("NFD", pattern), REGEX_FLAGS)


def regex_match(prediction: str, patterns: Sequence[str]) -> float:
    """1.0 if any of `patterns` matches the prediction from its first character, else 0.0: DrQA's
    CuratedTrec measure (`scripts/pipeline/eval.py --regex`: prediction and patterns NFD-normalized,
    then `regex_match_score`: `re.compile(pattern, IGNORECASE + UNICODE + MULTILINE).match(prediction)`).
    ORQA's `eval_utils.regex_match_score`, behind REALM's CuratedTrec numbers, is the same `match`
    without the NFD. The RAG paper publishes no CuratedTrec scorer of its own; its table sets its EM
    beside those numbers, so this is the measure followed. DPR's reader scores exact match only;
    DPR's regex code is its retrieval check, a `search` (`regex_search`). No other normalization:
    case goes by the flag, and `match` anchors the start, not the end: an answer may run on past
    the pattern, not begin before it.

    >>> regex_match("Ozzy Osbourne", ["Ozzie (Ozzy )?Osbourne", "(Ozzy )?Osbourne"])  # the second, from the start
    1.0
    >>> regex_match("CHURCHILL, Winston", ["(C|c)hurchill"]), regex_match("Winston Churchill", ["(C|c)hurchill"])
    (1.0, 0.0)
    """
    _check_answers(patterns, "patterns")
    _check_prediction(prediction)
    pred = unicodedata.normalize("NFD", prediction)
    return float(any(compile_answer_pattern(p).match(pred) is not None for p in patterns))


def regex_search(text: str, patterns: Sequence[str]) -> bool:
    """Whether any of `patterns` occurs anywhere in `text` (a passage): DPR's `has_answer` with
    `match_type="regex"` (dpr/data/qa_validation.py: NFD, `REGEX_FLAGS`, `search`), its retrieval
    measure on CuratedTrec.

    >>> regex_search("Winston Churchill led Britain.", ["(C|c)hurchill"]), regex_search("Attlee", ["(C|c)hurchill"])
    (True, False)
    """
    text = unicodedata.normalize("NFD", text)
    return any(compile_answer_pattern(p).search(text) is not None for p in patterns)


# has_answer's words: every mark that normalize_answer drops is a space there, as DPR's tokenizer makes
# each punctuation mark a token of its own ("Lincoln's" holds the word "lincoln", "1939–1945" "1945")
_MARKS_SPACED = _CharTable(lambda ch: " " if _is_punct(ch) else ch)


def normalize_passage(text: str) -> str:
    """`text` as `has_answer` compares it, passage and answer alike: `normalize_answer` after every
    punctuation mark it drops (ASCII ones, every Unicode mark, currency signs) has become a space.
    DPR's `SimpleTokenizer` makes each mark a token of its own, so its `has_answer` finds "Lincoln"
    in "Lincoln's", "1945" in "1939–1945" and "France" in "Paris,France"; deleted, as exact match
    deletes them, they glued the words ("lincolns"). Callers that pass `has_answer` a `normalized`
    text make it with this.

    >>> normalize_passage("Lincoln's assassination"), normalize_passage("1939–1945"), normalize_passage("首都是北京。")
    ('lincoln s assassination', '1939 1945', '首都是北京')
    """
    return normalize_answer(text.translate(_MARKS_SPACED))


_normalized_gold = lru_cache(maxsize=65536)(normalize_passage)  # an answer, checked against many passages


def has_answer(text: str, example, normalized: str | None = None) -> bool:
    """Whether the passage `text` holds an answer of `example` (a `data.records.QAExample`): DPR's
    `has_answer`, the test of a retrieved passage behind DPR's top-k retrieval accuracy (`index cut`'s
    answer recall and the base preset's retrieval, `scoring.retrieval.answer_recall`). An answer
    counts where it occurs as whole words (`_has_words`) of the text, both normalized by
    `normalize_passage` (as exact match normalizes them, but every punctuation mark a space, as DPR's
    tokenizer separates it: "Lincoln" is in "Lincoln's assassination", "New York" in "New York-based");
    one that normalizes to "" ("€", "The The") by its `_folded` form in the text's, as exact match
    compares it; a pattern (CuratedTrec's) anywhere in the raw text (`regex_search`, DPR's regex
    check). `normalized`: `normalize_passage(text)`, where the caller checks one passage for several
    questions.

    >>> from types import SimpleNamespace as Example
    >>> has_answer("The capital is Paris.", Example(answers=["paris"])), has_answer("Parisian food", Example(answers=["Paris"]))
    (True, False)
    >>> has_answer("首都是北京。", Example(answers=["北京"])), has_answer("Soul Mining by The The.", Example(answers=["The The"]))
    (True, True)
    >>> has_answer("Lincoln's assassination", Example(answers=["Lincoln"])), has_answer("1939–1945", Example(answers=["1945"]))
    (True, True)
    """
    if is_regex_answered(example):
        return regex_search(text, example.answers)
    if normalized is None:
        normalized = normalize_passage(text)
    folded = None
    for answer in example.answers:
        if gold := _normalized_gold(answer):
            if _has_words(normalized, gold):
                return True
        elif gold := _folded(answer):
            folded = _folded(text) if folded is None else folded
            if _has_words(folded, gold):
                return True
    return False


def _has_words(text: str, words: str) -> bool:
    """Whether `words` occur in `text` not as part of a longer word: at each end of an occurrence
    the text ends, or one of the two characters that meet there is no letter or digit, or is CJK (a
    word on its own, as EM counts it: "北京" is in "首都是北京"). On normalized ASCII text that is
    the words between spaces.

    >>> _has_words("the eiffel tower", "eiffel"), _has_words("eiffelturm", "eiffel"), _has_words("100° c", "100")
    (True, False, True)
    """
    start = text.find(words)
    while start >= 0:
        end = start + len(words)
        if _word_edge(text, start - 1, words[0]) and _word_edge(text, end, words[-1]):
            return True
        start = text.find(words, start + 1)
    return False


def _word_edge(text: str, i: int, inner: str) -> bool:
    """Whether a word may end between `text[i]` and the character `inner` beside it."""
    if i < 0 or i >= len(text):
        return True
    outer = text[i]
    return not (outer.isalnum() and inner.isalnum()) or is_cjk(outer) or is_cjk(inner)


def is_regex_answered(example) -> bool:
    """Whether `example` (a `data.records.QAExample`) holds regular expressions as its answers
    (CuratedTrec's): its exact match is `regex_match`, and token F1, ROUGE-L and BLEU-1 against a
    pattern measure nothing, so they go unmeasured (None)."""
    return getattr(example, "answer_match", "text") == "regex"


def answer_exact_match(prediction: str, example) -> float:
    """The exact match of `prediction` to `example`'s answers (a `data.records.QAExample`):
    `regex_match` for a regex-answered example (CuratedTrec's), `exact_match` otherwise.

    >>> from types import SimpleNamespace as Example
    >>> ct = Example(answers=["(C|c)hurchill"], answer_match="regex")
    >>> answer_exact_match("Churchill", ct), answer_exact_match("Churchill", Example(answers=["(C|c)hurchill"], answer_match="text"))
    (1.0, 0.0)
    """
    if is_regex_answered(example):
        return regex_match(prediction, example.answers)
    return exact_match(prediction, example.answers)


def _f1(pred: list[str], gold: list[str]) -> float:
    if not pred or not gold:
        return float(pred == gold)  # SQuAD: two empty answers agree, one empty one does not
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, answers: Sequence[str]) -> float:
    """SQuAD token F1, best over the answers. An answer without a token (one that normalizes to "")
    scores as `exact_match` compares it, 1.0 or 0.0: SQuAD's rule, two empty token lists agree, let an
    empty prediction match "€" or "The The".

    "the red list above the form" has tokens red, list, above, form (4); "a red list" has red,
    list (2); 2 in common: P = 2/4, R = 2/2, F1 = 2*0.5*1/1.5 = 2/3.

    >>> round(token_f1("the red list above the form", ["a red list"]), 4)
    0.6667
    >>> round(token_f1("红色列表", ["红色的列表"]), 4)  # 4 of 4 chars in 5: P=1, R=0.8 -> 8/9
    0.8889
    """
    _check_answers(answers, "answers")
    _check_prediction(prediction)
    pred = answer_tokens(prediction)
    return max(_f1(pred, gold) if (gold := answer_tokens(a)) else float(_folded(prediction) == _folded(a)) for a in answers)


def rouge_tokens(text: str) -> list[str]:
    """rouge-score's tokenizer (lowercase, runs of letters and digits) that also keeps CJK
    characters, one per token. On ASCII text it returns exactly what rouge-score returns. A CJK
    character that is no letter, the katakana middle dot of 安娜・凯尔, separates as punctuation does
    (as a token it made "安娜・凯尔" score 0.89 against "安娜·凯尔", whose dot is punctuation).

    >>> rouge_tokens("Don't return HTTP-422 登录"), rouge_tokens("安娜・凯尔")
    (['don', 't', 'return', 'http', '422', '登', '录'], ['安', '娜', '凯', '尔'])
    """
    tokens: list[str] = []
    run = ""
    for ch in unicodedata.normalize("NFKC", text).lower():
        cjk = is_cjk(ch) and ch.isalnum()
        if cjk or not ch.isalnum():
            if run:
                tokens.append(run)
                run = ""
            if cjk:
                tokens.append(ch)
        else:
            run += ch
    if run:
        tokens.append(run)
    return tokens


class _RougeTokenizer:
    """rouge-score's tokenizer interface over `rouge_tokens`."""

    def tokenize(self, text: str) -> list[str]:
        return rouge_tokens(text)


@lru_cache(maxsize=1)
def _rouge_l_scorer():
    # rouge-score loads on first use: it imports nltk (~0.9 s), and lewisrag.eval and training
    # import this module whether or not they score ROUGE
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], tokenizer=_RougeTokenizer())


def rouge_l(prediction: str, references: Sequence[str]) -> float:
    """ROUGE-L F-measure from rouge-score (no stemming) over `rouge_tokens`, best over the references.
    A pair in which a side has no token scores 0.0, two empty strings included.

    LCS("the cat sat on the mat", "the cat lay on the mat") = 5 of 6 tokens: P = R = F = 5/6.

    >>> round(rouge_l("the cat sat on the mat", ["the cat lay on the mat"]), 4)
    0.8333
    >>> round(rouge_l("前端显示红色列表", ["前端用红色列表显示"]), 4)  # LCS 前端红色列表 = 6; P=6/8, R=6/9 -> 12/17
    0.7059
    """
    _check_answers(references, "references")
    _check_prediction(prediction)
    scorer = _rouge_l_scorer()
    # float(): rouge-score returns the int 0 when a side has no token
    return max(float(scorer.score(ref, prediction)["rougeL"].fmeasure) for ref in references)


def bleu_1(prediction: str, references: Sequence[str]) -> float:
    """BLEU-1 in [0, 1]: sacrebleu's sentence BLEU with unigrams only, lowercased, all references
    at once (clipped unigram precision times the brevity penalty against the closest reference
    length). Tokenizer "zh" when any text has CJK, each CJK character (kana too, which "zh" leaves
    joined) spaced first, so that each is a token as for EM, F1 and ROUGE-L; else "13a".

    "the cat sat" vs "the cat sat down": precision 3/3, brevity penalty exp(1 - 4/3) = 0.7165.

    >>> round(bleu_1("the cat sat", ["the cat sat down"]), 4)
    0.7165
    >>> round(bleu_1("红色列表", ["红色的列表"]), 4)  # 4/4 chars, BP = exp(1 - 5/4)
    0.7788
    >>> bleu_1("锁定１５分钟", ["锁定 15 分钟"])
    1.0
    >>> round(bleu_1("カタカナです", ["カタカナでした"]), 4)  # 5/6 kana, BP = exp(1 - 7/6)
    0.7054
    >>> round(bleu_1("the cat", ["", "the cat sat down"]), 4)  # a blank reference takes no part
    0.3679
    """
    _check_answers(references, "references")
    _check_prediction(prediction)
    # sacrebleu loads on first use (~0.1 s): lewisrag.eval and training import this module, and only
    # the reproduce table's BLEU-1 needs it
    from sacrebleu.metrics import BLEU

    # NFKC first, as for EM and ROUGE-L: "１５分钟" is "15 分钟" (sacrebleu folds no full-width forms)
    prediction = unicodedata.normalize("NFKC", prediction)
    references = [unicodedata.normalize("NFKC", r) for r in references]
    # a blank reference has no word to match but is the closest length, 0, which waives the brevity
    # penalty: "the cat" against ["", "the cat sat down"] scored 1.0
    references = [r for r in references if r.strip()] or references
    has_cjk = any(is_cjk(ch) for text in (prediction, *references) for ch in text)
    if has_cjk:
        # every CJK character a token, as EM, F1 and ROUGE-L count them: sacrebleu's "zh" splits Chinese
        # characters only, and left "カタカナです" one token, scoring 0 against "カタカナでした"
        prediction, references = _cjk_spaced(prediction), [_cjk_spaced(r) for r in references]
    bleu = BLEU(max_ngram_order=1, lowercase=True, tokenize="zh" if has_cjk else "13a", effective_order=True)
    return min(1.0, bleu.sentence_score(prediction, references).score / 100.0)  # 1.0000000000000004 seen


def _cjk_spaced(text: str) -> str:
    return "".join(f" {ch} " if is_cjk(ch) else ch for ch in text)


# MS MARCO's ROUGE-L weighs recall 1.2 times precision (coco-caption's rouge.py, "updated based on
# discussion with Hovey"), where rouge-score's F-measure weighs them alike
MSMARCO_ROUGE_BETA = 1.2


def _lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two token lists (one DP row kept)."""
    if len(a) < len(b):
        a, b = b, a
    row = [0] * (len(b) + 1)
    for x in a:
        diagonal = 0  # row[j - 1] of the previous row
        for j, y in enumerate(b, 1):
            diagonal, row[j] = row[j], diagonal + 1 if x == y else max(row[j], row[j - 1])
    return row[-1]


def msmarco_rouge_l(prediction: str, references: Sequence[str]) -> float:
    """ROUGE-L as MS MARCO's official evaluation scores a long answer (ms_marco_eval, whose ROUGE-L is
    coco-caption's `Rouge.calc_score`): precision and recall each the best over the references, P =
    max_r LCS/len(prediction), R = max_r LCS/len(r), then F with beta = 1.2, (1 + b²)PR / (R + b²P); the
    reported column is the mean over questions. `rouge_l` is another measure: rouge-score's F1 (beta
    1) against the single best reference. Hand-written: no maintained library has this convention but
    coco-caption's toolkit itself (pycocoevalcap, with its Java scorers and tokenizer).

    Tokens are `rouge_tokens`' (lowercased letter-and-digit runs, one token per CJK character), as for
    `rouge_l`. ms_marco_eval tokenizes with spaCy's English tokenizer and lowercases, keeping each
    punctuation mark as a token: here marks are dropped, so a reference's final "." neither matches
    nor lengthens it. A reference with no token takes no part (coco-caption's scores 0 against it,
    which a max never picks); a prediction with no token, or references none of which has one, score 0.0.

    "a b c" against "a b" and "a b c d e f": P = max(2/3, 3/3) = 1 and R = max(2/2, 3/6) = 1, so 1.0,
    though no single reference scores it so (rouge_l 0.8).

    >>> msmarco_rouge_l("a b c", ["a b", "a b c d e f"])
    1.0
    >>> round(msmarco_rouge_l("前端显示红色列表", ["前端用红色列表显示"]), 4)  # LCS 前端红色列表: P=6/8, R=6/9
    0.6985
    """
    _check_answers(references, "references")
    _check_prediction(prediction)
    pred = rouge_tokens(prediction)
    golds = [tokens for r in references if (tokens := rouge_tokens(r))]
    if not pred or not golds:
        return 0.0
    common = [_lcs_length(pred, gold) for gold in golds]
    p = max(common) / len(pred)
    r = max(n / len(gold) for n, gold in zip(common, golds))
    if p == 0:  # no reference shares a token (then r is 0 too)
        return 0.0
    b2 = MSMARCO_ROUGE_BETA**2
    return (1 + b2) * p * r / (r + b2 * p)


def msmarco_bleu_1(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """Corpus BLEU-1, as MS MARCO's official evaluation reports it (coco-caption's `Bleu`, option
    "closest"): each question's unigram matches clipped by the most any one reference holds, then
    matches, prediction lengths and reference lengths summed over the corpus before dividing; the
    reference length of a question is the one closest to its prediction's (the shorter of two as close),
    and the brevity penalty exp(1 - ref_len/pred_len) applies to the sums. Not the mean of sentence
    scores (`bleu_1`): a short answer is penalized by the corpus' total length, not alone. Given one
    question, this is that question's BLEU-1 in the same convention (a per-question record's).

    Tokens are `msmarco_rouge_l`'s (`rouge_tokens`: punctuation dropped, one token per CJK character),
    so the two long-form columns read the same words. Hand-written beside `msmarco_rouge_l`; sacrebleu's
    corpus BLEU agrees on the same tokens (tests/test_msmarco_metrics.py), but takes the references as
    streams padded with None and tokenizes them its own way. coco-caption adds 1e-9 to denominators
    against division by zero; here a corpus with no predicted token scores 0.0. A reference with no
    token takes no part, unless every reference of the question has none.

    "the cat sat" / "the cat sat down" and "a dog" / "a dog barked": 5 of 5 tokens match; lengths 5
    against 4 + 3 = 7, so exp(1 - 7/5) = 0.6703 (the sentence scores' mean is 0.6615).

    >>> round(msmarco_bleu_1(["the cat sat", "a dog"], [["the cat sat down"], ["a dog barked"]]), 4)
    0.6703
    """
    if not isinstance(predictions, list | tuple) or not isinstance(references, list | tuple) or not predictions:
        raise ValueError(f"predictions and references must be non-empty lists, got {predictions!r} and {references!r}")
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} reference lists")
    matched = pred_len = ref_len = 0
    for prediction, refs in zip(predictions, references):
        _check_answers(refs, "references")
        _check_prediction(prediction)
        pred = Counter(rouge_tokens(prediction))
        n = sum(pred.values())
        golds = [tokens for r in refs if (tokens := rouge_tokens(r))] or [[]]
        clip = Counter()
        for gold in golds:
            clip |= Counter(gold)  # the most of each word any one reference holds
        matched += sum((pred & clip).values())
        pred_len += n
        ref_len += min((abs(len(gold) - n), len(gold)) for gold in golds)[1]
    if matched == 0:
        return 0.0
    return matched / pred_len * min(1.0, math.exp(1 - ref_len / pred_len))


def provenance_em(prediction: str, answers: Sequence[str], retrieved_ids: Sequence[str], gold_ids: Sequence[str]) -> float:
    """EM with provenance: the answer counts only when a gold passage was among the retrieved ones,
    anywhere in the list. Looser than KILT's EM (KILT-EM), which counts it only at R-precision 1: the
    first R distinct retrieved ids those of a gold provenance set of R.

    >>> provenance_em("422", ["422"], ["REQ-AUTH-03", "BUG-1042"], ["REQ-AUTH-03"])
    1.0
    >>> provenance_em("422", ["422"], ["REQ-USER-02"], ["REQ-AUTH-03"])  # right answer, wrong source
    0.0
    """
    _check_answers(gold_ids, "gold_ids")
    if isinstance(retrieved_ids, str):  # its characters would be the ids: "p1" retrieved "p" and "1"
        raise ValueError(f"retrieved_ids must be a list of strings, got {retrieved_ids!r}")
    if not set(retrieved_ids) & set(gold_ids):
        return 0.0
    return exact_match(prediction, answers)

