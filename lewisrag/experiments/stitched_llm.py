"""The stitched system with a generator from outside the run, for `lewisrag compare --stitched-generator`:
an LLM behind an OpenAI-compatible chat-completions endpoint (`chat:MODEL`) or a local transformers
causal or seq2seq LM folder (`hf:PATH`), so the scorecard puts the trained Lewis models beside
whatever LLM one has. Retrieval is the run's own (index A through the run's DPR question encoder),
as the run's own stitched system's; the Lewis models read their top K through the question encoders
they fine-tuned, so the systems share the index, not always the passages.

Prompt (`PROMPT_VERSION`). The system message is `ANSWER_INSTRUCTION`: answer from the numbered
passages only, as short an answer as possible followed by the supporting passage's number in brackets
(`Ana Kel [2]`), or "not found in the provided passages" (a refusal the evaluator recognizes). The
user message is `stitch()`'s input with the top-k passages numbered from 1, best first, one per
line, then the question:

    [1] Valdoria / Valdoria is led by Ana Kel.
    [2] Veldoria / Veldoria is led by Bo Ren.

    Question: Who leads Valdoria?

An `hf:` model gets the same two messages through its tokenizer's chat template when it has one (its
text encoded with no special tokens added: the template writes its own, a start token included), else
as plain text: the instruction, a blank line, the user message and "Answer:". A template that
cannot take them (one that refuses a system message) is refused before any question is asked. The
model reads at most `max_input_tokens` (`HFGenerator`'s default): its positions as its config gives
them (`rag_model.model.max_positions`), less the answer's for a causal LM, or 1024 when the config gives none. A prompt
longer than that holds as many whole passages as fit, best first (`HFAnswers.fit`), never a passage
cut mid-way and never without the instruction or the question; the answer's record lists the
passages it was given (`passage_ids`), and results.json's `generators.stitched` counts the prompts
shortened and the passages dropped. A question whose prompt does not hold even its best passage is
an InputError (one line, exit 2, nothing written): an answer from no passage is not RAG's.

A generator `lewisrag train stitched` wrote (an `hf:` folder holding stitched.json) never saw that
instruction or layout: it reads its prompts as it was trained on them (`TRAINED_PROMPT_VERSION`), the
stitched.json settings' layout ("Who leads Valdoria? // [1] Valdoria / Valdoria is led by Ana Kel. [2]
..."), its own k unless --n-docs is given, with no instruction, chat template or "Answer:", as the run's
own stitched system reads RUN/stitched; `generators.stitched` records the layout and the file. An `hf:`
model loads in float32 (`HFGenerator.from_pretrained`), as the run's own models do, whatever dtype its
checkpoint was saved in, and `generators.stitched` records it.

Parsing (`parse_reply`): a reasoning model's <think>...</think> block is dropped, and so is everything
before a "</think>" left without its opening (DeepSeek-R1's chat template puts "<think>" in the prompt);
Markdown footnote definition lines ("[^1]: source") go, a last line of nothing but a "Source:" label and
markers ("Source: [2]") becomes its markers, whitespace runs (newlines too) become one space, a leading
"Answer:" goes ("**Answer:**", "*Answer*:", "答案：" too), and every citation marker the evaluator
reads ("[1, 2]", "【2】", "［２］", "[1、2]") becomes plain ones ("[1][2]"); the rest
is the response, citations kept (the evaluator reads them). The QA metrics (EM, F1, ROUGE-L) score it
without its [n] markers; `cited_ids` maps the markers back to passage ids (`cited_passage_ids` in
the records; an out-of-range [n] stays as "?n").

Failures. Requests go through `lewisrag.chat_client.ChatClient`: a timeout per attempt (connecting,
headers and body), bounded retries with jittered backoff for transient faults (timeouts, resets,
429, 5xx, malformed bodies). A request that still fails, a reply with no answer text (nothing left but
citations and punctuation: "[1]"), or an `hf:` answer that reached max_new_tokens with no end token (cut
off, as a chat reply whose finish_reason is "length") becomes an `Answered` with `failure` set: compare
scores it null (NaN) with the reason, never as an empty answer, and counts it. Two failures end the
comparison instead, as an InputError (one line, exit 2, nothing written): one that every request
would repeat (HTTP 401/403, 404, a redirect, connections refused, or a request's every retry spent on
transient faults, while nothing has answered yet:
the client stops there, `ChatClient.run_error`), raised at
the batch that met it, naming the base URL and the flag or variable to fix; and a generator that
answered none of the questions (`check_answered`), since a column of nulls would read as a measurement.

Cache. Good replies are kept in a sqlite file (`answers.sqlite` under `--cache-dir`, default
~/.cache/lewisrag/answers) keyed by sha256(model, temperature, system message, user message), the
raw content with the request's token counts and seconds (its batch's wall time shared equally among the
requests the batch made, as `Answered.seconds` is), so a rerun asks the endpoint nothing (and reports the
first run's latency). Failures are not cached: the next run asks again. The base URL
is in no key: two endpoints serving the same model name share their cached answers (give each its
own --cache-dir). The API
key is read from the environment variable `--api-key-env` names; it travels in the Authorization
header only and is in no cache key, cached value, reason, record or message (the client scrubs
every string the endpoint sends back).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from lewisrag.chat_client import MAX_WORKERS, ChatClient, ChatError, key_problem, map_in_threads, token_count, url_problem
from lewisrag.data.io import InputError, first_line
from lewisrag.eval.judges.base import DiskCache, digest
from lewisrag.eval.statements import canonical_citations, strip_citations
from lewisrag.experiments.systems import Answered, as_passage
from lewisrag.rag_model.model import max_positions
from lewisrag.rag_model.stitched import PromptTooLong, StitchSettings, cited_ids, fit_passages, stitch
from lewisrag.scoring.markers import blank_footnote_definitions, source_line

PROMPT_VERSION = "lewisrag-stitched-answer-1"  # bump whenever the instruction or layout below changes
TRAINED_PROMPT_VERSION = "lewisrag-stitched-as-trained-1"  # a `train stitched` folder's prompts: stitched.json's layout alone
ANSWER_INSTRUCTION = (
    "Answer the question using only the numbered passages. Reply with the answer alone, as short as possible "
    "(a name, a number, a date or a few words, not a sentence), followed by the number of the passage that "
    "supports it in square brackets, for example: Ana Kel [2]. If the passages do not contain the answer, reply: "
    "not found in the provided passages."
)
DEFAULT_CACHE_DIR = Path("~/.cache/lewisrag/answers")
DEFAULT_KEY_ENV = "LEWISRAG_LLM_API_KEY"  # the LLM judge's variable too
BASE_URL_ENV = "LEWISRAG_LLM_BASE_URL"
DEFAULT_K = 5
EMPTY_REPLY = "empty reply: no answer text after parsing"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_THINK_END = re.compile(r"</think>", re.IGNORECASE)
_EMPHASIS = r"(?:\*\*|__|\*|_)"
_LABEL = r"(?:final answer|answer|最终答案|答案)"
# "Answer:", or in Markdown emphasis closed before or after its colon ("**Answer:**", "*Answer*:"): the emphasis
# goes with the label, and an answer's own ("Answer: *Ana Kel*") stays
_ANSWER_LABEL = re.compile(rf"^(?:({_EMPHASIS})\s*{_LABEL}\s*(?:\1\s*[:：]|[:：]\s*\1)|{_LABEL}\s*[:：])\s*", re.IGNORECASE)


def prompt_settings(k: int) -> StitchSettings:
    """The user message's layout: k passages one per line, then the question (`stitch`)."""
    return StitchSettings(k=k, passage_sep="\n", question_sep="\n\nQuestion: ", question_last=True)


