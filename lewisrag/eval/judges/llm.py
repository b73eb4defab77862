"""`LLMJudge`: support verdicts from an OpenAI-compatible chat-completions endpoint.

Statements that share a premise go out together in one request asking for `{"verdicts": [{"id": 1,
"label": "entailment", "reason": "..."}]}` (entailment, neutral or contradiction, RAGChecker's
checker labels; supported iff entailment), so the faithfulness of one answer costs one call (ragas
makes two). A verdict that gives only `"supported": true|false` keeps that binary verdict with no
label; an unknown label (anything but one label word: `base.parse_label`), a `supported` that is not
a JSON boolean, or a label and a `supported` that disagree, is a malformed verdict (undecided, with
the reason). A reply with a verdict for an id outside 1..n, or two for one id, has lost the
numbering: every statement of its batch is undecided, and none of it is cached. Requests run on a
thread pool of `max_workers`, a semaphore holds every request in flight to that bound, transient
faults (resets, timeouts, 429, 5xx, malformed bodies) are retried with bounded exponential backoff
and jitter (all of which `lewisrag.chat_client.ChatClient` does), and `usage` token counts are
summed into a cost estimate. A request that fails for good becomes Verdict(None, reason) or a
JudgeError, never a crash. After a failure every request would repeat (HTTP 401/403, 404, a
redirect) the client sends nothing more: the remaining requests fail at once with the same reason,
and `run_error` gives the one-line error a command ends with (naming the base URL, never the key),
as it does when no request got a reply.

`generate_questions` asks for questions the answer answers, each with its own noncommittal flag (ragas'
answer relevancy generates one question and flag at a time and scores 0 only when every flag is set);
an item without a question string or a boolean flag makes the reply malformed.

`extract_claims` asks for RAGChecker-style claims (RefChecker's triplet extraction: the text read as
(subject, predicate, object) triplets, each written back as one short sentence), for the claim-level
diagnostics when records carry no claims (`--claim-extractor llm`).

Decided verdicts are cached on disk under sha256(judge name, model, params, prompt version, verdicts
version, premise, hypothesis), with their three-way label (null when the reply gave none); undecided
ones are not, so the next run asks again. Verdicts cached under an earlier prompt or verdicts
version (`VERDICTS_VERSION`: how a reply is read) have other keys and are never read, nor are
questions cached under an earlier `QUESTIONS_VERSION` (one flag per answer), nor statements and
claims under an earlier `EXTRACTION_VERSION`; a cached entry without a "label" reads as unlabelled,
one whose label is unknown or disagrees with its binary verdict as a miss. Claims are cached once
their reply parses. The API key is sent in the Authorization header only: it is in no cache key,
fingerprint, reason or result. Whatever the endpoint says is scrubbed of it twice: by the client on
the reply's content, error bodies and exception messages, and here on every string decoded from the
content's JSON, since JSON can spell the key with \\u escapes. Reasons and error text lose any
Authorization/Bearer credential too; statements, claims and questions lose the key alone, since they
are judged as the answer wrote them ("Authorization: Bearer demo-token-123" is what it says, not a
credential). Cache hits are scrubbed too, for caches written before scrubbing existed.
"""

from __future__ import annotations

import json
import os
import re
import threading
import unicodedata

from lewisrag.chat_client import MAX_WORKERS, ChatClient, ChatError, key_problem, map_in_threads, url_problem
from lewisrag.data.io import InputError
from lewisrag.eval.judges.base import DEFAULT_CACHE_DIR, LABELS, DiskCache, Verdict, digest, parse_label

