"""`lewisrag compare`: one scorecard for RAG-Token, RAG-Sequence and prompt-stitching RAG."""

from __future__ import annotations

from pathlib import Path

import typer

from lewisrag.commands import _ui
from lewisrag.eval.reports.i18n import LANG_HELP

# a backslash before [ keeps rich's markup from reading [n] as a tag in --help
GENERATOR_HELP = ("The stitched system's generator: the run's trained one (default), chat:MODEL (an OpenAI-compatible "
                  "chat-completions endpoint at --llm-base-url) or hf:PATH (a local transformers causal or seq2seq LM folder). "
                  "Either reads the run's top --n-docs passages, numbered \\[1] to \\[k], with the question and is asked for "
                  "the short answer citing its passage, e.g. 'Ana Kel \\[2]'; the reply is parsed to one line, citations kept. "
                  "An hf:PATH folder `lewisrag train stitched` wrote (it holds stitched.json) reads its prompts as it was "
                  "trained, in that file's layout with its own k (unless --n-docs) and no instruction. hf:PATH loads in float32. "
                  "An answer that still fails after the retries is scored null with its reason; an endpoint that refuses "
                  "every request (HTTP 401/403, 404, a redirect) ends the run at its first refusal, and a generator that "
                  "answers none of the questions ends it too: one line naming the endpoint, exit 2, nothing written. Recorded as "
                  "generators.stitched in results.json; the prompt and parsing: README, 'Comparing with an LLM'.")


