"""Implicit citations for the Lewis model: the latent document as a source the evaluator can check.

Prompt-stitching RAG cites passages as [n] because the generator is asked to. The Lewis model is
never asked, yet its posterior over documents says which passage an answer came from:

- RAG-Sequence generates the whole answer from one document at a time, so the answer cites the
  document with the highest p(z | x, y);
- RAG-Token may switch documents at every token, so each sentence cites the documents its tokens
  leaned on: those whose mean per-token posterior p(z | x, y_≤t) over the sentence's tokens is at
  least `min_share` (and always the top one).

The cited answer reads like a stitched one ("Ana Kel leads Valdoria [p1].") and goes through the
same citation metrics, so the two paradigms are scored alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lewisrag.scoring.text import is_cjk, word_dot_ends_sentence

ALWAYS_END = frozenset("。！？｡")  # end a sentence wherever they stand


def sequence_citation(posterior: torch.Tensor, doc_ids: Sequence[str]) -> str:
    """The id of the document with the highest p(z | x, y); posterior is (K,).

    >>> sequence_citation(torch.tensor([0.1, 0.7, 0.2]), ["a", "b", "c"])
    'b'
    """
    if posterior.shape != (len(doc_ids),):
        raise ValueError(f"posterior: expected ({len(doc_ids)},), got {tuple(posterior.shape)}")
    return doc_ids[int(posterior.argmax())]


def ends_sentence(text: str, end: int) -> bool:
    """Whether a sentence ends with the piece that ends at text[end - 1], `text` the whole answer.

    。！？ always end one; "." "!" "?" only before whitespace, a CJK character or the end of the text,
    so the dot of "71.3", "$3.50" or "example.com" (a token of its own for BART) ends nothing; nor does
    a dot after an abbreviation ("e.g.", "Dr.", "U.S.", "No." before a number, "etc." before a small
    letter) or a name's initials ("J. Smith"): the word before a dot is judged by
    `scoring.text.word_dot_ends_sentence`, as the evaluator's splitter (`eval.statements`) judges it; the
    splitter's ellipses, quotes and numbered lists are not followed here.

    >>> [ends_sentence(t, 19) for t in ("The population is 71.3 million.", "Ana Kel leads it. Since 2010")]
    [False, False]
    >>> ends_sentence("Ana Kel leads it. Since 2010", 17), ends_sentence("He moved to the U.S. in 1990", 20)
    (True, False)
    """
    i = len(text[:end].rstrip()) - 1  # the piece's last visible character
    if i < 0:
        return False
    if text[i] in ALWAYS_END:
        return True
    if text[i] not in ".!?":
        return False
    nxt = text[i + 1 : i + 2]
    if nxt and not (nxt.isspace() or is_cjk(nxt) or nxt in ALWAYS_END):
        return False  # 71.3, example.com: the stop sits inside a token
    if text[i] != "." or (i > 0 and text[i - 1] == "."):
        return True
    return word_dot_ends_sentence(text, i, text[i + 1 :].lstrip()[:1])


def token_citations(pieces: Sequence[str], posterior: torch.Tensor, doc_ids: Sequence[str],
                    min_share: float = 0.3) -> list[tuple[str, list[str]]]:
    """Sentences of the answer (ending where `ends_sentence` says) with the documents each one leaned on.

    `pieces` are the decoded text pieces of the generated tokens (joined, they give the answer);
    `posterior` is (T, K): row t is p(z | x, y_≤t) for piece t.

    >>> post = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.2, 0.8], [0.4, 0.6]])
    >>> token_citations(["Ana Kel", ".", " Since 2010", "."], post, ["p1", "p2"])
    [('Ana Kel.', ['p1']), ('Since 2010.', ['p2', 'p1'])]
    """
    if posterior.shape != (len(pieces), len(doc_ids)):
        raise ValueError(f"posterior: expected ({len(pieces)}, {len(doc_ids)}), got {tuple(posterior.shape)}")
    whole, end = "".join(pieces), 0
    out, start, text = [], 0, ""
    for t, piece in enumerate(pieces):
        text += piece
        end += len(piece)
        if t == len(pieces) - 1 or (piece.strip() and ends_sentence(whole, end)):
            if text.strip():
                mean = posterior[start : t + 1].mean(0)  # (K,)
                order = torch.argsort(mean, descending=True).tolist()
                cited = [doc_ids[order[0]]] + [doc_ids[i] for i in order[1:] if mean[i] >= min_share]
                out.append((text.strip(), cited))
            start, text = t + 1, ""
    return out


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
        if variant == "sequence":
            out.append(cite([(text, [sequence_citation(decoded.doc_posterior[b], doc_ids[b])])]) if text else text)
            continue
        pieces = pieces_of(tokenizer, [ids[t] for t in keep])
        post = decoded.doc_posterior[b][keep]  # (T', K)
        out.append(cite(token_citations(pieces, post, doc_ids[b], min_share)) if pieces else text)
    return out


def cite(sentences: Sequence[tuple[str, list[str]]]) -> str:
    """Sentences with their citations inserted before the final punctuation.

    >>> cite([("Ana Kel.", ["p1"]), ("Since 2010", ["p2", "p1"])])
    'Ana Kel [p1]. Since 2010 [p2][p1]'
    """
    parts = []
    for text, ids in sentences:
        marks = "".join(f"[{i}]" for i in ids)
        end = len(text) - len(text.rstrip(".!?。！？｡"))
        body, punct = (text[:-end], text[-end:]) if end else (text, "")
        parts.append(f"{body} {marks}{punct}" if marks else text)
    return " ".join(parts)
