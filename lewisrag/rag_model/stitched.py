"""Prompt-stitching RAG: today's RAG, held beside the paper's.

Lewis et al. marginalize over documents: each retrieved passage is read on its own, and the
answer's probability sums over passages weighted by p(z|x). Prompt stitching instead pastes the
top-k passages, numbered, into ONE generator input with the question, and asks for an answer that
cites them as [n]. One forward pass reads every passage at once (so a passage's position in the
input matters, as "Lost in the Middle" measured), and the citations are the only trace of which
passage an answer used.

Generators are plain callables `list[str] -> list[str]` (prompts in, answers out):
`HFGenerator` wraps a local transformers seq2seq or causal LM, `ChatGenerator` an
OpenAI-compatible chat endpoint (lewisrag.chat_client), and any function works in tests.
A generator with a token limit also has `fit(question, passages, settings) -> int` (`HFGenerator`'s:
`fit_passages`), and `PromptStitchingRAG` gives it the most whole passages its prompt holds, best
first, never a prompt cut mid-way; a question whose prompt holds not even its best passage raises
`PromptTooLong`, naming it.
`lewisrag compare --stitched-generator chat:MODEL` answers through `experiments.stitched_llm.ChatAnswers`
instead, which caches each answer and keeps its token usage.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

from lewisrag.chat_client import ChatError, map_in_threads
from lewisrag.data.io import InputError
from lewisrag.data.pretrained import load_config, load_model, load_tokenizer
from lewisrag.rag_model.model import max_positions
from lewisrag.scoring.markers import citation_ids

CITATION = re.compile(r"\[(\d+)\]")  # the [n] `stitch` numbers passages with in the input; answers: `cited_ids`
DEFAULT_INSTRUCTION = (
    "Answer the question using only the numbered passages. Cite the passages that support each "
    "sentence as [n]. If the passages do not contain the answer, say that it was not found."
)


@dataclass(frozen=True)
class StitchSettings:
    k: int = 5  # passages stitched into the input, best first
    instruction: str = ""  # prepended to the input; "" for a seq2seq trained on stitched inputs
    passage_sep: str = " "  # between numbered passages
    title_sep: str = " / "  # between a passage's title and text, as in the Lewis model's inputs
    question_sep: str = " // "  # between the question and the passages
    question_last: bool = False  # the passages first, then the question (the Lewis model's "title / text // question" order)


def stitch(question: str, passages: Sequence, settings: StitchSettings = StitchSettings()) -> str:
    """One generator input: the question, then the passages numbered from 1 (or the passages first).

    >>> from lewisrag.data.records import Passage
    >>> stitch("Who leads Valdoria?", [Passage("p7", "Valdoria", "Ana Kel leads it."), Passage("p2", "Veldoria", "Bo Ren leads it.")])
    'Who leads Valdoria? // [1] Valdoria / Ana Kel leads it. [2] Veldoria / Bo Ren leads it.'
    >>> stitch("Who leads Valdoria?", [Passage("p7", "Valdoria", "Ana Kel leads it.")], StitchSettings(question_last=True))
    '[1] Valdoria / Ana Kel leads it. // Who leads Valdoria?'
    """
    numbered = settings.passage_sep.join(f"[{n}] {p.title}{settings.title_sep}{p.text}" for n, p in enumerate(passages, start=1))
    body = f"{numbered}{settings.question_sep}{question}" if settings.question_last else f"{question}{settings.question_sep}{numbered}"
    return f"{settings.instruction}\n\n{body}" if settings.instruction else body


def cited_ids(answer: str, passages: Sequence) -> list[str]:
    """The ids of the passages an answer cites, in order of first citation; out-of-range [n] kept as "?n".

    Markers are read as the evaluator reads them (`lewisrag.scoring.markers`): 【2】, ［２］, [1, 2],
    [1-3] and [^2] cite, [٢] and `arr[0]` in Markdown code do not, so what the system reports it cited
    is what its answer's citations are checked against.

    >>> from lewisrag.data.records import Passage
    >>> cited_ids("Ana Kel [2]. Since 2010 [2][5].", [Passage("a", "", "x"), Passage("b", "", "y")])
    ['b', '?5']
    >>> cited_ids("安娜【2】，见［1-2］。", [Passage("a", "", "x"), Passage("b", "", "y")])
    ['b', 'a']
    """
    out: list[str] = []
    for n in citation_ids(answer):  # numbers as strings, without leading zeros, each once
        i = int(n) if len(n) < 10 else None  # a longer number cites no passage (and int() may refuse it)
        pid = passages[i - 1].id if i is not None and 1 <= i <= len(passages) else f"?{n}"
        if pid not in out:
            out.append(pid)
    return out


@dataclass
class StitchedAnswer:
    id: str
    question: str
    answer: str  # as generated, citations included
    passages: list  # the stitched passages, in input order ([n] is passages[n-1])
    prompt: str
    input_tokens: int | None = None  # tokens the generator read (when the generator counts them)
    cited: list[str] = field(default_factory=list)

    def to_record(self, gold_passage_ids: Sequence[str] = ()) -> dict:
        """The answer in the evaluator's (ragas-style) format.

        The evaluator reads citations as numbers, so the contexts keep the numbers the generator
        saw ("1".."k") and the passages' own ids go to `passage_ids`; gold ids are renumbered alike,
        and a gold passage not read gets an id that no number is, as `experiments.compare.answer_record`
        gives it (its own id could be "2", a hit on whatever passage [2] is).

        >>> from lewisrag.data.records import Passage
        >>> a = StitchedAnswer("q", "?", "x", [Passage("a", "", ""), Passage("p9", "", "")], "")
        >>> a.to_record(["p9", "2"])["gold_passage_ids"]
        ['2', 'not read: 2']
        """
        number = {p.id: str(n) for n, p in enumerate(self.passages, start=1)}
        return {"id": self.id, "user_input": self.question, "response": self.answer, "system": "stitched",
                "retrieved_contexts": [{"id": str(n), "title": p.title, "text": p.text} for n, p in enumerate(self.passages, start=1)],
                "passage_ids": [p.id for p in self.passages],
                "gold_passage_ids": [number.get(g, f"not read: {g}") for g in gold_passage_ids]}


def shown_question(question: str) -> str:
    """`question` on one line, at most 80 characters: how an error names it.

    >>> shown_question("Who leads\\n Valdoria?")
    'Who leads Valdoria?'
    """
    shown = " ".join(question.split())
    return shown if len(shown) <= 80 else shown[:77] + "..."


class PromptTooLong(ValueError):
    """A question whose stitched prompt does not fit a generator's input limit even with its best
    passage alone (`with_best`, `tokens` counted with it) or with no passage at all (`tokens` without
    any): an answer from no passage is not retrieval-augmented, and a prompt cut to fit loses the
    instruction, the question or passage [1]."""

    def __init__(self, question: str, tokens: int, limit: int, with_best: bool):
        self.question, self.tokens, self.limit, self.with_best = question, tokens, limit, with_best
        super().__init__(self.explain())

    def explain(self, reads: str = "this generator reads", limit_why: str = "") -> str:
        """The one-line reason; `reads` names the reader of the `limit` tokens, `limit_why` says where
        that limit comes from (after it, when no passage fits at all)."""
        q = shown_question(self.question)
        if self.with_best:
            return (f"the prompt of the question '{q}' does not hold even its best passage within the {self.limit} "
                    f"tokens {reads} ({self.tokens} with it)")
        return (f"the prompt of the question '{q}' takes {self.tokens} tokens with no passage at all, more than the "
                f"{self.limit} {reads}{limit_why}")


def fit_passages(question: str, passages: Sequence, settings: StitchSettings, tokens: Callable[[str], int], limit: int) -> int:
    """How many of `passages` (best first) the question's stitched prompt holds within `limit` tokens
    (`tokens(prompt)` counts them as the generator reads them, untruncated): all of them when they fit,
    else the most that do, dropped whole from the worst-ranked end (the count grows with each passage:
    a binary search). Raises `PromptTooLong` when not even the best passage fits.

    >>> from lewisrag.data.records import Passage
    >>> ps = [Passage("a", "A", "x" * 10), Passage("b", "B", "y" * 10), Passage("c", "C", "z" * 10)]
    >>> fit_passages("Who?", ps, StitchSettings(), len, len(stitch("Who?", ps[:2])))
    2
    """
    if tokens(stitch(question, passages, settings)) <= limit:
        return len(passages)
    if (bare := tokens(stitch(question, [], settings))) > limit:
        raise PromptTooLong(question, bare, limit, with_best=False)
    fits, over = 0, len(passages)
    while over - fits > 1:
        mid = (fits + over) // 2
        if tokens(stitch(question, passages[:mid], settings)) <= limit:
            fits = mid
        else:
            over = mid
    if fits == 0:  # an answer from no passage at all is not retrieval-augmented: refused, not answered
        raise PromptTooLong(question, tokens(stitch(question, passages[:1], settings)), limit, with_best=True)
    return fits


class PromptStitchingRAG:
    """Retrieve top-k, stitch them with the question into one input, generate, parse the citations."""

    def __init__(self, retriever, generate: Callable[[list[str]], list[str]], settings: StitchSettings = StitchSettings()):
        self.retriever, self.generate, self.settings = retriever, generate, settings

    def answer(self, questions: Sequence[str], ids: Sequence[str] | None = None) -> list[StitchedAnswer]:
        hits = self.retriever.search(list(questions), self.settings.k)
        return self.answer_with(questions, hits, ids)

    def answer_with(self, questions: Sequence[str], passages: Sequence[Sequence], ids: Sequence[str] | None = None) -> list[StitchedAnswer]:
        """Answer from given passages (e.g. reordered for the position probe) instead of retrieving. A
        generator with a token limit (`fit`, e.g. `HFGenerator`) gets the most whole passages each prompt
        holds, best first, and each answer's `passages` are those it was given; a question whose prompt
        holds not even its best passage raises `PromptTooLong` before anything is generated."""
        if (fit := getattr(self.generate, "fit", None)) is not None:
            passages = [list(ps)[: fit(q, ps, self.settings)] for q, ps in zip(questions, passages)]
        prompts = [stitch(q, ps, self.settings) for q, ps in zip(questions, passages)]
        answers = self.generate(prompts)
        counts = getattr(self.generate, "last_input_tokens", None) or [None] * len(prompts)
        ids = ids or [str(i) for i in range(len(questions))]
        return [StitchedAnswer(i, q, a, list(ps), p, n, cited_ids(a, ps))
                for i, q, a, ps, p, n in zip(ids, questions, answers, passages, prompts, counts)]


DEFAULT_INPUT_TOKENS = 1024  # what HFGenerator reads by default when the model's config names no positions (a T5's)
MIN_PROMPT_TOKENS = 16  # the fewest positions a causal LM's max_new_tokens must leave its prompt (instruction, question)


class HFGenerator:
    """A local transformers seq2seq or causal LM as a `prompts -> answers` callable. It reads at most
    `max_input_tokens` (by default the model's positions, `model.max_positions`, or DEFAULT_INPUT_TOKENS
    when its config names none: a fixed 1024 cut an 8192-position model's prompts to 1024 tokens),
    capped at the model's positions (less the answer's, for a causal LM): `PromptStitchingRAG` fits
    its prompts to that (`fit`); a longer prompt handed in directly is cut to it, from the
    tokenizer's `truncation_side`. A `max_new_tokens` the positions cannot hold is refused (an
    InputError naming --max-new-tokens): a seq2seq decoder's start token takes one of them, and a causal
    LM must keep MIN_PROMPT_TOKENS for the prompt; capped in silence, an answer was cut at a length no
    one asked for, and one past them was an IndexError. `last_cut_off` says which answers of the last
    call ran into max_new_tokens with no end token of the model's own (`ended_by_the_model`): no whole
    answer (`compare`'s `HFAnswers` fails them)."""

    def __init__(self, model, tokenizer, max_new_tokens: int = 64, num_beams: int = 1, max_input_tokens: int | None = None):
        self.model, self.tokenizer = model.eval(), tokenizer
        longest = max_positions(model.config)  # past it, an IndexError mid-generate
        if max_input_tokens is None:
            max_input_tokens = longest or DEFAULT_INPUT_TOKENS
        check_new_tokens(max_new_tokens, longest, model.config.is_encoder_decoder)
        self.max_new_tokens, self.num_beams, self.max_input_tokens = max_new_tokens, num_beams, max_input_tokens
        if longest and model.config.is_encoder_decoder:  # the prompt and the answer each have their positions
            self.max_input_tokens = min(self.max_input_tokens, longest)
        elif longest:  # a causal LM's answer shares its positions with the prompt
            self.max_input_tokens = min(self.max_input_tokens, longest - max_new_tokens)
        # False for a prompt already holding the tokenizer's start token: a chat template's output writes it
        # (Llama 3's "{{ bos_token }}"), and encoding that text with special tokens read it twice
        self.add_special_tokens = True
        self.last_input_tokens: list[int] = []  # tokens read per prompt in the last call
        self.last_new_tokens: list[int] = []  # tokens generated per prompt in the last call (padding left out)
        self.last_cut_off: list[bool] = []  # per prompt in the last call: stopped at max_new_tokens with no end token

    @classmethod
    def from_pretrained(cls, path: str, device: str = "cpu", dtype: torch.dtype = torch.float32, **kw) -> HFGenerator:
        """The model in `path` with its tokenizer, its weights in `dtype`: float32 unless asked otherwise, as the
        run's own models load (`data.pretrained.load_generator`). transformers loads a checkpoint in its own
        dtype, bf16 for most hub LLMs, whose greedy answers then depend on the batch a prompt is padded into."""
        config = load_config(AutoConfig.from_pretrained, path, "generator config")
        if "max_new_tokens" in kw:  # refused before the weights load (an LLM's take minutes), as __init__ would
            check_new_tokens(kw["max_new_tokens"], max_positions(config), config.is_encoder_decoder)
        auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
        return cls(load_model(auto.from_pretrained, path, "generator", dtype=dtype).to(device),
                   load_tokenizer(AutoTokenizer.from_pretrained, path, "generator tokenizer"), **kw)

    def tokens(self, prompt: str) -> int:
        """Input tokens the model reads for `prompt` as `__call__` encodes it, before any truncation."""
        return len(self.tokenizer(prompt, add_special_tokens=self.add_special_tokens, verbose=False)["input_ids"])

    def fit(self, question: str, passages: Sequence, settings: StitchSettings) -> int:
        """How many of `passages` (best first) the stitched prompt holds within `max_input_tokens`
        (`fit_passages`; `PromptTooLong` when not even the best one fits)."""
        return fit_passages(question, passages, settings, self.tokens, self.max_input_tokens)

    def __call__(self, prompts: list[str]) -> list[str]:
        tok = self.tokenizer
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        encoder_decoder = self.model.config.is_encoder_decoder
        tok.padding_side = "right" if encoder_decoder else "left"  # a causal LM continues from the right end
        enc = tok(prompts, return_tensors="pt", padding=True, truncation=True, max_length=self.max_input_tokens,
                  add_special_tokens=self.add_special_tokens)
        self.last_input_tokens = enc["attention_mask"].sum(1).tolist()
        enc = enc.to(self.model.device)
        with torch.inference_mode():
            out = self.model.generate(**enc, max_new_tokens=self.max_new_tokens, num_beams=self.num_beams, do_sample=False,
                                      pad_token_id=tok.pad_token_id)
        # each answer with the token it follows first: the decoder's start token, or the prompt's last (left padding)
        out = out if encoder_decoder else out[:, enc["input_ids"].shape[1] - 1:]  # (B, 1 + new)
        self.last_new_tokens = out[:, 1:].ne(tok.pad_token_id).sum(1).tolist()
        # generate stops a row at an end token of the model's generation config, else at max_new_tokens: a row
        # holding none of its own ran out of room mid-answer (an end token the model cannot emit: every row does)
        config = getattr(self.model, "generation_config", None)
        self.last_cut_off = [not ended_by_the_model(row, config, 1 + self.max_new_tokens) and len(row) > self.max_new_tokens
                             for row in out]
        return [t.strip() for t in tok.batch_decode(out[:, 1:].cpu(), skip_special_tokens=True)]


def check_new_tokens(max_new_tokens: int, positions: int | None, encoder_decoder: bool) -> None:
    """Refuse a `max_new_tokens` a model of `positions` (`max_positions`; None: no limit) cannot decode: a
    seq2seq's decoder reads its start token and each new token in them, a causal LM its prompt too, which
    keeps at least MIN_PROMPT_TOKENS.

    >>> check_new_tokens(383, 384, True), check_new_tokens(16, 32, False), check_new_tokens(10**6, None, False)
    (None, None, None)
    >>> check_new_tokens(384, 384, True)
    Traceback (most recent call last):
    lewisrag.data.io.InputError: --max-new-tokens: 384 does not fit the model's 384 positions, which its decoder reads its start token and each new token in; must be at most 383
    """
    if positions is None:
        return
    if encoder_decoder:
        most, why = positions - 1, "which its decoder reads its start token and each new token in"
    else:
        most = positions - MIN_PROMPT_TOKENS
        why = f"which a causal LM reads its prompt (at least {MIN_PROMPT_TOKENS} tokens) and its answer in"
    if max_new_tokens > most:
        limit = f"must be at most {most}" if most > 0 else "this model can answer no prompt"
        raise InputError("--max-new-tokens",
                         f"{max_new_tokens} does not fit the model's {positions} positions, {why}; {limit}")


def ended_by_the_model(seq: torch.Tensor, generation_config, max_length: int) -> bool:
    """Whether the decoded `seq` (T,) holds an end token the model chose; `seq[0]` is the token the answer
    follows (the decoder start token, a causal LM's last prompt token), `max_length` the most `seq` could hold.

    With `forced_eos_token_id` set (transformers' BartConfig default, so every bart-large generator) the
    decoding forces that token at the last position, max_length − 1: an answer cut there ends with it
    too, so that position counts only when the sequence stopped before it.

    >>> from types import SimpleNamespace as C
    >>> cut, done = torch.tensor([2, 5, 6, 2]), torch.tensor([2, 5, 2, 1])
    >>> [ended_by_the_model(s, C(eos_token_id=2, forced_eos_token_id=f), 4) for s in (cut, done) for f in (None, 2)]
    [True, False, True, True]
    """
    eos = token_ids(getattr(generation_config, "eos_token_id", None))  # the tokens that end an answer, as decoding read them
    if not eos:
        return False
    own = seq[1:]
    if token_ids(getattr(generation_config, "forced_eos_token_id", None)) and len(seq) >= max_length:
        own = seq[1:max_length - 1]  # the token at max_length − 1 was forced, whatever the model would have said
    return bool(torch.isin(own, torch.tensor(eos, dtype=seq.dtype, device=seq.device)).any())


def token_ids(value) -> list[int]:
    """A generation config's token id field (an id, a list or none) as a list."""
    return [] if value is None else [value] if isinstance(value, int) else list(value)


class FailedAnswer(str):
    """A `ChatGenerator` answer whose request failed for good: "" to code that reads strings (the
    `prompts -> answers` protocol, `cited_ids`), told from an empty answer by its type and its
    `failure` (the reason).

    >>> a = FailedAnswer("HTTP 401 (1 attempt)")
    >>> (a == "", a.failure, isinstance(a, FailedAnswer), isinstance("", FailedAnswer))
    (True, 'HTTP 401 (1 attempt)', True, False)
    """

    failure: str

    def __new__(cls, failure: str = ""):
        self = super().__new__(cls, "")
        self.failure = failure
        return self

    def __repr__(self) -> str:
        return f"FailedAnswer({self.failure!r})"


class ChatGenerator:
    """An OpenAI-compatible chat endpoint as a `prompts -> answers` callable (one request per prompt)."""

    def __init__(self, client, system: str = DEFAULT_INSTRUCTION):
        self.client, self.system = client, system
        self.failures: list[tuple[str, str]] = []  # (prompt, reason) of requests that failed after the retries

    def __call__(self, prompts: list[str]) -> list[str]:
        """One answer per prompt. A request that fails for good answers a `FailedAnswer` (its reason
        also kept in `failures`), so one dropped endpoint does not end a whole evaluation, and a
        failure is never taken for the model's empty answer: check `isinstance(a, FailedAnswer)` or
        `getattr(a, "failure", None)` before scoring. Once the client has stopped at a failure every
        request would repeat (`ChatClient.broken`), the remaining prompts fail at once, unsent."""
        def answer(prompt: str) -> str:
            try:
                return self.client.complete(self.system, prompt).strip()
            except ChatError as e:
                self.failures.append((prompt, str(e)))
                return FailedAnswer(str(e))

        return map_in_threads(answer, prompts, self.client.max_workers)
