"""Three-way labels (entailment / neutral / contradiction) beside the binary verdict, and claims the
LLM judge extracts: the NLI mapping, the LLM reply parsing and its cache, human labels with a
`label` field, extraction against a local stub endpoint (cached, failures null with a reason), and
the binary metrics unchanged by labels."""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from conftest import local_server, run_main, write_jsonl
from lewisrag.cli import app
from lewisrag.data.io import InputError
from lewisrag.eval import claims
from lewisrag.eval.evaluator import EvalConfig, bughunt_label_judge, evaluate_answers, evaluate_bughunt
from lewisrag.eval.judges import LABELS, FunctionJudge, LabelJudge, NLIJudge, Verdict, digest, three_way_labels
from lewisrag.eval.judges.llm import PROMPT_VERSION, SYSTEM_CLAIMS, JudgeError, LLMJudge, parse_claims, parse_verdicts
from lewisrag.eval.records import parse_answer
from lewisrag.eval.results import CLAIM_METRICS, CONTRADICTIONS, read_results

KEY = "sk-test-LABELS-77aa"


# ---------------------------------------------------------------------------------------------
# the verdict


def test_verdict_label_agrees_with_the_binary_verdict():
    assert Verdict(True, "x", "entailment").supported is True and Verdict(True, "x") == Verdict(True, "x", None)
    assert repr(Verdict(None, "timeout")) == "Verdict(supported=None, reason='timeout')"
    for supported, label in ((True, "neutral"), (False, "entailment"), (None, "contradiction"), (True, "Entailment")):
        with pytest.raises(ValueError):
            Verdict(supported, "", label)
    assert LABELS == ("entailment", "neutral", "contradiction")


# ---------------------------------------------------------------------------------------------
# NLI: the label of the argmax class, where the model has the three classes


def test_three_way_labels_from_id2label():
    assert three_way_labels({0: "entailment", 1: "neutral", 2: "contradiction"}) == {0: "entailment", 1: "neutral", 2: "contradiction"}
    assert three_way_labels({"0": "CONTRADICTION", "1": "NEUTRAL", "2": "ENTAILMENT"}) == {0: "contradiction", 1: "neutral", 2: "entailment"}
    assert three_way_labels({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}) is None
    assert three_way_labels({0: "entailment", 1: "not_entailment"}) is None  # two classes: no three-way label
    assert three_way_labels({0: "entailment", 1: "neutral", 2: "neutral"}) is None


class _Logits:
    """A stand-in sequence classifier: the logits of a pair are looked up by its hypothesis."""

    def __init__(self, table: dict[str, list[float]]):
        import torch

        self.hyps = list(table)
        self.logits = torch.tensor([table[h] for h in self.hyps])
        self.tokenizer = _FakeTokenizer(self.hyps)

    def __call__(self, rows):
        return SimpleNamespace(logits=self.logits[rows])


class _FakeTokenizer:
    """The calls NLIJudge makes of a tokenizer: a pair's rows, and a text's length in tokens (its words)."""

    def __init__(self, hyps: list[str]):
        self.hyps = hyps

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        return 3 if pair else 2

    def __call__(self, premises, hypotheses=None, **kw):
        import torch

        if hypotheses is None:  # NLIJudge._lengths
            return {"input_ids": [t.split() for t in premises]}
        return {"rows": torch.tensor([self.hyps.index(h) for h in hypotheses])}


def test_nli_judge_labels_each_pair_by_its_argmax():
    id2label = {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}
    fake = _Logits({"e": [0.0, 1.0, 4.0], "n": [0.5, 3.0, 1.0], "c": [5.0, 0.0, 1.0]})
    judge = NLIJudge(fake, fake.tokenizer, "fake@0", entail=2, batch_size=2, labels=three_way_labels(id2label))
    got = judge.judge([("p", "e"), ("p", "n"), ("p", "c")])
    assert [(v.supported, v.label) for v in got] == [(True, "entailment"), (False, "neutral"), (False, "contradiction")]
    assert got[0].reason.startswith("p(entailment)=0.9")
    two = NLIJudge(fake, fake.tokenizer, "fake@0", entail=2)  # a model without the three classes
    assert [(v.supported, v.label) for v in two.judge([("p", "e"), ("p", "c")])] == [(True, None), (False, None)]
    assert two.fingerprint == judge.fingerprint  # labels change no score, so no fingerprint


