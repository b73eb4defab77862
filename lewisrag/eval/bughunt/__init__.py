"""The BugHunt sample: one question, a four-document knowledge base, six preset answers (one correct,
five that each fail in a different layer), five edge sentences, and a human label on every sentence.

The scenario (Chinese, like the reference chapter): a testing agent found that the Conduit app
shows nothing when a login password is wrong, and asks the knowledge base what the API returns and
how the front end should tell the user. REQ-AUTH-03 answers it; REQ-USER-02 (registration) is the
look-alike that also returns 422. Citations [n] use the documents' ids "1".."4".

Human labels per sentence:
- `faithful`     the retrieved contexts, joined, support the sentence (faithfulness);
- `citation_ok`  the documents it cites, among the retrieved ones, support it on their own;
- `on_topic`     it answers the question that was asked;
and, for the claim-level diagnostics (RAGChecker's, which check each claim against the reference and
against each retrieved document on its own), on the preset answers' sentences:
- `correct`      the reference statements, joined, support it;
- `supported_by` the retrieved documents that support it on their own;
and on each reference statement, `supported_by`: the documents that support it on their own.

Running the rule checker over the 22 sentences against `citation_ok` gives the reference chapter's table (docs/architecture.md):
caught 7, passed 12, false block 1, missed 1, unverifiable 1 (`rule_checker_table`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

from lewisrag.data.records import Passage
from lewisrag.eval.citations import PASS, UNVERIFIABLE, check_sentence
from lewisrag.eval.statements import sentence_spans, strip_citations, to_statement

CONTEXT_SEPARATOR = "\n"  # how contexts are joined into one premise (as ragas' faithfulness does)
OUTCOMES = ("caught", "passed", "false_block", "missed", "unverifiable")


@dataclass(frozen=True)
class LabelledSentence:
    text: str  # the sentence as written, citation markers included
    faithful: bool  # supported by the retrieved contexts joined together
    citation_ok: bool  # supported by its cited (and retrieved) documents alone
    on_topic: bool  # answers the question that was asked
    retrieved_ids: tuple[str, ...]  # the contexts retrieved for the answer it belongs to
    note: str = ""  # why it is in the sample, for readers
    cited_alone_ok: tuple[tuple[str, bool], ...] = ()  # with several citations: does each alone support it
    correct: bool | None = None  # the reference statements, joined, support it (preset answers' sentences)
    supported_by: tuple[str, ...] | None = None  # the retrieved documents that each support it alone (same)


@dataclass(frozen=True)
class PresetAnswer:
    name: str  # correct, not_retrieved, retrieved_not_used, hallucinated, off_topic, misplaced_citations
    description: str  # the failure it shows
    retrieved_ids: tuple[str, ...]  # ids of the retrieved contexts, in rank order
    sentences: tuple[LabelledSentence, ...]  # the answer, one labelled sentence after another
    expected_primary: str | None  # the layer a diagnosis should blame first; None for the correct one
    covers: tuple[str, ...]  # reference statements the answer states (answer completeness)
    context_supports: tuple[str, ...]  # reference statements the contexts support (context recall)
    atomic: tuple[tuple[str, bool], ...] = ()  # a finer split with faithful labels, where given
    whole_faithful: bool | None = None  # the whole answer as one statement, where labelled

    @property
    def response(self) -> str:
        return "".join(s.text for s in self.sentences)


@dataclass(frozen=True)
class BugHunt:
    question: str  # what the testing agent asks
    category: str  # QA category of the question (a look-alike document exists: "distractor")
    reference_statements: dict[str, str]  # R1..R3 -> statement
    reference_support: dict[str, tuple[str, ...]]  # R1..R3 -> the documents that each support it alone
    gold_passage_ids: tuple[str, ...]  # the documents that must be retrieved
    docs: tuple[Passage, ...]  # the knowledge base
    answers: tuple[PresetAnswer, ...]  # the six preset answers
    edge_sentences: tuple[LabelledSentence, ...]  # single sentences at the rule checker's edges

    def doc_texts(self) -> dict[str, str]:
        return {d.id: d.text for d in self.docs}

    def answer(self, name: str) -> PresetAnswer:
        for a in self.answers:
            if a.name == name:
                return a
        raise KeyError(f"no preset answer {name!r}; have {[a.name for a in self.answers]}")

    def all_sentences(self) -> list[tuple[str, LabelledSentence]]:
        """(answer name or "edge", sentence) for the 22 sentences the checker table counts."""
        rows = [(a.name, s) for a in self.answers for s in a.sentences]
        return rows + [("edge", s) for s in self.edge_sentences]


def _sentence(d: dict, retrieved_ids: tuple[str, ...]) -> LabelledSentence:
    alone = tuple(d.get("cited_alone_ok", {}).items())
    by = tuple(d["supported_by"]) if "supported_by" in d else None
    sentence = LabelledSentence(d["text"], d["faithful"], d["citation_ok"], d["on_topic"], retrieved_ids, d.get("note", ""),
                                alone, d.get("correct"), by)
    if by is not None:  # the claim labels must agree with the sentence's other labels
        cited = [i for i in to_statement(d["text"]).citations if i in retrieved_ids]
        if not set(by) <= set(retrieved_ids):
            raise ValueError(f"BugHunt sentence {d['text']!r}: supported_by names documents that were not retrieved")
        if by and not sentence.faithful:
            raise ValueError(f"BugHunt sentence {d['text']!r}: a document supports it alone, yet the contexts do not")
        if len(cited) == 1 and (cited[0] in by) is not sentence.citation_ok:
            raise ValueError(f"BugHunt sentence {d['text']!r}: citation_ok disagrees with supported_by")
    return sentence


def _answer(d: dict) -> PresetAnswer:
    ids = tuple(d["retrieved_ids"])
    answer = PresetAnswer(
        name=d["name"],
        description=d["description"],
        retrieved_ids=ids,
        sentences=tuple(_sentence(s, ids) for s in d["sentences"]),
        expected_primary=d["expected_primary"],
        covers=tuple(d["covers"]),
        context_supports=tuple(d["context_supports"]),
        atomic=tuple((a["text"], a["faithful"]) for a in d.get("atomic", [])),
        whole_faithful=d.get("whole_faithful"),
    )
    # the labels are per sentence, so the shipped splitter must cut the answer where they do
    if sentence_spans(answer.response) != [s.text for s in answer.sentences]:
        raise ValueError(f"BugHunt answer {answer.name!r}: the splitter does not reproduce its labelled sentences")
    return answer


def _edge(d: dict) -> LabelledSentence:
    sentence = _sentence(d, tuple(d["retrieved_ids"]))
    if sentence_spans(sentence.text) != [sentence.text]:
        raise ValueError(f"BugHunt edge sentence {sentence.text!r} is not one sentence to the splitter")
    return sentence


def load_bughunt() -> BugHunt:
    """Load the sample shipped in lewisrag/eval/bughunt/."""
    folder = resources.files("lewisrag.eval.bughunt")
    raw = json.loads(folder.joinpath("sample.json").read_text(encoding="utf-8"))
    docs = tuple(
        Passage(r["id"], r["title"], r["text"])
        for r in map(json.loads, folder.joinpath("kb.jsonl").read_text(encoding="utf-8").splitlines())
    )
    return BugHunt(
        question=raw["question"],
        category=raw["category"],
        reference_statements={r["id"]: r["text"] for r in raw["reference_statements"]},
        reference_support={r["id"]: tuple(r["supported_by"]) for r in raw["reference_statements"]},
        gold_passage_ids=tuple(raw["gold_passage_ids"]),
        docs=docs,
        answers=tuple(_answer(a) for a in raw["answers"]),
        edge_sentences=tuple(_edge(e) for e in raw["edge_sentences"]),
    )


def outcome(status: str, human_ok: bool) -> str:
    """Where one rule-checker verdict lands against the human citation label.

    >>> outcome("TOKEN_NOT_FOUND", False), outcome("PASS", True), outcome("BAD_ID", True)
    ('caught', 'passed', 'false_block')
    >>> outcome("PASS", False), outcome("UNVERIFIABLE", True)
    ('missed', 'unverifiable')
    """
    if status == UNVERIFIABLE:
        return "unverifiable"
    if status == PASS:
        return "passed" if human_ok else "missed"
    return "false_block" if human_ok else "caught"


def rule_checker_rows(sample: BugHunt) -> list[dict]:
    """One row per sentence: answer, sentence, checker status and detail, human label, outcome."""
    docs = sample.doc_texts()
    rows = []
    for name, s in sample.all_sentences():
        check = check_sentence(s.text, docs, set(s.retrieved_ids))
        rows.append({"answer": name, "sentence": s.text, "status": check.status, "detail": check.detail,
                     "citation_ok": s.citation_ok, "outcome": outcome(check.status, s.citation_ok)})
    return rows


def rule_checker_table(sample: BugHunt) -> dict[str, int]:
    """The checker against the human `citation_ok` labels: counts of caught (flagged, and the human
    says the citation does not support the sentence), passed (PASS, human agrees), false_block
    (flagged, but the human says it is fine), missed (PASS, but the human says it is not) and
    unverifiable (the rule had nothing to check)."""
    counts = dict.fromkeys(OUTCOMES, 0)
    for row in rule_checker_rows(sample):
        counts[row["outcome"]] += 1
    return counts


def human_labels(sample: BugHunt) -> list[dict]:
    """The sample's labels in the human-labels format {"id", "premise", "hypothesis", "supported"}.

    Premises: for `-faithful`, `-context` and the atomic labels, the retrieved contexts joined with
    CONTEXT_SEPARATOR in rank order; for `-citation`, the cited documents that were retrieved, joined
    (a sentence without such a citation has no citation label), and for `-citation-<id>` one cited
    document alone (ALCE's precision needs it when a sentence cites several); for `-answer`
    (completeness), the response without citation markers. Hypotheses are statements without their
    citation markers (`Statement.text`).

    The claim-level checks add, for each preset answer's sentence, `-reference` (premise: the
    reference statements joined with CONTEXT_SEPARATOR) and `-doc-<id>` for each retrieved document
    alone, and for each reference statement `<R>-doc-<id>` for each document of the knowledge base;
    a pair that an earlier label already holds is not repeated (a disagreeing one is an error).
    """
    docs = sample.doc_texts()
    labels: list[dict] = []

    def add(id_: str, premise: str, hypothesis: str, supported: bool) -> None:
        labels.append({"id": id_, "premise": premise, "hypothesis": hypothesis, "supported": supported})

    def sentence_labels(prefix: str, s: LabelledSentence) -> None:
        statement = to_statement(s.text)
        add(f"{prefix}-faithful", CONTEXT_SEPARATOR.join(docs[i] for i in s.retrieved_ids), statement.text, s.faithful)
        cited = [docs[i] for i in statement.citations if i in s.retrieved_ids]
        if cited:
            add(f"{prefix}-citation", CONTEXT_SEPARATOR.join(cited), statement.text, s.citation_ok)
        for doc_id, ok in s.cited_alone_ok:
            add(f"{prefix}-citation-{doc_id}", docs[doc_id], statement.text, ok)

    for a in sample.answers:
        contexts = CONTEXT_SEPARATOR.join(docs[i] for i in a.retrieved_ids)
        for k, s in enumerate(a.sentences, start=1):
            sentence_labels(f"{a.name}-s{k}", s)
        for k, (text, ok) in enumerate(a.atomic, start=1):
            add(f"{a.name}-a{k}-faithful", contexts, text, ok)
        if a.whole_faithful is not None:
            add(f"{a.name}-whole-faithful", contexts, strip_citations(a.response), a.whole_faithful)
        for rid, ref in sample.reference_statements.items():
            add(f"{a.name}-{rid}-context", contexts, ref, rid in a.context_supports)
            add(f"{a.name}-{rid}-answer", strip_citations(a.response), ref, rid in a.covers)
    for k, s in enumerate(sample.edge_sentences, start=1):
        sentence_labels(f"edge-e{k}", s)
    return labels + _claim_labels(sample, labels)


def _claim_labels(sample: BugHunt, earlier: list[dict]) -> list[dict]:
    """The labels the claim-level checks read that `human_labels`' others do not already hold."""
    docs, reference = sample.doc_texts(), CONTEXT_SEPARATOR.join(sample.reference_statements.values())
    seen = {(r["premise"], r["hypothesis"]): r for r in earlier}
    labels: list[dict] = []

    def add(id_: str, premise: str, hypothesis: str, supported: bool) -> None:
        held = seen.get((premise, hypothesis))
        if held is not None:
            if held["supported"] is not supported:
                raise ValueError(f"BugHunt label {id_} disagrees with {held['id']} on the same premise and statement")
            return
        seen[premise, hypothesis] = row = {"id": id_, "premise": premise, "hypothesis": hypothesis, "supported": supported}
        labels.append(row)

    for a in sample.answers:
        for k, s in enumerate(a.sentences, start=1):
            text = to_statement(s.text).text
            add(f"{a.name}-s{k}-reference", reference, text, s.correct)
            for i in a.retrieved_ids:
                add(f"{a.name}-s{k}-doc-{i}", docs[i], text, i in s.supported_by)
    for rid, ref in sample.reference_statements.items():
        for i, doc in docs.items():
            add(f"{rid}-doc-{i}", doc, ref, i in sample.reference_support[rid])
    return labels


def answer_records(sample: BugHunt) -> list[dict]:
    """The preset answers as answer records (the format `lewisrag.eval.records` reads) for `lewisrag eval answers`."""
    docs = {d.id: d for d in sample.docs}
    return [
        {
            "id": a.name,
            "user_input": sample.question,
            "response": a.response,
            "retrieved_contexts": [docs[i].to_dict() for i in a.retrieved_ids],
            "reference_statements": list(sample.reference_statements.values()),
            "gold_passage_ids": list(sample.gold_passage_ids),
            "category": sample.category,
            "system": "bughunt",
        }
        for a in sample.answers
    ]
