"""Two defects of the Chinese reports and of answer relevancy.

Chinese reports showed English: the lexical judge's "; but the premise lacks the number 2012" landed in the
"missing" list of its translation and was printed as it was, and several reasons why a metric is null ("no
statements in the answer", "no response claims", "judge undecided on all 2 ...") had no Chinese. Every reason
text the evaluator and the claim metrics can write, and every reason the base preset skips a stage or a measure
for, is read here from their source and must reach a Chinese report in Chinese.

Answer relevancy is 0 only when every generated question is noncommittal (ragas), but the LLM judge asked for
one flag for the whole answer and the evaluator copied it to every question: one flag zeroed the score. The
judge now reads one flag per question, strictly, under a new questions version (fingerprint, cache key).
"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
import re

import pytest
from conftest import ModeEndpoint, endpoint_root, send_json, write_jsonl

from lewisrag.eval import claims, evaluator
from lewisrag.eval.evaluator import EvalConfig, evaluate_answers
from lewisrag.eval.judges import LexicalJudge
from lewisrag.eval.judges.base import digest
from lewisrag.eval.judges.llm import EXTRACTION_VERSION, PROMPT_VERSION, VERDICTS_VERSION, JudgeError, LLMJudge
from lewisrag.eval.metrics import answer_relevancy
from lewisrag.eval.records import read_answers
from lewisrag.eval.reports.html import page_data_from_results
from lewisrag.eval.reports.i18n import messages
from lewisrag.eval.reports.markdown import render_results
from lewisrag.experiments import base

ZH = messages("zh")


def _english(text: str) -> list[str]:
    """The English words left in a Chinese text: Latin words that are no identifier (retrieved_contexts),
    flag (--embedder) or the judge's name."""
    return [w for w in re.findall(r"(?<![\w-])[A-Za-z]{2,}(?![\w-])", text) if w not in ("llm", "id")]


# --- the lexical judge's reason -------------------------------------------------------------------

@pytest.mark.parametrize("premise,hypothesis,lacks", [
    ("卡温拉斯的女王是贺璐钧。贺璐钧自2010年起执政。", "贺璐钧自2012年起执政。", "；但前提里没有数字 2012"),
    ("鲁斯于2016年成为瓦尔多利亚的国家元首。", "塔姆于2016年成为瓦尔多利亚的国家元首。", "；但前提里没有名字 塔姆"),
    ("Ruus became head of state of Valdoria in 2016.", "The head of state of Valdoria is Tamm.", "；但前提里没有名字 Tamm"),
    ("Ruus became head of state of Valdoria in 2016 after the long election campaign.",
     "Tamm became head of state of Valdoria in 2018 after the long election campaign.", "；但前提里没有数字 2018，也没有名字 Tamm"),
])
def test_the_lexical_judges_lacking_number_or_name_is_chinese(premise, hypothesis, lacks):
    (v,) = LexicalJudge().judge([(premise, hypothesis)])
    assert v.supported is False and "but the premise lacks" in v.reason  # the share alone would have passed it
    zh = ZH.text(v.reason)
    assert zh.startswith("前提里有 ") and zh.endswith(lacks), zh
    assert [w for w in _english(zh) if w.lower() != "tamm"] == [], zh  # the name itself is the statement's


def test_a_lexical_reason_of_another_shape_is_shown_as_written_not_half_translated():
    odd = "4/4 content tokens in premise (1.00 ≥ 0.75); missing: x; but the premise lacks something else"
    assert ZH.text(odd) == odd
    assert ZH.text("2/3 content tokens in premise (0.67 < 0.75); missing: returns, 弹出") == \
        "前提里有 2/3 个内容词（0.67 < 0.75）；缺少：returns、弹出"


# --- every reason a metric can be null for ----------------------------------------------------------

# The functions whose strings become a record's nan_reasons (or a statement's reason). Every string in them
# with a space, outside a `raise`, is such a text; an f-string is written out with each value it can take.
REASON_SOURCES = {evaluator: ("_prepare", "_claim_inputs", "_claim_scores", "_scored", "_record", "_relevancy"),
                  claims: ("diagnostics_from_labels", "_share", "_f1", "_why_nothing_recalled")}