def test_nli_checkpoints_get_their_labels_from_the_config(tmp_path):
    from test_judges import _tiny_nli

    three = NLIJudge.from_pretrained(_tiny_nli(tmp_path / "three", {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
                                               [4.0, 0.0, 0.0]))
    assert three.labels == {0: "contradiction", 1: "neutral", 2: "entailment"}
    assert three.judge([("login returns 422", "toast")]) == [Verdict(False, three.judge([("a", "b")])[0].reason, "contradiction")]
    two = NLIJudge.from_pretrained(_tiny_nli(tmp_path / "two", {0: "entailment", 1: "not_entailment"}, [3.0, 0.0]))
    assert two.labels is None and two.judge([("a", "b")])[0] == Verdict(True, two.judge([("a", "b")])[0].reason)


# ---------------------------------------------------------------------------------------------
# LLM replies


@pytest.mark.parametrize(("item", "want"), [
    ({"id": 1, "label": "entailment", "reason": "stated"}, Verdict(True, "stated", "entailment")),
    ({"id": 1, "label": "Contradiction", "reason": "500, not 422"}, Verdict(False, "500, not 422", "contradiction")),
    ({"id": 1, "label": "NEUTRAL", "supported": False, "reason": "not said"}, Verdict(False, "not said", "neutral")),
    ({"id": 1, "supported": True, "reason": "stated"}, Verdict(True, "stated")),  # no label: the binary verdict alone
    ({"id": 1, "label": None, "supported": False}, Verdict(False, "")),
])
def test_llm_reply_with_three_way_labels(item, want):
    assert parse_verdicts(json.dumps({"verdicts": [item]}), 1) == [want]


@pytest.mark.parametrize(("content", "why"), [
    ('{"verdicts": [{"id": 1, "label": "maybe", "supported": true}]}', "malformed verdict: label='maybe'"),
    ('{"verdicts": [{"id": 1, "label": "contradiction", "supported": true}]}', "label='contradiction' but supported=True"),
    ('{"verdicts": [{"id": 1, "reason": "no verdict at all"}]}', "malformed verdict: no label, supported=None"),
    ('{"verdicts": [{"id": 1, "label": 3}]}', "malformed verdict: label=3"),
    ("Entailment.", "malformed reply: not JSON"),
])
def test_malformed_llm_labels_are_undecided_with_the_reason(content, why):
    (v,) = parse_verdicts(content, 1)
    assert v.supported is None and v.label is None and why in v.reason


def test_parse_claims():
    assert parse_claims({"claims": []}) == []  # a text without claims (a refusal)
    assert parse_claims({"claims": [{"triplet": ["Login", "returns", "422"], "claim": " Login returns 422. "},
                                    {"triplet": ["account", "locks for", "15 minutes"], "claim": ""}, "  "]}) == [
        "Login returns 422.", "account locks for 15 minutes"]
    for bad in ({"statements": ["x"]}, {"claims": "x"}, {"claims": [{"triplet": ["a", "b"]}]}, {"claims": [3]}, []):
        with pytest.raises(JudgeError, match="malformed reply"):
            parse_claims(bad)


# ---------------------------------------------------------------------------------------------
# a local chat-completions endpoint: claims by sentence, three-way labels by rule


def label_of(evidence: str, statement: str) -> str:
    """entailment: the statement occurs in the evidence; contradiction: it says 500 where the evidence says 422."""
    s, e = statement.lower().rstrip("."), evidence.lower()
    if s in e:
        return "entailment"
    return "contradiction" if "500" in s and "422" in e else "neutral"


class Stub:
    def __init__(self):
        self.requests: list[dict] = []
        self.labels = True  # False: replies in the binary format only
        self.lock = threading.Lock()

    def reply(self, body: dict) -> str:
        with self.lock:
            self.requests.append(body)
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        if system == SYSTEM_CLAIMS:
            text = user.split("Text:\n", 1)[1]
            if "FAIL" in text:
                return json.dumps({"claims": "cannot"})
            sentences = [s.strip().rstrip(".") for s in text.split(". ") if s.strip()]
            return json.dumps({"claims": [{"triplet": [s.split()[0], s.split()[1], " ".join(s.split()[2:])], "claim": s}
                                          for s in sentences]})
        evidence, listing = user.split("\n\nStatements:\n")
        evidence = evidence.removeprefix("Evidence:\n")
        verdicts = []
        for line in listing.splitlines():
            n, text = line.split(". ", 1)
            label = label_of(evidence, text)
            verdicts.append({"id": int(n), "label": label, "reason": "rule"} if self.labels else
                            {"id": int(n), "supported": label == "entailment", "reason": "rule"})
        return json.dumps({"verdicts": verdicts})


@pytest.fixture
def stub():
    state = Stub()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": state.reply(body)}}],
                                  "usage": {"prompt_tokens": 10, "completion_tokens": 5}})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(payload.encode())

        def log_message(self, *args):
            pass

    with local_server(Handler) as url:
        state.url = url
        yield state


