"""One scorecard for the paper's RAG and today's: RAG-Token, RAG-Sequence and prompt-stitching RAG.

The same questions go to every system, and each retrieves its own passages from index A: a Lewis model
its top K through the question encoder it fine-tuned, the stitched system its top k through the run's
DPR (K=5 against k=3 in the small preset). So the layer metrics and the position probe measure each
system on its own evidence, and the scorecard has a recall row per k. Each answer becomes an evaluator
record (ragas-style) whose contexts are the passages the generator read, numbered in input order, and
whose citations are [n]: explicit ones for the stitched system, implicit ones (from p(z|x,y)) for the
Lewis models. So one evaluator (lewisrag.eval.evaluator, with the deterministic LexicalJudge) scores
every layer of every system alike. Context ids are the numbers 1..k rather than passage ids because
the evaluator's citation markers are numeric; gold ids are renumbered the same way while it scores, and
each record then carries the real ids: `passage_ids` (what contexts 1..k were), `cited_passage_ids` (those
its [n] markers cite, explicit or implicit) and the question's own `gold_passage_ids` (so `lewisrag gate`
pairs a question by its labels, not by where a run happened to retrieve them). Each system is evaluated
at its own k: recall@1 and recall@k, k the
passages it read (the Lewis models' K, the stitched system's k; the most any answer read, where an hf:
generator's shortened prompts read fewer), in the scorecard's recall row too, its diagnosis at that k;
none is labelled past what it read. EM, F1 and ROUGE-L of a record are scored against every gold answer, as
the scorecard's are (`scoring.qa`: the best over the answers; a pattern's by `regex_match`, F1 and
ROUGE-L unmeasured).

The passages the gold ids are checked against, report.html shows and the position probe moves are
the world's passages_a.jsonl, which must be what index A holds (its manifest's content hash): an
index A over other passages is refused (`index_passages`), since the systems search it.

Cost is counted from the tokenized inputs and the decoded hypotheses, in generator forward passes
over one input each: encoding it, one decoding step, or one teacher-forced pass of a whole answer
(`systems.lewis_forward_passes`). A Lewis model reads K inputs per answer: K encoder passes, then
RAG-Token K decoder passes per decoded token and K teacher-forced passes of its answer for the
implicit citations (K + K·T + K); RAG-Sequence one greedy search per document (T_z passes for
document z's hypothesis) and every one of the C distinct hypotheses rescored under every document,
its thorough decoding (K + Σ_z T_z + C·K). A stitched model reads one input holding the k passages:
one encoder pass and one decoder pass per token (1 + T).

RAGChecker's claim-level diagnostics (`lewisrag.eval.claims`) come with the evaluator's records:
each system's means and intervals sit under layers.<system>.claims, and the scorecard shows them side
by side with one sentence per metric group computed from them (`lewisrag.eval.reports.claims`).

The stitched system's generator is the run's trained one, or with `generator` (`--stitched-generator`)
an LLM or local LM from outside the run (`lewisrag.experiments.stitched_llm`). It stays `stitched` in
every key; `generators.stitched` in results.json and the scorecard's column label say which model it
was. An answer that generator failed to give is scored null with the failure as its reason (the
retrieval scores stay: its passages were found), its diagnosis names `generator_failed`, and the
failures are counted per system.

report.md, report.html and the findings are written in `lang` (`lewisrag.eval.reports.i18n`); the
scorecard's rows keep their English labels for the console and --json.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from lewisrag.data.io import InputError, LewisragWarning, expect, write_json
from lewisrag.data.outputs import check_out_dir, made_by, note_writing
from lewisrag.data.records import check_gold_ids, read_passages, read_qa
from lewisrag.eval.diagnose import diagnose
from lewisrag.eval.evaluator import EvalConfig, aggregate, claim_aggregates, evaluate_answers
from lewisrag.eval.judges import LexicalJudge
from lewisrag.eval.records import parse_answer
from lewisrag.eval.reports.claims import claims_markdown, column_summary
from lewisrag.eval.reports.html import page_data_from_results, render_report_html
from lewisrag.eval.reports.i18n import messages
from lewisrag.eval.results import CLAIM_METRICS, CONTRADICTIONS, Producer, QuestionRecord, Results, write_run_dir
from lewisrag.eval.statements import strip_citations
from lewisrag.training.checkpoint import load_trained
from lewisrag.training.rag_data import refuse_fever_claims
from lewisrag.experiments.ask import knows_no_word, question_problem
from lewisrag.experiments.position import plot_positions, position_probe
from lewisrag.experiments.presets import read_run_config
from lewisrag.experiments.stitched_llm import GeneratorOptions, build_system, check_options
from lewisrag.experiments.systems import Answered, LewisSystem, StitchedSystem
from lewisrag.experiments.swap import line_of
from lewisrag.index import open_retriever
from lewisrag.index.dense import DenseIndex
from lewisrag.index.store import content_hash, read_manifest
from lewisrag.rag_model.model import Tokenizers, max_positions
from lewisrag.scoring import qa as Q
from lewisrag.scoring.aggregate import mean
from lewisrag.scoring.retrieval import recall_at_k
from lewisrag.training.stitched_train import SETTINGS_FILE, StitchedTrainConfig, load_stitched, read_settings, train_stitched

SYSTEMS = ("rag_token", "rag_sequence", "stitched")
LAYER_METRICS = ("faithfulness", "context_recall", "answer_completeness", "citation_recall", "citation_precision")
GENERATOR_FAILED = "generator_failed"  # the diagnosis of a record whose generator gave no answer
# scores of the retrieved passages alone: they stand when the generator failed
RETRIEVAL_SCORES = ("recall_at_k", "context_recall", "claims.claim_recall", "claims.context_precision")
Progress = Callable[[str, int, int, str], None]  # (task, done, total, info), as reproduce's
# why a regex-answered question's F1 and ROUGE-L are null: it has a reference, a pattern, that EM was scored by
PATTERN_REASON = "the reference is a pattern (regex_match): F1 and ROUGE-L against it measure nothing"


def answer_all(system, questions: list[str], batch_size: int = 16, on_batch: Callable[[int], None] | None = None) -> list[Answered]:
    out: list[Answered] = []
    for s in range(0, len(questions), batch_size):
        out += system.answer(questions[s : s + batch_size])
        if on_batch:
            on_batch(len(out))
    return out


def answer_record(ex, a: Answered, system: str) -> dict:
    """The evaluator's (ragas-style) record of one answer; contexts numbered 1..k in input order, and gold ids
    the numbers of those read, a gold passage not read an id that no number is (its real id could be "2").

    >>> from types import SimpleNamespace as NS
    >>> ex = NS(id="q", question="?", reference_statements=[], gold_passage_ids=["p9", "2"], category=None, answers=[])
    >>> answer_record(ex, NS(response="x", passages=[NS(id="a", title="", text=""), NS(id="p9", title="", text="")]),
    ...               "rag_token")["gold_passage_ids"]
    ['2', 'not read: 2']
    """
    number = {p.id: str(n) for n, p in enumerate(a.passages, start=1)}
    rec = {"id": ex.id, "user_input": ex.question, "response": a.response, "system": system,
           "retrieved_contexts": [{"id": str(n), "title": p.title, "text": p.text} for n, p in enumerate(a.passages, start=1)],
           "reference_statements": list(ex.reference_statements),
           "gold_passage_ids": [number.get(g, f"not read: {g}") for g in ex.gold_passage_ids], "category": ex.category}
    if ex.answers and not Q.is_regex_answered(ex):  # a pattern (CuratedTrec's) is no reference text to judge by
        rec["reference"] = ex.answers[0]
    return rec


def scorecard(systems: dict, test: list, eval_examples: list, judge=None, batch_size: int = 16,
              on_progress: Progress = lambda *a: None) -> dict:
    """Every system on the short-answer `test` questions (EM, F1, ROUGE-L, recall@k) and on `eval_examples`
    (layered metrics through the evaluator). Returns qa, retrieval, layers, timings and the evaluator results."""
    test = [ex for ex in test if ex.kind == "short" and ex.answers]
    card: dict = {"qa": {}, "retrieval": {}, "layers": {}, "timings": {}}
    parsed, extras, ks = {}, {}, {}
    for name, system in systems.items():
        answers = answer_all(system, [ex.question for ex in test], batch_size,
                             lambda d, name=name: on_progress(f"{name}: test questions", d, len(test), ""))
        card["qa"][name], card["retrieval"][name] = qa_scores(answers, test)
        ev = answer_all(system, [ex.question for ex in eval_examples], batch_size,
                        lambda d, name=name: on_progress(f"{name}: eval questions", d, len(eval_examples), ""))
        seen: dict = {}  # ids are unique per system; the evaluator keys records by (id, system)
        parsed[name] = [parse_answer(answer_record(ex, a, name), "compare", i, seen)
                        for i, (ex, a) in enumerate(zip(eval_examples, ev), 1)]
        extras.update({(ex.id, name): {"passage_ids": [p.id for p in a.passages], "token_posteriors": a.token_posteriors,
                                       "failure": a.failure, "cited": a.cited, "example": ex} for ex, a in zip(eval_examples, ev)})
        ks[name] = recall_ks(answers + ev)
        card["layers"][name] = {"forward_passes_per_answer": mean(a.forward_passes for a in answers + ev),
                                "tokens_per_answer": mean(a.input_tokens for a in answers + ev)}
        card["timings"][name] = {"latency_s": mean(a.seconds for a in answers + ev)}
    judge = judge or LexicalJudge()
    total = sum(map(len, parsed.values()))
    tick = _counter(lambda d: on_progress("evaluating answers", d, total, ""))
    # each system at its own k (recall@k and the diagnosis's k): none is labelled past the passages it read
    evaluated = [evaluate_answers(parsed[name], judge, EvalConfig(ks=ks[name]), progress=tick).to_json() for name in systems]
    results = {**evaluated[-1], "records": [rec for r in evaluated for rec in r["records"]]}  # one judge and splitter
    results["config"] = {**results.get("config", {}), "ks": {name: list(ks[name]) for name in systems}}
    for rec in results["records"]:
        extra = extras[(rec["id"], rec["system"])]
        rec["passage_ids"] = extra["passage_ids"]  # what the numbered contexts 1..k were
        rec["gold_passage_ids"] = list(extra["example"].gold_passage_ids)  # the question's, whatever was retrieved
        score_answers(rec, extra["example"])
        if extra["token_posteriors"]:
            rec["token_posteriors"] = extra["token_posteriors"]
        if extra["cited"] is not None:
            rec["cited_passage_ids"] = extra["cited"]
        if extra["failure"] is not None:
            mark_failed(rec, extra["failure"])
    results["aggregates"] = aggregate(results["records"])  # without the failed answers' scores, as results.json
    for name in systems:
        card["layers"][name] = {**layer_summary([r for r in results["records"] if r["system"] == name]), **card["layers"][name]}
    card["results"] = results
    card["generators"] = generators(systems)
    return card


def recall_ks(answers: list[Answered]) -> tuple[int, ...]:
    """The recall@k cut-offs of a system whose answers are `answers`: 1 and k, the passages it read (the most
    an answer read: an outside generator's shortened prompt reads fewer).

    >>> from types import SimpleNamespace as NS
    >>> recall_ks([NS(passages=[1, 2, 3])]), recall_ks([NS(passages=[1])]), recall_ks([])
    ((1, 3), (1,), (1,))
    """
    k = max((len(a.passages) for a in answers), default=1)
    return tuple(sorted({1, max(k, 1)}))


def score_answers(rec: dict, ex) -> None:
    """A record's EM, F1 and ROUGE-L against every gold answer of `ex`, as the scorecard scores them
    (`scoring.qa`: the best over the answers; a pattern, CuratedTrec's, by `regex_match`, its F1 and
    ROUGE-L left unmeasured): the evaluator, given one reference text, scored the first answer only.

    >>> from types import SimpleNamespace as NS
    >>> rec = {"response": "Ana Kel [2]", "metrics": {"exact_match": 0.0, "f1": 0.0, "rougeL": 0.0}, "nan_reasons": {}}
    >>> score_answers(rec, NS(answers=["Kel family", "Ana Kel"], answer_match="text"))
    >>> rec["metrics"]
    {'exact_match': 1.0, 'f1': 1.0, 'rougeL': 1.0}
    """
    if not ex.answers:
        return  # no reference: the evaluator's null and its reason stand
    answer, m = strip_citations(rec["response"]), rec["metrics"]
    m["exact_match"] = Q.answer_exact_match(answer, ex)
    rec["nan_reasons"].pop("exact_match", None)
    if Q.is_regex_answered(ex):  # the evaluator, given no reference text (`answer_record`), said "no reference answer"
        rec["nan_reasons"].update(f1=PATTERN_REASON, rougeL=PATTERN_REASON)
    else:
        m["f1"], m["rougeL"] = Q.token_f1(answer, ex.answers), Q.rouge_l(answer, ex.answers)


def generators(systems: dict) -> dict:
    """{system: what its outside generator was, its usage and failures} for systems that have one."""
    return {n: s.describe() for n, s in systems.items() if hasattr(s, "describe")}


def mark_failed(rec: dict, reason: str) -> None:
    """Score an evaluator record whose generator gave no answer as null, with `reason`, not as an empty answer.

    >>> rec = {"metrics": {"faithfulness": 0.0, "recall_at_k": {"5": 1.0}}, "nan_reasons": {}, "category": "single_doc",
    ...        "refused": True, "diagnosis": {}}
    >>> mark_failed(rec, "timeout after 5s (3 attempts)")
    >>> rec["metrics"]["faithfulness"], rec["nan_reasons"]["faithfulness"], rec["refused"], rec["diagnosis"]["primary"]
    (None, 'no answer: the generator failed: timeout after 5s (3 attempts)', False, 'generator_failed')
    """
    why = f"no answer: the generator failed: {reason}"
    for m in rec["metrics"]:
        if m not in RETRIEVAL_SCORES:
            rec["metrics"][m] = None
            rec["nan_reasons"][m] = why
    rec["refused"] = False  # it did not decline: it never answered (and is left out of refusal counts)
    rec["generator_error"] = reason
    rec["diagnosis"] = {**diagnose(rec["metrics"]), "primary": GENERATOR_FAILED, "consequences": [], "reason": reason}


def qa_scores(answers: list[Answered], examples: list) -> tuple[dict, dict]:
    """({exact_match, f1, rougeL, n}, {recall_at_k, k}) of answers to `examples`, recall over those with gold ids."""
    pairs = list(zip(answers, examples))
    answered = [(a, ex) for a, ex in pairs if a.failure is None]  # a failed answer is no score, not a zero
    text = [(a, ex) for a, ex in answered if not Q.is_regex_answered(ex)]  # F1 and ROUGE-L against a pattern measure nothing
    scores = {"exact_match": mean(Q.answer_exact_match(a.text, ex) for a, ex in answered),
              "f1": mean(Q.token_f1(a.text, ex.answers) for a, ex in text),
              "rougeL": mean(Q.rouge_l(a.text, ex.answers) for a, ex in text), "n": len(pairs),
              "answered": len(answered)}
    # each over the passages it read, labelled as the evaluator's recall@k: k the most any answer read
    recall = {"recall_at_k": mean(recall_at_k([p.id for p in a.passages], ex.gold_passage_ids) for a, ex in pairs),
              "k": recall_ks(answers)[-1] if answers else None}
    return scores, recall


def _counter(fn: Callable[[int], None]) -> Callable[[int], None]:
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        fn(done[0])
    return tick


def layer_summary(records: list[dict]) -> dict:
    """Mean of each layered metric over answerable records, the primary failure layer counts, and the
    claim diagnostics' summaries (n, nan, mean, interval) under "claims" when the records have them.

    >>> layer_summary([{"category": "single_doc", "refused": False, "metrics": {"faithfulness": 1.0}, "diagnosis": {"primary": None}},
    ...                {"category": "not_in_kb", "refused": True, "metrics": {}, "diagnosis": {"primary": None}}])["faithfulness"]
    1.0
    """
    scored = [r for r in records if r.get("category") != "not_in_kb"]
    out = {m: mean(r["metrics"].get(m) for r in scored) for m in LAYER_METRICS}
    claims = column_summary(claim_aggregates(scored))
    if claims:
        out["claims"] = claims
    out["failure_layers"] = dict(sorted(Counter(r["diagnosis"]["primary"] or "none" for r in records).items()))
    nik = [r for r in records if r.get("category") == "not_in_kb" and not r.get("generator_error")]
    out["not_in_kb"] = {"n": len(nik), "refused": sum(bool(r["refused"]) for r in nik)}
    failed = sum(bool(r.get("generator_error")) for r in records)
    if failed:
        out[GENERATOR_FAILED] = failed
    out["n"] = len(records)
    return out


def position_curves(systems: dict, examples: list, passages_by_id: dict, batch_size: int = 16,
                    on_progress: Progress = lambda *a: None) -> dict:
    """The position probe for every system: EM with the gold passage moved to each input position.

    A Lewis model's curve is flat by construction (its answer sums over the documents, whatever their
    order); a stitched model's need not be. An outside generator's prompt may hold fewer passages than
    given: a probe whose prompt dropped the gold passage is left out and counted (`_reading_probe`)."""
    examples = [ex for ex in examples if ex.answers and ex.gold_passage_ids and ex.gold_passage_ids[0] in passages_by_id]
    if not examples:
        return {}
    gold = [passages_by_id[ex.gold_passage_ids[0]] for ex in examples]
    curves = {}
    for name, system in systems.items():
        tops = [p for s in range(0, len(examples), batch_size)
                for p in system.top_k([ex.question for ex in examples[s : s + batch_size]])]
        total = len(examples) * len(tops[0])
        tick = _counter(lambda d, name=name: on_progress(f"{name}: position probe", d, total, ""))
        if hasattr(system, "answer_from"):  # an outside generator, whose prompt may hold fewer passages than given
            curves[name] = _reading_probe(system, examples, tops, gold, batch_size, tick)
        else:
            curves[name] = position_probe(examples, tops, gold, system.answer_with, batch_size, tick)
    return curves


def _reading_probe(system, examples: list, tops: list, gold: list, batch_size: int, on_batch) -> dict:
    """`position_probe` for a system whose prompt may not hold every passage (an hf: generator's drops them
    from the worst-ranked end, `answer_from`: the last positions, where the probe moves the gold passage).
    A probe whose prompt dropped the gold passage measures no position: it is left out of its position's
    EM, not scored as a miss, and counted per position in "not_read"; a failed answer to one that read it
    (a chat error, an hf: answer cut at max_new_tokens) is left out too, counted per position in "failed".
    Either way "scored" holds each position's n (`position_probe`)."""
    gold = [copy.copy(g) for g in gold]  # one object per question, which no top_k list holds: found by identity
    golds = {id(g) for g in gold}
    unread, failed = Counter(), Counter()

    def answer(questions: list[str], passages: list[list]) -> list[str | None]:
        out = []
        for a, ps in zip(system.answer_from(questions, passages), passages):
            at = next(n for n, p in enumerate(ps, start=1) if id(p) in golds)  # where `with_gold_at` put it
            read = any(id(p) in golds for p in a.passages)
            if not read:
                unread[at] += 1
            elif a.failure is not None:
                failed[at] += 1
            out.append(a.text if read and a.failure is None else None)  # None: left out of the position's EM
        return out

    curve = position_probe(examples, tops, gold, answer, batch_size, on_batch)
    curve.pop("failed", None)  # it counted every None: the failures alone are counted again below
    if failed:
        curve["failed"] = [failed[p] for p in curve["positions"]]
    if unread:
        curve["not_read"] = [unread[p] for p in curve["positions"]]
    return curve