def parse_reply(text: str) -> str:
    """The response in a model's reply: no <think> block (nor the reasoning before a "</think>" whose
    "<think>" was in the prompt, as DeepSeek-R1's template puts it), no footnote definition line
    ("[^1]: source"), a last line of nothing but a "Source:" label and citations reduced to its citations,
    one line, no "Answer:" label (nor "**Answer:**", "答案："), and every citation the evaluator reads as
    one ([1, 2], 【2】, ［２］, [1、2], [^2]) written [1][2].

    >>> parse_reply("<think>Passage 2 says so.</think>\\n Answer: Ana  Kel [1, 2].\\n")
    'Ana Kel [1][2].'
    >>> parse_reply("Passage [2] is about Veldoria.</think>Ana Kel [1]"), parse_reply("Ana Kel[^1]\\n\\n[^1]: Valdoria")
    ('Ana Kel [1]', 'Ana Kel[1]')
    >>> parse_reply("安娜·凯尔【2】。"), parse_reply("  ")
    ('安娜·凯尔[2]。', '')
    >>> parse_reply("**Answer:** Ana Kel [2]"), parse_reply("Answer: Ana Kel\\nSources: [1], [2]")
    ('Ana Kel [2]', 'Ana Kel [1][2]')
    """
    # whole blocks, then all up to the last lone "</think>" (its "<think>" was the prompt's: the reasoning goes too)
    text = _THINK_END.split(_THINK.sub(" ", text))[-1]
    # before the lines are joined: a definition is a line of its own ("Ana Kel[^1]: Valdoria / ..." was scored)
    text = " ".join(_source_line_citations(blank_footnote_definitions(text)).split())
    text = _ANSWER_LABEL.sub("", text)
    return canonical_citations(text).strip()