def _llm(stub, tmp_path) -> LLMJudge:
    return LLMJudge(stub.url, "judge-model", KEY, cache_dir=tmp_path / "cache", max_retries=0, timeout=5.0)


def test_llm_prompt_asks_for_the_three_labels_and_the_cache_keeps_them(stub, tmp_path):
    pairs = [("Login returns 422.", "Login returns 422"), ("Login returns 422.", "Login returns 500"),
             ("Login returns 422.", "A toast appears")]
    j = _llm(stub, tmp_path)
    got = j.judge(pairs)
    assert [v.label for v in got] == ["entailment", "contradiction", "neutral"]
    assert [v.supported for v in got] == [True, False, False]
    system = stub.requests[0]["messages"][0]["content"]
    assert all(f'"{lab}"' in system for lab in LABELS) and PROMPT_VERSION == "lewisrag-judge-2"
    again = _llm(stub, tmp_path)  # a later run: every verdict from the disk cache, label included
    assert again.judge(pairs) == got and again.usage["calls"] == 0 and again.usage["cache_hits"] == 3
    assert len(stub.requests) == 1


def test_an_old_cache_entry_is_not_read_as_labelled(stub, tmp_path):
    j = _llm(stub, tmp_path)
    # written by the binary-only judge (prompt version 1): another key, never read
    old_key = digest(j.name, j.model, j.params, "lewisrag-judge-1", "judge", "Login returns 422.", "Login returns 500")
    j.cache.put(old_key, {"supported": True, "reason": "old prompt"})
    assert j.judge([("Login returns 422.", "Login returns 500")]) == [Verdict(False, "rule", "contradiction")]
    assert len(stub.requests) == 1
    # an entry without a label under today's key reads as unlabelled, never as a guessed label
    j.cache.put(j._key_for("judge", "p", "q"), {"supported": False, "reason": "binary"})
    assert j.judge([("p", "q")]) == [Verdict(False, "binary")] and len(stub.requests) == 1
    # a label that is unknown or disagrees with the verdict is a miss: asked again
    j.cache.put(j._key_for("judge", "p", "x"), {"supported": True, "reason": "bad", "label": "contradiction"})
    j.cache.put(j._key_for("judge", "p", "y"), {"supported": False, "reason": "bad", "label": "refuted"})
    assert [v.reason for v in j.judge([("p", "x"), ("p", "y")])] == ["rule", "rule"] and len(stub.requests) == 2


def test_binary_replies_still_work(stub, tmp_path):
    stub.labels = False
    got = _llm(stub, tmp_path).judge([("Login returns 422.", "Login returns 422"), ("Login returns 422.", "x")])
    assert got == [Verdict(True, "rule"), Verdict(False, "rule")]


# ---------------------------------------------------------------------------------------------
# LLM claim extraction inside eval answers

CONTEXTS = ["Login returns 422 on a wrong password.", "Errors are listed in red."]
RECORD = {"id": "q1", "user_input": "What does login return on a wrong password?",
          "response": "Login returns 500 [1]. Errors are listed in red [2].", "retrieved_contexts": CONTEXTS,
          "reference": "Login returns 422. The account locks for 15 minutes."}


def _records(rows):
    return [parse_answer(r, "answers.jsonl", i, {}) for i, r in enumerate(rows, start=1)]


