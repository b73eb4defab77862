"""The reports' comparative sentences say only what their numbers bear out: a lead that the paired
test reverses on the shared questions is not named plainly (a mean over each column's own questions
can lead where the shared ones do not); "every column", "every system" and "the same" need every
column or system to have the value; a closed book tied for the lead has no gap to itself; a null
ROUGE-L is not measured, not 0; and the Chinese reports have no stray space beside their own
punctuation, nor a label saying every layer passed where none was measured."""

from __future__ import annotations

import json

from conftest import run_main, write_jsonl
from lewisrag.eval.reports.claims import claim_sentences, paired_difference, paired_pvalue
from lewisrag.eval.reports.i18n import Messages
from lewisrag.experiments import report as R

EN, ZH = Messages("en"), Messages("zh")


def _ids(values: list[float], start: int = 0) -> dict[str, float]:
    return {f"q{start + i:03d}": v for i, v in enumerate(values)}


def _faithfulness(means: dict[str, float]) -> dict:
    return {label: {"claims.faithfulness": {"n": 40, "nan": 0, "mean": m}} for label, m in means.items()}


# --- 1. a lead the paired questions reverse ----------------------------------------------------------


def test_a_claim_lead_reversed_on_the_shared_questions_is_not_named_plainly():
    """a's mean (0.95 over 100 questions) tops b's (0.90 over 10), but on those 10 b is higher at
    p = 0.002: the sentence said "highest for a, lowest for b", as if the test bore it out."""
    a, b = _ids([0.5] * 10 + [1.0] * 90), _ids([0.9] * 10)
    assert paired_pvalue(a, b)["p"] < 0.05 and paired_difference(a, b) < 0
    scores = {"a": {"claims.faithfulness": a}, "b": {"claims.faithfulness": b}}
    columns = _faithfulness({"a": 0.95, "b": 0.9})
    sentence = claim_sentences(columns, str, scores=scores)[-1]
    assert sentence.endswith("(highest for a, reversed against b on the questions both have a value for; "
                             "lowest for b, reversed against a on the questions both have a value for)."), sentence
    assert "，但只看与 b 都有数值的题，高低相反" in claim_sentences(columns, str, "zh", scores)[-1]
    # the same means, the shared questions leaning a's way: named plainly
    scores["b"]["claims.faithfulness"] = _ids([0.2] * 10)
    assert claim_sentences(columns, str, scores=scores)[-1].endswith("(highest for a, lowest for b).")


def _faithful_results() -> dict:
    """RAG-Token 0.918 over 49 questions, RAG-Sequence 0.9 over 10, on which RAG-Token scores 0.6."""
    values = {"rag_token": [0.6] * 10 + [1.0] * 39, "rag_sequence": [0.9] * 10}
    return {"layers": {s: {"faithfulness": sum(v) / len(v)} for s, v in values.items()},
            "records": [{"id": q, "system": s, "metrics": {"faithfulness": v}}
                        for s, vs in values.items() for q, v in _ids(vs).items()]}


def test_the_most_faithful_system_is_not_named_plainly_when_the_shared_questions_reverse_it():
    sentence = R._compare(_faithful_results(), EN)[-2]
    assert sentence.startswith("RAG-Token has the most faithful answers (0.918 of their statements supported by the "
                               "passages they read); the lead over RAG-Sequence (p = 0.002) is reversed on the paired "
                               "questions (the paired sign-flip test"), sentence
    assert "在配对的题上，RAG-Sequence（p = 0.002）反而更高（配对符号翻转检验" in R._compare(_faithful_results(), ZH)[-2]


