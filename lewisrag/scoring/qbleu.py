"""Q-BLEU-1: BLEU-1 mixed with an answerability score (Nema & Khapra 2018, "Towards a Better Metric for
Evaluating Question Generation Systems", EMNLP), the metric Lewis et al. 2020 report for Jeopardy question
generation (their Table 2).

The tokens of a question fall in four classes: named entities (NE), question words (Q: who, what, ...;
after "what"/"which" the next word too, as it names the answer type), relevant content words (R) and
function words (F). For each class i, P_i and R_i are the clipped overlap of that class's tokens in the
candidate and the reference, over the candidate's and the reference's count. Then

    P_avg = sum_i w_i P_i,   R_avg = sum_i w_i R_i,   answerability = 2 P_avg R_avg / (P_avg + R_avg)
    Q-BLEU-1 = delta * answerability + (1 - delta) * BLEU-1

Weights: w_ne = 0.6, w_q = 0.2, w_r = 0.1, w_f = 1 - 0.6 - 0.2 - 0.1 = 0.1, delta = 0.7. Source: the
authors' reference implementation, github.com/PrekshaNema25/Answerability-Metric: the run command in its
README (--ner_weight 0.6 --qt_weight 0.2 --re_weight 0.1 --delta 0.7), the module constants of its
test_components.py and its tests/test_answerability_score.py; delta=0.7 is also the default of
answerability_score.py (which has no default for the weights). The paper tunes the weights per data set;
Lewis et al. do not say which they used, so these defaults are our choice.

Where we differ from answerability_score.py, and why:
- Combination: we follow the paper (F-mean of the weighted P and R). The script instead sums w_i * F1_i,
  with each class's P and R a coco-caption BLEU-1 (brevity penalty included) in both directions.
- A class absent from both texts carries no information: it is left out and the remaining weights are
  rescaled to sum to 1 (the formula above leaves it 0/0; the script scores such a class 0, so two identical
  questions without a wh-word score at most 0.8 answerability, and Jeopardy clues rarely have one).
  A class present on one side only scores P_i = R_i = 0.
- Named entities: the script takes every capitalised whitespace token except a leading wh-word (so "Is"
  in "Is this ...?" is an entity) and runs no NER model; a model would not be available offline anyway.
  We take capitalised tokens not at a sentence start, numbers ("1921", "4,350", "12.9"), and a
  sentence-initial capitalised token that is capitalised mid-sentence in either text ("Valdoria joined
  ..." vs "... when Valdoria joined").
- Function words: the script hard-codes (most of) NLTK's English stopword list; we write our own fixed list
  below (articles, determiners, pronouns, prepositions, conjunctions, auxiliaries, clitic fragments), so no
  corpus is fetched at run time.
- Tokens: the script splits on whitespace, then lowercases and drops punctuation with the Stanford PTB
  tokenizer (Java). We use a regular expression: runs of letters, runs of digits (with inner "," or "."),
  one token per CJK character (as `lewisrag.scoring.qa.answer_tokens`), NFKC-folded and compared
  lowercased. CJK characters have no case, so in Chinese only numbers are entities; the rest are content
  words. Overlaps are clipped counts (a repeated word matches at most as often as the other side has it).
- BLEU-1: the script uses coco-caption's sentence BLEU-1 on PTB tokens (punctuation dropped, brevity
  penalty). We reuse `lewisrag.scoring.qa.bleu_1` (sacrebleu sentence BLEU, unigrams, lowercased, 13a
  tokenizer or "zh" for CJK, brevity penalty), the BLEU-1 this project reports, so with one reference
  the two columns agree (with several, Q-BLEU-1 scores each and keeps the best, while the BLEU-1 column
  scores against all at once); against the script they differ mainly on punctuation (13a keeps "?" as a token).
- References: the script scores one reference per question; we score each reference and keep the best.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from lewisrag.scoring.qa import _check_answers, _check_prediction, bleu_1
from lewisrag.scoring.text import split_cjk

W_NE = 0.6  # named entities
W_Q = 0.2  # question words
W_R = 0.1  # relevant content words
W_F = 0.1  # function words: 1 - W_NE - W_Q - W_R
DELTA = 0.7  # weight of answerability against BLEU-1
WEIGHTS: dict[str, float] = {"ne": W_NE, "q": W_Q, "r": W_R, "f": W_F}

QUESTION_WORDS = frozenset({"who", "whom", "whose", "what", "which", "where", "when", "why", "how"})
_ANSWER_TYPE_CUE = frozenset({"what", "which"})  # the word after these names the answer type

# Our own list (see the module docstring): determiners and quantifiers; pronouns; prepositions; conjunctions;
# auxiliaries and modals; adverbial particles; clitic fragments left by splitting at apostrophes (don't, it's).
_FUNCTION_WORDS_TEXT = """
a an the this that these those some any each every all both either neither no such own other another same
few more most much many several
i me my mine myself we us our ours ourselves you your yours yourself yourselves he him his himself she her
hers herself it its itself they them their theirs themselves
about above across after against along among around at before behind below beneath beside between beyond
by down during except for from in inside into near of off on onto out outside over per since through
throughout till to toward towards under until up upon via with within without
and but or nor so yet if than then because as while although though unless whether once
am is are was were be been being do does did doing have has had having can could may might must shall
should will would
not very too only just also again further here there now ever still
s t d ll m re ve don
"""
FUNCTION_WORDS = frozenset(_FUNCTION_WORDS_TEXT.split())

_CLOSED_CLASS = QUESTION_WORDS | FUNCTION_WORDS

# a number with inner separators ("4,350", "12.9"), a run of letters, a run of digits
_TOKEN_RE = re.compile(r"\d+(?:[.,]\d+)+|[^\W\d_]+|\d+")
_SENTENCE_END_RE = re.compile(r"[.!?。]")


class Token(NamedTuple):
    text: str  # as written, after NFKC
    key: str  # what is compared: lowercased, thousands separators dropped
    starts_sentence: bool


def question_tokens(text: str) -> list[Token]:
    """Tokens with their case and whether they open a sentence (first token, or after . ! ? 。).

    >>> toks = question_tokens("Is it 4,350? Yes, Valdoria's 2nd.")
    >>> [t.text for t in toks], [t.starts_sentence for t in toks]
    (['Is', 'it', '4,350', 'Yes', 'Valdoria', 's', '2', 'nd'], [True, False, False, True, False, False, False, False])
    >>> [t.key for t in question_tokens("瓦尔多利亚在１９２１年")]
    ['瓦', '尔', '多', '利', '亚', '在', '1921', '年']
    """
    text = unicodedata.normalize("NFKC", text)
    out: list[Token] = []
    last_end = 0
    for m in _TOKEN_RE.finditer(text):
        starts = not out or bool(_SENTENCE_END_RE.search(text, last_end, m.start()))
        for j, piece in enumerate(split_cjk(m.group())):
            out.append(Token(piece, piece.lower().replace(",", ""), starts and j == 0))
        last_end = m.end()
    return out


def _capitalised(tok: Token) -> bool:
    return tok.text[0].isupper()


def entity_keys(toks: Sequence[Token]) -> set[str]:
    """Keys of the capitalised tokens inside a sentence that are not question or function words."""
    return {
        t.key for t in toks
        if _capitalised(t) and not t.starts_sentence and t.key not in _CLOSED_CLASS
    }


def _is_entity(tok: Token, known: set[str]) -> bool:
    if any(ch.isdigit() for ch in tok.key):
        return True
    return _capitalised(tok) and (not tok.starts_sentence or tok.key in known)


def classify(toks: Sequence[Token], known_entities: set[str]) -> dict[str, Counter[str]]:
    """Token keys by class: "ne", "q", "r", "f" (see the module docstring).

    >>> c = classify(question_tokens("Which river flows through Kelmora in 1921"), set())
    >>> {k: sorted(v) for k, v in c.items()}
    {'ne': ['1921', 'kelmora'], 'q': ['river', 'which'], 'r': ['flows'], 'f': ['in', 'through']}
    >>> {k: sorted(v) for k, v in classify(question_tokens("What is the capital of Valdoria"), set()).items()}
    {'ne': ['valdoria'], 'q': ['what'], 'r': ['capital'], 'f': ['is', 'of', 'the']}
    """
    classes: dict[str, Counter[str]] = {name: Counter() for name in WEIGHTS}
    after_cue = False
    for tok in toks:
        if tok.key in QUESTION_WORDS:
            name = "q"
        elif _is_entity(tok, known_entities):
            name = "ne"
        elif after_cue and tok.key not in FUNCTION_WORDS:  # "what river", not "what is": "is" names no answer type
            name = "q"
        else:
            name = "f" if tok.key in FUNCTION_WORDS else "r"
        classes[name][tok.key] += 1
        after_cue = tok.key in _ANSWER_TYPE_CUE
    return classes


def _overlap(side: Counter[str], other: Counter[str]) -> float:
    """Clipped matches over the size of `side`: precision when `side` is the candidate, recall when the reference."""
    if not side or not other:
        return 0.0
    return sum((side & other).values()) / sum(side.values())


def answerability(prediction: str, reference: str) -> float:
    """Nema & Khapra's answerability of `prediction` against one reference question, in [0, 1].

    NE {kelmora, 1921} of {valdoria, kelmora, 1921}: P = 2/3, R = 1; Q {which, river} both: 1, 1;
    R {runs} vs {flows}: 0, 0; F {through, and, in} vs {through, in}: 2/3, 1.
    P_avg = .6*2/3 + .2 + .1*2/3 = 2/3, R_avg = .6 + .2 + .1 = .9, F = 2*(2/3)*.9 / (2/3 + .9) = 36/47.

    >>> round(answerability("Which river runs through Valdoria and Kelmora in 1921",
    ...                     "Which river flows through Kelmora in 1921"), 4)
    0.766
    """
    pred, ref = question_tokens(prediction), question_tokens(reference)
    if not pred or not ref:
        return 0.0
    known = entity_keys(pred) | entity_keys(ref)
    cp, cr = classify(pred, known), classify(ref, known)
    present = [name for name in WEIGHTS if cp[name] or cr[name]]
    total = sum(WEIGHTS[name] for name in present)
    p_avg = sum(WEIGHTS[name] * _overlap(cp[name], cr[name]) for name in present) / total
    r_avg = sum(WEIGHTS[name] * _overlap(cr[name], cp[name]) for name in present) / total
    return 0.0 if p_avg + r_avg == 0 else 2 * p_avg * r_avg / (p_avg + r_avg)


def q_bleu1(prediction: str, references: Sequence[str]) -> float:
    """Q-BLEU-1 = DELTA * answerability + (1 - DELTA) * BLEU-1, each against one reference; best over the
    references. A prediction without a token scores 0.0; an empty reference list, or a prediction that is
    not a string, raises ValueError (as `bleu_1` does).

    Answerability 36/47 (see `answerability`); BLEU-1 = 6 of 9 unigrams, no brevity penalty = 2/3;
    0.7 * 36/47 + 0.3 * 2/3 = 34.6/47.

    >>> round(q_bleu1("Which river runs through Valdoria and Kelmora in 1921",
    ...               ["Which river flows through Kelmora in 1921"]), 4)
    0.7362
    """
    _check_answers(references, "references")
    _check_prediction(prediction)  # None raised a TypeError from unicodedata, naming neither
    if not question_tokens(prediction):
        return 0.0
    scores = (DELTA * answerability(prediction, ref) + (1 - DELTA) * bleu_1(prediction, [ref]) for ref in references)
    return min(1.0, max(scores))  # min: sacrebleu's BLEU-1 of identical strings is 1 + 4e-16
