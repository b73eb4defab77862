"""Implicit citations for the Lewis model: the latent document as a source the evaluator can check.

Prompt-stitching RAG cites passages as [n] because the generator is asked to. The Lewis model is
never asked, yet its posterior over documents says which passage an answer came from:

- RAG-Sequence generates the whole answer from one document at a time, so every sentence of the
  answer cites the document with the highest p(z | x, y) (the answer as one sentence, cited once,
  left all but its last sentence uncited);
- RAG-Token may switch documents at every token, so each sentence cites the documents its tokens
  leaned on: those whose mean per-token posterior p(z | x, y_≤t) over the sentence's tokens is at
  least `min_share` (and always the top one).

The cited answer reads like a stitched one ("Ana Kel leads Valdoria [p1].") and goes through the
same citation metrics, so the two paradigms are scored alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lewisrag.scoring.markers import blank_footnote_definitions
from lewisrag.scoring.text import sentence_bounds, word_dot_ends_sentence

_STOPS = frozenset("。！？｡.!?．…⋯")  # the marks a sentence's final run of stops is made of
_CLOSERS = frozenset("\"'’”」』)）")  # closing quotes and brackets: a stop after one follows the quote


def sequence_citation(posterior: torch.Tensor, doc_ids: Sequence[str]) -> str:
    """The id of the document with the highest p(z | x, y); posterior is (K,).

    >>> sequence_citation(torch.tensor([0.1, 0.7, 0.2]), ["a", "b", "c"])
    'b'
    """
    if posterior.shape != (len(doc_ids),):
        raise ValueError(f"posterior: expected ({len(doc_ids)},), got {tuple(posterior.shape)}")
    return doc_ids[int(posterior.argmax())]


def sentences_of(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of `text`, without its spaces and list marker: as the evaluator's splitter
    finds it
    (`scoring.text.sentence_bounds`, the cuts of `eval.statements.sentence_spans`), so a dot inside
    "71.3", "$3.50" or "example.com", after "U.S.", "e.g." or initials, an ellipsis that trails off, a stop
    inside quotes and a numbered list's "1." end nothing; a piece without a letter or digit (a line of
    "...") and a Markdown footnote definition line ("[^1]: ...") are no sentences, as the splitter drops them.

    >>> t = 'He said "yes." Then he moved to the U.S. in 1990. Wait... What? 价格上涨 3.5%。'
    >>> [t[a:b] for a, b in sentences_of(t)]
    ['He said "yes."', 'Then he moved to the U.S. in 1990.', 'Wait...', 'What?', '价格上涨 3.5%。']
    """
    text = blank_footnote_definitions(text)  # as spaces: every other sentence keeps its indices
    return [(a, b) for a, b in sentence_bounds(text) if any(c.isalnum() for c in text[a:b])]


def token_citations(pieces: Sequence[str], posterior: torch.Tensor, doc_ids: Sequence[str],
                    min_share: float = 0.3) -> list[tuple[str, list[str]]]:
    """Sentences of the answer (`sentences_of`) with the documents each one leaned on.

    `pieces` are the decoded text pieces of the generated tokens (joined, they give the answer);
    `posterior` is (T, K): row t is p(z | x, y_≤t) for piece t.

    >>> post = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.2, 0.8], [0.4, 0.6]])
    >>> token_citations(["Ana Kel", ".", " Since 2010", "."], post, ["p1", "p2"])
    [('Ana Kel.', ['p1']), ('Since 2010.', ['p2', 'p1'])]
    """
    whole = "".join(pieces)
    return [(whole[a:b], ids) for a, b, ids in _token_citation_spans(pieces, posterior, doc_ids, min_share)]


def _token_citation_spans(pieces: Sequence[str], posterior: torch.Tensor, doc_ids: Sequence[str],
                          min_share: float) -> list[tuple[int, int, list[str]]]:
    """(start, end, cited ids) of each sentence of "".join(pieces). A sentence's tokens are the pieces
    that overlap it (a piece that adds "", part of a character, goes with the piece that completes it)."""
    if posterior.shape != (len(pieces), len(doc_ids)):
        raise ValueError(f"posterior: expected ({len(pieces)}, {len(doc_ids)}), got {tuple(posterior.shape)}")
    ranges, pos = [], 0  # each piece's characters in the whole answer
    for piece in pieces:
        ranges.append((pos, pos + len(piece)))
        pos += len(piece)
    for t in range(len(ranges) - 2, -1, -1):
        if ranges[t][0] == ranges[t][1]:
            ranges[t] = ranges[t + 1]
    out = []
    for a, b in sentences_of("".join(pieces)):
        rows = [t for t, (s, e) in enumerate(ranges) if s < b and e > a]
        mean = posterior[rows].mean(0)  # (K,)
        order = torch.argsort(mean, descending=True).tolist()
        out.append((a, b, [doc_ids[order[0]]] + [doc_ids[i] for i in order[1:] if mean[i] >= min_share]))
    return out