def _reason_texts() -> set[str]:
    texts: set[str] = set()
    for module, names in REASON_SOURCES.items():
        tree = ast.parse(inspect.getsource(module))
        consts = {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                  for t in node.targets if isinstance(t, ast.Name) and isinstance(node.value, ast.Constant)
                  and isinstance(node.value.value, str)}
        texts |= {v for k, v in consts.items() if k.endswith("_REASON")}
        # `_scored(name, support, what, ...)`: the `what` its f-strings name
        whats = [c.args[2].value for c in ast.walk(tree) if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "_scored"]
        for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names):
            # an error raised is no reason, nor is a docstring or a piece of an f-string on its own
            skip = {id(x) for n in ast.walk(fn) if isinstance(n, (ast.Raise, ast.JoinedStr)) for x in ast.walk(n) if x is not n}
            skip |= {id(fn.body[0].value)} if isinstance(fn.body[0], ast.Expr) else set()
            for node in ast.walk(fn):
                if id(node) in skip:
                    continue
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and " " in node.value:
                    texts.add(node.value)
                elif isinstance(node, ast.JoinedStr):
                    choices = []
                    for part in node.values:
                        if isinstance(part, ast.Constant):
                            choices.append([part.value])
                        elif isinstance(part.value, ast.Name) and part.value.id in consts:
                            choices.append([consts[part.value.id]])
                        elif isinstance(part.value, ast.Name) and part.value.id == "what":
                            choices.append(whats)
                        else:  # a count, or an error or verdict reason shown as written: a number keeps English out
                            choices.append(["3"])
                    texts |= {"".join(p) for p in itertools.product(*choices)}
    return texts


def test_every_reason_a_metric_can_be_null_for_reaches_a_chinese_report_in_chinese():
    texts = _reason_texts()
    # the enumeration finds what the reviewers saw, so it cannot pass by finding nothing
    assert {"no statements in the answer", "the answer has no sentences", "precision or recall is undefined",
            "no response claims", "no reference claims", "no contexts", "judge undecided on all 3 statements in the answer: 3",
            "no reference claim is entailed by any context (no relevant context)", "claim extraction failed: 3",
            "not_in_kb: judged on refusal only, never averaged", "all 3 labels it counts are undecided"} <= texts, texts
    untranslated = {t: ZH.text(t) for t in texts if ZH.text(t) == t or _english(ZH.text(t))}
    assert not untranslated, untranslated
    assert messages("en").text("no response claims") == "no response claims"  # English stays as written


def _skip_reasons() -> set[str]:
    """Why the base preset leaves a stage or a measure out (experiments/base.py), which report.md prints:
    NOT_RUN's values, what is assigned to `skipped[...]` and every dict's "skipped" entry, each branch of
    a conditional."""
    def texts(node) -> set[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, ast.IfExp):
            return texts(node.body) | texts(node.orelse)
        return {s for v in node.values for s in texts(v)} if isinstance(node, ast.Dict) else set()

    found: set[str] = set()
    for node in ast.walk(ast.parse(inspect.getsource(base))):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "NOT_RUN" or isinstance(t, ast.Subscript)
                                                and getattr(t.value, "id", "") == "skipped" for t in node.targets):
            found |= texts(node.value)
        elif isinstance(node, ast.Dict):
            found |= {s for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and k.value == "skipped"
                      for s in texts(v)}
    return found


def test_every_reason_the_base_preset_skips_for_reaches_a_chinese_report_in_chinese():
    texts = _skip_reasons()
    assert {"no --passages-b", "used only by the ablations", "no test question's gold passage is among the indexed passages",
            "no test question has gold_passage_ids (the hub's QA sets and DPR's .qa.csv have none)"} <= texts, texts
    untranslated = [t for t in texts if ZH.text(t) == t or not re.search(r"[\u4e00-\u9fff]", ZH.text(t))]
    assert not untranslated, untranslated