def _source_line_citations(text: str) -> str:
    """`text` with a last "Source: [2]" line (`markers.source_line`) written " [2]": the label joined to the
    answer's last line was scored as part of the answer ("Ana Kel Source:"). A line with any other words is
    left as it is."""
    if (found := source_line(text)) is None:
        return text
    start, markers = found
    return text[: start - 1] + " " + "".join(text[a:b] for a, b in markers)


def answer_failure(answer: str) -> str | None:
    """EMPTY_REPLY for a parsed reply with no answer text, nothing but citations and punctuation ("[1]",
    "[2]."; scored, it was an empty answer, EM 0 and not failed), else None.

    >>> answer_failure("[1]"), answer_failure("[2]."), answer_failure("安娜[2]"), answer_failure("1990 [1]")
    ('empty reply: no answer text after parsing', 'empty reply: no answer text after parsing', None, None)
    """
    return None if any(ch.isalnum() for ch in strip_citations(answer)) else EMPTY_REPLY


@dataclass(frozen=True)
class GeneratorOptions:
    """What `--stitched-generator` and its flags asked for (validated by `check_options`)."""

    spec: str  # "chat:MODEL" or "hf:PATH"
    base_url: str | None = None  # chat: the endpoint's base URL, e.g. http://localhost:8000/v1
    api_key_env: str = DEFAULT_KEY_ENV  # chat: the NAME of the environment variable holding the key
    timeout: float = 60.0  # chat: seconds one attempt of a request may take, connecting to the reply's last byte
    max_retries: int = 4  # chat: extra tries after a transient fault
    concurrency: int = 4  # chat: requests in flight at most
    cache_dir: str | os.PathLike | None = None  # chat: answers.sqlite's folder (default ~/.cache/lewisrag/answers)
    n_docs: int | None = None  # passages per prompt (default: the run's stitched k, else 5)
    max_new_tokens: int | None = None  # hf: tokens an answer may take (default: the run's answer length + 8)
    base_url_from: str = "--llm-base-url"  # chat: where the base URL came from, the flag or the variable, as errors name it

    @property
    def kind(self) -> str:
        return self.spec.partition(":")[0]

    @property
    def target(self) -> str:
        return self.spec.partition(":")[2]


def check_options(o: GeneratorOptions) -> GeneratorOptions:
    """`o` with the base URL filled from $LEWISRAG_LLM_BASE_URL when not given; an InputError (exit 2,
    one line) for a bad spec, a chat model without a base URL or with one that is not a URL, a variable
    name that is not one, a key no HTTP header can carry (`key_problem`), or an hf folder that is not
    there. The key-variable flag's value is never echoed: it may be a pasted key; nor is the key."""
    flag = "--stitched-generator"
    if o.kind not in ("chat", "hf") or not o.target.strip():
        raise InputError(flag, f"expected chat:MODEL or hf:PATH, got '{o.spec}'")
    if o.n_docs is not None and o.n_docs < 1:
        raise InputError("--n-docs", "must be at least 1")
    if o.kind == "hf":
        path = Path(o.target).expanduser()  # the shell leaves a ~ after "hf:" alone
        if not path.is_dir():
            raise InputError(path, f"{flag} hf:PATH: {'not a folder' if path.exists() else 'folder not found'}")
        return GeneratorOptions(**{**o.__dict__, "spec": f"hf:{path}"})
    if not _ENV_NAME.match(o.api_key_env):
        raise InputError("--api-key-env", "expected the NAME of an environment variable that holds the key, not the key")
    # upper bounds too: 1e300 s overflowed the clock, 99,999,999,999 retries never ended
    for flag_, bad, want in (("--timeout", not 0 < o.timeout <= 86_400, "between 0 and 86400 seconds"),
                             ("--max-retries", not 0 <= o.max_retries <= 100, "between 0 and 100"),
                             ("--concurrency", not 1 <= o.concurrency <= MAX_WORKERS, f"between 1 and {MAX_WORKERS}")):
        if bad:
            raise InputError(flag_, f"must be {want}")
    base_url = o.base_url or os.environ.get(BASE_URL_ENV)
    if not base_url:
        raise InputError(flag, f"{o.spec} needs --llm-base-url URL or ${BASE_URL_ENV} (an OpenAI-compatible endpoint, "
                         "e.g. http://localhost:8000/v1)")
    source = "--llm-base-url" if o.base_url else f"${BASE_URL_ENV}"  # what an error about the endpoint names as the fix
    if problem := url_problem(base_url):  # "http://[::1/v1" was a traceback, a non-numeric port a null for every answer
        raise InputError(source, problem)
    if problem := key_problem(os.environ.get(o.api_key_env, "")):  # else every request raised, the key in its traceback
        raise InputError(f"${o.api_key_env}", f"the API key {problem}")
    return GeneratorOptions(**{**o.__dict__, "base_url": base_url, "base_url_from": source})