RUN_KIND = "reproduction"  # the marker kind of `lewisrag reproduce` run folders (reproduce.KIND, which imports this module)


def check_systems(run: Path, names, generator: GeneratorOptions | None = None) -> None:
    """Every named system is known and trained in `run` (an outside stitched generator needs the run's
    index A and DPR instead of RUN/stitched), else an InputError naming it. In a `lewisrag reproduce`
    run each of them, and the world, must be a finished stage: a run killed mid-stage holds a RAG
    model's best/ from its first dev evaluation, which would be scored as if trained."""
    if not names:
        raise InputError("--systems", f"names no system (choose from {', '.join(SYSTEMS)})")
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise InputError("--systems", f"unknown system(s) '{', '.join(unknown)}' (choose from {', '.join(SYSTEMS)})")
    if generator is not None and "stitched" not in names:
        raise InputError("--stitched-generator", "replaces the stitched system's generator, but --systems leaves stitched out")
    kind = made_by(run)
    if kind is not None and kind != RUN_KIND:  # a model, an index, a world or a comparison: no systems to find there
        raise InputError(run, f"is a lewisrag {kind} folder, not a reproduction's (the --out of `lewisrag reproduce`)",
                         field="--run")
    if kind == RUN_KIND and not (run / "config.json").is_file():
        # its preset: the answers' length and the guard below; read as {} it decoded 32 tokens, not the preset's
        raise InputError(run / "config.json", "missing: the reproduction records its preset there, which compare "
                         "decodes with; the run folder is damaged (`lewisrag reproduce --resume` with its flags rewrites it)")
    if read_run_config(run).get("preset", {}).get("hub"):
        raise InputError(run, "a `reproduce --preset base` run, which has no built-in world: compare asks the world's "
                         "questions of its systems and searches its passages", field="--run")
    reproduced = kind == RUN_KIND
    parts = [("world", None)] if reproduced else []
    for n in names:
        parts += [(p, n) for p in (["index_a", "dpr"] if n == "stitched" and generator is not None else [n])]
    for part, n in parts:
        if not (run / part).exists():
            what = (f"no trained '{n}' system" if part == n else "no built-in world" if n is None
                    else f"no '{part}' for the stitched system's retrieval")
            # a reproduction killed before the stage: --resume finishes it, where a plain rerun redid every stage
            how = ("`lewisrag reproduce --resume` with the run's own flags finishes it" if reproduced
                   else "run `lewisrag reproduce` first")
            raise InputError(run / part, f"{what} in this run ({how})")
        record = run / "stages" / f"{part}.json"  # stages.stage_record (stages imports this module)
        if reproduced and not record.is_file():
            raise InputError(run / part, f"the run's {part} stage did not finish (no {record}): "
                             "`lewisrag reproduce --resume` with the run's own flags finishes it")
    if "stitched" in names and generator is None:
        read_settings(run / "stitched")  # a damaged stitched.json fails here, before any model loads