def test_a_verdicts_reason_inside_a_null_reason_is_translated_too():
    why = "judge undecided on all 2 reference statements: no content tokens in the statement"
    assert ZH.text(why) == "裁判对全部 2 条参考陈述都没有给出判定：陈述里没有内容词"
    assert ZH.text("decompose failed: the judge returned no statements for 3 sentences") == "拆分陈述失败：裁判没有从 3 个句子里拆出任何陈述"
    assert ZH.text("decompose failed: HTTP 500") == "拆分陈述失败：HTTP 500"  # an error's own text as written


CTX = [{"id": "1", "title": "卡温拉斯", "text": "卡温拉斯的女王是贺璐钧。约有580万人生活在卡温拉斯。贺璐钧自2010年起执政。"}]
ZH_RECORDS = [
    {"id": "z1", "user_input": "贺璐钧何时开始执政？", "response": "贺璐钧自2012年起执政[1]。", "retrieved_contexts": CTX,
     "reference": "2010年", "reference_statements": ["贺璐钧自2010年起执政。"], "gold_passage_ids": ["1"], "category": "single_doc"},
    {"id": "e1", "user_input": "卡温拉斯的女王是谁？", "response": "[1]", "retrieved_contexts": CTX, "reference": "贺璐钧",
     "reference_statements": ["卡温拉斯的女王是贺璐钧。"], "gold_passage_ids": ["1"], "category": "single_doc"},
    {"id": "e2", "user_input": "卡温拉斯的女王是谁？", "response": "卡温拉斯的女王是贺璐钧。", "retrieved_contexts": [],
     "reference": "贺璐钧", "category": "single_doc"},
    {"id": "e3", "user_input": "卡温拉斯的女王是谁？", "response": "是的。", "retrieved_contexts": CTX, "category": "single_doc"},
]


def test_eval_answers_in_chinese_writes_no_english_reason(tmp_path):
    """What `eval answers --lang zh` writes into report.md and report.html's page data (plots left out)."""
    res = evaluate_answers(read_answers(write_jsonl(tmp_path / "a.jsonl", ZH_RECORDS)), LexicalJudge()).to_json()
    written = {why for rec in res["records"] for why in rec["nan_reasons"].values()}
    # the run reaches the reasons the reviewers saw in English
    assert {"no statements in the answer", "the answer has no sentences", "no response claims", "no contexts",
            "judge undecided on all 1 statements in the answer: no content tokens in the statement"} <= written, written
    md = render_results(res, "zh")
    assert "缺少：2012；但前提里没有数字 2012 |" in md and "but the premise lacks" not in md
    answers = [a for q in page_data_from_results(res, lang="zh")["questions"] for a in q["answers"]]
    shown = [why for a in answers for why in a["nan_reasons"].values()] + [s["reason"] for a in answers for s in a["statements"]]
    assert shown and not [s for s in shown if _english(s)], [s for s in shown if _english(s)]


# --- answer relevancy: one noncommittal flag per question ------------------------------------------

QUESTIONS = ["What does login return?", "接口返回什么？", "Is signup open?"]
REPLIES = {  # mode -> the questions reply
    "mixed": {"questions": [{"question": q, "noncommittal": nc} for q, nc in zip(QUESTIONS, (True, False, False))]},
    "evasive": {"questions": [{"question": q, "noncommittal": True} for q in QUESTIONS]},
    "ragas": {"questions": [{"question": q, "noncommittal": nc} for q, nc in zip(QUESTIONS, (1, 0, 0))]},
    # malformed: one flag for the whole answer (the old reply), a flag that is no boolean, a question without one
    "one_flag": {"questions": QUESTIONS, "noncommittal": True},
    "string_flag": {"questions": [{"question": QUESTIONS[0], "noncommittal": "false"}]},
    "two": {"questions": [{"question": QUESTIONS[0], "noncommittal": 2}]},
    "no_flag": {"questions": [{"question": QUESTIONS[0]}]},
    "no_question": {"questions": [{"noncommittal": False}]},
}


