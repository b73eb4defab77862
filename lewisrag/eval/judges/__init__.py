"""Judges: does a premise (evidence) support a hypothesis (a statement)?

One small protocol, batched: a judge has a `name`, a `fingerprint` (sha256 over its class, model,
parameters and prompt version, stamped on every score it makes) and
`judge(pairs: list[(premise, hypothesis)]) -> list[Verdict]`. A judge that cannot decide returns
`Verdict(None, reason)`; metrics turn that into "left out and counted", never into a silent False.
Where a judge tells three ways, `Verdict.label` is "entailment", "neutral" or "contradiction" (NLI
with three classes, the LLM judge, human labels with a `label` field); metrics read `supported` only.

    function.py  FunctionJudge(fn)            fn(premise, hypothesis) -> bool, for tests and custom rules
    lexical.py   LexicalJudge()               deterministic token-support baseline
    nli.py       NLIJudge.from_pretrained(p)  any transformers sequence-classification checkpoint with an entailment label
    llm.py       LLMJudge(base_url, model)    an OpenAI-compatible chat-completions endpoint
    labels.py    LabelJudge.from_file(p)      human labels {"id", "premise", "hypothesis", "supported", "label"?}
    base.py      Verdict, LABELS, parse_label, digest (the one hashing rule for fingerprints and cache keys), DiskCache

`from_spec("lexical" | "nli:PATH" | "llm:MODEL" | "labels:FILE")` builds one from a CLI string.
"""

from __future__ import annotations

import os

from lewisrag.data.io import InputError
from lewisrag.eval.judges.base import DEFAULT_CACHE_DIR, LABELS, DiskCache, Verdict, digest, parse_label
from lewisrag.eval.judges.function import FunctionJudge
from lewisrag.eval.judges.labels import Label, LabelJudge, read_labels
from lewisrag.eval.judges.lexical import LexicalJudge, content_tokens
from lewisrag.eval.judges.llm import JudgeError, LLMJudge
from lewisrag.eval.judges.nli import NLIJudge, entailment_index, three_way_labels

__all__ = ["DEFAULT_CACHE_DIR", "LABELS", "DiskCache", "FunctionJudge", "JudgeError", "LLMJudge", "Label", "LabelJudge",
           "LexicalJudge", "NLIJudge", "Verdict", "content_tokens", "digest", "entailment_index", "from_spec",
           "parse_label", "read_labels", "spec_path", "three_way_labels"]


def spec_path(spec: str | None) -> str | None:
    """The local file or folder a --judge spec reads (`nli:PATH`, `labels:FILE`), else None: an
    output folder must never hold it.

    >>> spec_path("labels:run/labels.jsonl"), spec_path("llm:gpt-4o-mini"), spec_path(None)
    ('run/labels.jsonl', None, None)
    """
    kind, _, arg = (spec or "").partition(":")
    return arg if kind in ("nli", "labels") and arg else None


def from_spec(spec: str, *, cache_dir: str | os.PathLike | None = None, concurrency: int = 4, base_url: str | None = None,
              temperature: float = 0.0, json_mode: bool = True, timeout: float = 60.0, max_retries: int = 4):
    """Build a judge from `lexical`, `nli:PATH`, `llm:MODEL` or `labels:FILE` (the CLI's --judge).
    `cache_dir`, `concurrency`, `base_url`, `temperature`, `json_mode` (send response_format
    json_object, which some servers reject), `timeout` (seconds per attempt) and `max_retries` are the
    llm judge's; temperature and JSON mode are in its fingerprint and cache keys (`LLMJudge.params`)."""
    kind, _, arg = spec.partition(":")
    if kind == "lexical" and not arg:
        return LexicalJudge()
    if kind == "nli" and arg:
        return NLIJudge.from_pretrained(arg)
    if kind == "labels" and arg:
        return LabelJudge.from_file(arg)
    if kind == "llm" and arg:
        return LLMJudge(base_url=base_url, model=arg, cache_dir=cache_dir, max_workers=concurrency, temperature=temperature,
                        json_mode=json_mode, timeout=timeout, max_retries=max_retries)
    raise InputError("--judge", f"unknown judge '{spec}': use lexical, nli:PATH, llm:MODEL or labels:FILE")