def test_llm_extracts_the_claims_and_every_check_keeps_its_label(stub, tmp_path):
    out = evaluate_answers(_records([RECORD]), _llm(stub, tmp_path), EvalConfig(claim_extractor="llm")).to_json()
    (rec,) = out["records"]
    c = rec["claims"]
    assert c["response"] == ["Login returns 500", "Errors are listed in red"]
    assert c["reference"] == ["Login returns 422", "The account locks for 15 minutes"]
    assert c["source"] == {"response": "llm", "reference": "llm"} and out["config"]["claim_extractor"] == "llm"
    extraction = [r for r in stub.requests if r["messages"][0]["content"] == SYSTEM_CLAIMS]
    assert len(extraction) == 2 and "Question:\nWhat does login return" in extraction[0]["messages"][1]["content"]
    assert all("[1]" not in r["messages"][1]["content"] for r in extraction)  # citation markers removed
    m = rec["metrics"]
    assert m["claims.precision"] == 0.0 and m["claims.claim_recall"] == 0.5 and m["claims.context_precision"] == 0.5
    assert m["claims.hallucination"] == 0.5 and m["claims.noise_sensitivity_in_irrelevant"] == 0.5
    wrong = c["checks"]["response"][0]
    assert wrong == {"correct": False, "correct_label": "contradiction", "in_contexts": [False, False],
                     "in_contexts_labels": ["contradiction", "neutral"]}
    assert c["checks"]["reference"][0]["in_contexts_labels"] == ["entailment", "neutral"]
    assert c["contradictions"] == {"by_reference": 1, "labelled": 2, "by_reference_rate": 0.5, "by_a_context": 1}
    assert [s["label"] for s in rec["statements"]] == ["contradiction", "entailment"]
    assert {"in_contexts_label", "in_answer_label"} <= set(rec["reference_statements"][0])
    assert [v["label"] for v in rec["citation_verdicts"]] == ["contradiction", "entailment"]
    # a later run reads every extraction and verdict from the cache: no request at all
    n = len(stub.requests)
    again = evaluate_answers(_records([RECORD]), _llm(stub, tmp_path), EvalConfig(claim_extractor="llm")).to_json()
    assert len(stub.requests) == n and again["records"] == out["records"]
    assert again["judge"]["usage"]["calls"] == 0 and again["judge"]["usage"]["cache_hits"] > 0


def test_a_failed_extraction_is_null_with_the_reason_never_empty(stub, tmp_path):
    rows = [{**RECORD, "id": "bad-response", "response": "FAIL to answer. Errors are listed in red."},
            {**RECORD, "id": "bad-reference", "reference": "FAIL here. Login returns 422."}]
    out = evaluate_answers(_records(rows), _llm(stub, tmp_path), EvalConfig(claim_extractor="llm")).to_json()
    response_failed, reference_failed = out["records"]
    m, why = response_failed["metrics"], response_failed["nan_reasons"]
    for name in ("precision", "faithfulness", "hallucination", "self_knowledge", "noise_sensitivity_in_relevant"):
        assert m[f"claims.{name}"] is None
        assert why[f"claims.{name}"] == "claim extraction failed: malformed reply: no 'claims' list"
    assert m["claims.recall"] == 0.0 and m["claims.context_precision"] == 0.5  # the reference's claims were made
    assert response_failed["claims"]["failed"] == {"response": "claim extraction failed: malformed reply: no 'claims' list"}
    m, why = reference_failed["metrics"], reference_failed["nan_reasons"]
    for name in claims.REFERENCE_CLAIM_METRICS:  # context_precision would read 0 from no claims: it is unknown
        assert m[f"claims.{name}"] is None and why[f"claims.{name}"].startswith("claim extraction failed")
    assert m["claims.precision"] == 0.0 and m["claims.faithfulness"] == 0.5  # judged against the reference text
    n = len(stub.requests)
    evaluate_answers(_records(rows), _llm(stub, tmp_path), EvalConfig(claim_extractor="llm"))
    assert len(stub.requests) == n + 2  # failed extractions are not cached: asked again, the rest is


def test_given_claims_and_reference_statements_are_not_extracted(stub, tmp_path):
    given = {**RECORD, "response_claims": ["Login returns 500"], "reference_statements": ["Login returns 422"]}
    (rec,) = evaluate_answers(_records([given]), _llm(stub, tmp_path), EvalConfig(claim_extractor="llm")).to_json()["records"]
    assert rec["claims"]["source"] == {"response": "response_claims", "reference": "reference_statements"}
    assert not any(r["messages"][0]["content"] == SYSTEM_CLAIMS for r in stub.requests)


