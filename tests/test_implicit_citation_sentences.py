"""RAG-Token's implicit citations cite the sentences the evaluator splits, and change nothing else.

For tricky answers (numbers, abbreviations, initials, ellipses, quotes, lists, Chinese stops), each
sentence of the answer as the evaluator splits it (`eval.statements`) is given its own document; after
the citations are inserted (`implicit_citations.cited_answers`, the path `compare` and `ask` take):

(a) deleting each inserted " [n]" (one space, then the markers: the only whitespace added) gives the
    answer back exactly, and so does the evaluator's `strip_citations`;
(b) the evaluator splits the cited answer into the same sentences, each citing exactly its document
    (one a citation comes right before may lose an ellipsis opening it: `_opening`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lewisrag.eval.statements import sentence_spans, split_sentences, strip_citations
from lewisrag.rag_model import implicit_citations as ic
from lewisrag.rag_model.decoding import Decoded
from lewisrag.scoring.text import _LIST_MARKER_RE

K = 3  # documents per question; sentence k is given document k % K + 1, so neighbours cite different ones

TRICKY = [
    "The population is 71.3 million. It costs $3.50 today.",
    "He moved to the U.S. in 1990. He lives in the U.S.",
    "He lives in the U.S.",
    "Apples, e.g. Fuji, are sweet. J. Smith grows them. He sells them at the market, e.g.",
    "It was written by J.K. Rowling. She lives in the U.K.",
    "Dr. Smith leads it. Since 2010. He is No. 5 in the list. He said no.",
    "It reads JSON, XML, etc. It caches them.",
    "It reads JSON, XML, etc.\nIt caches them, etc.",
    "(It reads JSON, XML, etc.) It caches them.",
    "Version 3.5 is out, e.g. today. See example.com for details.",
    "Wait... What happened? It returns 422… Then the account is locked.",
    "He hesitated... then left. JSON… XML support came later. A, B, … and Z are letters.",
    'He said "yes." Then he left.',
    'The error is "Invalid credentials." It is shown in red. He said "Stop." and left.',
    "(See the manual.) It is short.",
    "It returns 422 ! Then it stops .",
    "Two facts:\n1. It returns 422.\n2. It locks the account",
    "- It returns 422\n- It locks the account.",
    "He lives in the U.S.\nShe lives in the U.K.\nThey met in 1990",
    "It ends here...\n...\nA new line starts.",
    "Wait...  ...\nIt ends here …",
    "1. one\n（一）\nIt costs $3.50. …",
    "登录失败时接口返回 422。前端弹出提示！账户会被锁定吗？会。",
    "“用户名或密码错误。”账户会被删除。",
    "香蕉……还有橙子。苹果、香蕉……等水果很好吃。他沉默了……",
    "由J.K.罗琳创作。它很有名｡",
    "第一行\n第二行。",
    "登录失败返回 422。Then the U.S. team fixed it.",
    "He lives in the U.S.\n… 然后他离开了",
    "It reads XML, etc. It caches them. 它读 JSON, etc.然后缓存",
    "一、登录失败返回 422。\n二、前端弹出提示",
]


class VocabTokenizer:
    """Decodes ids 3.. to the pieces of `vocab`; 0-2 are special (start, pad, end)."""

    all_special_ids = [0, 1, 2]

    def __init__(self, vocab: list[str]):
        self.vocab = vocab

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.vocab[i - 3] for i in ids if i not in self.all_special_ids)


def bart_like(text: str) -> list[str]:
    """Pieces as a byte-level BPE cuts them: a word with its space before it, each mark a token of its own."""
    return re.findall(r" ?[A-Za-z]+| ?\d+| ?[^\sA-Za-z\d]|\s", text)


def evaluator_sentences(text: str) -> list[tuple[int, int]]:
    """Where each sentence the evaluator splits `text` into lies in it (list markers and all)."""
    spans, out, pos = sentence_spans(text), [], 0
    for span in spans:
        a = text.index(span, pos)
        out.append((a, a + len(span)))
        pos = a + len(span)
    return out


def cite_as_rag_token(text: str, pieces: list[str]) -> str:
    """The answer as `cited_answers` cites it, each evaluator sentence's tokens leaning on its own document."""
    whole = "".join(pieces)  # the decode, which `cited_answers` strips
    assert whole.strip() == text
    doc = [0] * len(pieces)  # each piece's document: that of the sentence its first visible character is in
    pos = -(len(whole) - len(whole.lstrip()))  # offsets into text
    sentences = evaluator_sentences(text)
    for t, piece in enumerate(pieces):
        first = pos + len(piece) - len(piece.lstrip())
        doc[t] = next((k % K for k, (a, b) in enumerate(sentences) if first < b), 0)
        pos += len(piece)
    post = torch.full((len(pieces) + 1, K), 0.05)  # the end token's row too
    post[torch.arange(len(pieces)), torch.tensor(doc)] = 0.9
    seq = torch.tensor([[2, *range(3, 3 + len(pieces)), 2]])
    decoded = Decoded(seq, post[None], torch.zeros(1))
    return ic.cited_answers(decoded, VocabTokenizer(pieces), [[str(n) for n in range(1, K + 1)]], "token")[0]


def _opening(sentence: str) -> str:
    """A sentence without an ellipsis opening it: the evaluator makes one a piece of its own, dropped, when a
    citation comes right before it on its line ('He said "yes." [1] … Then', `scoring.text.
    _ellipsis_ends_sentence`), which a sentence cited after its last character cannot avoid."""
    return _LIST_MARKER_RE.sub("", re.sub(r"^(?:\.\.\.|[…⋯])+\s*", "", sentence))  # and "- " or "1. " after it


