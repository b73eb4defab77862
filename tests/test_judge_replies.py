"""Judges that must not read a verdict into what is none: an LLM reply whose label is the prompt's
placeholder, whose ids are off by one or repeated, or whose `supported` is a string; and NLI folders
that cannot be judged with (one class, label indices past the head, a tokenizer past the embeddings)
or whose tokenizer changed without the fingerprint noticing."""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from conftest import local_server, send_json
from lewisrag.data.io import InputError
from lewisrag.eval.judges import NLIJudge, Verdict, digest, parse_label
from lewisrag.eval.judges.labels import Label
from lewisrag.eval.judges.llm import PROMPT_VERSION, LLMJudge, parse_verdicts
from lewisrag.eval.stats.calibration import calibrate

KEY = "sk-test-replies-7a2e"

# ---------------------------------------------------------------------------------------------
# labels: whole words only


@pytest.mark.parametrize("spelling", ["entailment|neutral|contradiction", "Entailment: no", "entailment or neutral",
                                      "entailments", "contradiction, not entailment", "not entailed", ""])
def test_a_label_that_is_not_one_whole_label_word_is_none(spelling):
    assert parse_label(spelling) is None
    (v,) = parse_verdicts(json.dumps({"verdicts": [{"id": 1, "label": spelling, "reason": "x"}]}), 1)
    assert v.supported is None and v.label is None and "malformed verdict: label=" in v.reason


@pytest.mark.parametrize(("spelling", "label"), [("Entailment", "entailment"), (" entails. ", "entailment"),
                                                 ('"Contradicts"', "contradiction"), ("NEUTRAL!", "neutral")])
def test_a_whole_label_word_in_any_case_and_punctuation_is_read(spelling, label):
    assert parse_label(spelling) == label


# ---------------------------------------------------------------------------------------------
# ids: each of 1..n at most once, or the whole batch is undecided


def _reply(*verdicts: dict) -> str:
    return json.dumps({"verdicts": list(verdicts)})


@pytest.mark.parametrize(("content", "why"), [
    (_reply({"id": 0, "label": "entailment"}, {"id": 1, "label": "contradiction"}, {"id": 2, "label": "contradiction"}),
     "a verdict for statement 0, but the statements are 1..3"),  # numbered from 0
    (_reply(*[{"id": i, "label": "entailment"} for i in (1, 2, 3, 4)]), "a verdict for statement 4"),  # one too many
    (_reply({"id": 1, "label": "contradiction"}, {"id": 1, "label": "entailment"}, {"id": 2, "label": "entailment"},
            {"id": 3, "label": "neutral"}), "more than one verdict for statement 1"),  # conflicting
    (_reply({"id": 1, "label": "neutral"}, {"id": "1", "label": "neutral"}, {"id": 2, "label": "neutral"},
            {"id": 3, "label": "neutral"}), "more than one verdict for statement 1"),  # repeated alike
])
def test_a_reply_that_lost_the_numbering_decides_no_statement_of_its_batch(content, why):
    got = parse_verdicts(content, 3)
    assert [v.supported for v in got] == [None, None, None]
    assert all(v.reason.startswith("malformed reply: ") and why in v.reason for v in got)


# ---------------------------------------------------------------------------------------------
# supported: a JSON boolean or nothing


@pytest.mark.parametrize("supported", ["false", "true", 0, None, [True]])
def test_a_supported_that_is_not_a_boolean_is_malformed(supported):
    (v,) = parse_verdicts(_reply({"id": 1, "label": "entailment", "supported": supported}), 1)
    assert v.supported is None and v.label is None and f"supported={supported!r}" in v.reason
    (v,) = parse_verdicts(_reply({"id": 1, "label": "entailment", "supported": True}), 1)
    assert v == Verdict(True, "", "entailment")


# ---------------------------------------------------------------------------------------------
# the LLM judge against a local endpoint: nothing of a bad reply is cached; the verdicts' version


class Endpoint:
    """Replies by `mode`: "ok" (the rule: entailment iff the statement is in the evidence), "zero"
    (the same, numbered from 0), "dup" (id 1 twice), "echo" (the prompt's placeholder as label)."""

    def __init__(self):
        self.mode, self.calls, self.lock = "ok", 0, threading.Lock()

    def content(self, user: str) -> str:
        evidence, listing = user.split("\n\nStatements:\n")
        verdicts = []
        for line in listing.splitlines():
            n, text = line.split(". ", 1)
            label = "entailment" if text in evidence else "contradiction"
            verdicts.append({"id": int(n) - (self.mode == "zero"), "label": label, "reason": self.mode})
        if self.mode == "dup":
            verdicts.insert(0, {"id": 1, "label": "entailment", "reason": "dup"})
        if self.mode == "echo":
            verdicts = [{**v, "label": "entailment|neutral|contradiction"} for v in verdicts]
        return json.dumps({"verdicts": verdicts})


@pytest.fixture
def endpoint():
    state = Endpoint()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.calls += 1
            content = state.content(body["messages"][-1]["content"])
            send_json(self, 200, json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}],
                                             "usage": {"prompt_tokens": 1, "completion_tokens": 1}}))

        def log_message(self, *args):
            pass

    with local_server(Handler) as url:
        state.url = url
        yield state


def _judge(endpoint, cache: Path) -> LLMJudge:
    return LLMJudge(endpoint.url, "judge-model", KEY, cache_dir=cache, max_retries=0, timeout=5.0)