# Bump whenever a prompt below or the cached layout changes: it changes scores and cache keys.
# 2: three-way labels (entailment / neutral / contradiction) and claim extraction.
PROMPT_VERSION = "lewisrag-judge-2"
# Bump whenever the reading of a verdicts reply changes (parse_verdicts, _verdict, base.parse_label):
# the same reply then gives other verdicts, so this is in the fingerprint and in the verdicts' cache
# keys, and verdicts read by the old rules are neither reused nor compared as the same judge's. Its
# own number, not PROMPT_VERSION's: the prompts did not change, and the decompose, claims and
# questions replies, read as before, keep their cache.
# 2: strict replies. Before (unnumbered) "entailment|neutral|contradiction" or "Entailment: no" read
# as entailment, "supported": "false" beside it as supported, ids outside 1..n were dropped (verdicts
# landing on the wrong statements) and the last of two verdicts for one id won; all of it cached.
# 3: a reply with a closed <think> block is searched after its last </think> only (a draft verdict inside
# the thinking was read, and cached, when the JSON after it did not parse), and a label keeps its CJK
# punctuation and quotes out ("entailment。", "“entailment”" were malformed).
# 4: a reply that is not JSON is read only where every verdicts object in it agrees (a draft then a
# correction, "Draft: {...} Final: {...}", gave the draft, cached); a label may be Chinese (蕴含, 中立, 矛盾),
# full-width or in bold, and keys in any case ("Verdicts", "Label", "ID"): all were undecided; a
# "reason": null is "", not "None".
# 5: a <think> left open (a reply cut off while thinking) is no answer: the draft inside it was read, and
# cached; and a statement's whitespace runs, line breaks included, are one space in the numbered listing
# ("1. Login needs:\na password" read as two statements, the verdicts after it on the wrong ones).
VERDICTS_VERSION = "lewisrag-verdicts-5"
# Bump whenever SYSTEM_QUESTIONS, the answer text it is sent, or the reading of its reply (`_questions`)
# changes: in the fingerprint and the questions' cache keys, as VERDICTS_VERSION is for verdicts (the
# other prompts keep their cache).
# 2: one noncommittal flag per question; before, one flag for the whole answer zeroed its relevancy.
# 3: read after the last </think> (as VERDICTS_VERSION 3), and only the key redacted (as EXTRACTION_VERSION 2).
# 4: sent the answer's text without its [n] markers and footnote lines (`evaluator.answer_text`), so a
#    run's relevancy before compares as another judge's.
# 5: as EXTRACTION_VERSION 3: a <think> left open is no answer, objects that disagree are refused, and an
#    empty list for an answer with words is a malformed reply (it was cached: the failure was for good).
QUESTIONS_VERSION = "lewisrag-questions-5"
# Bump whenever the reading of a decompose or claims reply changes: in the fingerprint and their cache keys.
# 2: read after the last </think> (as VERDICTS_VERSION 3), and only the API key redacted from the statements and
# claims: an answer's "Authorization: Bearer demo-token" was judged (and cached) as "Authorization: [redacted]".
# 3: a <think> left open is no answer (as VERDICTS_VERSION 5), a reply whose JSON objects read apart ("Format:
# {...} Answer: {...}") is refused, not read as its first, and no statements for a text with words is a
# malformed reply, not cached (a rerun read the cached nothing and asked nothing).
EXTRACTION_VERSION = "lewisrag-extraction-3"

SYSTEM_JUDGE = (
    "You check statements against evidence, using the evidence alone and not your own knowledge. "
    'Label each statement "entailment" if the evidence states it or directly implies it, '
    '"contradiction" if the evidence states or directly implies that it is false, and "neutral" '
    "otherwise (the evidence does not say, or says only part of it). "
    'Reply with JSON only: {"verdicts": [{"id": <statement id>, "label": "entailment"|"neutral"|"contradiction", '
    '"reason": "<one short sentence>"}]}, one verdict per statement.'
)
SYSTEM_CLAIMS = (
    "Extract the claims a text makes, so that each can be checked on its own. First read the text as "
    "a knowledge graph of (subject, predicate, object) triplets, one fact each, none repeating another "
    "or restating it in reverse. Then write each triplet as one short self-contained sentence in the "
    "text's language: resolve pronouns, and keep the conditions, numbers and dates the fact needs "
    '("the API returned 422 on a wrong password", not "the API returned 422"). Opinions, questions, '
    "hedges and refusals are not claims: a text without claims gives an empty list. This is "
    "extraction, not checking: keep a claim whether or not it is true. The question, when given, "
    "only tells what the text is about. Reply with JSON only: "
    '{"claims": [{"triplet": ["<subject>", "<predicate>", "<object>"], "claim": "<sentence>"}]}.'
)
SYSTEM_DECOMPOSE = (
    "Split the text into short atomic statements, each one self-contained fact, keeping its "
    'language. Reply with JSON only: {"statements": ["...", "..."]}.'
)
SYSTEM_QUESTIONS = (
    "Write questions that the given answer answers, in the answer's language. For each question, mark "
    "the answer noncommittal if it answers that question evasively or vaguely (e.g. 'I don't know'). "
    'Reply with JSON only: {"questions": [{"question": "...", "noncommittal": true|false}]}, one item per question.'
)


