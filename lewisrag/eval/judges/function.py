"""`FunctionJudge`: any Python rule `fn(premise, hypothesis) -> bool | None` as a judge."""

from __future__ import annotations

from collections.abc import Callable

from lewisrag.eval.judges.base import Verdict, digest


class FunctionJudge:
    """Wrap `fn(premise, hypothesis) -> bool | None` as a judge.

    >>> FunctionJudge(lambda p, h: h in p).judge([("登录返回 422", "422"), ("ok", "toast")])
    [Verdict(supported=True, reason=''), Verdict(supported=False, reason='')]
    """

    name = "function"

    def __init__(self, fn: Callable[[str, str], bool | None], label: str | None = None):
        self.fn = fn
        self.label = label or getattr(fn, "__qualname__", type(fn).__name__)  # names the rule in the fingerprint

    @property
    def fingerprint(self) -> str:
        return digest("FunctionJudge", self.label, {}, "")

    def judge(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        out = []
        for premise, hypothesis in pairs:
            v = self.fn(premise, hypothesis)
            out.append(Verdict(None, "function returned None") if v is None else Verdict(bool(v)))
        return out