PAIRS = [("Login returns 422.", "Login returns 422."), ("Login returns 422.", "Login returns 500."),
         ("Login returns 422.", "A toast appears.")]


@pytest.mark.parametrize("mode", ["zero", "dup", "echo"])
def test_a_bad_reply_is_undecided_and_never_cached(endpoint, tmp_path, mode):
    endpoint.mode = mode
    got = _judge(endpoint, tmp_path).judge(PAIRS)
    assert [v.supported for v in got] == [None, None, None], got
    endpoint.mode = "ok"  # a rerun with the same cache against a good endpoint asks again and gets it right
    again = _judge(endpoint, tmp_path)
    assert [v.supported for v in again.judge(PAIRS)] == [True, False, False]
    assert again.usage["cache_hits"] == 0 and endpoint.calls == 2


def test_calibrating_a_judge_that_echoes_the_placeholder_measures_nothing(endpoint, tmp_path):
    """The echoed placeholder read as entailment gave faithfulness 1.0 and a κ of 0 as if measured."""
    endpoint.mode = "echo"
    labels = [Label(str(i), p, h, i == 0) for i, (p, h) in enumerate(PAIRS)]
    r = calibrate(_judge(endpoint, tmp_path), labels)
    assert r["undecided"] == 3 and r["misses"] == 0 and [d["kind"] for d in r["disagreements"]] == ["undecided"] * 3


def test_verdicts_read_by_the_old_rules_are_not_reused_nor_the_same_judge(endpoint, tmp_path):
    """Replies are read by other rules now: a verdict cached under the key of the rules before
    (no verdicts version in it) is a miss, and the judge's fingerprint differs from theirs."""
    j = _judge(endpoint, tmp_path)
    premise, hypothesis = PAIRS[0]
    old_key = digest(j.name, j.model, j.params, PROMPT_VERSION, "judge", premise, hypothesis)
    j.cache.put(old_key, {"supported": False, "reason": "read by the old rules", "label": "contradiction"})
    assert j.judge([PAIRS[0]]) == [Verdict(True, "ok", "entailment")] and endpoint.calls == 1
    assert j.fingerprint != digest("LLMJudge", j.model, j.params, PROMPT_VERSION)


# ---------------------------------------------------------------------------------------------
# NLI folders: refused at load, or fingerprinted with their tokenizer

L3 = {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "login", "returns", "422", "toast"]


def _tiny_nli(path: Path, id2label: dict, vocab: list[str] = VOCAB, vocab_size: int | None = None) -> Path:
    """A random one-layer BERT classifier whose class is decided by its bias (the last class wins)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    path.mkdir(parents=True)
    # vocab= (transformers 5 builds only the special tokens from a vocab_file)
    BertTokenizerFast(vocab={piece: i for i, piece in enumerate(vocab)}, do_lower_case=True).save_pretrained(path)
    cfg = BertConfig(vocab_size=vocab_size or len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=64, num_labels=len(id2label),
                     id2label=id2label, label2id={v: k for k, v in id2label.items()})
    torch.manual_seed(0)
    model = BertForSequenceClassification(cfg)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.arange(len(id2label), dtype=torch.float) * 5)
    model.save_pretrained(path)
    return path


def test_nli_fingerprint_changes_with_the_tokenizer(tmp_path):
    a = _tiny_nli(tmp_path / "a", L3)
    b = _tiny_nli(tmp_path / "b", L3, VOCAB[:5] + ["toast", "422", "returns", "login"])  # same size, other ids
    before = NLIJudge.from_pretrained(a).fingerprint
    assert NLIJudge.from_pretrained(a).fingerprint == before  # the same folder, the same judge
    shutil.copy(b / "tokenizer.json", a / "tokenizer.json")  # what the fast tokenizer reads
    assert NLIJudge.from_pretrained(a).fingerprint != before


def test_a_one_class_nli_model_is_refused(tmp_path):
    path = _tiny_nli(tmp_path / "one", {0: "entailment"})
    with pytest.raises(InputError, match=r"one/config\.json: field 'id2label': has 1 class"):
        NLIJudge.from_pretrained(path)


def test_nli_labels_off_the_heads_indices_are_refused(tmp_path):
    path = _tiny_nli(tmp_path / "gap", L3)
    config = json.loads((path / "config.json").read_text())
    config["id2label"] = {"0": "contradiction", "1": "neutral", "5": "entailment"}
    config["label2id"] = {"contradiction": 0, "neutral": 1, "entailment": 5}
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"gap/config\.json: field 'id2label': keys \['0', '1', '5'\] must be .* 0\.\.2"):
        NLIJudge.from_pretrained(path)


def test_a_tokenizer_larger_than_the_embeddings_is_refused(tmp_path):
    path = _tiny_nli(tmp_path / "big", L3, VOCAB + [f"w{i}" for i in range(20)], vocab_size=len(VOCAB))
    with pytest.raises(InputError, match=r"big: field 'tokenizer': the tokenizer has 29 tokens but the model's "
                                         r"embeddings hold 9"):
        NLIJudge.from_pretrained(path)


def test_nli_fingerprint_carries_the_judges_version(tmp_path, monkeypatch):
    """A change in how pairs reach the model (a new `version`) changes the verdicts on the same
    checkpoint, so it must change the fingerprint stamped on every score."""
    judge = NLIJudge.from_pretrained(_tiny_nli(tmp_path / "a", L3))
    before = judge.fingerprint
    monkeypatch.setattr(NLIJudge, "version", "next")
    assert judge.fingerprint != before