class JudgeError(Exception):
    """A request that failed for good (after retries); callers record the reason as a NaN."""


_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S | re.I)
_THINK_END = re.compile(r"</think>", re.I)
_THINK_START = re.compile(r"<think>", re.I)


def _whole(text: str):
    try:
        return json.loads(text)
    except RecursionError:  # "[[[[..." nested past the parser's depth
        raise json.JSONDecodeError("nested too deep", text, 0) from None


def _loads(content: str, read=None):
    """The JSON a decompose, claims or questions reply holds: the reply whole when it is JSON, whatever
    its strings hold ("Run ```ls -l```", "the <think> tag"); otherwise its one answer among those
    `_answers` finds, where they agree. `read(answer)` (raising JudgeError) gives what an answer says:
    those it refuses are no answer to compare (an aside {"note": ...}), and those it reads must all say
    the same, or the reply is refused as `parse_verdicts` refuses one ("Format: {...} Answer: {...}", a
    draft then its correction: the first was read, and cached). Raises json.JSONDecodeError when there
    is none (RecursionError, for "[[[[..." nested past the parser's depth, reads as the same), and
    JudgeError for answers that disagree.

    >>> _loads('<think>{"no": 1}</think>Sure! {"verdicts": []} Done.')
    {'verdicts': []}
    >>> _loads('{"statements": ["Run ```ls -l``` to list files.", "The <think> tag is kept."]}')["statements"][0]
    'Run ```ls -l``` to list files.'
    >>> _loads('<think>Maybe {"verdicts": [1]}? No.</think> {"verdicts": [2],}')
    Traceback (most recent call last):
    ...
    json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)
    >>> _loads('Draft: {"statements": ["a"]} Final: {"statements": ["b"]}')
    Traceback (most recent call last):
    ...
    lewisrag.eval.judges.llm.JudgeError: malformed reply: several JSON objects that disagree
    """
    try:
        return _whole(content)
    except json.JSONDecodeError as e:
        error = e
    answers = [a for a in _answers(content) if isinstance(a, dict)]
    if not answers:
        raise error
    readings = {}
    for answer in answers:
        try:
            said = answer if read is None else read(answer)
        except JudgeError:  # not an answer of this kind: the check names what is missing if none is
            continue
        readings[json.dumps(said, sort_keys=True)] = answer
    if len(readings) > 1:
        raise JudgeError("malformed reply: several JSON objects that disagree")
    return next(reversed(readings.values()), answers[-1])  # the last that reads: the model's final word


def _answers(content: str) -> list:
    """Every JSON value a reply may give as its answer. A reply that is JSON is that value alone.
    Otherwise, after its last "</think>" (what the thinking held is no answer, even where the text after
    it does not parse) and with <think> blocks left out: that text whole, the body of each ```json fence,
    and each JSON object in it that no other holds; and in the reply as it came where that finds none
    (a string naming "<think>" cut its object short), though never an answer that starts inside a
    <think> left open: a reply cut off while thinking, or only thinking, has no answer yet (its draft
    was read, and cached). `parse_verdicts` and `_loads` read them all: a model that drafts and then
    corrects itself wrote two answers.

    >>> _answers('Draft: {"verdicts": [1]} then {"verdicts": [2]}. ```json [3] ```')
    [[3], {'verdicts': [1]}, {'verdicts': [2]}]
    >>> _answers('<think>Maybe {"verdicts": [1]}'), _answers('Sure: {"a": "the <think> tag"}')
    ([], [{'a': 'the <think> tag'}])
    """
    try:
        return [_whole(content)]
    except json.JSONDecodeError:
        pass
    closed = None
    for closed in _THINK_END.finditer(content):
        pass
    if closed is not None:
        content = content[closed.end():]
    opened = _THINK_START.search(content)  # after the last "</think>", any "<think>" is left open
    stop = opened.start() if opened else len(content)
    for text in dict.fromkeys((_THINK.sub(" ", content), content)):
        found = []
        for part in (text, *(m[1] for m in _FENCE.finditer(text) if text != content or m.start() < stop)):
            try:
                found.append(_whole(part.strip()))
            except json.JSONDecodeError:
                pass
        found += _objects(text, stop if text == content else len(text))
        if found:
            return found
    return []


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S | re.I)