@dataclass
class Reply:
    answer: str  # the parsed response ("" when it failed)
    failure: str | None = None  # why there is no answer, after the retries
    input_tokens: int | None = None  # prompt tokens, when known
    new_tokens: int | None = None  # generated tokens, when known
    seconds: float = 0.0  # this answer's share of its batch's wall time (a cached answer: the first run's share)


class ChatAnswers:
    """Stitched prompts -> Replies from an OpenAI-compatible endpoint, one request per prompt, cached."""

    def __init__(self, client: ChatClient, cache: DiskCache, system: str = ANSWER_INSTRUCTION,
                 names: dict[str, str] | None = None):
        self.client, self.cache, self.system = client, cache, system
        self.cache_hits = 0
        self._lock = threading.Lock()  # requests run on a thread pool
        # the flags or variables `ChatClient.run_error` names as the fix: key, model, url
        self.names = names or {"key": f"${DEFAULT_KEY_ENV}", "model": "--stitched-generator", "url": "--llm-base-url"}

    def stopped(self) -> InputError | None:
        """The one-line error to end the run with once the client has stopped at a failure every
        request would repeat (`ChatClient.broken`), else None."""
        if getattr(self.client, "broken", None) is None:
            return None
        return self.client.run_error(**self.names)

    @property
    def where(self) -> str | None:
        """The endpoint's base URL as a message may show it (no key), for the error of a run that got no answer."""
        return getattr(self.client, "where", None)

    @property
    def usage(self) -> dict:
        return {**self.client.usage, "cache_hits": self.cache_hits}

    def key(self, prompt: str) -> str:
        return digest("stitched-answer", self.client.model, self.client.temperature, self.system, prompt)

    def __call__(self, prompts: list[str]) -> list[Reply]:
        """One Reply per prompt. The requests made share the batch's wall time equally, as the Lewis and hf:
        systems' answers share theirs (`Answered.seconds`): each request's own time, with `concurrency` of
        them in flight at once, read as that many times slower. A cached reply keeps the first run's share."""
        start = time.perf_counter()
        got = map_in_threads(self.one, prompts, self.client.max_workers)
        asked = [(prompt, reply, entry) for prompt, (reply, entry) in zip(prompts, got) if entry is not None]
        share = (time.perf_counter() - start) / max(1, len(asked))
        for prompt, reply, entry in asked:
            reply.seconds = share
            if reply.failure is None:
                self.cache.put(self.key(prompt), {**entry, "seconds": share})
        return [reply for reply, _ in got]

    def one(self, prompt: str) -> tuple[Reply, dict | None]:
        """The prompt's Reply (its seconds the cached share, else left for `__call__`) and, when a request
        was sent, its cache entry less the seconds (the content and token counts; {} when it failed)."""
        hit = self.cache.get(self.key(prompt))
        if isinstance(hit, dict) and isinstance(hit.get("content"), str):
            with self._lock:
                self.cache_hits += 1
            # a damaged entry's counts ("seconds": null) were a traceback: what is not a count is unknown, by the
            # rule the client reads a fresh reply's with (a cache written before it may hold -5)
            usage = {k: n for k in ("prompt_tokens", "completion_tokens") if (n := token_count(hit.get(k))) is not None}
            # the key alone, as a fresh reply's: the full scrub is for reasons and error text, and read
            # "Bearer bonds [1]" as a credential ("Bearer [redacted] [1]", scored and cached so)
            return self._reply(self.client.scrub_key(hit["content"]), usage,
                               float(hit["seconds"]) if _number(hit.get("seconds"), (int, float)) else 0.0), None
        try:
            content, usage = self.client.reply(self.system, prompt, key_only=True)
        except ChatError as e:  # already retried as far as the client's bounds allow
            return Reply("", str(e)), {}
        return self._reply(content, usage, 0.0), {"content": content, **usage}

    @staticmethod
    def _reply(content: str, usage: dict, seconds: float) -> Reply:
        answer = parse_reply(content)
        return Reply(answer, answer_failure(answer), usage.get("prompt_tokens"), usage.get("completion_tokens"), seconds)