def test_the_best_exact_match_is_not_named_plainly_when_mcnemar_reverses_it():
    """RAG-Sequence leads on its own 100 questions (90%); on the 10 RAG-Token answered, RAG-Token has every
    one right and RAG-Sequence none: McNemar's p = 0.002 the other way."""
    em = {"rag_sequence": _ids([0.0] * 10 + [1.0] * 90), "rag_token": _ids([1.0] * 10) | _ids([0.0] * 20, 100)}
    qa = {s: {"exact_match": sum(v.values()) / len(v), "f1": 0.0, "rougeL": 0.0} for s, v in em.items()}
    records = [{"id": q, "system": s, "kind": "short", "metrics": {"exact_match": v}} for s, vs in em.items()
               for q, v in vs.items()]
    sentence = R._table1({"qa": qa, "records": records}, EN)[-2]
    assert sentence == ("RAG-Sequence has the highest exact match (90%); the lead over RAG-Token (p = 0.002) is "
                        "reversed on the paired questions (McNemar's exact test, two-sided, over the questions both "
                        "systems answered; a lead counts at p < 0.05)."), sentence


# --- 3. "0 in every column" needs every column ---------------------------------------------------------


def _col(**means: float) -> dict:
    return {f"claims.{m}": {"n": 4, "nan": 0, "mean": v} for m, v in means.items()}


def _prf(columns: dict, lang: str = "en") -> str:
    return claim_sentences(columns, str, lang)[0]


def test_recall_zero_is_said_of_every_column_only_when_every_column_has_it():
    """A column without recall (shown "–") beside one at 0 read "Recall ... is 0 in every column"."""
    assert "in every column" not in _prf({"a": _col(precision=0.5, recall=0.0, f1=0.0), "b": _col(precision=0.5)})
    assert "Recall, and with it F1, is 0 in every column" in _prf({"a": _col(precision=0.5, recall=0.0, f1=0.0)})


def test_f1_is_named_zero_only_where_it_is():
    """F1 has no value where precision has none (answers without claims): "Recall, and with it F1, is 0"
    beside an F1 shown "–"."""
    prf = _prf({"a": _col(recall=0.0, context_utilization=0.0)})
    assert ". Recall, and with it context utilization, is 0 in every column: these ask" in prf and "F1," not in prf, prf
    assert ". Recall is 0 in every column" in _prf({"a": _col(recall=0.0, f1=0.0), "b": _col(recall=0.0)})
    zh = _prf({"a": _col(recall=0.0, context_utilization=0.0)}, "zh")
    assert "。召回率（以及随之的上下文利用率）在每一列都是 0" in zh and "。 " not in zh, zh
    assert "。召回率（以及随之的 F1 和上下文利用率）在每一列都是 0" in _prf(
        {"a": _col(recall=0.0, f1=0.0, context_utilization=0.0)}, "zh")


def test_no_wrong_claim_from_either_side_is_not_an_even_split():
    """Noise and hallucination both 0 read "wrong claims come as much from the passages as from nowhere
    (0.000 against 0.000)"."""
    zero = _col(noise_sensitivity_in_relevant=0.0, noise_sensitivity_in_irrelevant=0.0, hallucination=0.0)
    some = _col(noise_sensitivity_in_relevant=0.1, noise_sensitivity_in_irrelevant=0.0, hallucination=0.0)
    (alone,) = [s for s in claim_sentences({"all": zero}, str) if s.startswith("Hallucination")]
    assert alone == "Hallucination (a wrong claim in no passage): 0.000.", alone
    (two,) = [s for s in claim_sentences({"A": zero, "B": some}, str) if s.startswith("Hallucination")]
    assert "for B (0.100 against 0.000)" in two and "for A" not in two, two


# --- 4 and 5. Table 1 and the long-form table --------------------------------------------------------


def _row(em: float | None) -> dict:
    return {"exact_match": em, "f1": 0.0, "rougeL": 0.0}


def test_a_closed_book_tied_for_the_lead_has_no_gap_to_itself():
    qa = {"rag_token": _row(0.5), "rag_sequence": _row(0.3), "closed_book": _row(0.5)}
    sentence = R._table1({"qa": qa}, EN)[-2]
    assert sentence.startswith("RAG-Token and BART (closed book) share the highest exact match (50%); the lead over "
                               "RAG-Sequence is not tested") and "points against" not in sentence, sentence
    assert "相差" not in R._table1({"qa": qa}, ZH)[-2]