def check(text: str, pieces: list[str]) -> None:
    cited = cite_as_rag_token(text, pieces)
    # (a) the answer is unchanged but for " [n]" markers
    assert re.sub(r" (?:\[\d+\])+", "", cited) == text, cited
    assert strip_citations(cited) == text, cited
    # (b) the evaluator reads the same sentences, each citing its own document
    before, after = split_sentences(text), split_sentences(cited)
    assert [_opening(s.text) for s in after] == [_opening(s.text) for s in before], cited
    assert [s.citations for s in after] == [(str(k % K + 1),) for k in range(len(before))], cited


@pytest.mark.parametrize("text", TRICKY)
def test_citations_follow_the_evaluators_sentences(text):
    check(text, bart_like(text))
    check(text, list(text))  # one character a token: a stop never a token of its own with its space


def test_citations_follow_the_evaluators_sentences_with_a_byte_level_tokenizer():
    """The pieces the generator's own tokenizer decodes to (`pieces_of`: "U", ".", "S", ".", a character over
    several tokens)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(Path(ic.__file__).parents[1] / "pretrained" / "generator-small")
    for text in TRICKY:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids).strip() == text  # BART's tokenizer decodes it with a space before
        check(text, ic.pieces_of(tok, ids))


def test_a_trailing_abbreviation_keeps_its_dot():
    """The marker went before the last dot, which was the abbreviation's: "in the U.S [1].". """
    assert cite_as_rag_token("He lives in the U.S.", bart_like("He lives in the U.S.")) == "He lives in the U.S. [1]"
    assert ic.cite([("It moved to the U.S.", ["1"]), ("Written by J.K.", ["2"])]) == \
        "It moved to the U.S. [1] Written by J.K. [2]"
    assert ic.cite([("It reads XML, etc.", ["1"]), ("He said no.", ["2"])]) == "It reads XML, etc. [1] He said no [2]."
    assert ic.cite([("It reads XML, etc.", ["1"])]) == "It reads XML, etc. [1]"
    assert ic.cite([("Ana Kel leads it.", ["1"])]) == "Ana Kel leads it [1]."  # a stop: before it, as before


def test_lines_quotes_and_ellipses_keep_their_sentences_and_layout():
    """Sentences ended only at a word's stop ('He said "yes [1]." Then ...' was one sentence for the
    evaluator, citing two documents) and were joined by a space (a list lost its lines)."""
    assert cite_as_rag_token('He said "yes." Then he left.', bart_like('He said "yes." Then he left.')) == \
        'He said "yes." [1] Then he left [2].'
    text = "Two facts:\n1. It returns 422.\n2. It locks the account"
    # "Two facts:" is a label, no sentence of the evaluator's (splitter version 15): its tokens lean on the first
    # sentence's passage, and its marker goes with it where the evaluator reads the answer
    assert cite_as_rag_token(text, bart_like(text)) == "Two facts: [1]\n1. It returns 422 [1].\n2. It locks the account [2]"
    assert cite_as_rag_token("Wait... What?", bart_like("Wait... What?")) == "Wait [1]... What [2]?"


FRAGMENTS = [
    "It costs $3.50.", "The population is 71.3 million.", "He moved to the U.S.", "in 1990.", "Dr. Smith leads it.",
    "e.g. apples.", "J. Smith wrote it.", "J.K. Rowling did.", "It reads JSON, XML, etc.", "then more.", "Wait...",
    "What?", "He hesitated…", 'He said "yes."', "“用户名或密码错误。”", "(See above.)", "登录失败返回 422。",
    "前端弹出提示！", "会吗？", "香蕉……还有橙子", "由J.K.罗琳创作。", "No. 5 won.", "He said no.", "It works!",
    "Version 3.5 is out", "see example.com", "- a bullet item", "Facts:", "It stops .", "...", "…", "1. one", "2) two",
    "（一）", "①", "etc.", "U.S.", "No.", "5", "J.", "'Yes.'", "‘好。’", "「错误。」列表", "!",
]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(FRAGMENTS), st.sampled_from([" ", " ", "\n", ""])), min_size=1, max_size=6))
def test_any_mix_of_tricky_sentences(parts):
    text = "".join(f + sep for f, sep in parts).strip()
    check(text, bart_like(text))


def test_etc_ending_a_sentence_inside_a_line_keeps_its_dot_and_an_ellipsis_opening_a_line_its_text():
    """Version 9 of the evaluator read the "[" after "etc. [1]" as what followed the dot, so the marker went
    before the dot ("XML, etc [1]. It caches them"), and it gave an ellipsis opening a line to the citation
    ending the line before, dropping it ("… 然后" read as "然后")."""
    text = "It reads XML, etc. It caches them."
    cited = cite_as_rag_token(text, bart_like(text))
    assert cited == "It reads XML, etc. [1] It caches them [2]."
    text = "He lives in the U.S.\n… 然后他离开了"
    cited = cite_as_rag_token(text, bart_like(text))
    assert cited == "He lives in the U.S. [1]\n… 然后他离开了 [2]"
    assert [(s.text, s.citations) for s in split_sentences(cited)] == [("He lives in the U.S.", ("1",)),
                                                                       ("… 然后他离开了", ("2",))]