def load_systems(run: str | os.PathLike, names=SYSTEMS, batch_size: int = 16, max_length: int = 32,
                 generator: GeneratorOptions | None = None, device: str = "cpu") -> dict:
    """The trained systems of a reproduce run: RUN/rag_token, RUN/rag_sequence (best/ else final/), RUN/stitched,
    their generators on `device`; with `generator` (checked by `stitched_llm.check_options`) the stitched
    system answers through it instead."""
    run = Path(run)
    check_systems(run, names, generator)
    # an outside generator first: a folder that does not load fails before the Lewis models are read
    # an hf: answer may take the run's answer length and its citation, unless --max-new-tokens says otherwise
    # (a reasoning model thinks aloud first, and every answer cut off there fails)
    outside = ({"stitched": build_system(run, generator, generator.max_new_tokens or max_length + 8, device)}
               if generator is not None else {})
    index = DenseIndex.load(run / "index_a") if any(n != "stitched" for n in names) else None
    systems = {}
    for n in names:
        if n in outside:
            systems[n] = outside[n]
        elif n == "stitched":
            model, tokenizer, settings = load_stitched(run / "stitched", device=device)
            retriever = open_retriever(run / "index_a", run / "dpr")
            n_passages = len(retriever.index.passages)  # FAISS would pad a deeper search with row -1
            expect(settings.k <= n_passages, run / "stitched" / SETTINGS_FILE, "settings.k",
                   f"at most the index's {n_passages} passages", settings.k)
            # the stitched answer carries its citation: a few tokens more than the Lewis models' answers
            _check_answer_length(run, max_length, 1 + 8, model.config, run / "stitched")
            systems[n] = StitchedSystem(retriever, model, tokenizer, settings, max_length + 8)
        else:
            model, tokenizers = load_trained(run / n, device=device)
            _check_answer_length(run, max_length, 0, model.generator.config, run / n)
            systems[n] = LewisSystem(model, tokenizers, index, batch_size, max_length)
    return systems