def _number(value, kind) -> bool:
    """Whether a cached number (the seconds) is a finite, non-negative number of `kind` (a bool is none)."""
    return isinstance(value, kind) and not isinstance(value, bool) and 0 <= value < float("inf")


class HFAnswers:
    """Stitched prompts -> Replies from a local transformers LM (`HFGenerator`), greedy, in one batch.
    `fit` says how many passages a question's prompt holds (`LLMStitchedSystem` asks it first).
    `as_trained`: a generator `train stitched` wrote reads the stitched prompt alone, as it was trained
    (no instruction, chat template or "Answer:"; the tokenizer's special tokens added, as in training)."""

    def __init__(self, generator, system: str = ANSWER_INSTRUCTION, path: str | None = None, as_trained: bool = False):
        self.generator, self.path, self.as_trained = generator, path, as_trained
        self.system = "" if as_trained else system
        self.prompt_version = TRAINED_PROMPT_VERSION if as_trained else PROMPT_VERSION
        tok = generator.tokenizer
        # only a prompt `fit` did not shorten (one handed in directly) is cut, losing its start, never its question
        tok.truncation_side = "left"
        self.chat_template = not as_trained and bool(getattr(tok, "chat_template", None))
        # a template's text holds the special tokens it wants (Llama 3's starts with "{{ bos_token }}"): encoded as
        # apply_chat_template(tokenize=True) encodes it, with none added, or the model read its start token twice
        generator.add_special_tokens = not self.chat_template
        self.usage = {"batches": 0}

    def text(self, prompt: str) -> str:
        """The model's input: the prompt as trained, or its chat template over the system and user messages,
        else plain text."""
        if self.as_trained:
            return prompt
        if self.chat_template:
            messages = [{"role": "system", "content": self.system}, {"role": "user", "content": prompt}]
            return self.generator.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return f"{self.system}\n\n{prompt}\nAnswer:"

    def tokens(self, prompt: str) -> int:
        """Input tokens the generator reads for `prompt` (the user message), as it encodes it (no truncation)."""
        return len(self.generator.tokenizer(self.text(prompt), add_special_tokens=not self.chat_template,
                                            verbose=False)["input_ids"])

    def fit(self, question: str, passages: Sequence, settings: StitchSettings) -> int:
        """How many of `passages` (best first) the question's prompt holds within the generator's
        max_input_tokens: all of them when they fit, else the most that do, dropped whole from the
        worst-ranked end (`rag_model.stitched.fit_passages`, over this prompt's instruction and
        template). An InputError naming the question when the prompt does not hold even its best
        passage, or does not fit without passages: the instruction and the question alone are too long."""
        try:
            return fit_passages(question, passages, settings, self.tokens, self.generator.max_input_tokens)
        except PromptTooLong as e:  # an answer from no passage at all is not retrieval-augmented: refused, not scored
            config = self.generator.model.config
            # only a causal LM's answer takes from its positions (`HFGenerator`): a seq2seq's has its own
            why = "" if config.is_encoder_decoder or max_positions(config) is None else " (its positions less the answer's)"
            raise InputError(self.path or "--stitched-generator", "--stitched-generator hf:PATH: "
                             + e.explain("this model reads", why)) from None

    def __call__(self, prompts: list[str]) -> list[Reply]:
        start = time.perf_counter()
        outs = self.generator([self.text(p) for p in prompts])
        self.usage["batches"] += 1
        seconds = (time.perf_counter() - start) / max(1, len(prompts))
        replies = []
        for out, n_in, n_new, cut in zip(outs, self.generator.last_input_tokens, self.generator.last_new_tokens,
                                         self.generator.last_cut_off):
            if cut:  # a truncated answer must not be scored as the model's (the chat path refuses finish_reason "length")
                failure = (f"reply cut off at max_new_tokens ({self.generator.max_new_tokens} tokens, no end token; "
                           "--max-new-tokens raises it)")
                replies.append(Reply("", failure, int(n_in), int(n_new), seconds))
                continue
            answer = parse_reply(out)
            replies.append(Reply(answer, answer_failure(answer), int(n_in), int(n_new), seconds))
        return replies


