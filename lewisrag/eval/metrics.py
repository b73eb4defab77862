"""Layered RAG metrics: pure functions over statements, contexts and a judge.

Every score is a share of statements (or citations) that a judge found supported. Two rules hold
throughout and fix faults seen in other tools:

- NaN, never a silent 0 or 1, when there is nothing to score (no statements, no reference
  statements, no citation to judge for precision, no gold ids). A statement without a citation
  is something to score: its citation recall is 0.
- A verdict the judge could not give (`Verdict(None, reason)`: malformed reply, timeout, unknown
  label) is left out of numerator *and* denominator; the score is NaN only if no verdict remains.
  `count_support` reports how many were left out, and results.json records them with reasons.

`citation_quality(..., convention="alce")` is the one exception, on request: it reproduces ALCE's
numbers, its precision 0 for an answer that cites nothing and its "not entailed" for an undecided verdict.

Examples use `FunctionJudge(lambda premise, hypothesis: hypothesis in premise)`: "supported" means
the statement occurs verbatim in the premise, so every number below can be checked by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lewisrag.data.io import InputError
from lewisrag.data.pretrained import load_model, load_tokenizer
from lewisrag.eval.claims import check_texts, claim_diagnostics  # noqa: F401  (claim_diagnostics: RAGChecker's)
from lewisrag.eval.judges import Verdict
from lewisrag.eval.judges.nli import model_limit
from lewisrag.eval.statements import strip_citations
from lewisrag.scoring.retrieval import hit_at_k, recall_at_k  # noqa: F401  (the retrieval layer's scores)

NAN = float("nan")


@dataclass(frozen=True)
class Support:
    score: float  # supported / decided; NaN when nothing was decided
    verdicts: list[Verdict]  # one per hypothesis, in order
    undecided: int  # verdicts with supported=None, left out of the score


# the reason of a statement citing an id that names no document: refused without asking the judge
NOT_IN_DOCUMENTS = "cited ids not in the documents: "


def join_contexts(contexts: Sequence[str]) -> str:
    """All retrieved contexts as one premise, joined with newlines as ragas does."""
    check_texts(contexts, "contexts")  # a str joined its characters: "x y" became "x\n \ny"
    return "\n".join(contexts)


def share(verdicts: Sequence[Verdict]) -> float:
    """Supported share of the decided verdicts; NaN if none was decided.

    >>> share([Verdict(True), Verdict(False), Verdict(None, "timeout")])
    0.5
    """
    decided = [v.supported for v in verdicts if v.supported is not None]
    return sum(decided) / len(decided) if decided else NAN


def count_support(premise: str, hypotheses: Sequence[str], judge, name: str = "hypotheses") -> Support:
    """Judge every hypothesis against one premise in a single batched judge call; `name` names
    `hypotheses` in the error a str or a non-string item raises (a str was judged letter by letter)."""
    check_texts(hypotheses, name)
    verdicts = judge.judge([(premise, h) for h in hypotheses]) if hypotheses else []
    if len(verdicts) != len(hypotheses):
        raise ValueError(f"judge returned {len(verdicts)} verdicts for {len(hypotheses)} pairs")
    return Support(share(verdicts), verdicts, sum(v.supported is None for v in verdicts))


def faithfulness(statements: list[str], contexts: list[str], judge) -> float:
    """Share of the answer's statements supported by the retrieved contexts joined together.

    NaN when there are no statements. Citations are ignored: that is citation_quality's job.

    >>> from lewisrag.eval.judges import FunctionJudge
    >>> judge = FunctionJudge(lambda premise, hypothesis: hypothesis in premise)
    >>> faithfulness(["login returns 422", "a toast appears"], ["login returns 422", "errors listed"], judge)
    0.5
    >>> round(faithfulness(["返回 422", "弹出 toast", "锁定 15 分钟"], ["登录失败返回 422。"], judge), 3)
    0.333
    >>> faithfulness([], ["登录失败返回 422。"], judge)
    nan
    """
    return count_support(join_contexts(contexts), statements, judge, "statements").score


def context_recall(reference_statements: list[str], contexts: list[str], judge) -> float:
    """Share of the reference answer's statements supported by the retrieved contexts.

    Measures the retriever: a reference fact no context supports was not retrieved.

    >>> from lewisrag.eval.judges import FunctionJudge
    >>> judge = FunctionJudge(lambda premise, hypothesis: hypothesis in premise)
    >>> round(context_recall(["返回 422", "is invalid", "红色列表"], ["登录失败返回 422"], judge), 3)
    0.333
    >>> context_recall(["returns 422"], ["login returns 422"], judge)
    1.0
    """
    return count_support(join_contexts(contexts), reference_statements, judge, "reference_statements").score


def answer_completeness(reference_statements: list[str], answer: str, judge) -> float:
    """Share of the reference statements the answer covers (the answer is the premise).

    Measures "retrieved but not used": the context had the fact, the answer left it out.

    >>> from lewisrag.eval.judges import FunctionJudge
    >>> judge = FunctionJudge(lambda premise, hypothesis: hypothesis in premise)
    >>> round(answer_completeness(["返回 422", "is invalid", "红色列表"], "登录失败时返回 422。", judge), 3)
    0.333
    >>> answer_completeness(["returns 422", "is invalid"], "It returns 422.", judge)
    0.5
    """
    if not isinstance(answer, str):  # a list premise would be judged by list membership
        raise TypeError(f"answer: expected a string, got {answer!r}")
    return count_support(answer, reference_statements, judge, "reference_statements").score


def answer_relevancy(
    question: str, generated_questions: Sequence[str], embed: Callable[[str], Sequence[float]], noncommittal: Sequence[bool]
) -> float:
    """Mean cosine between the question and questions generated back from the answer.

    The cosines are averaged as they are, as ragas 0.4.3 does: each lies in [-1, 1], so the score
    usually, not always, lies in [0, 1] (a question generated back that points away from the asked
    one pulls it down; a zero vector counts 0). It is 0 only if every generated question was marked
    noncommittal: some evasive questions cost nothing, as in ragas 0.4.3 (legacy and collections).
    `noncommittal` holds one flag per generated question; a lone bool is refused, since copying one
    flag to every question zeroes the score whenever it is set. NaN if nothing was generated.

    >>> vec = {"登录密码错误返回什么？": [1.0, 0.0], "What does login return?": [0.6, 0.8], "注册": [-1.0, 0.0]}
    >>> round(answer_relevancy("登录密码错误返回什么？", ["What does login return?", "注册"], vec.get, [False, False]), 3)
    -0.2
    >>> answer_relevancy("登录密码错误返回什么？", ["What does login return?"], vec.get, [False])
    0.6
    >>> answer_relevancy("登录密码错误返回什么？", ["What does login return?"], vec.get, [True])
    0.0
    """
    if isinstance(noncommittal, bool):
        raise TypeError(f"noncommittal: expected one flag per generated question, got {noncommittal!r}")
    if not generated_questions:
        return NAN
    flags = list(noncommittal)
    if len(flags) != len(generated_questions):
        raise ValueError(f"noncommittal: expected {len(generated_questions)} flags, got {len(flags)}")
    if all(flags):
        return 0.0
    q = np.asarray(embed(question), dtype=float)
    cosines = []
    for g in generated_questions:
        v = np.asarray(embed(g), dtype=float)
        if v.shape != q.shape:
            raise ValueError(f"embed returned shapes {q.shape} and {v.shape}; expected equal")
        denom = float(np.linalg.norm(q) * np.linalg.norm(v))
        # clipped: rounding puts a vector's cosine with itself at 1 + 2e-16 about one time in four, which
        # results.json's range check (and so the gate) refuses as a score outside [-1, 1]
        cosines.append(min(1.0, max(-1.0, float(q @ v) / denom)) if denom > 0 else 0.0)
    return float(np.mean(cosines))


def on_topic_rate(statements_on_topic: Sequence[bool | None]) -> float:
    """Share of the answer's statements that address the question (labels from a human or judge).

    None (not labelled) is left out; NaN when nothing is labelled.

    >>> on_topic_rate([True, True, False, None])
    0.6666666666666666
    >>> on_topic_rate([])
    nan
    """
    return share([Verdict(v) for v in statements_on_topic])


def load_embedder(path: str, max_length: int = 256) -> Callable[[str], list[float]]:
    """A sentence embedder from a local transformers encoder dir (e.g. all-MiniLM-L6-v2): mean of
    the token states under the attention mask, L2-normalized, as sentence-transformers does. A text
    is cut to `max_length` tokens, or to fewer where the model takes fewer (`model_limit`, as the NLI
    judge cuts): past its positions a long answer raised a RuntimeError inside the model."""
    # torch and transformers load on first use: every `lewisrag eval` run imports this module, few embed
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = load_tokenizer(AutoTokenizer.from_pretrained, path, "embedder tokenizer")
    # an encoder may be read from a checkpoint with a task head or without a pooler: mean pooling uses neither
    model = load_model(AutoModel.from_pretrained, path, "embedder", allow_unexpected=True,
                       ignore_missing=r"(^|\.)pooler\.").eval()
    max_length = min(max_length, model_limit(model.config, tokenizer))

    def embed(text: str) -> list[float]:
        enc = tokenizer([text], truncation=True, max_length=max_length, return_tensors="pt")
        with torch.no_grad():
            states = model(**enc).last_hidden_state  # (1, L, D)
        mask = enc["attention_mask"].unsqueeze(-1).to(states.dtype)  # (1, L, 1)
        vec = (states * mask).sum(1) / mask.sum(1).clamp(min=1.0)  # (1, D)
        return torch.nn.functional.normalize(vec, dim=-1)[0].tolist()

    # a model whose outputs hold no token states (a DPR encoder gives pooled vectors only) failed at the
    # first answer, after the judge's calls were made and paid for: tried once here, on a probe
    with torch.no_grad():
        probe = model(**tokenizer(["probe"], return_tensors="pt"))
    if getattr(probe, "last_hidden_state", None) is None:
        raise InputError(path, f"embedder: a {type(model).__name__} gives no token states (last_hidden_state) to "
                         "average; give a sentence encoder's folder (e.g. all-MiniLM-L6-v2)", field="--embedder")
    return embed


# ---------------------------------------------------------------------------------------------
# citation quality (ALCE, Gao et al. 2023)


CONVENTIONS = ("lewisrag", "alce")
ALCE_AT_MOST_CITATIONS = 3  # eval.py's --at_most_citations default: ALCE reads a sentence's first three


def citation_quality(statements: list[tuple[str, list[str]]], docs: dict[str, str], judge,
                     convention: str = "lewisrag") -> dict[str, float]:
    """Citation recall and precision of one answer (ALCE's definitions).

    `statements` are (text, cited ids in the order written); `docs` maps an id to its document.
    recall, per statement: 1 iff it cites at least one document and the cited documents joined
    (newline) support it. precision, per citation: 1 iff its statement has recall 1 and the
    citation is not irrelevant; a citation is irrelevant iff it alone does not support the
    statement AND the statement's other citations still do. Both are shares over the answer.

    convention="lewisrag" (the default) gives ALCE's eval.py numbers when every statement cites
    one to three distinct ids found in `docs` and the judge decides every pair. Elsewhere it
    differs on purpose:

    - a repeated id counts once. ALCE keeps repeats: each copy enters precision's denominator,
      and leaving one copy out keeps the other, so a document cited twice that supports the
      statement only together with another citation is "irrelevant", both copies.
    - every cited id is judged. ALCE reads the first three only: a statement supported by its
      fourth citation fails recall, and its later citations are in no score.
    - an id missing from `docs` makes its statement unsupported and counts as a wrong citation.
      ALCE fails the statement too but leaves all of its citations out of precision.
    - precision is NaN when nothing is cited. ALCE gives 0, which reads as "every citation wrong".
    - a verdict the judge could not give is left out of the score. ALCE's NLI model has no such
      verdict: any output but "1" is "not entailed".

    convention="alce" reproduces ALCE's `compute_autoais` for one answer in every one of those
    cases; an answer without statements is NaN in both conventions, as ALCE skips it. ALCE's own
    sentence splitter (NLTK), its citation parser (`[n`, so "[1, 2]" cites 1 only, and "[0]" reads
    the last document through Python's index -1) and its document format ("Title: ...") come
    before this function and are not reproduced here.

    >>> from lewisrag.eval.judges import FunctionJudge
    >>> judge = FunctionJudge(lambda premise, hypothesis: hypothesis in premise)
    >>> docs = {"1": "login returns 422", "2": "errors listed in red", "3": "signup returns 422"}
    >>> citation_quality([("login returns 422", ["1"]), ("login returns 422", ["1", "3"]),
    ...                   ("errors listed in red", ["3"])], docs, judge)   # recall 2/3; precision: [3] in the 2nd is irrelevant, the 3rd wrong
    {'recall': 0.6666666666666666, 'precision': 0.5}
    >>> citation_quality([("登录返回 422", ["1", "2"])], {"1": "登录返回 422", "2": "注册返回 422"}, judge)
    {'recall': 1.0, 'precision': 0.5}
    >>> citation_quality([("login returns 422", ["1", "9"])], docs, judge, convention="alce")  # [9]: no such doc
    {'recall': 0.0, 'precision': 0.0}
    """
    d = citation_quality_detail(statements, docs, judge, convention)
    return {"recall": d["recall"], "precision": d["precision"]}


def citation_quality_detail(statements: list[tuple[str, list[str]]], docs: dict[str, str], judge,
                            convention: str = "lewisrag") -> dict:
    """citation_quality plus, per statement, `supported` (the recall verdict), its three-way `label`
    (null where the judge gives none or nothing was asked), `irrelevant` ids and a `reason`; "lewisrag" adds `undecided_citations` (left out of precision), "alce" adds `read` (the
    ids ALCE judged: the first three, none when it rejected the statement unjudged) and `undecided`
    (verdicts the judge could not give, read as "not entailed").

    At most three batched judge calls: the joint check of every statement, then the single-citation
    checks of multi-citation statements, then the leave-one-out checks of those that failed alone.
    """
    _check_cited(statements, docs)
    if convention == "alce":
        return _alce_detail(statements, docs, judge)
    if convention != "lewisrag":
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    return _lewisrag_detail(statements, docs, judge)


def _check_cited(statements: list[tuple[str, list[str]]], docs: dict[str, str]) -> None:
    """A TypeError naming the argument, before any judge call: a str statement was unpacked as (text,
    ids) ("a1" as "a" citing "1"), a str of ids cited each character, an int id failed in a join."""
    if not isinstance(statements, (list, tuple)):
        raise TypeError(f"statements: expected a list of (text, cited ids) pairs, got {statements!r}")
    if not isinstance(docs, Mapping):
        raise TypeError(f"docs: expected a dict of id -> text, got {docs!r}")
    for key, text in docs.items():
        if not isinstance(text, str):
            raise TypeError(f"docs[{key!r}]: expected a string, got {text!r}")
    for i, pair in enumerate(statements):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError(f"statements[{i}]: expected a (text, cited ids) pair, got {pair!r}")
        text, ids = pair
        if not isinstance(text, str):
            raise TypeError(f"statements[{i}][0]: expected a string, got {text!r}")
        check_texts(ids, f"statements[{i}][1]")  # a list or tuple of id strings


def _lewisrag_detail(statements: list[tuple[str, list[str]]], docs: dict[str, str], judge) -> dict:
    # As ALCE does, the judge reads the statement without its [n] markers; unlike ALCE, each cited doc counts once.
    statements = [(strip_citations(text), c) for text, c in statements]
    cites = [list(dict.fromkeys(c)) for _, c in statements]
    joint: list[Verdict] = [Verdict(False, "no citation")] * len(statements)
    ask: list[int] = []
    for i, c in enumerate(cites):
        missing = [x for x in c if x not in docs]
        if c and missing:
            joint[i] = Verdict(False, NOT_IN_DOCUMENTS + ", ".join(missing))
        elif c:
            ask.append(i)
    for i, v in zip(ask, _judge(judge, [("\n".join(docs[x] for x in cites[i]), statements[i][0]) for i in ask])):
        joint[i] = v
    alone = [(i, x) for i, c in enumerate(cites) if joint[i].supported and len(c) > 1 for x in c]
    alone_v = dict(zip(alone, _judge(judge, [(docs[x], statements[i][0]) for i, x in alone])))
    rest = [(i, x) for (i, x), v in alone_v.items() if v.supported is not True]
    rest_v = dict(zip(rest, _judge(judge, [("\n".join(docs[y] for y in cites[i] if y != x), statements[i][0]) for i, x in rest])))
    precise = decided = 0
    per_statement = []
    for i, c in enumerate(cites):
        irrelevant, undecided, why = [], 0, None
        for x in c:
            if joint[i].supported is None:
                undecided += 1
            elif not joint[i].supported:
                decided += 1
            elif len(c) == 1 or alone_v[(i, x)].supported is True or rest_v[(i, x)].supported is False:
                decided, precise = decided + 1, precise + 1
            elif alone_v[(i, x)].supported is None or rest_v[(i, x)].supported is None:
                undecided += 1
                why = why or next(v.reason for v in (alone_v[(i, x)], rest_v[(i, x)]) if v.supported is None)
            else:
                decided += 1
                irrelevant.append(x)
        entry = {"supported": joint[i].supported, "irrelevant": irrelevant, "undecided_citations": undecided,
                 "reason": joint[i].reason, "label": joint[i].label}
        if why is not None:  # a citation checked alone (or left out) undecided: the joint verdict's reason is not it
            entry["undecided_reason"] = why
        per_statement.append(entry)
    return {"recall": share(joint), "precision": precise / decided if decided else NAN, "statements": per_statement}


def _alce_read(cited: Sequence[str], docs: dict[str, str]) -> tuple[list[str], str]:
    """The ids ALCE judges for one statement, and why none when it rejects the statement unjudged.

    The range check covers every citation, the cap comes after it: a fourth citation missing from
    `docs` still rejects the statement.
    """
    if not cited:
        return [], "no citation"
    missing = [x for x in cited if x not in docs]
    if missing:
        return [], NOT_IN_DOCUMENTS + ", ".join(missing)
    return list(cited[:ALCE_AT_MOST_CITATIONS]), ""


def _without_first(ids: list[str], x: str) -> list[str]:
    """`ids` less the first copy of `x` (ALCE's list.remove): other copies of a repeated id stay."""
    rest = list(ids)
    rest.remove(x)
    return rest


def _alce_detail(statements: list[tuple[str, list[str]]], docs: dict[str, str], judge) -> dict:
    """ALCE's compute_autoais loop for one answer, its judge calls batched."""
    if not statements:  # ALCE skips an answer without sentences: it enters neither mean
        return {"recall": NAN, "precision": NAN, "statements": []}
    texts = [strip_citations(text) for text, _ in statements]
    reads = [_alce_read(c, docs) for _, c in statements]
    refs = [ref for ref, _ in reads]

    def premise(ids: list[str]) -> str:
        return "\n".join(docs[x] for x in ids)

    ask = [i for i, ref in enumerate(refs) if ref]
    joint = dict(zip(ask, _judge(judge, [(premise(refs[i]), texts[i]) for i in ask])))
    multi = [(i, j) for i in ask if joint[i].supported is True and len(refs[i]) > 1 for j in range(len(refs[i]))]
    alone = dict(zip(multi, _judge(judge, [(docs[refs[i][j]], texts[i]) for i, j in multi])))
    follow = [(i, j) for (i, j), v in alone.items() if v.supported is not True]
    rest = dict(zip(follow, _judge(judge, [(premise(_without_first(refs[i], refs[i][j])), texts[i]) for i, j in follow])))
    entailed = precise = cited = 0
    per_statement = []
    for i, (ref, why) in enumerate(reads):
        verdict = joint.get(i, Verdict(False, why))
        supported = verdict.supported is True  # ALCE: anything but "1" is "not entailed"
        irrelevant = [x for j, x in enumerate(ref) if (i, j) in rest and rest[(i, j)].supported is True]
        entailed += supported
        cited += len(ref)
        precise += len(ref) - len(irrelevant) if supported else 0  # an unsupported statement's citations are all wrong
        asked = [verdict] + [d[(i, j)] for d in (alone, rest) for j in range(len(ref)) if (i, j) in d]
        per_statement.append({"supported": supported, "read": ref, "irrelevant": irrelevant,
                              "undecided": sum(v.supported is None for v in asked), "reason": verdict.reason,
                              "label": verdict.label})
    return {"recall": entailed / len(statements), "precision": precise / cited if cited else 0.0,
            "statements": per_statement}


def _judge(judge, pairs: list[tuple[str, str]]) -> list[Verdict]:
    verdicts = judge.judge(pairs) if pairs else []
    if len(verdicts) != len(pairs):
        raise ValueError(f"judge returned {len(verdicts)} verdicts for {len(pairs)} pairs")
    return verdicts