def _check_answer_length(run: Path, max_length: int, extra: int, generator_config, model: Path) -> None:
    """Refuse a decoding length (the run's preset.rag.max_target_length, start token included, plus
    `extra` tokens) past the positions of `model`'s generator: an answer that had not ended by then
    was an IndexError in the position embedding. Only a hand-edited RUN/config.json holds one, as
    training refused it."""
    positions = max_positions(generator_config)
    if positions is not None and max_length + extra > positions:
        plus = f" (+{extra}: the stitched answer's citation and start token)" if extra else ""
        raise InputError(run / "config.json", f"{max_length}{plus} exceeds the {positions} positions of {model}'s "
                         f"generator; must be at most {positions - extra}", field="preset.rag.max_target_length")


def stitched_config(run: Path, preset, seed: int):
    """The stitched system's training config, from the preset's stitched_* fields."""
    rag = preset.rag
    return StitchedTrainConfig(
        index=str(run / "index_a"), encoder=str(run / "dpr"), generator=str(run / "generator"),
        train=str(run / "world" / "train.jsonl"), train_kinds=rag.train_kinds, seed=seed, k=preset.stitched_k,
        # room for k passages as long as the Lewis models read one, and the answer plus its citation (at least:
        # train_stitched raises it to the longest cited answer, as a cut target would lose its citation)
        max_input_length=min(1024, preset.stitched_k * rag.max_combined_length),
        max_target_length=rag.max_target_length + 8,
        steps=preset.stitched_steps, batch_size=preset.stitched_batch_size, lr=preset.stitched_lr,
        gold_position=preset.stitched_gold_position, cite_first=preset.stitched_cite_first, device=preset.device)