class Endpoint(ModeEndpoint):
    """POST /MODE/v1/chat/completions: a questions request gets REPLIES[MODE]; a judge's request a verdict
    (entailment) per statement; a decompose request one statement. Each request's mode is logged in `seen`."""

    def answer(self, mode: str, body: dict, first: bool) -> None:
        system, user = (m["content"] for m in body["messages"])
        if system.startswith("Write questions"):
            content = REPLIES[mode]
        elif "Statements:" in user:
            n = len(user.split("Statements:\n", 1)[1].splitlines())
            content = {"verdicts": [{"id": i, "label": "entailment", "reason": "r"} for i in range(1, n + 1)]}
        else:
            content = {"statements": ["from the endpoint"]}
        send_json(self, 200, json.dumps({"choices": [{"message": {"content": json.dumps(content, ensure_ascii=False)}}],
                                         "usage": {"prompt_tokens": 3, "completion_tokens": 2}}))


@pytest.fixture(scope="module")
def root():
    with endpoint_root(Endpoint) as url:
        yield url


def _judge(root: str, mode: str, tmp_path) -> LLMJudge:
    return LLMJudge(f"{root}/{mode}/v1", "m", "", cache_dir=tmp_path / "cache", max_retries=0, timeout=5.0)


EMBED = {"What does login return?": [1.0, 0.0], "接口返回什么？": [0.6, 0.8], "Is signup open?": [0.0, 1.0]}


@pytest.mark.parametrize("mode,flags,score", [("mixed", [True, False, False], 1.6 / 3), ("ragas", [True, False, False], 1.6 / 3),
                                              ("evasive", [True, True, True], 0.0)])
def test_one_noncommittal_question_does_not_zero_answer_relevancy(root, tmp_path, mode, flags, score):
    j = _judge(root, mode, tmp_path)
    assert j.generate_questions("It returns 422.", 3) == (QUESTIONS, flags)
    rec = read_answers(write_jsonl(tmp_path / "a.jsonl", [{"id": "q", "user_input": "What does login return?",
                                                          "response": "It returns 422.", "retrieved_contexts": ["Login returns 422."]}]))
    res = evaluate_answers(rec, j, EvalConfig(claims=False), embed=EMBED.get).to_json()
    assert res["records"][0]["metrics"]["answer_relevancy"] == pytest.approx(score)


@pytest.mark.parametrize("mode", ["one_flag", "string_flag", "two", "no_flag", "no_question"])
def test_a_questions_reply_without_one_flag_per_question_is_malformed_and_not_cached(root, tmp_path, mode):
    j = _judge(root, mode, tmp_path)
    with pytest.raises(JudgeError, match="malformed reply"):
        j.generate_questions("It returns 422.", 3)
    n = len(Endpoint.seen)
    with pytest.raises(JudgeError, match="malformed reply"):
        j.generate_questions("It returns 422.", 3)
    assert len(Endpoint.seen) == n + 1  # asked again


def test_questions_cached_under_the_old_reading_are_not_reused_and_the_fingerprint_moves(root, tmp_path):
    j = _judge(root, "mixed", tmp_path)
    user = "Write 3 questions.\n\nAnswer:\nIt returns 422."
    stale = {"questions": [{"question": q, "noncommittal": True} for q in QUESTIONS]}  # would read as evasive
    j.cache.put(digest(j.name, j.model, j.params, PROMPT_VERSION, "questions", user, "3"), stale)
    n = len(Endpoint.seen)
    assert j.generate_questions("It returns 422.", 3)[1] == [True, False, False] and len(Endpoint.seen) == n + 1
    assert j.fingerprint != digest("LLMJudge", j.model, j.params, PROMPT_VERSION, VERDICTS_VERSION)
    assert j.describe()["questions_version"] != PROMPT_VERSION
    # the other replies keep their cache: a decompose reply cached under its own reading (EXTRACTION_VERSION) is still read
    j.cache.put(digest(j.name, j.model, j.params, PROMPT_VERSION, EXTRACTION_VERSION, "decompose", "It returns 422.", ""),
                {"statements": ["cached"]})
    assert j.decompose("It returns 422.") == ["cached"] and len(Endpoint.seen) == n + 1


def test_answer_relevancy_refuses_one_flag_for_all_questions():
    with pytest.raises(TypeError, match="one flag per generated question"):
        answer_relevancy("What does login return?", QUESTIONS, EMBED.get, True)
    assert answer_relevancy("What does login return?", QUESTIONS, EMBED.get, [True, False, False]) == pytest.approx(1.6 / 3)