def test_the_cli_flag(stub, tmp_path, monkeypatch, capsys):
    src = write_jsonl(tmp_path / "answers.jsonl", [RECORD])
    code, _, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", src, "--judge", "lexical",
                            "--claim-extractor", "llm", "--out", tmp_path / "lexical")
    assert code == 2 and err.strip().splitlines()[-1] == (
        "error: --claim-extractor: claim extraction by llm needs an llm judge (--judge llm:MODEL), not 'lexical'")
    code, _, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", src, "--claim-extractor", "gpt",
                            "--out", tmp_path / "gpt")
    assert code == 2 and "unknown claim extractor 'gpt'" in err and "Traceback" not in err
    monkeypatch.setenv("LEWISRAG_LLM_BASE_URL", stub.url)
    monkeypatch.setenv("LEWISRAG_LLM_API_KEY", KEY)
    run = tmp_path / "run"
    r = CliRunner().invoke(app, ["eval", "answers", "--answers", str(src), "--judge", "llm:judge-model", "--out", str(run),
                                 "--cache-dir", str(tmp_path / "cache"), "--claim-extractor", "llm"])
    assert r.exit_code == 0, r.output
    back = read_results(run)  # what the gate reads: a field more, nothing renamed
    assert back.config["claim_extractor"] == "llm" and back.records[0].detail["claims"]["source"]["response"] == "llm"
    assert back.records[0].detail["claims"]["contradictions"]["by_reference"] == 1
    cell = "1 of 2 (0.500) by the reference, 1 by a passage"  # summed over the run's answers, in every report
    assert back.aggregates["claims.contradictions"]["answers_contradicted"] == 1
    assert f"| contradicted claims | {cell} |" in (run / "report.md").read_text(encoding="utf-8")
    assert f"<th scope=\"row\">contradicted claims</th><td>{cell}</td>" in (run / "report.html").read_text(encoding="utf-8")
    assert "contradicted claims" in r.output
    for p in run.rglob("*"):
        assert not p.is_file() or KEY.encode() not in p.read_bytes(), p


# ---------------------------------------------------------------------------------------------
# human labels with a three-way label


def _labels_file(tmp_path, rows, name="labels.jsonl"):
    return write_jsonl(tmp_path / name, rows)


def test_label_judge_reads_three_way_labels(tmp_path):
    rows = [{"id": "a", "premise": "Login returns 422.", "hypothesis": "Login returns 422", "supported": True, "label": "entailment"},
            {"id": "b", "premise": "Login returns 422.", "hypothesis": "Login returns 500", "supported": False, "label": "Contradiction"},
            {"id": "c", "premise": "Login returns 422.", "hypothesis": "A toast", "supported": False},
            {"id": "d", "premise": "Login returns 422.", "hypothesis": "Red errors", "supported": False, "label": None}]
    j = LabelJudge.from_file(_labels_file(tmp_path, rows))
    got = j.judge([("Login returns  422.", "Login returns 422"), ("Login returns 422.", "Login returns 500"),
                   ("Login returns 422.", "A toast"), ("Login returns 422.", "Red errors"), ("x", "y")])
    assert [v.label for v in got] == ["entailment", "contradiction", None, None, None]
    assert [v.supported for v in got] == [True, False, False, False, None]
    binary = LabelJudge.from_file(_labels_file(tmp_path, [{k: v for k, v in r.items() if k != "label"} for r in rows], "b.jsonl"))
    plain = LabelJudge({(r["premise"], r["hypothesis"]): r["supported"] for r in rows})
    assert binary.fingerprint == plain.fingerprint != j.fingerprint  # binary files keep their fingerprint


@pytest.mark.parametrize(("bad", "message"), [
    ({"supported": False, "label": "refuted"}, "field 'label': expected one of entailment, neutral, contradiction"),
    ({"supported": False, "label": 2}, "field 'label': expected one of"),
    ({"supported": True, "label": "contradiction"}, "field 'label': 'contradiction' disagrees with supported=true"),
    ({"supported": False, "label": "entailment"}, "field 'label': 'entailment' disagrees with supported=false"),
])
def test_label_judge_refuses_a_bad_label(tmp_path, monkeypatch, capsys, bad, message):
    good = {"id": "a", "premise": "p", "hypothesis": "h", "supported": True, "label": "entailment"}
    path = _labels_file(tmp_path, [good, {"id": "b", "premise": "p", "hypothesis": "other", **bad}])
    with pytest.raises(InputError, match=f"labels.jsonl:2: {message}"):
        LabelJudge.from_file(path)
    answers = write_jsonl(tmp_path / "answers.jsonl", [RECORD])
    code, _, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", answers, "--judge", f"labels:{path}",
                            "--out", tmp_path / "run")
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"error: {path}:2: {message}")