def _run_max_length(run: Path) -> int:
    """The decoding length the run's preset trained for (RUN/config.json, checked by `read_run_config`), else 32."""
    return read_run_config(run).get("preset", {}).get("rag", {}).get("max_target_length", 32)


def train_stitched_stage(run: str | os.PathLike, preset, seed: int, on_progress: Progress = lambda *a: None,
                         overwrite: bool = False) -> dict:
    """The `stitched` stage of `lewisrag reproduce`: train the stitched system's generator into RUN/stitched
    (a file the user added to an earlier one there is refused, unless `overwrite`)."""
    run = Path(run)
    cfg = stitched_config(run, preset, seed)
    return train_stitched(cfg, run / "stitched", lambda s, t, loss: on_progress("stitched training", s, t, f"loss {loss:.3f}"),
                          overwrite=overwrite)


def compare_stage(run: str | os.PathLike, preset, seed: int, on_progress: Progress = lambda *a: None,
                  lang: str = "en") -> dict:
    """The `compare` stage of `lewisrag reproduce`: score all three systems, probe positions.

    Reads RUN/stitched/ (the `stitched` stage's); writes RUN/position.png; returns qa.stitched,
    layers.<system>, records, position curves, report_html and findings (in `lang`) and timings
    (wall-clock numbers, kept out of results.json)."""
    run = Path(run)
    systems = load_systems(run, SYSTEMS, max_length=preset.rag.max_target_length,  # the Lewis models' target length
                           device=preset.device)
    test, eval_examples = read_qa(run / "world" / "test.jsonl"), read_qa(run / "world" / "eval.jsonl")
    card = scorecard(systems, test, eval_examples, on_progress=on_progress)
    passages = {p.id: p for p in index_passages(run)}
    probe = [ex for ex in test if ex.kind == "short"][: preset.position_questions]
    position = card["position"] = position_curves(systems, probe, passages, on_progress=on_progress)
    if position:
        note_writing(run, ["position.png"])  # the run's before it is there: a kill after the plot leaves it listed
        plot_positions(position, run / "position.png", lang)
    return {"qa": {"stitched": card["qa"]["stitched"]}, "layers": card["layers"], "records": card["results"]["records"],
            "position": position, "report_html": report_html(card, passages, lang), "timings": card["timings"],
            "scorecard": {"qa": card["qa"], "retrieval": card["retrieval"]},
            "judge": card["results"]["judge"], "splitter": card["results"]["splitter"],  # the gate compares these
            "findings": findings(card, lang)}  # sentences for the run's report.md


def index_passages(run: Path) -> list:
    """The world's passages_a.jsonl, which the gold ids are checked against, report.html shows and the
    position probe moves, after checking that index A, which every system searches, holds them (its
    manifest's content hash): over another corpus it was scored silently, over a subset the probe
    failed on a passage the index lacks. Else an InputError naming index A."""
    world = run / "world" / "passages_a.jsonl"
    passages = read_passages(world)
    held, ours = read_manifest(run / "index_a")["content_hash"], content_hash(passages)
    if held != ours:
        raise InputError(run / "index_a", f"holds other passages than {world} (content hash {held}, the world's "
                         f"{ours}): the systems search index A, the gold ids and the position probe "
                         "read the world's passages; build index A over them again")
    return passages