def marker_at(text: str, a: int, b: int) -> int:
    """Where the citation marker of the sentence text[a:b] goes: before its final stops, as a prompted
    model writes one ("Ana Kel leads it [1]."), unless that would change the sentence as written or as the
    evaluator reads it: after a closing quote or bracket ('He said "yes." [1]', "(see above.) [1]"), after
    an abbreviation's or initials' dot ("in the U.S. [1]", "by J.K. [1]", "XML, etc. [1] It caches them": the
    evaluator reads what follows the citations to tell whether "etc." ends a sentence), after a sentence that
    ends without a stop (a list item, a line). The marker goes in as " [n]" at the returned index.

    >>> [marker_at(t, 0, len(t)) for t in ("Ana Kel.", "in the U.S.", 'He said "yes."', "登录失败。", "Wait...")]
    [7, 11, 14, 4, 4]
    >>> marker_at("XML, etc. It caches them.", 0, 9)  # after the dot: "XML, etc. [1] It caches them"
    9
    """
    e = b
    while e > a and text[e - 1] in _CLOSERS:
        e -= 1
    r = e  # the final run of stops is text[r:e], closing quotes and brackets text[e:b]
    while r > a and text[r - 1] in _STOPS:
        r -= 1
    if r == e:
        return b  # no stop: "Facts:", a list item, a line
    if (text[r] == "." and text[r - 1].isalpha() and ".." not in text[r:e]
            and not word_dot_ends_sentence(text, r, "a")):
        return b  # an abbreviation's or initials' dot: "U.S.", "e.g.", "J.K.", "etc."
    if e < b or text[r - 1].isspace() or text[r - 1] in _CLOSERS:
        return b  # 'He said "yes." [1]', "(see above.) [1]", "It stops . [1]", 'He said "yes."... [1]'
    return r


def _insert_citations(text: str, spans: Sequence[tuple[int, int, Sequence[str]]]) -> str:
    """`text` with " [id]..." inserted for each (start, end, ids) sentence, at `marker_at`."""
    out, last = [], 0
    for a, b, ids in spans:
        if not ids:
            continue
        at = marker_at(text, a, b)
        out += [text[last:at], " " + "".join(f"[{i}]" for i in ids)]
        last = at
    return "".join(out) + text[last:]


def pieces_of(tokenizer, ids: Sequence[int]) -> list[str]:
    """The text each token adds to the decoded answer; the pieces join to the whole decode.

    A byte-level tokenizer can split one character over several tokens: until its last byte
    arrives the partial decode ends in U+FFFD, so those tokens add "" and the token that completes
    the character adds it whole.
    """
    pieces, before = [], ""
    for t in range(len(ids)):
        now = tokenizer.decode(ids[: t + 1], skip_special_tokens=True)
        if now.endswith("\ufffd") and t < len(ids) - 1:  # a character still incomplete: wait for its bytes
            pieces.append("")
            continue
        pieces.append(now[len(before):] if now.startswith(before) else now)
        before = now
    return pieces


def cited_answers(decoded, tokenizer, doc_ids: Sequence[Sequence[str]], variant: str, min_share: float = 0.3) -> list[str]:
    """Answers with implicit citations from `RagModel.generate(..., return_evidence=True)`.

    `decoded.sequences` is (B, T) with the decoder start token first; `decoded.doc_posterior` is
    (B, K) for RAG-Sequence and (B, T, K) for RAG-Token (row t for token t+1, the last row padding); `doc_ids` gives
    the K retrieved passage ids of each question.
    """
    out = []
    specials = set(tokenizer.all_special_ids)
    for b, seq in enumerate(decoded.sequences.tolist()):
        ids = seq[1:]
        keep = [t for t, i in enumerate(ids) if i not in specials]
        text = tokenizer.decode([ids[t] for t in keep], skip_special_tokens=True).strip()
        if variant == "sequence":  # one document for the whole answer: each of its sentences cites it
            cited = [sequence_citation(decoded.doc_posterior[b], doc_ids[b])]
            out.append(_insert_citations(text, [(s, e, cited) for s, e in sentences_of(text)]))
            continue
        pieces = pieces_of(tokenizer, [ids[t] for t in keep])
        post = decoded.doc_posterior[b][keep]  # (T', K)
        spans = _token_citation_spans(pieces, post, doc_ids[b], min_share)
        out.append(_insert_citations("".join(pieces), spans).strip())
    return out


def cite(sentences: Sequence[tuple[str, list[str]]]) -> str:
    """Sentences joined by a space, each with its citations inserted where `marker_at` says (before the
    final stops, unless they end an abbreviation or a quote: removing each " [id]..." gives the text back).

    >>> cite([("Ana Kel.", ["p1"]), ("Since 2010", ["p2", "p1"]), ("It moved to the U.S.", ["p2"])])
    'Ana Kel [p1]. Since 2010 [p2][p1] It moved to the U.S. [p2]'
    """
    spans, pos = [], 0
    for text, ids in sentences:
        spans.append((pos, pos + len(text), ids))
        pos += len(text) + 1
    return _insert_citations(" ".join(text for text, _ in sentences), spans)