class LLMStitchedSystem:
    """Prompt-stitching RAG with an outside generator: the run's retriever, `prompt_settings(k)`, the
    generator's parsed replies as answers with explicit [n] citations, failures kept as `failure`."""

    def __init__(self, retriever, answers, settings: StitchSettings, info: dict):
        self.retriever, self.answers, self.settings, self.info = retriever, answers, settings, info
        self.n_answers = self.n_failed = 0
        self.n_shortened = self.n_dropped = 0  # prompts that held fewer passages than given, and the passages left out
        self.first_failure: str | None = None

    def top_k(self, questions: list[str]) -> list[list]:
        return [[as_passage(h) for h in hits] for hits in self.retriever.search(questions, self.settings.k)]

    def answer(self, questions: list[str]) -> list[Answered]:
        return self.answer_from(questions, self.top_k(questions))

    def answer_from(self, questions: Sequence[str], passages: Sequence[Sequence]) -> list[Answered]:
        """Answers from given passages, best first; a generator with a token limit (`HFAnswers.fit`) gets the
        most of them its prompt holds, and the answer's `passages` are those it was given."""
        if (fit := getattr(self.answers, "fit", None)) is not None:
            given = [list(ps)[: fit(q, ps, self.settings)] for q, ps in zip(questions, passages)]
            dropped = [len(ps) - len(g) for ps, g in zip(passages, given)]
            self.n_shortened += sum(d > 0 for d in dropped)
            self.n_dropped += sum(dropped)
            passages = given
        replies = self.answers([stitch(q, ps, self.settings) for q, ps in zip(questions, passages)])
        if (stop := getattr(self.answers, "stopped", lambda: None)()) is not None:
            raise stop  # every later request would fail the same way: end now, before anything is written
        self.n_answers += len(replies)
        self.n_failed += sum(r.failure is not None for r in replies)
        self.first_failure = self.first_failure or next((r.failure for r in replies if r.failure is not None), None)
        return [Answered(strip_citations(r.answer), r.answer, list(ps), None if r.new_tokens is None else 1 + r.new_tokens,
                         r.input_tokens, r.seconds, failure=r.failure, cited=cited_ids(r.answer, ps))
                for r, ps in zip(replies, passages)]

    def answer_with(self, questions: list[str], passages: list[list]) -> list[str | None]:
        """Plain answers from given passages (the position probe); None where the generator failed."""
        return [None if a.failure else a.text for a in self.answer_from(questions, passages)]

    def check_answered(self) -> None:
        """An InputError (exit 2) when the generator answered none of the questions asked of it (every
        request failed, after its retries, or every reply was empty or cut off): a comparison whose column is
        all nulls would read as a measurement. Some answers failing is recorded, not refused."""
        if not self.n_answers or self.n_failed < self.n_answers:
            return
        at = f" from {self.answers.where}" if getattr(self.answers, "where", None) else ""
        n = self.n_answers
        raise InputError("--stitched-generator", f"{self.info['generator']} gave no answer to any of the {n} "
                         f"question{'s' if n > 1 else ''} asked{at} (the first failure: {self.first_failure}); "
                         "nothing was scored or written")

    def describe(self) -> dict:
        """What results.json records about the generator: spec, prompt, usage, failures (no URL, no key)."""
        # the prompt the answers read: the instruction's, or a `train stitched` folder's as trained (`HFAnswers`)
        out = {**self.info, "n_docs": self.settings.k,
               "prompt_version": getattr(self.answers, "prompt_version", PROMPT_VERSION),
               "instruction": getattr(self.answers, "system", ANSWER_INSTRUCTION),
               "usage": dict(self.answers.usage), "answers": self.n_answers, "failed": self.n_failed}
        if hasattr(self.answers, "fit"):  # a local model reads a bounded prompt: how often the passages did not all fit
            out.update(max_input_tokens=self.answers.generator.max_input_tokens, shortened_prompts=self.n_shortened,
                       passages_dropped=self.n_dropped)
        return out