def test_one_system_is_not_every_system():
    for qa in ({"rag_token": _row(0.5)}, {"rag_token": _row(0.5), "stitched": _row(None)}):
        assert R._table1({"qa": qa}, EN)[-2] == "RAG-Token has an exact match of 50%."
        assert R._table1({"qa": qa}, ZH)[-2] == "RAG-Token 的精确匹配（EM）为 50%。"


def _long(**rouge: float | None) -> dict:
    return {"qa": {s: {"long": {"n": 6, "rougeL": v, "bleu1": 0.0}} for s, v in rouge.items()}}


def test_a_null_rouge_l_is_not_measured_not_zero():
    """The schema allows a null long-form ROUGE-L; the sentence read it as 0: "every system scores the same
    ROUGE-L (0.000)"."""
    assert R._long_form(_long(rag_token=None, rag_sequence=None, closed_book=None), EN)[-2] == \
        "On 6 long-form questions no system has a ROUGE-L: not measured."
    assert R._long_form(_long(rag_token=0.0, rag_sequence=None, closed_book=None), EN)[-2] == \
        "On 6 long-form questions RAG-Token has a ROUGE-L of 0.000."
    ranked = R._long_form(_long(rag_token=0.3, rag_sequence=0.2, closed_book=None), EN)[-2]
    assert ranked == ("On 6 long-form questions RAG-Token scores the highest ROUGE-L (0.300); the lead over "
                      "RAG-Sequence is not tested (results.json holds no per-question scores to pair)."), ranked
    assert "没有哪个系统有 ROUGE-L：未测量" in R._long_form(_long(rag_token=None, rag_sequence=None), ZH)[-2]


# --- 2 and 6. Chinese labels and spacing --------------------------------------------------------------


def test_the_chinese_label_of_no_primary_cause_does_not_claim_every_layer_passed():
    """An empty answer or a refused not_in_kb question has every layer n/a and no primary cause either."""
    assert "通过" not in ZH("layer.none") and ZH("layer.none").startswith("无")


def test_chinese_lists_space_he_only_beside_a_latin_name():
    assert ZH.names(["BART（闭卷）", "提示拼接 RAG"]) == "BART（闭卷）和提示拼接 RAG"
    assert ZH.names(["RAG-Token（p = 1.000）", "BART（闭卷）（p = 1.000）"]) == "RAG-Token（p = 1.000）和 BART（闭卷）（p = 1.000）"
    assert ZH.names(["RAG-Token", "RAG-Sequence"]) == "RAG-Token 和 RAG-Sequence"
    assert EN.names(["a", "提示拼接 RAG"]) == "a and 提示拼接 RAG"


def test_each_systems_refusals_read_in_the_reports_language(tmp_path, monkeypatch, capsys):
    """The per-system not_in_kb line had an ASCII ": " and a space after 。 in the Chinese report.md."""
    answer = {"question": "Q?", "response": "Paris is big [1].", "retrieved_contexts": [{"id": "p", "text": "Paris is big."}],
              "reference": "Paris is big."}
    src = write_jsonl(tmp_path / "answers.jsonl", [
        {**answer, "id": "n1", "system": "A", "category": "not_in_kb"},
        {**answer, "id": "n1", "system": "B", "response": "I don't know.", "retrieved_contexts": [], "category": "not_in_kb"},
        {**answer, "id": "a", "system": "A"}, {**answer, "id": "a", "system": "B"}])
    for lang, line in (("zh", "- `A`：1 道中 0 道拒答。没有拒答：`n1`"), ("en", "- `A`: 0 of 1 refused. Did not refuse: `n1`")):
        code, _, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", src, "--out", tmp_path / lang,
                                "--lang", lang)
        assert code == 0, err
        report = (tmp_path / lang / "report.md").read_text(encoding="utf-8")
        assert line in report.splitlines(), report
        assert json.loads((tmp_path / lang / "results.json").read_text(encoding="utf-8"))["aggregates"]["by_system"]
