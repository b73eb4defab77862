"""What changes between the paper's tasks when a RAG model (or the closed-book baseline) trains on them.

The model, the losses and the loop are the same for every task (Lewis et al. 2020 fine-tune the
same architecture on each); only three things differ:

- the generator's vocabulary: FEVER labels are single output tokens ("we map each FEVER class
  label ... to single output tokens", §3.4), so the three label strings are added to the tokenizer
  as tokens of their own when it would split them, and the generator's embeddings grow to match;
- the dev score that picks the best checkpoint: exact match for QA, Q-BLEU-1 for Jeopardy, label
  accuracy for FEVER;
- how FEVER is answered: by the label whose whole target sequence the model finds most likely
  (`label_log_probs`), which is greedy decoding restricted to the three labels. Restricting to
  SUPPORTS and REFUTES gives the paper's 2-way accuracy from the same model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from lewisrag.data.io import InputError
from lewisrag.data.tasks import LABELS, NEI

DEV_METRIC = {"qa": "em", "jeopardy": "q_bleu1", "fever": "acc3"}  # log.jsonl's dev_<metric>


def prepare_generator(task: str, generator, tokenizer) -> bool:
    """Give FEVER's labels one token each in `tokenizer` and `generator` (in place); True if the
    vocabulary grew. Other tasks, and a tokenizer that has them already (a FEVER checkpoint), are
    left alone.

    A new label's embedding starts as the mean of the embeddings of the pieces the old vocabulary
    split its lower-cased word into ("supports" -> "sup", "ports"): three distinct rows from what
    the model already knows. transformers' own start (every new row the mean of the whole
    vocabulary) gives the three labels the same logit, and a small generator then took hundreds
    of steps to tell them apart. The label tokens are ordinary (not special) tokens, so decoding
    keeps them.
    """
    if task != "fever" or all(len(label_ids(tokenizer, label)) == 1 for label in LABELS):
        return False
    pieces = [label_ids(tokenizer, label.lower()) for label in LABELS]
    tokenizer.add_tokens(list(LABELS))
    generator.resize_token_embeddings(len(tokenizer), mean_resizing=False)  # the rows are set below
    emb = generator.get_input_embeddings().weight
    with torch.no_grad():
        for label, ids in zip(LABELS, pieces):
            emb[label_ids(tokenizer, label)[0]] = emb[ids].mean(0)
    if any(len(label_ids(tokenizer, label)) != 1 for label in LABELS):
        raise InputError("--generator", f"its tokenizer does not keep {LABELS} as single tokens after adding them")
    return True


def label_ids(tokenizer, label: str) -> list[int]:
    return tokenizer(label, add_special_tokens=False)["input_ids"]


def predicted_label(scores: Sequence[float], two_way: bool = False) -> str:
    """The label with the highest log-probability among LABELS (or SUPPORTS/REFUTES when `two_way`).

    >>> predicted_label([-3.0, -2.0, -1.0]), predicted_label([-3.0, -2.0, -1.0], two_way=True)
    ('NOT ENOUGH INFO', 'REFUTES')
    """
    allowed = [i for i, label in enumerate(LABELS) if not (two_way and label == NEI)]
    return LABELS[max(allowed, key=lambda i: scores[i])]


def fever_accuracy(scores: Sequence[Sequence[float]], gold: Sequence[str]) -> dict:
    """acc3 over every claim, and acc2 over the SUPPORTS/REFUTES claims with NOT ENOUGH INFO ruled
    out (the paper's 2-way setting, here from the 3-way model); also the per-claim predictions. An
    accuracy over no claims is None (null in the stage record; NaN there was refused by the next
    --resume), with its reason under "nan_reasons", as the evaluator's records keep theirs.

    >>> fever_accuracy([[-1, -2, -3], [-1, -2, -0.5]], ["SUPPORTS", "REFUTES"])["acc2"]
    0.5
    >>> r = fever_accuracy([[-1, -2, -3]], ["NOT ENOUGH INFO"]); r["acc3"], r["acc2"], r["nan_reasons"]
    (0.0, None, {'acc2': 'no SUPPORTS or REFUTES claim to score'})
    """
    pred3 = [predicted_label(s) for s in scores]
    two = [(predicted_label(s, two_way=True), g) for s, g in zip(scores, gold) if g != NEI]
    out = {"acc3": sum(p == g for p, g in zip(pred3, gold)) / len(gold) if gold else None,
           "acc2": sum(p == g for p, g in two) / len(two) if two else None, "n": len(gold), "n2": len(two)}
    reasons = {"acc3": "no claim to score", "acc2": "no SUPPORTS or REFUTES claim to score"}
    if missing := {k: why for k, why in reasons.items() if out[k] is None}:  # absent otherwise: results.json as before
        out["nan_reasons"] = missing
    return out | {"predictions": pred3}


@torch.no_grad()
def label_log_probs(score_batch: Callable[[list[str], torch.Tensor], torch.Tensor], tokenizer, decoder_start_id: int,
                    claims: Sequence[str], batch_size: int = 16,
                    on_batch: Callable[[int], None] | None = None) -> list[list[float]]:
    """log p(label | claim) for each of LABELS, per claim: `score_batch(claims, labels)` returns the
    model's per-example NLL (B,) of `labels` (B, T) in the RAG convention (`rag_data.answer_labels`:
    the decoder start token, then the label with the tokenizer's specials); every label is scored in full."""
    out: list[list[float]] = []
    for i in range(0, len(claims), batch_size):
        chunk = list(claims[i : i + batch_size])
        nll = []
        for label in LABELS:
            ids = [decoder_start_id, *tokenizer(label)["input_ids"]]
            nll.append(score_batch(chunk, torch.tensor([ids] * len(chunk), dtype=torch.long)))  # (B,)
        out += (-torch.stack(nll, dim=1)).float().tolist()
        if on_batch:
            on_batch(len(chunk))
    return out


def rag_label_log_probs(model, tokenizers, index, claims: Sequence[str], n_docs: int | None = None, batch_size: int = 16,
                        swap: bool = False, on_batch=None) -> list[list[float]]:
    """`label_log_probs` for a RagModel: one retrieval per batch, one forward per label."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    gen = model.generator.config
    cache: dict = {}

    def score(chunk: list[str], labels: torch.Tensor) -> torch.Tensor:
        key = tuple(chunk)
        if key not in cache:
            cache.clear()
            cache[key] = model.retrieve(chunk, index, tokenizers, n_docs=n_docs, swap=swap)
        r = cache[key]
        return model(r.context_input_ids, r.context_attention_mask, r.doc_scores, labels=labels.to(device),
                     n_docs=r.doc_scores.shape[1], label_smoothing=0.0).loss  # log p(label): no smoothing term

    try:
        return label_log_probs(score, tokenizers.generator, gen.decoder_start_token_id, claims, batch_size, on_batch)
    finally:
        model.train(was_training)