def check_prompts(answers: HFAnswers, path: str) -> None:
    """An InputError naming the hf: folder whose tokenizer cannot make the prompts: a chat template
    that refuses a system message (Gemma's), or no pad and no end token to pad a batch with. Both
    raised at the first question, as a traceback, once the run's other models had loaded."""
    from jinja2 import TemplateError

    tok, flag = answers.generator.tokenizer, "--stitched-generator hf:PATH"
    try:
        answers.text("Question: ?")
    except (TemplateError, ValueError) as e:
        raise InputError(path, f"{flag}: the tokenizer's chat template cannot take a system and a user message "
                         f"({first_line(e)})") from None
    if tok.pad_token is None and tok.eos_token is None:  # HFGenerator pads with the end token when there is no pad
        raise InputError(path, f"{flag}: the tokenizer has neither a pad token nor an end-of-sequence token")


def run_k(run: Path) -> int:
    """Passages per prompt by default: the run's trained stitched k, else its preset's, else 5 (each
    file checked: a damaged one is an InputError naming it, not a k taken from elsewhere in silence)."""
    # here, as build_system's: both modules load torch, which the light paths of this module never need
    from lewisrag.experiments.presets import read_run_config
    from lewisrag.training.stitched_train import SETTINGS_FILE, read_settings

    if (run / "stitched" / SETTINGS_FILE).is_file():
        return read_settings(run / "stitched").k
    return read_run_config(run).get("preset", {}).get("stitched_k", DEFAULT_K)


def build_system(run: Path, o: GeneratorOptions, max_new_tokens: int, device: str = "cpu") -> LLMStitchedSystem:
    """The stitched system of `o` (checked by `check_options`) over the run's index A and DPR. An `hf:` folder
    `train stitched` wrote (its stitched.json) is asked in its trained layout, with its own k unless `o.n_docs`."""
    from lewisrag.index import open_retriever
    from lewisrag.index.store import check_depth
    from lewisrag.training.stitched_train import SETTINGS_FILE, read_settings

    trained = o.kind == "hf" and (Path(o.target) / SETTINGS_FILE).is_file()
    if trained:  # read before the model loads: a damaged file is one line naming its field
        layout = read_settings(o.target)
        settings = replace(layout, k=o.n_docs or layout.k)
    else:
        settings = prompt_settings(o.n_docs or run_k(run))
    if o.kind == "chat":
        key = os.environ.get(o.api_key_env, "")
        client = ChatClient(o.base_url or "", o.target, key, max_workers=o.concurrency,
                            timeout=o.timeout, max_retries=o.max_retries, key_hint="the variable --api-key-env names")
        # the variable is named only when it holds a key: an unset one may be a key pasted as its name
        names = {"key": f"${o.api_key_env}" if key or o.api_key_env == DEFAULT_KEY_ENV else "--api-key-env",
                 "model": "--stitched-generator", "url": o.base_url_from}
        answers = ChatAnswers(client, DiskCache(o.cache_dir or DEFAULT_CACHE_DIR, "answers"), names=names)
        info = {"generator": o.spec, "kind": "chat", "model": o.target, "timeout_s": o.timeout, "max_retries": o.max_retries}
    else:
        from lewisrag.rag_model.stitched import HFGenerator

        from lewisrag.data.threads import resolve_device

        # no max_input_tokens: the model's own positions (HFGenerator's default), not a fixed 1024
        answers = HFAnswers(HFGenerator.from_pretrained(o.target, device=resolve_device(device), max_new_tokens=max_new_tokens),
                            path=o.target, as_trained=trained)
        check_prompts(answers, o.target)
        info = {"generator": o.spec, "kind": "hf", "path": o.target, "chat_template": answers.chat_template,
                "max_new_tokens": max_new_tokens, "dtype": str(answers.generator.model.dtype).removeprefix("torch.")}
        if trained:  # the layout it was trained on, from the file that says so
            info.update(trained_settings=str(Path(o.target) / SETTINGS_FILE), layout=asdict(settings))
    retriever = open_retriever(run / "index_a", run / "dpr")
    check_depth(settings.k, len(retriever.index.passages))
    return LLMStitchedSystem(retriever, answers, settings, info)
