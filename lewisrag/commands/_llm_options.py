"""The llm judge's endpoint flags, shared by `eval answers`, `eval bughunt` and `calibrate`: one
definition of each option (a function per option, as a typer default is one object per command), the
check that refuses them with another judge and range-checks the temperature, the timeout and the
retries, and what a run records of the settings. Temperature and JSON mode are in the judge's
fingerprint and cache keys too (`LLMJudge.params`), so verdicts made under other settings are neither
reused nor compared as the same judge's; the timeout and the retries are not (they change how long a
request may take, not its verdicts). `--timeout` and `--max-retries` are compare's flags of the same
names, for its chat:MODEL generator, with the same defaults and ranges."""

from __future__ import annotations

import typer
from typer.models import OptionInfo

from lewisrag.commands import _ui
from lewisrag.data.io import InputError

LLM_ONLY = "applies to an llm judge (--judge llm:MODEL)"
# the parameters of the options below, by name: refused, when given, with a judge that is not llm:MODEL
PARAMS = ("cache_dir", "concurrency", "llm_base_url", "llm_temperature", "timeout", "max_retries")
MAX_TIMEOUT_S, MAX_RETRIES = 86_400, 100  # as compare's: 1e300 s overflowed the clock, 99,999,999,999 retries never ended


def cache_dir() -> OptionInfo:
    return typer.Option(None, "--cache-dir", help="Judge cache directory (llm judge; default ~/.cache/lewisrag/judge).")


def concurrency() -> OptionInfo:
    return typer.Option(4, "--concurrency", min=1, help="LLM requests in flight at most.")


def base_url() -> OptionInfo:
    return typer.Option(None, "--llm-base-url", help="OpenAI-compatible base URL, e.g. http://localhost:8000/v1 (default: "
                        "$LEWISRAG_LLM_BASE_URL).")


def temperature() -> OptionInfo:
    return typer.Option(0.0, "--llm-temperature", help="The llm judge's sampling temperature, between 0 and 2 "
                        "(in its fingerprint and cache keys: verdicts cached at another temperature are not reused).")


def timeout() -> OptionInfo:
    return typer.Option(60.0, "--timeout", help="llm judge: seconds one attempt of a request may take, from connecting "
                        "to the reply's last byte (headers included); then it is retried as a timeout.")


def max_retries() -> OptionInfo:
    return typer.Option(4, "--max-retries", help="llm judge: extra tries of a request after a transient fault "
                        "(timeout, reset, 429, 5xx, malformed reply), with jittered exponential backoff. A request that "
                        "spends them on timeouts, resets, 429 or 5xx before any request was answered ends the run (exit 2).")


def json_mode() -> OptionInfo:
    return typer.Option(True, "--llm-json-mode/--no-llm-json-mode", help="Ask the llm judge's endpoint for a JSON "
                        "object (response_format json_object); --no-llm-json-mode for servers that reject it "
                        "(in the judge's fingerprint and cache keys).")


def is_llm(judge: str | None) -> bool:
    """Whether the --judge spec is an llm judge's (None: a command's own default judge, never one)."""
    return (judge or "").startswith("llm:")


def check(ctx: typer.Context, judge: str | None, temperature: float, json_mode: bool, also: tuple[str, ...] = (),
          timeout: float = 60.0, max_retries: int = 4) -> None:
    """One line, exit 2, for an llm flag given with a judge that is not llm:MODEL (`also`: the command's
    other parameters that apply to an llm judge alone), and for a temperature outside 0..2, a timeout
    outside (0, 86400] seconds or retries outside 0..100."""
    if not is_llm(judge):  # never ignored in silence
        _ui.refuse_given(ctx, (*PARAMS, *also), LLM_ONLY)
        if not json_mode:  # refuse_given would name the flag's first spelling, --llm-json-mode
            raise InputError("--no-llm-json-mode", LLM_ONLY)
    if not 0.0 <= temperature <= 2.0:  # NaN and inf too
        raise InputError("--llm-temperature", f"must be between 0 and 2, got {temperature}")
    if not 0 < timeout <= MAX_TIMEOUT_S:  # NaN too
        raise InputError("--timeout", f"must be between 0 and {MAX_TIMEOUT_S} seconds, got {timeout}")
    if not 0 <= max_retries <= MAX_RETRIES:
        raise InputError("--max-retries", f"must be between 0 and {MAX_RETRIES}, got {max_retries}")


def recorded(judge: str | None, temperature: float, json_mode: bool, timeout: float = 60.0, max_retries: int = 4) -> dict:
    """What a run's config records of the settings (temperature and JSON mode are in the llm judge's
    fingerprint too; the timeout and retries, as compare's generator records them, are not); nothing
    for another judge, which has none of them."""
    if not is_llm(judge):
        return {}
    return {"llm_temperature": temperature, "llm_json_mode": json_mode, "llm_timeout_s": timeout,
            "llm_max_retries": max_retries}