def report_html(card: dict, passages: dict, lang: str = "en") -> str:
    """The teaching page over every system's eval answers (RAG-Token's with its posterior heatmaps); its
    contexts are numbered 1..k, so a record's gold ids are numbered as they were read (`passage_ids`) to
    mark them, and a gold passage not read keeps its id to be shown from `passages`."""
    known = {pid: {"title": p.title, "text": p.text} for pid, p in passages.items()}
    title = messages(lang)("html.title_compare")
    results = {**card["results"], "records": [_page_record(r) for r in card["results"]["records"]]}
    return render_report_html(page_data_from_results(results, known, title=title, lang=lang))


def _page_record(rec: dict) -> dict:
    """`rec` with its gold ids numbered as its contexts are (1..k in input order), for report.html.

    >>> _page_record({"passage_ids": ["a", "g"], "gold_passage_ids": ["g", "x"]})["gold_passage_ids"]
    ['2', 'x']
    """
    number = {pid: str(n) for n, pid in enumerate(rec.get("passage_ids") or [], start=1)}
    return {**rec, "gold_passage_ids": [number.get(g, g) for g in rec.get("gold_passage_ids") or []]}


KIND = "comparison"  # the marker kind of `lewisrag compare` folders (lewisrag.data.outputs)


def compare_run(run: str | os.PathLike, out: str | os.PathLike, names=SYSTEMS, data: str | os.PathLike | None = None,
                position_questions: int = 100, on_progress: Progress = lambda *a: None, overwrite: bool = False,
                qa_fields: dict[str, str] | None = None, generator: GeneratorOptions | None = None, lang: str = "en",
                device: str = "cpu") -> dict:
    """`lewisrag compare`: score a reproduce run's trained systems into OUT (results.json, report.md,
    report.html, and position.png unless `position_questions` is 0). OUT must be missing, empty or
    a comparison lewisrag wrote, unless `overwrite`. With `generator` the stitched system answers
    through that LLM or LM instead of the run's trained generator. The reports are written in `lang`
    (recorded as config.lang when it is not English). The run's trained models answer on `device`."""
    messages(lang)  # an unknown language fails before anything is read
    generator = check_options(generator) if generator is not None else None  # flags first: nothing read yet
    local = {"--stitched-generator": generator.spec.partition(":")[2] if generator.kind == "hf" else None,
             "--cache-dir": generator.cache_dir} if generator is not None else {}
    run, out = Path(run), check_out_dir(out, KIND, overwrite=overwrite, inputs={"--run": run, "--questions": data, **local})
    data = Path(data) if data else run / "world" / "eval.jsonl"
    check_systems(run, names, generator)
    max_length = _run_max_length(run)
    test, eval_examples = read_qa(run / "world" / "test.jsonl"), read_qa(data, qa_fields)  # all input read before any model
    refuse_fever_claims(eval_examples, data, qa_fields, "compare scores as free-text answers by exact match: FEVER's "
                        "label accuracy is `lewisrag reproduce --tasks fever`'s (results.json's fever)")
    passages = {p.id: p for p in index_passages(run)}
    check_gold_ids(eval_examples, list(passages.values()), data, f"the run's passages {run / 'world' / 'passages_a.jsonl'}",
                   qa_fields)  # the passages every system searches
    systems = load_systems(run, names, max_length=max_length, generator=generator, device=device)
    check_questions(systems, eval_examples, data, qa_fields)
    card = scorecard(systems, test, eval_examples, on_progress=on_progress)
    for system in systems.values():  # an outside generator that answered nothing: one line, before the probe asks more
        getattr(system, "check_answered", lambda: None)()
    probe = [ex for ex in test if ex.kind == "short"][:position_questions]
    card["position"] = position_curves(systems, probe, passages, on_progress=on_progress) if probe else {}
    card["generators"] = generators(systems)  # again: the probe's requests count too
    r = card["results"]
    config = {"run": str(run), "data": str(data), "systems": list(names), "position_questions": position_questions}
    if generator is not None:
        config["stitched_generator"] = generator.spec  # the spec only: no URL, no key, no key variable
    if lang != "en":
        config["lang"] = lang
    sections = {"qa": card["qa"], "retrieval": card["retrieval"], "layers": card["layers"], "position": card["position"]}
    if card["generators"]:
        sections["generators"] = card["generators"]
    results = Results(Producer.here("compare"), config, [QuestionRecord.of(rec) for rec in r["records"]], r["judge"],
                      r["splitter"], r["aggregates"], sections)  # aggregated by `scorecard`, failed answers nulled

    def more(d: Path) -> list[str]:
        write_json(d / "timings.json", card["timings"])  # wall-clock numbers stay out of results.json
        if card["position"]:
            plot_positions(card["position"], d / "position.png", lang)
            return ["position.png"]
        return []

    from lewisrag.eval.reports.i18n import cjk_font  # looked up when called, as plot_positions' labels look it up

    plots_in_english = bool(card["position"]) and lang != "en" and cjk_font() is None  # their fallback: the report says so
    write_run_dir(out, KIND, results, report_md=render_markdown(card, lang, plots_in_english),
                  report_html=report_html(card, passages, lang),
                  more=more, overwrite=overwrite)
    return card


def check_questions(systems: dict, examples: list, path: Path, qa_fields: dict[str, str] | None = None) -> None:
    """What `ask` and `swap` check of a question, through the question encoder each system retrieves with: one
    it reads nothing of (`ask.question_problem`: empty, or only characters its tokenizer drops, U+200B, which
    would be answered from [CLS] [SEP] alone) is an InputError naming its line in `path`; questions it knows no
    word of (`ask.knows_no_word`: Chinese to an English DPR, each retrieving the same passages) are counted in
    a warning, as swap's note counts them."""
    blind: dict[int, list[str]] = {}  # {questions known by no word: the systems whose encoder knows none of them}
    for name, system in systems.items():
        tokenizers = _question_tokenizers(system)
        for ex in examples:
            if problem := question_problem(tokenizers, ex.question):
                raise InputError(path, f"question {ex.id!r} ({ex.question!r}): {problem} (of {name})",
                                 line=line_of(path, ex, qa_fields), field="question")
        if n := sum(knows_no_word(tokenizers.question, ex.question) for ex in examples):
            blind.setdefault(n, []).append(name)
    for n, names in blind.items():
        warnings.warn(LewisragWarning(
            f"{path}: the question encoder of {', '.join(names)} knows no word of {n} of its {len(examples)} questions "
            "(each is its unknown token): their passages are retrieved for a question without words, the same for "
            "each (questions in another language than the model's?)"), stacklevel=2)


