"""Judges: does a premise (evidence) support a hypothesis (a statement)?

One small protocol, batched: a judge has a `name`, a `fingerprint` (sha256 over its class, model,
parameters and prompt version, stamped on every score it makes) and
`judge(pairs: list[(premise, hypothesis)]) -> list[Verdict]`. A judge that cannot decide returns
`Verdict(None, reason)`; metrics turn that into "left out and counted", never into a silent False.

    FunctionJudge(fn)            fn(premise, hypothesis) -> bool, for tests and custom rules
    LexicalJudge()               deterministic token-support baseline (below)
    NLIJudge.from_pretrained(p)  any transformers sequence-classification checkpoint with an entailment label
    LLMJudge(base_url, model)    an OpenAI-compatible chat-completions endpoint (lewisrag.eval.llm_judge)
    LabelJudge.from_file(p)      human labels {"id", "premise", "hypothesis", "supported"}

`from_spec("lexical" | "nli:PATH" | "llm:MODEL" | "labels:FILE")` builds one from a CLI string.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import threading
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lewisrag.data.io import InputError, iter_records, record_id, require_str

DEFAULT_CACHE_DIR = Path("~/.cache/lewisrag/judge")


@dataclass(frozen=True)
class Verdict:
    supported: bool | None  # None: the judge could not decide (malformed reply, timeout, unknown pair)
    reason: str = ""  # why; shown per statement in results.json


def digest(*parts) -> str:
    """sha256 hex of JSON-encoded parts; the one hashing rule for fingerprints and cache keys.

    >>> digest("a", 1) == digest("a", 1) != digest("a", 2)
    True
    """
    blob = json.dumps(parts, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class DiskCache:
    """A sqlite table key -> JSON value under `directory`; safe to share between threads."""

    def __init__(self, directory: str | os.PathLike):
        self.path = Path(directory).expanduser() / "judge.sqlite"
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, check_same_thread=False)
            self._conn.execute("CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        return self._conn

    def get(self, key: str):
        with self._lock:
            row = self._db().execute("SELECT value FROM cache WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, key: str, value) -> None:
        with self._lock:
            db = self._db()
            db.execute("INSERT OR REPLACE INTO cache VALUES (?, ?)", (key, json.dumps(value, ensure_ascii=False)))
            db.commit()


class FunctionJudge:
    """Wrap `fn(premise, hypothesis) -> bool | None` as a judge.

    >>> FunctionJudge(lambda p, h: h in p).judge([("登录返回 422", "422"), ("ok", "toast")])
    [Verdict(supported=True, reason=''), Verdict(supported=False, reason='')]
    """

    name = "function"

    def __init__(self, fn: Callable[[str, str], bool | None], label: str | None = None):
        self.fn = fn
        self.label = label or getattr(fn, "__qualname__", type(fn).__name__)  # names the rule in the fingerprint

    @property
    def fingerprint(self) -> str:
        return digest("FunctionJudge", self.label, {}, "")

    def judge(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        out = []
        for premise, hypothesis in pairs:
            v = self.fn(premise, hypothesis)
            out.append(Verdict(None, "function returned None") if v is None else Verdict(bool(v)))
        return out


# ---------------------------------------------------------------------------------------------
# lexical baseline

_WORD = re.compile(r"[a-z0-9]+(?:[.'][a-z0-9]+)*")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
# Function words carry no claim; leaving them out keeps "the", "是", "的" from propping up a score.
_STOP_EN = frozenset(
    "a an the is are was were be been being of to in on at by for with and or but not no it its this that these "
    "those as from into than then so if do does did has have had will would can could should may might must "
    "there their they he she we you i".split()
)
_STOP_ZH = frozenset("的了是在和与及或也就都而把被对向从之其这那个一有为以")


def content_tokens(text: str) -> list[str]:
    """Lowercased NFKC words and numbers, plus single CJK characters, without function words.

    >>> content_tokens("The API returns HTTP 422.")
    ['api', 'returns', 'http', '422']
    >>> content_tokens("接口返回了 422")
    ['422', '接', '口', '返', '回']
    """
    s = unicodedata.normalize("NFKC", text).lower()
    words = [w for w in _WORD.findall(s) if w not in _STOP_EN]
    chars = [c for c in _CJK.findall(s) if c not in _STOP_ZH]
    # Keep words first, then characters: order only matters for the "missing" list in reasons.
    return words + chars


class LexicalJudge:
    """Supported iff at least `threshold` of the hypothesis' content tokens occur in the premise.

    Content tokens are English/number words and single CJK characters (`content_tokens`); a
    hypothesis with none cannot be judged (Verdict None). A cheap, deterministic floor for a real
    judge: it cannot see negation or paraphrase.

    >>> LexicalJudge().judge([("Login fails with HTTP 422.", "login returns 422"), ("登录失败返回 422", "弹出提示")])
    [Verdict(supported=False, reason='2/3 content tokens in premise (0.67 < 0.75); missing: returns'), Verdict(supported=False, reason='0/4 content tokens in premise (0.00 < 0.75); missing: 弹, 出, 提, 示')]
    """

    name = "lexical"
    version = "1"  # bump when the tokenization or rule changes: it changes scores

    def __init__(self, threshold: float = 0.75):
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold

    @property
    def fingerprint(self) -> str:
        return digest("LexicalJudge", "", {"threshold": self.threshold}, self.version)

    def judge(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        return [self._one(p, h) for p, h in pairs]

    def _one(self, premise: str, hypothesis: str) -> Verdict:
        hyp = content_tokens(hypothesis)
        if not hyp:
            return Verdict(None, "no content tokens in the statement")
        have = set(content_tokens(premise))
        missing = [t for t in dict.fromkeys(hyp) if t not in have]
        share = sum(t in have for t in hyp) / len(hyp)
        ok = share >= self.threshold
        why = f"{sum(t in have for t in hyp)}/{len(hyp)} content tokens in premise ({share:.2f} {'≥' if ok else '<'} {self.threshold})"
        return Verdict(ok, why + (f"; missing: {', '.join(missing)}" if missing else ""))


# ---------------------------------------------------------------------------------------------
# NLI classifier


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


class NLIJudge:
    """Premise/hypothesis pairs through a sequence classifier; supported iff the argmax is entailment."""

    name = "nli"

    def __init__(self, model, tokenizer, model_id: str, entail: int, batch_size: int = 16, max_length: int = 512):
        self.model, self.tokenizer = model, tokenizer
        self.model_id = model_id  # checkpoint dir name @ content digest
        self.entail = entail  # class index of "entailment" in the model's logits
        self.batch_size = batch_size
        self.max_length = max_length  # premise is truncated first: the statement must stay whole

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, batch_size: int = 16, max_length: int = 512) -> NLIJudge:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from lewisrag.data.pretrained import load_model, load_tokenizer

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
        return cls(model, tokenizer, f"{d.name}@{_file_digest(d)}", entail, batch_size, max_length)

    @property
    def fingerprint(self) -> str:
        return digest("NLIJudge", self.model_id, {"max_length": self.max_length, "entail": self.entail}, "")

    def judge(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        import torch

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
                out.append(Verdict(int(row.argmax()) == self.entail, f"p(entailment)={float(row[self.entail]):.3f}"))
        return out


# ---------------------------------------------------------------------------------------------
# human labels


def _label_key(premise: str, hypothesis: str) -> tuple[str, str]:
    def norm(s: str) -> str:
        return " ".join(unicodedata.normalize("NFKC", s).split())

    return norm(premise), norm(hypothesis)


@dataclass(frozen=True)
class Label:
    id: str  # the label's id, quoted in the disagreement list
    premise: str  # the evidence text
    hypothesis: str  # the statement
    supported: bool  # a human's verdict: the premise alone supports the hypothesis
    line: int | None = None  # where it was read, for error messages


def read_labels(path: str | os.PathLike) -> list[Label]:
    """All labels of a file, validated before any judge runs (a bad line is an InputError)."""
    seen: dict[str, int] = {}
    labels = []
    for line, rec in iter_records(path):
        rid = record_id(rec, path, line, seen)
        premise = require_str(rec, "premise", path, line)
        hypothesis = require_str(rec, "hypothesis", path, line)
        if not isinstance(rec.get("supported"), bool):
            raise InputError(path, "expected true or false", line=line, field="supported")
        labels.append(Label(rid, premise, hypothesis, rec["supported"], line))
    if not labels:
        raise InputError(path, "no labels in file")
    return labels


class LabelJudge:
    """Look up human verdicts by (premise, hypothesis), compared after NFKC and whitespace folding."""

    name = "labels"

    def __init__(self, labels: dict[tuple[str, str], bool], source: str = "labels"):
        self.labels = {_label_key(p, h): v for (p, h), v in labels.items()}
        self.source = source  # shown in reports; not part of the fingerprint (the content is)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> LabelJudge:
        """Read a human-labels file (`read_labels`); conflicting labels for one pair are an error."""
        labels: dict[tuple[str, str], bool] = {}
        first: dict[tuple[str, str], Label] = {}
        for lab in read_labels(path):
            key = _label_key(lab.premise, lab.hypothesis)
            if key in labels and labels[key] != lab.supported:
                raise InputError(path, f"contradicts the label on line {first[key].line}", line=lab.line, field="supported")
            labels[key] = lab.supported
            first.setdefault(key, lab)
        return cls(labels, str(path))

    @property
    def fingerprint(self) -> str:
        content = sorted([p, h, v] for (p, h), v in self.labels.items())
        return digest("LabelJudge", digest(content), {}, "")

    def judge(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        out = []
        for p, h in pairs:
            v = self.labels.get(_label_key(p, h))
            out.append(Verdict(None, "no label") if v is None else Verdict(v, "human label"))
        return out


# ---------------------------------------------------------------------------------------------


def from_spec(spec: str, *, cache_dir: str | os.PathLike | None = None, concurrency: int = 4, base_url: str | None = None):
    """Build a judge from `lexical`, `nli:PATH`, `llm:MODEL` or `labels:FILE` (the CLI's --judge)."""
    kind, _, arg = spec.partition(":")
    if kind == "lexical" and not arg:
        return LexicalJudge()
    if kind == "nli" and arg:
        return NLIJudge.from_pretrained(arg)
    if kind == "labels" and arg:
        return LabelJudge.from_file(arg)
    if kind == "llm" and arg:
        from lewisrag.eval.llm_judge import LLMJudge

        return LLMJudge(base_url=base_url, model=arg, cache_dir=cache_dir, max_workers=concurrency)
    raise InputError("--judge", f"unknown judge '{spec}': use lexical, nli:PATH, llm:MODEL or labels:FILE")


def __getattr__(name: str):
    # LLMJudge lives in its own module (HTTP, retries, cache) but is part of this protocol's namespace.
    if name == "LLMJudge":
        from lewisrag.eval.llm_judge import LLMJudge

        return LLMJudge
    raise AttributeError(name)
