"""`NLIJudge`: any transformers sequence-classification checkpoint with an entailment label.

A checkpoint whose three classes are entailment, neutral and contradiction (MNLI-style, in any
order and spelling: `three_way_labels`) gives each verdict the three-way label of its argmax as
well; a two-class one (entailment / not_entailment) leaves the label None. The binary verdict is
the same either way: supported iff the argmax is entailment.

A pair longer than the model takes (`max_length`, at most the model's positions and the tokenizer's
model_max_length) has its premise cut, never its statement: the reason says "premise cut to n of m
tokens", since a passage cut short may have lost the support (an unsupported verdict then says
less). A statement that does not fit whole beside at least one premise token is not judged: its
verdict is undecided (None, a NaN in the metrics) with the reason, because a verdict on part of a
statement says nothing about the part cut off (a hallucination at its end would pass). Never a
tokenizer's or a model's traceback: a pair the tokenizer still cannot encode, or the model cannot
take, is undecided with the message.

Text is text: a "</s>", "<s>" or "[SEP]" written in a premise or statement (HTML strikethrough, a
leaked end-of-sequence marker) is tokenized as the characters it is, never as the special token
(`split_special_tokens`): it could end a sequence early, and it gave BART's classifier a pair with a
second end-of-sequence token ("All examples must have the same number of <eos> tokens": the run's end)."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from lewisrag.data.io import InputError
from lewisrag.data.pretrained import load_model, load_tokenizer, model_files
from lewisrag.eval.judges.base import LABELS, Verdict, digest


def _file_digest(directory: Path) -> str:
    """sha256 over what loading the checkpoint reads (`pretrained.model_files`: config, safetensors
    weights and the tokenizer's files), so that a retrained model or another tokenizer, which changes
    the verdicts as surely, gets a new fingerprint. (Before the tokenizer was in it: config and
    weights only, so NLI fingerprints taken then differ from today's for the same folder.)"""
    h = hashlib.sha256()
    for p in sorted(model_files(directory), key=lambda f: f.name):
        content = hashlib.sha256()
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                content.update(block)
        h.update(f"{p.name}\0{content.hexdigest()}\n".encode("utf-8"))
    return h.hexdigest()[:16]


def entailment_index(id2label: dict) -> int:
    """The class index whose label contains "entail" (case-insensitive) but is not a negation of it.

    >>> entailment_index({0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"})
    2
    >>> entailment_index({"0": "entailment", "1": "not_entailment"})
    0
    """
    hits = [int(i) for i, lab in id2label.items() if "entail" in str(lab).lower() and not re.search(r"not|non", str(lab).lower())]
    if len(hits) != 1:
        raise ValueError(f"need exactly one entailment label in config.id2label, got {dict(id2label)}")
    return hits[0]


def three_way_labels(id2label: dict) -> dict[int, str] | None:
    """{class index: "entailment" | "neutral" | "contradiction"} when the model has exactly these three
    classes (one label containing "entail" and no negation, one "neutral", one "contradict"), else None.

    >>> three_way_labels({0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"})
    {0: 'contradiction', 1: 'neutral', 2: 'entailment'}
    >>> three_way_labels({"0": "entailment", "1": "not_entailment"}) is None
    True
    """
    if len(id2label) != 3:
        return None
    try:
        out = {entailment_index(id2label): "entailment"}
    except ValueError:
        return None
    for name, stem in (("neutral", "neutral"), ("contradiction", "contradict")):
        hits = [int(i) for i, lab in id2label.items() if stem in str(lab).lower() and int(i) not in out]
        if len(hits) != 1:
            return None
        out[hits[0]] = name
    assert sorted(out.values()) == sorted(LABELS)
    return dict(sorted(out.items()))


class NLIJudge:
    """Premise/hypothesis pairs through a sequence classifier; supported iff the argmax is entailment,
    labelled with the argmax's class where the model has the three NLI classes."""

    name = "nli"
    # bump when how a pair reaches the model changes (it changes verdicts on the same checkpoint):
    # 2: special-token spellings in the text are read as characters (`split_special_tokens`), and a
    # pair the model fails on is undecided; version 1 was an empty string, so fingerprints from
    # before differ from today's for the same folder
    # 3: the fingerprint holds the checkpoint's content digest alone, not its folder's name (`model_id`
    # still shows it): the same model copied to another folder is the same judge, and the gate compares
    version = "3"

    def __init__(self, model, tokenizer, model_id: str, entail: int, batch_size: int = 16, max_length: int = 512,
                 labels: dict[int, str] | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.model_id = model_id  # checkpoint dir name @ content digest
        self.entail = entail  # class index of "entailment" in the model's logits
        self.labels = labels  # class index -> three-way label (`three_way_labels`); None: the model has no three-way labels
        if labels is not None and labels.get(entail) != "entailment":
            raise ValueError(f"labels {labels} do not put entailment at index {entail}")
        self.batch_size = batch_size
        self.max_length = max_length  # the premise is cut to fit, never the statement (`judge`)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, batch_size: int = 16, max_length: int = 512) -> NLIJudge:
        # torch and transformers load here, on first use: lewisrag.eval.judges imports this module
        # for every judge, and a lexical- or LLM-judge run should not pay for them.
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        d = Path(path)
        if not (d / "config.json").exists():
            raise InputError(d, "not a transformers checkpoint directory (no config.json)")
        # allow_unexpected: published NLI checkpoints often keep a pooler their classifier does not use
        model = load_model(AutoModelForSequenceClassification.from_pretrained, d, "NLI judge",
                           allow_unexpected=True).eval()
        _check_labels(model.config.id2label, d / "config.json")
        try:
            entail = entailment_index(model.config.id2label)
        except ValueError as e:
            raise InputError(d / "config.json", str(e), field="id2label") from None
        tokenizer = load_tokenizer(AutoTokenizer.from_pretrained, d, "NLI judge tokenizer")
        _check_vocabulary(tokenizer, model, d)
        max_length = min(max_length, model_limit(model.config, tokenizer))
        return cls(model, tokenizer, f"{d.name}@{_file_digest(d)}", entail, batch_size, max_length,
                   three_way_labels(model.config.id2label))

    @property
    def fingerprint(self) -> str:
        content = self.model_id.rpartition("@")[2]  # the digest: where the folder sits or is named changes no verdict
        return digest("NLIJudge", content, {"max_length": self.max_length, "entail": self.entail},
                      self.version)

    def judge(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        import torch  # loaded by from_pretrained already; local for the reason given there

        out: list[Verdict] = []
        special = self.tokenizer.num_special_tokens_to_add(pair=True)
        for start in range(0, len(pairs), self.batch_size):
            chunk = pairs[start : start + self.batch_size]
            verdicts: list[Verdict | None] = [None] * len(chunk)
            premise_len = self._lengths([p for p, _ in chunk])
            statement_len = self._lengths([h for _, h in chunk])
            keep = []
            for i, (pl, hl) in enumerate(zip(premise_len, statement_len)):
                if hl + special + min(pl, 1) > self.max_length:
                    verdicts[i] = Verdict(None, f"statement too long for the NLI model: {hl} tokens, and the pair may "
                                                f"hold {self.max_length} with the premise; a cut statement is not judged")
                else:
                    keep.append(i)
            probs = self._probs([chunk[i] for i in keep], torch) if keep else []
            for i, row in zip(keep, probs):
                if isinstance(row, str):  # why this pair could not be judged
                    verdicts[i] = Verdict(None, row)
                    continue
                top = int(row.argmax())
                label = self.labels[top] if self.labels is not None else None
                reason = f"p(entailment)={float(row[self.entail]):.3f}"
                total = premise_len[i] + statement_len[i] + special
                if total > self.max_length:
                    reason += f"; premise cut to {self.max_length - special - statement_len[i]} of {premise_len[i]} tokens"
                verdicts[i] = Verdict(top == self.entail, reason, label)
            out.extend(verdicts)
        return out

    def _lengths(self, texts: list[str]) -> list[int]:
        """Each text's token count without special tokens (a special token's spelling is text, as in `_encode`)."""
        ids = self.tokenizer(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        return [len(x) for x in ids]

    def _encode(self, pairs: list[tuple[str, str]]):
        return self.tokenizer([p for p, _ in pairs], [h for _, h in pairs], truncation="only_first",
                              max_length=self.max_length, padding=True, return_tensors="pt", split_special_tokens=True)

    def _probs(self, pairs: list[tuple[str, str]], torch) -> list:
        """Class probabilities per pair, or why a pair could not be judged (a str): the tokenizer could
        not cut it to fit (counts taken apart can differ by a token from the pair's), or the model raised
        on it. A batch that fails is tried again a pair at a time, so that one bad pair costs only its own
        verdict: never a traceback that ends the run."""
        try:
            return list(self._forward(self._encode(pairs), torch))
        except Exception:  # noqa: BLE001 - the fast tokenizer raises a bare Exception; find the pair, one at a time
            return [self._pair_probs(pair, torch) for pair in pairs]

    def _pair_probs(self, pair: tuple[str, str], torch):
        try:
            enc = self._encode([pair])
        except Exception as e:  # noqa: BLE001
            return f"NLI tokenizer could not encode the pair within {self.max_length} tokens: {_first_line(e)}"
        try:
            return self._forward(enc, torch)[0]
        except Exception as e:  # noqa: BLE001 - a model's check on its input (BART's count of end-of-sequence tokens)
            return f"NLI model could not judge the pair: {_first_line(e)}"

    def _forward(self, enc, torch):
        with torch.no_grad():
            return self.model(**enc).logits.float().softmax(-1)  # (B, C)


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _check_labels(id2label: dict, config: Path) -> None:
    """Refuse a head that cannot be read as NLI: one class (softmax over one logit says entailment to
    everything), or class indices that are not 0..C-1 (a label no logit has: a KeyError mid-judging).

    >>> _check_labels({0: "entailment"}, Path("m/config.json"))
    Traceback (most recent call last):
    ...
    lewisrag.data.io.InputError: m/config.json: field 'id2label': has 1 class ({0: 'entailment'}); an NLI model needs at least two (entailment and the rest)
    """
    if len(id2label) < 2:
        raise InputError(config, f"has {len(id2label)} class ({dict(id2label)}); an NLI model needs at least two "
                                 "(entailment and the rest)", field="id2label")
    keys = sorted(str(k) for k in id2label)
    if keys != sorted(str(i) for i in range(len(id2label))):
        raise InputError(config, f"keys {keys} must be the class indices 0..{len(id2label) - 1} of the model's "
                                 f"{len(id2label)} outputs", field="id2label")


def _check_vocabulary(tokenizer, model, directory: Path) -> None:
    """Refuse a tokenizer with ids past the model's embedding table: its first rare word would be an
    IndexError mid-judging."""
    table = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > table:
        raise InputError(directory, f"the tokenizer has {len(tokenizer)} tokens but the model's embeddings hold "
                                    f"{table} (config.json vocab_size): not the tokenizer this model was trained with",
                         field="tokenizer")


def model_limit(config, tokenizer) -> int:
    """The most tokens the model takes: its positions (less RoBERTa's offset of padding_idx + 1), or the
    tokenizer's model_max_length if smaller. A pair past it would index past the position table. The
    sentence embedder (`eval.metrics.load_embedder`) cuts its texts to it too."""
    limit = getattr(config, "max_position_embeddings", None)
    limit = int(limit) if isinstance(limit, int) and limit > 0 else 1 << 30
    if "roberta" in str(getattr(config, "model_type", "")) or str(getattr(config, "model_type", "")) == "camembert":
        limit -= int(getattr(config, "pad_token_id", 1) or 1) + 1
    m = getattr(tokenizer, "model_max_length", None)
    if isinstance(m, int) and 0 < m < limit:
        limit = m
    return limit