def _objects(text: str, stop: int) -> list[dict]:
    """The JSON objects of `text` that no other holds and that start before `stop`, in order (64 tries at
    most: each may read to the end)."""
    decoder, found, start = json.JSONDecoder(), [], text.find("{", 0, stop)
    for _ in range(64):
        if start < 0:
            break
        try:
            data, end = decoder.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            start = text.find("{", start + 1, stop)
            continue
        if isinstance(data, dict):
            found.append(data)
        start = text.find("{", end, stop)
    return found


def _folded(obj: dict) -> dict | None:
    """`obj` with its keys in NFKC lower case ("Verdicts", "Label", "ＩＤ"); None where two keys fold to one."""
    out = {unicodedata.normalize("NFKC", k).lower(): v for k, v in obj.items()}
    return out if len(out) == len(obj) else None


def _id(value) -> int | None:
    """A verdict's statement id as an int (1, "1", 1.0), else None: a string of up to nine ASCII
    digits (`str.isdigit` let "²" through to `int`, and 5,000 digits past `int`'s limit: tracebacks).

    >>> _id(2), _id(" 3 "), _id(4.0), _id("²"), _id("7" * 5000), _id(True)
    (2, 3, 4, None, None, None)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return int(value)
    return int(value) if isinstance(value, str) and re.fullmatch(r"\s*[0-9]{1,9}\s*", value) else None


def parse_verdicts(content: str, n: int) -> list[Verdict]:
    """Verdicts for ids 1..n from a reply; anything missing or malformed becomes Verdict(None, why). A
    reply that is not JSON may hold several verdicts objects (`_answers`: a draft and its correction, an
    example and the answer): read where they all agree, undecided where they do not.

    >>> parse_verdicts('{"verdicts": [{"id": 1, "label": "Contradiction", "reason": "it says 500"}]}', 2)
    [Verdict(supported=False, reason='it says 500', label='contradiction'), Verdict(supported=None, reason='no verdict for statement 2 in the reply')]
    >>> parse_verdicts('{"verdicts": [{"id": 1, "supported": true, "reason": "stated"}]}', 1)  # no label: binary only
    [Verdict(supported=True, reason='stated')]
    >>> parse_verdicts("yes", 1)[0].reason
    'malformed reply: not JSON'
    >>> parse_verdicts('{"verdicts": [{"id": 0, "label": "entailment"}, {"id": 1, "label": "neutral"}]}', 2)[1].reason
    'malformed reply: a verdict for statement 0, but the statements are 1..2'
    >>> draft, final = ({"verdicts": [{"id": 1, "label": label}]} for label in ("contradiction", "entailment"))
    >>> parse_verdicts(f"Draft: {json.dumps(draft)} Final: {json.dumps(final)}", 1)
    [Verdict(supported=None, reason='malformed reply: several verdict objects that disagree')]
    """
    answers = _answers(content)
    if not answers:
        return [Verdict(None, "malformed reply: not JSON")] * n
    readings = [_read_verdicts(items, n) for items in map(_verdicts_list, answers) if items is not None]
    if not readings:
        return [Verdict(None, "malformed reply: no 'verdicts' list")] * n
    decided = [[(v.supported, v.label) for v in r] for r in readings]
    if any(d != decided[0] for d in decided):
        return [Verdict(None, "malformed reply: several verdict objects that disagree")] * n
    return readings[-1]  # the last: where they agree, its reasons are the model's final word


def _verdicts_list(answer) -> list | None:
    """The verdict items of one answer: its "verdicts" list (the key in any case), or the answer itself
    when it is a bare list; None when it holds none."""
    if isinstance(answer, dict):
        answer = (_folded(answer) or {}).get("verdicts")
    return answer if isinstance(answer, list) else None


def _read_verdicts(items: list, n: int) -> list[Verdict]:
    """Verdicts for ids 1..n from one answer's items."""
    found: dict[int, Verdict] = {}
    for item in items:
        item = _folded(item) if isinstance(item, dict) else None  # "ID", "Label": read; two "id"s: no verdict
        if item is None or (i := _id(item.get("id"))) is None:
            continue
        # An id outside 1..n or given twice means the reply's numbering cannot be trusted (numbered from
        # 0, or 1, 1, 2 for three statements): its other verdicts may sit on the wrong statements, so
        # none of the batch is decided, and nothing of it cached.
        if not 1 <= i <= n:
            return [Verdict(None, f"malformed reply: a verdict for statement {i}, but the statements are 1..{n}")] * n
        if i in found:
            return [Verdict(None, f"malformed reply: more than one verdict for statement {i}")] * n
        found[i] = _verdict(item)
    return [found.get(i, Verdict(None, f"no verdict for statement {i} in the reply")) for i in range(1, n + 1)]