def _question_tokenizers(system) -> Tokenizers:
    """The tokenizers `system` reads its questions with: a Lewis model's own, else its retriever's question
    encoder's (the run's DPR; the run's own stitched system keeps its retriever in its `rag`)."""
    if hasattr(system, "tokenizers"):
        return system.tokenizers
    retriever = system.rag.retriever if hasattr(system, "rag") else system.retriever
    return Tokenizers(retriever.checkpoint.tokenizer, None)


ROW_KEYS = (("EM", "qa", "exact_match"), ("F1", "qa", "f1"), ("ROUGE-L", "qa", "rougeL"),
            ("recall@k", "retrieval", "recall_at_k"), *((f"metric.{m}", "layers", m) for m in LAYER_METRICS),
            ("cmp.row.forward_passes", "layers", "forward_passes_per_answer"), ("cmp.row.tokens", "layers", "tokens_per_answer"),
            ("cmp.row.latency", "timings", "latency_s"))  # (label or message id, part of the card, key)


def _rows(lang: str = "en") -> tuple:
    t = messages(lang)
    return tuple((t.get(label, label), part, key) for label, part, key in ROW_KEYS)


def system_labels(card: dict) -> dict[str, str]:
    """{system: its column label}: the name, and the outside generator's spec where it has one ("stitched (chat:gpt-4o)")."""
    outside = card.get("generators") or {}
    return {n: f"{n} ({outside[n]['generator']})" if n in outside else n for n in card["qa"]}


def scorecard_rows(card: dict, lang: str = "en") -> tuple[list[str], list[list]]:
    """(system names, rows of [label, value per system]): metrics, refusals of not_in_kb questions, failure layers,
    and with an outside generator the answers it failed to give (scored null). Labels in `lang`."""
    t = messages(lang)
    names = list(card["qa"])
    rows = []
    for label, part, key in _rows(lang):
        if label == "recall@k":
            rows += recall_rows(card["retrieval"], names)
        else:
            rows.append([label, *[card[part][n].get(key) for n in names]])
    rows.append([t("cmp.row.refused"), *[f"{card['layers'][n]['not_in_kb']['refused']}/{card['layers'][n]['not_in_kb']['n']}"
                                         for n in names]])
    outside = card.get("generators") or {}
    if outside:
        rows.append([t("cmp.row.failed"), *[f"{outside[n]['failed']}/{outside[n]['answers']}" if n in outside else None
                                            for n in names]])
    causes = sorted({c for n in names for c in card["layers"][n]["failure_layers"]})
    layer = (lambda c: c) if lang == "en" else (lambda c: t.word("layer", c))  # English rows name the key
    rows += [[t("cmp.row.primary", layer=layer(c)), *[card["layers"][n]["failure_layers"].get(c, 0) for n in names]]
             for c in causes]
    if any("claims" in card["layers"][n] for n in names):
        rows += [[t("cmp.row.claims", label=t(m)), *[((card["layers"][n].get("claims") or {}).get(m) or {}).get("mean")
                                                     for n in names]] for m in CLAIM_METRICS]
    contradicted = {n: (card["layers"][n].get("claims") or {}).get(CONTRADICTIONS) for n in names}
    if any(contradicted.values()):  # a judge with three-way labels: the pooled share of labelled claims
        rows.append([t("cmp.row.claims", label=t(CONTRADICTIONS)),
                     *[(contradicted[n] or {}).get("by_reference_rate") for n in names]])
    return names, rows


def recall_rows(retrieval: dict, names: list[str]) -> list[list]:
    """One recall@k row per k the systems read, each system's recall in the row of its own k (the Lewis models
    read K=5 passages and the stitched system k=3 in the small preset: one row would set recall@5 beside recall@3).

    >>> recall_rows({"rag_token": {"k": 5, "recall_at_k": 0.9}, "stitched": {"k": 3, "recall_at_k": 0.8}},
    ...             ["rag_token", "stitched"])
    [['recall@3', None, 0.8], ['recall@5', 0.9, None]]
    """
    ks = sorted({retrieval[n]["k"] for n in names} - {None})  # None: no question asked
    if not ks:
        return [["recall@k", *[retrieval[n].get("recall_at_k") for n in names]]]
    return [[f"recall@{k}", *[retrieval[n].get("recall_at_k") if retrieval[n]["k"] == k else None for n in names]]
            for k in ks]


def _fmt(v) -> str:
    return "–" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))


def render_markdown(card: dict, lang: str = "en", plots_in_english: bool = False) -> str:
    """The scorecard as a Markdown table, what it shows in words, and the claim-level diagnostics
    with their intervals and sentences, in `lang`. `plots_in_english`: position.png kept English labels
    (no CJK font: `i18n.cjk_font`), which a report in another language says after its findings."""
    t = messages(lang)
    names, rows = scorecard_rows(card, lang)
    labels = system_labels(card)
    lines = [t("cmp.title"), "", f"| {t('col.metric')} | " + " | ".join(labels[n] for n in names) + " |",
             "|---|" + "---:|" * len(names), *("| " + " | ".join([r[0], *map(_fmt, r[1:])]) + " |" for r in rows), ""]
    claims = claims_markdown(claims_by_system(card["layers"]), lambda n: f"`{n}`", lang=lang)
    note = ["", t("rep.plots.no_cjk")] if plots_in_english and t.lang != "en" else []
    return "\n".join(lines + findings(card, lang) + note + (["", *claims] if claims else [])) + "\n"


def claims_by_system(layers: dict) -> dict:
    """{system: its claim diagnostics' summaries} for the systems that have them."""
    return {n: v["claims"] for n, v in layers.items() if v.get("claims")}


def _unscored(v) -> bool:
    """A position where no answer was scored: NaN in the probe's curve, null once written to JSON."""
    return v is None or v != v