def test_label_judge_refuses_two_labels_for_one_pair(tmp_path):
    rows = [{"id": "a", "premise": "p", "hypothesis": "h", "supported": False},
            {"id": "b", "premise": "p", "hypothesis": "h", "supported": False, "label": "neutral"},
            {"id": "c", "premise": "p", "hypothesis": "h", "supported": False, "label": "contradiction"}]
    with pytest.raises(InputError, match=r"labels.jsonl:3: field 'label': contradicts the label on line 2"):
        LabelJudge.from_file(_labels_file(tmp_path, rows))


# ---------------------------------------------------------------------------------------------
# the binary verdict stays what the metrics read


def _three_way(premise: str, hypothesis: str) -> Verdict:
    label = label_of(premise, hypothesis)
    return Verdict(label == "entailment", "", label)


def test_labels_change_no_metric():
    rows = [RECORD, {**RECORD, "id": "q2", "response": "Login returns 422 [1]. The account locks [2]."},
            {k: v for k, v in {**RECORD, "id": "q3"}.items() if k != "reference"}]

    class Labelled:
        name, fingerprint = "labelled", "l" * 64

        def judge(self, pairs):
            return [_three_way(p, h) for p, h in pairs]

    binary = evaluate_answers(_records(rows), FunctionJudge(lambda p, h: label_of(p, h) == "entailment")).to_json()
    labelled = evaluate_answers(_records(rows), Labelled()).to_json()
    for a, b in zip(binary["records"], labelled["records"]):
        assert a["metrics"] == b["metrics"] and a["nan_reasons"] == b["nan_reasons"] and a["diagnosis"] == b["diagnosis"]
        assert "contradictions" not in a["claims"] and "contradictions" in b["claims"]
        assert all(s["label"] is None for s in a["statements"])
    contradicted = labelled["aggregates"].pop(CONTRADICTIONS)  # the one addition: counts, summed over the answers
    assert CONTRADICTIONS not in binary["aggregates"] and binary["aggregates"] == labelled["aggregates"]
    assert any(m in binary["aggregates"] for m in CLAIM_METRICS)
    each = [r["claims"]["contradictions"] for r in labelled["records"] if "contradictions" in r["claims"]]
    assert contradicted["answers"] == len(each) == 3
    for key in ("by_reference", "labelled", "by_a_context"):
        assert contradicted[key] == sum(c[key] for c in each)
    assert contradicted["by_reference_rate"] == contradicted["by_reference"] / contradicted["labelled"]


def test_bughunt_with_three_way_human_labels_scores_the_same():
    from lewisrag.eval.bughunt import human_labels, load_bughunt

    sample = load_bughunt()
    rows = human_labels(sample)
    # the humans' binary labels, each told apart further: negatives alternate neutral / contradiction
    three = {(r["premise"], r["hypothesis"]): ("entailment" if r["supported"] else ("neutral", "contradiction")[i % 2])
             for i, r in enumerate(rows)}
    labelled = LabelJudge({(r["premise"], r["hypothesis"]): r["supported"] for r in rows}, "labelled", three)
    before, after = evaluate_bughunt(sample).to_json(), evaluate_bughunt(sample, labelled).to_json()
    assert bughunt_label_judge(sample).fingerprint == before["judge"]["fingerprint"]
    for a, b in zip(before["records"], after["records"]):
        assert a["metrics"] == b["metrics"] and a["granularity"] == b["granularity"]
        assert [s["supported"] for s in a["statements"]] == [s["supported"] for s in b["statements"]]
    labels = [s["label"] for r in after["records"] for s in r["statements"] if s["supported"] is not None]
    assert labels and all(lab in LABELS for lab in labels) and any(lab == "contradiction" for lab in labels)
    assert not any(math.isnan(v) for r in after["records"] for v in r["metrics"].values() if isinstance(v, float))