def _verdict(item: dict) -> Verdict:
    """One reply item: the label decides; `supported` alone gives a binary verdict; both must agree,
    and a `supported` given must be a JSON boolean ("false", a string, is no answer to read either way).

    >>> _verdict({"label": "entailment", "supported": "false"}).reason
    "malformed verdict: supported='false' (expected true or false)"
    """
    raw, sup, reason = item.get("label"), item.get("supported"), item.get("reason")
    reason = "" if reason is None else str(reason)  # "reason": null is no reason, not the word "None"
    if "supported" in item and not isinstance(sup, bool):
        return Verdict(None, f"malformed verdict: supported={sup!r} (expected true or false)")
    if raw is None:
        if isinstance(sup, bool):
            return Verdict(sup, reason)
        return Verdict(None, f"malformed verdict: no label, supported={sup!r}")
    label = parse_label(raw)
    if label is None:
        return Verdict(None, f"malformed verdict: label={raw!r} (expected one of {', '.join(LABELS)})")
    if isinstance(sup, bool) and sup is not (label == "entailment"):
        return Verdict(None, f"malformed verdict: label={label!r} but supported={sup!r}")
    return Verdict(label == "entailment", reason, label)


def parse_claims(data) -> list[str]:
    """The claims of an extraction reply (decoded JSON): each item's "claim" sentence, else its
    "triplet" joined with spaces (as RefChecker renders a triplet), else a plain string; blanks and
    repeats dropped. Raises JudgeError on anything else (an empty list is a text without claims).

    >>> parse_claims({"claims": [{"triplet": ["login", "returns", "422"], "claim": "Login returns 422."},
    ...                          {"triplet": ["account", "locks for", "15 minutes"]}, "Login returns 422."]})
    ['Login returns 422.', 'account locks for 15 minutes']
    """
    items = data.get("claims") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise JudgeError("malformed reply: no 'claims' list")
    out = []
    for i, item in enumerate(items, start=1):
        if isinstance(item, dict):
            claim, triplet = item.get("claim"), item.get("triplet")
            if isinstance(claim, str) and claim.strip():
                item = claim
            elif isinstance(triplet, list) and len(triplet) == 3 and all(isinstance(t, str) and t.strip() for t in triplet):
                item = " ".join(t.strip() for t in triplet)
        if not isinstance(item, str):
            raise JudgeError(f"malformed reply: claim {i} has neither a 'claim' sentence nor a 'triplet' of three strings")
        out.append(item.strip())
    return list(dict.fromkeys(c for c in out if c))