def position_shape(name: str, ems: list) -> str:
    """The message id naming the shape of a position curve, from its numbers as printed (3 decimals); a
    position where no answer was scored is left out. Flat is what a Lewis model's marginal over documents
    promises; any other system's flat curve, or a Lewis curve that is not flat, is told by its numbers.

    >>> position_shape("rag_token", [0.95, 0.95, 0.95]), position_shape("stitched", [0.9, float("nan"), 0.0])
    ('cmp.pos.flat', 'cmp.pos.first')
    >>> position_shape("rag_token", [0.95, 0.4, 0.1]), position_shape("stitched", [0.8, 0.6, 0.8])
    ('cmp.pos.first', 'cmp.pos.middle')
    """
    shown = [None if _unscored(v) else round(v, 3) for v in ems]
    scored = [v for v in shown if v is not None]
    if len(scored) < 2:
        return "cmp.pos.plain"
    if len(set(scored)) == 1:
        return "cmp.pos.flat" if name in ("rag_token", "rag_sequence") else "cmp.pos.level"
    first, rest = shown[0], [v for v in shown[1:] if v is not None]
    if first is not None and rest and round(first - max(rest), 3) >= 0.5:
        return "cmp.pos.first"
    middle, ends = [v for v in shown[1:-1] if v is not None], (shown[0], shown[-1])
    if middle and None not in ends and round(min(ends) - min(middle), 3) >= 0.1:
        return "cmp.pos.middle"
    return "cmp.pos.plain"


def thin_positions(curve: dict) -> list[int]:
    """The positions of a probe curve whose EM was scored on fewer than half of its `n` probes (the rest
    failed or did not read the gold passage: "scored"), which leave its shape unread: 1 answer of 4 is
    EM 0 or 1, and decided a "lost in the middle" verdict. A position none was scored at is NaN, left out
    of the shape as it is (`position_shape`).

    >>> thin_positions({"positions": [1, 2, 3], "n": 4, "scored": [1, 4, 0]}), thin_positions({"positions": [1], "n": 4})
    ([1], [])
    """
    return [p for p, k in zip(curve["positions"], curve.get("scored") or ()) if 0 < 2 * k < curve["n"]]


def findings(card: dict, lang: str = "en") -> list[str]:
    """Sentences saying what the scorecard shows (for report.md), in `lang`."""
    t = messages(lang)
    qa, layers = card["qa"], card["layers"]
    em = {n: v["exact_match"] for n, v in qa.items() if v["exact_match"] is not None}
    out = []
    if em:
        best = max(em, key=em.get)
        tie = [n for n in em if f"{em[n]:.3f}" == f"{em[best]:.3f}"]  # tied as printed, as report.md decides its tables
        partial = {n: qa[n]["answered"] for n in em if qa[n].get("answered", qa[n]["n"]) < qa[n]["n"]}
        # one system with a score is stated, not ranked: "is best" against nothing (as report.md's rep.t1.one)
        out.append(t("cmp.em", n=qa[best]["n"])
                   + (t("cmp.em.one", name=best, v=em[best]) if len(em) == 1
                      else t("cmp.em.best", best=best, v=em[best]) if len(tie) == 1
                      else t("cmp.em.tie", names=t.join((f"`{n}`" for n in tie), "sep.enum"), v=em[best]))
                   + (t("cmp.em.partial", items=t.join(f"`{n}` {k}/{qa[n]['n']}" for n, k in partial.items()))
                      if partial else ""))
    lewis = {n: em[n] for n in ("rag_token", "rag_sequence") if n in em}
    if lewis and "stitched" in em:
        better = max(lewis, key=lewis.get)
        gap = em["stitched"] - lewis[better]
        close = abs(round(gap, 3)) <= 0.05  # as printed: 19/20 against 20/20 is -0.050, not -0.05000000000000004
        tie = [n for n in lewis if f"{lewis[n]:.3f}" == f"{lewis[better]:.3f}"]  # as printed, as the EM sentence's
        out.append((t("cmp.gap.one", gap=gap, name=better) if len(lewis) == 1  # no "better" of one variant
                    else t("cmp.gap", gap=gap, better=better) if len(tie) == 1
                    else t("cmp.gap.tie", gap=gap, names=t.join((f"`{n}`" for n in tie), "sep.enum")))
                   + t("cmp.gap.close" if close else "cmp.gap.far"))
    cp = {n: v.get("citation_precision") for n, v in layers.items() if v.get("citation_precision") is not None}
    if cp:
        out.append(t("cmp.cp", items=t.join(f"`{n}` {v:.3f}" for n, v in cp.items())))
    for n, c in (card.get("position") or {}).items():
        points = t.join(f"{p}: {t('cmp.pos.unscored') if _unscored(v) else f'{v:.3f}'}"
                        for p, v in zip(c["positions"], c["exact_match"]))
        unread, failed = any(c.get("not_read") or ()), any(c.get("failed") or ())
        left_out = ""
        if unread or failed:  # an hf: prompt dropped the gold passage, or an answer failed: each position's n differs
            left_out = t("cmp.pos.failed_unread" if unread and failed else "cmp.pos.failed" if failed else "cmp.pos.unread",
                         items=t.join(f"{p}: {k}/{c['n']}" for p, k in zip(c["positions"], c["scored"])))
        thin = thin_positions(c)
        shape = (t("cmp.pos.thin", n=c["n"], positions=t.join(map(str, thin))) if thin
                 else t(position_shape(n, c["exact_match"])))
        out.append(t("cmp.pos", name=n, points=points, shape=shape) + left_out)
    for n, g in (card.get("generators") or {}).items():
        out.append(t("cmp.generator", name=n, generator=g["generator"], n_docs=g["n_docs"], version=g["prompt_version"],
                     failed=g["failed"], answers=g["answers"]))
    cost = {n: v["forward_passes_per_answer"] for n, v in layers.items()}
    out.append(t("cmp.cost", items=t.join(f"`{n}` {_fmt(v)}" for n, v in cost.items())))
    return out