def compare(
    ctx: typer.Context,
    run: Path = typer.Option(..., "--run", help="A `lewisrag reproduce` run folder with trained rag_token, rag_sequence and "
                             "stitched systems (with --stitched-generator, stitched needs only the run's index_a and dpr)."),
    questions: Path = typer.Option(None, "--questions", help="Questions for the layered evaluation (default: RUN/world/eval.jsonl)."),
    old_data: Path = typer.Option(None, "--data", hidden=True, help="Deprecated: --questions."),
    qa_fields: str = typer.Option(None, "--qa-fields", help=_ui.QA_FIELDS_HELP + " Applies to --questions."),
    systems: str = typer.Option("rag_token,rag_sequence,stitched", "--systems", help="Comma-separated systems to score."),
    out: Path = typer.Option(None, "--out", help="Folder for results.json, report.md, report.html, position.png (default: RUN/compare)."),
    position_questions: int = typer.Option(100, "--position-questions", min=0,
                                           help="Test questions in the position probe (gold passage moved to each input position); 0 skips it."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even if it holds files that are not a "
                                   "comparison lewisrag wrote (replaced once every file is written); never a folder lewisrag did not make."),
    as_json: bool = typer.Option(False, "--json", help="Print the scorecard as one JSON object instead of a table."),
    stitched_generator: str = typer.Option(None, "--stitched-generator", metavar="chat:MODEL|hf:PATH", help=GENERATOR_HELP),
    llm_base_url: str = typer.Option(None, "--llm-base-url", help="chat:MODEL's OpenAI-compatible base URL, e.g. "
                                     "http://localhost:8000/v1 (default: $LEWISRAG_LLM_BASE_URL); POST BASE_URL/chat/completions."),
    old_base_url: str = typer.Option(None, "--base-url", hidden=True, help="Deprecated: --llm-base-url."),
    api_key_env: str = typer.Option("LEWISRAG_LLM_API_KEY", "--api-key-env", metavar="NAME",
                                    help="The environment variable holding chat:MODEL's API key (sent as a Bearer header, "
                                    "written nowhere); unset means no key, as local servers need."),
    timeout: float = typer.Option(60.0, "--timeout", help="chat:MODEL: seconds one attempt of a request may take, from "
                                  "connecting to the reply's last byte (headers included); then it is retried as a timeout."),
    max_retries: int = typer.Option(4, "--max-retries", help="chat:MODEL: extra tries of a request after a transient fault "
                                    "(timeout, reset, 429, 5xx, malformed reply), with jittered exponential backoff."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="chat:MODEL: requests in flight at most."),
    cache_dir: Path = typer.Option(None, "--cache-dir", help="chat:MODEL: folder of the answer cache answers.sqlite, keyed by "
                                   "model and prompt; reruns ask the endpoint only what failed or changed "
                                   "(default ~/.cache/lewisrag/answers). The base URL is not in the key: two "
                                   "endpoints serving the same model name share cached answers, so use a "
                                   "separate --cache-dir per endpoint."),
    n_docs: int = typer.Option(None, "--n-docs", help="--stitched-generator: passages per prompt "
                               "(default: a `train stitched` folder's own k, else the run's stitched k, else 5)."),
    max_new_tokens: int = typer.Option(None, "--max-new-tokens", min=1, help="hf:PATH: tokens an answer may take "
                                       "(default: the run's answer length + 8); an answer cut off there fails, scored "
                                       "null. Raise it for a model that reasons before answering."),
    device: str = typer.Option("auto", "--device", help="Where the run's trained models and an hf:PATH "
                               "generator answer: auto (a GPU when one is visible), cpu or cuda[:N]."),
    lang: str = typer.Option("en", "--lang", help=LANG_HELP + " The table printed here follows it too; --json prints the "
                             "same JSON in either language."),
) -> None:
    """Answer the same questions with every system and print one scorecard: QA, retrieval, layers, citations, cost."""
    # the flags and the run folder are checked before torch and transformers load: a typo is refused in a moment
    from lewisrag.data.io import InputError, given_once
    from lewisrag.data.threads import check_device_flag
    from lewisrag.eval.reports.i18n import check_lang, messages

    check_lang(lang)
    check_device_flag(device)
    data = _ui.renamed(ctx, "questions", "old_data", "--questions", "--data")
    if data is None:  # else the mapping was applied to the run's own eval.jsonl, and blamed it for lacking the fields
        _ui.refuse_given(ctx, ("qa_fields",), "only applies with --questions (the run's own questions are in lewisrag's schema)")
    fields = _ui.qa_fields(qa_fields)
    names = [s.strip() for s in systems.split(",") if s.strip()]
    given_once("--systems", names)
    chat_only = ("llm_base_url", "old_base_url", "api_key_env", "timeout", "max_retries", "concurrency", "cache_dir")
    if stitched_generator is None:  # never ignored in silence: the user meant an outside generator
        _ui.refuse_given(ctx, (*chat_only, "n_docs", "max_new_tokens"), "only applies with --stitched-generator")
    elif not stitched_generator.startswith("chat:"):
        _ui.refuse_given(ctx, chat_only, "only applies with --stitched-generator chat:MODEL")
    elif set(names) <= {"stitched"}:  # an endpoint answers alone: no model of the run loads
        _ui.refuse_given(ctx, ("device",), "places the run's trained models and an hf: generator; here a chat endpoint "
                         "answers alone")
    if stitched_generator is not None and stitched_generator.startswith("chat:"):
        # the endpoint decides how long a reply may be, and says so when it cut one (finish_reason "length")
        _ui.refuse_given(ctx, ("max_new_tokens",), "only applies with --stitched-generator hf:PATH")
    # after the refusals: an old spelling refused is one line, not a deprecation warning too
    base_url = _ui.renamed(ctx, "llm_base_url", "old_base_url", "--llm-base-url", "--base-url")
    if not run.is_dir():  # before --out, which defaults to RUN/compare and would be blamed for a missing run
        raise InputError(run, "run folder not found" if not run.exists() else "is not a folder; --run takes a "
                         "`lewisrag reproduce` run folder", field="--run")
    from lewisrag.experiments.compare import compare_run, scorecard_rows, system_labels
    from lewisrag.experiments.stitched_llm import GeneratorOptions

    generator = None
    if stitched_generator is not None:
        generator = GeneratorOptions(stitched_generator, base_url, api_key_env, timeout, max_retries, concurrency, cache_dir,
                                     n_docs, max_new_tokens)
    out = out or run / "compare"
    with _ui.progress() as p:
        card = compare_run(run, out, names, data, position_questions, on_progress=_ui.Bars(p), overwrite=overwrite,
                           qa_fields=fields, generator=generator, lang=lang, device=device)
    labels, outside = system_labels(card), card.get("generators") or {}
    if as_json:  # for programs: English row labels, whatever --lang
        header, rows = scorecard_rows(card)
        _ui.print_json({"out": str(out), "systems": header, "labels": labels, "generators": outside,
                        "scorecard": {r[0]: dict(zip(header, r[1:])) for r in rows}})
        return
    t = messages(lang)
    header, rows = scorecard_rows(card, lang)  # the report's row labels
    _ui.out.print(_ui.table(t("cli.cmp.title"), [t("col.metric"), *(labels[n] for n in header)],
                            [[r[0], *("–" if v is None else v for v in r[1:])] for r in rows]))
    for name, g in outside.items():
        usage = t.join(f"{t.get('usage.' + k, k.replace('_', ' '))} {v}" for k, v in g["usage"].items())
        _ui.out.print(t("cli.cmp.generator", name=name, generator=g["generator"], answers=g["answers"],
                        failed=g["failed"], usage=usage))
    _ui.out.print(t("cli.eval.wrote", files=t.join([f"{out}/results.json", "report.md", "report.html"])), soft_wrap=True)