class LLMJudge:
    """Judge, decompose, extract claims and generate questions through `POST {base_url}/chat/completions`."""

    name = "llm"
    prompt_version = PROMPT_VERSION
    verdicts_version = VERDICTS_VERSION
    questions_version = QUESTIONS_VERSION
    extraction_version = EXTRACTION_VERSION

    def __init__(
        self,
        base_url: str | None = None,
        model: str = "",
        api_key: str | None = None,
        *,
        cache_dir: str | os.PathLike | None = None,
        max_workers: int = 4,
        batch_size: int = 16,
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        seed: int | None = None,
        temperature: float = 0.0,
        json_mode: bool = True,
        price_in: float = 0.0,
        price_out: float = 0.0,
    ):
        source = "--llm-base-url" if base_url else "$LEWISRAG_LLM_BASE_URL"  # the flag of eval answers, bughunt, calibrate
        base_url = base_url or os.environ.get("LEWISRAG_LLM_BASE_URL")
        if not base_url:
            raise InputError("--judge", "the llm judge needs a base URL: give --llm-base-url or set "
                             "LEWISRAG_LLM_BASE_URL")
        if problem := url_problem(base_url):  # "xx" or "http://[::1/v1" was a traceback, ftp:// retried every call
            # user info may hold a password, a query a key (?api-key=...): neither is ever printed
            shown = re.sub(r"[?#].*", "?...", re.sub(r"//.*@", "//...@", base_url, flags=re.S), flags=re.S)
            raise InputError(source, f"{problem}, got {shown!r}")  # repr: a line break stays on the line
        if not model:
            raise InputError("--judge", "the llm judge needs a model name (llm:MODEL)")
        api_key = os.environ.get("LEWISRAG_LLM_API_KEY", "") if api_key is None else api_key
        if problem := key_problem(api_key):  # else every request raised, the key in its traceback
            raise InputError("$LEWISRAG_LLM_API_KEY", f"the API key {problem}")
        if max_workers < 1 or batch_size < 1:
            raise ValueError("max_workers and batch_size must be at least 1")
        if max_workers > MAX_WORKERS:  # as compare's --concurrency
            raise InputError("--concurrency", f"must be between 1 and {MAX_WORKERS}")
        self.model = model  # the base URL is not in the fingerprint: one model may sit behind many URLs
        self._names = {"key": "$LEWISRAG_LLM_API_KEY", "model": "--judge", "url": source}  # what run_error names as the fix
        # requests in flight, timeouts, retries and backoff are the client's (lewisrag.chat_client)
        self.client = ChatClient(base_url, model, api_key, max_workers=max_workers, timeout=timeout, max_retries=max_retries,
                                 backoff=backoff, max_backoff=max_backoff, seed=seed, temperature=temperature)
        self.cache = DiskCache(cache_dir or DEFAULT_CACHE_DIR)
        self.max_workers = max_workers  # requests in flight at most, across all calls on this judge
        self.batch_size = batch_size  # statements per request
        # 0, 0.0 and -0.0 are one setting: one fingerprint, one cache key (json writes -0.0 as "-0.0")
        self.temperature = float(temperature) + 0.0
        self.json_mode = json_mode  # send response_format json_object (some servers reject it)
        self.price_in, self.price_out = price_in, price_out  # currency per prompt / completion token
        self._lock = threading.Lock()
        self._cache_hits = 0

    @property
    def params(self) -> dict:
        return {"temperature": self.temperature, "batch_size": self.batch_size, "json_mode": self.json_mode}

    @property
    def usage(self) -> dict:
        """Calls, retries, failures and tokens of the endpoint, and the cache hits that saved calls."""
        return {**self.client.usage, "cache_hits": self._cache_hits}

    @property
    def fingerprint(self) -> str:
        return digest("LLMJudge", self.model, self.params, PROMPT_VERSION, VERDICTS_VERSION, QUESTIONS_VERSION,
                      EXTRACTION_VERSION)

    @property
    def cost(self) -> float:
        return self.usage["prompt_tokens"] * self.price_in + self.usage["completion_tokens"] * self.price_out

    def run_error(self) -> InputError | None:
        """The one-line error (exit 2) a command ends with instead of writing its results: the endpoint
        refused in a way every request would repeat, or no request got a reply and no verdict came
        from the cache (`ChatClient.run_error`); None when something was judged."""
        return self.client.run_error(**self._names, served=self._cache_hits, json_mode=self.json_mode)

    def describe(self) -> dict:
        """This judge's settings, usage and cost, for logs (no URL, no key); results.json records
        the same through `evaluator.judge_info`."""
        return {"model": self.model, "params": self.params, "prompt_version": PROMPT_VERSION,
                "verdicts_version": VERDICTS_VERSION, "questions_version": QUESTIONS_VERSION,
                "extraction_version": EXTRACTION_VERSION, "usage": dict(self.usage), "cost": self.cost}

    # -- protocol ---------------------------------------------------------------------------

    def judge(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        out: list[Verdict | None] = [None] * len(pairs)
        todo: dict[str, list[int]] = {}  # premise -> positions still to judge
        for i, (premise, hypothesis) in enumerate(pairs):
            hit = self._cached_verdict(self.cache.get(self._key_for("judge", premise, hypothesis)))
            if hit is not None:
                out[i] = hit
                self._count(cache_hits=1)
            else:
                todo.setdefault(premise, []).append(i)
        batches = [(p, idx[s : s + self.batch_size]) for p, idx in todo.items() for s in range(0, len(idx), self.batch_size)]

        def batch(premise: str, idx: list[int]) -> None:  # cached as it comes: an interrupted run keeps what it paid for
            for i, v in zip(idx, self._judge_batch(premise, [pairs[i][1] for i in idx])):
                out[i] = v
                if v.supported is not None:
                    self.cache.put(self._key_for("judge", premise, pairs[i][1]),
                                   {"supported": v.supported, "reason": v.reason, "label": v.label})

        map_in_threads(lambda b: batch(*b), batches, self.max_workers)
        return out  # type: ignore[return-value]

    def decompose(self, text: str) -> list[str]:
        """Atomic statements of `text` (`--splitter atomic`: the whole answer, once); raises
        JudgeError on failure. Cached once it parses."""
        return _statements(self._ask_json("decompose", SYSTEM_DECOMPOSE, text, "", check=_statements,
                                          keep=lambda data: _worth_keeping(_statements(data), text)))

    def generate_questions(self, answer: str, n: int = 3) -> tuple[list[str], list[bool]]:
        """Up to `n` questions the answer answers, and for each whether the answer is noncommittal
        about it (answer relevancy); raises JudgeError on failure. Cached once it parses."""
        data = self._ask_json("questions", SYSTEM_QUESTIONS, f"Write {n} questions.\n\nAnswer:\n{answer}", str(n),
                              check=_questions, keep=lambda data: _worth_keeping(_questions(data)[0], answer))
        qs, noncommittal = _questions(data)
        return qs[:n], noncommittal[:n]

    def extract_claims(self, text: str, question: str = "") -> list[str]:
        """RAGChecker-style claims of `text` (triplets written as short sentences; `parse_claims`),
        the question telling what it answers; raises JudgeError on failure. Cached once it parses."""
        user = (f"Question:\n{question}\n\n" if question.strip() else "") + f"Text:\n{text}"
        return parse_claims(self._ask_json("claims", SYSTEM_CLAIMS, user, "", check=parse_claims))

    # -- internals --------------------------------------------------------------------------

    def _cached_verdict(self, hit) -> Verdict | None:
        """A cached verdict, or None (a miss) when the entry is absent or does not read as one."""
        if not isinstance(hit, dict) or not isinstance(hit.get("supported"), bool):
            return None
        label = hit.get("label")  # absent: an entry without labels reads as unlabelled, never guessed
        if label is not None and (label not in LABELS or hit["supported"] is not (label == "entailment")):
            return None
        return Verdict(hit["supported"], self.client.scrub(str(hit.get("reason", ""))), label)

    def _key_for(self, task: str, a: str, b: str) -> str:
        # each task's key also carries how its reply is read
        versions = {"judge": [VERDICTS_VERSION], "questions": [QUESTIONS_VERSION], "decompose": [EXTRACTION_VERSION],
                    "claims": [EXTRACTION_VERSION]}.get(task, [])
        return digest(self.name, self.model, self.params, PROMPT_VERSION, *versions, task, a, b)

    def _count(self, cache_hits: int) -> None:
        with self._lock:
            self._cache_hits += cache_hits

    def _judge_batch(self, premise: str, hypotheses: list[str]) -> list[Verdict]:
        # one line per statement: a line break inside one ("Login needs:\na password") read as another
        # statement, and the verdicts after it landed on the wrong statements
        listing = "\n".join(f"{i}. {' '.join(h.split())}" for i, h in enumerate(hypotheses, start=1))
        user = f"Evidence:\n{premise}\n\nStatements:\n{listing}"
        try:
            content = self._chat(SYSTEM_JUDGE, user)
        except JudgeError as e:
            return [Verdict(None, str(e))] * len(hypotheses)
        return [Verdict(v.supported, self.client.scrub(v.reason), v.label) for v in parse_verdicts(content, len(hypotheses))]

    def _ask_json(self, task: str, system: str, user: str, extra: str, check=None, keep=None) -> dict:
        """The reply's JSON object, from the cache or the endpoint; `check(data)` (raising JudgeError)
        runs before a reply is cached, so a malformed one is asked again next time; a reply `keep(data)`
        says may be a failure (no statements for a text with words) is returned but not cached. Statements, claims
        and questions are judged or embedded as they came: only the key is redacted from them
        (`ChatClient.scrub_key`), not an "Authorization: Bearer demo-token" the answer quotes."""
        key = self._key_for(task, user, extra)
        hit = self.cache.get(key)
        if isinstance(hit, dict) and _passes(check, hit):  # an entry that does not parse is a miss
            self._count(cache_hits=1)
            return self._scrubbed(hit)
        try:
            data = self._scrubbed(_loads(self._chat(system, user, key_only=True), check))
        except json.JSONDecodeError:
            raise JudgeError("malformed reply: not JSON") from None
        if not isinstance(data, dict):
            raise JudgeError("malformed reply: not a JSON object")
        if check is not None:
            check(data)
        if keep is None or keep(data):
            self.cache.put(key, data)
        return data

    def _scrubbed(self, obj):
        """`obj` (decoded JSON) with the key redacted from every string (`ChatClient.scrub_key`)."""
        if isinstance(obj, str):
            return self.client.scrub_key(obj)
        if isinstance(obj, list):
            return [self._scrubbed(x) for x in obj]
        if isinstance(obj, dict):
            return {self.client.scrub_key(k): self._scrubbed(v) for k, v in obj.items()}
        return obj

    def _chat(self, system: str, user: str, key_only: bool = False) -> str:
        try:
            return self.client.complete(system, user, json_mode=self.json_mode, key_only=key_only)
        except ChatError as e:
            raise JudgeError(str(e)) from None

    def __repr__(self) -> str:  # never show the key
        return f"LLMJudge(model={self.model!r}, max_workers={self.max_workers}, batch_size={self.batch_size})"


def _statements(data: dict) -> list[str]:
    """The statements of a decompose reply; raises JudgeError when it has no list of strings.

    >>> _statements({"statements": [" a ", ""]}), _statements({"statements": []})
    (['a'], [])
    """
    items = data.get("statements")
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise JudgeError("malformed reply: no 'statements' list of strings")
    return [s.strip() for s in items if s.strip()]


def _questions(data: dict) -> tuple[list[str], list[bool]]:
    """The questions of a questions reply and each one's noncommittal flag; raises JudgeError when malformed.

    A flag is a JSON boolean, or 0/1 as ragas writes it; anything else ("false", 2, one flag for the
    whole reply) is no flag to read either way.

    >>> _questions({"questions": [{"question": "What does login return?", "noncommittal": False},
    ...                           {"question": "Is it 422?", "noncommittal": 1}]})
    (['What does login return?', 'Is it 422?'], [False, True])
    """
    items = data.get("questions")
    if not isinstance(items, list):
        raise JudgeError("malformed reply: no 'questions' list")
    qs, flags = [], []
    for i, item in enumerate(items, start=1):
        q, nc = (item.get("question"), item.get("noncommittal")) if isinstance(item, dict) else (None, None)
        if not isinstance(q, str) or not (isinstance(nc, bool) or (type(nc) is int and nc in (0, 1))):
            raise JudgeError(f'malformed reply: question {i} is not {{"question": <string>, "noncommittal": true|false}}')
        qs.append(q)
        flags.append(bool(nc))
    return qs, flags


def _worth_keeping(items: list, text: str) -> bool:
    """Whether a reply's `items` (statements, questions) may be cached: not none for a text with words (a
    letter or a digit). None is the right reply for a refusal or a pleasantry, and a failure of a model
    that answered with nothing for a claim; cached, that failure was read by every later run, which never
    asked again, so it is returned (the evaluator tells the two apart: DECOMPOSE_FAILED where the answer
    asserts something) and asked again next run. A text without words has none to give: cached."""
    return bool(items) or not any(c.isalnum() for c in text)


def _passes(check, data: dict) -> bool:
    if check is None:
        return True
    try:
        check(data)
    except JudgeError:
        return False
    return True
