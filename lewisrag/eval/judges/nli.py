"""`NLIJudge`: any transformers sequence-classification checkpoint with an entailment label.

A checkpoint whose three classes are entailment, neutral and contradiction (MNLI-style, in any
order and spelling: `three_way_labels`) gives each verdict the three-way label of its argmax as
well; a two-class one (entailment / not_entailment) leaves the label None. The binary verdict is
the same either way: supported iff the argmax is entailment."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from lewisrag.data.io import InputError
from lewisrag.data.pretrained import load_model, load_tokenizer
from lewisrag.eval.judges.base import LABELS, Verdict, digest


def _file_digest(directory: Path) -> str:
    """sha256 over the checkpoint's config and weight files, so a retrained model gets a new fingerprint."""
    h = hashlib.sha256()
    for p in sorted(directory.iterdir()):
        if p.name == "config.json" or p.suffix in (".safetensors", ".bin"):
            h.update(p.name.encode())
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
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

    def __init__(self, model, tokenizer, model_id: str, entail: int, batch_size: int = 16, max_length: int = 512,
                 labels: dict[int, str] | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.model_id = model_id  # checkpoint dir name @ content digest
        self.entail = entail  # class index of "entailment" in the model's logits
        self.labels = labels  # class index -> three-way label (`three_way_labels`); None: the model has no three-way labels
        if labels is not None and labels.get(entail) != "entailment":
            raise ValueError(f"labels {labels} do not put entailment at index {entail}")
        self.batch_size = batch_size
        self.max_length = max_length  # premise is truncated first: the statement must stay whole

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
        try:
            entail = entailment_index(model.config.id2label)
        except ValueError as e:
            raise InputError(d / "config.json", str(e), field="id2label") from None
        tokenizer = load_tokenizer(AutoTokenizer.from_pretrained, d, "NLI judge tokenizer")
        return cls(model, tokenizer, f"{d.name}@{_file_digest(d)}", entail, batch_size, max_length,
                   three_way_labels(model.config.id2label))

    @property
    def fingerprint(self) -> str:
        return digest("NLIJudge", self.model_id, {"max_length": self.max_length, "entail": self.entail}, "")

    def judge(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        import torch  # loaded by from_pretrained already; local for the reason given there

        out: list[Verdict] = []
        for start in range(0, len(pairs), self.batch_size):
            chunk = pairs[start : start + self.batch_size]
            enc = self.tokenizer(
                [p for p, _ in chunk], [h for _, h in chunk], truncation="only_first",
                max_length=self.max_length, padding=True, return_tensors="pt",
            )
            with torch.no_grad():
                probs = self.model(**enc).logits.float().softmax(-1)  # (B, C)
            for row in probs:
                top = int(row.argmax())
                label = self.labels[top] if self.labels is not None else None
                out.append(Verdict(top == self.entail, f"p(entailment)={float(row[self.entail]):.3f}", label))
        return out
