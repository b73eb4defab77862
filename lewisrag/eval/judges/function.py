"""`FunctionJudge`: any Python rule `fn(premise, hypothesis) -> bool | None` as a judge."""

from __future__ import annotations

from collections.abc import Callable

from lewisrag.eval.judges.base import Verdict, digest
from lewisrag.eval.stats.checks import is_mark


class FunctionJudge:
    """Wrap `fn(premise, hypothesis) -> bool | None` as a judge: None is an undecided verdict, any
    value but True, False (numpy's too, or the ints 1 and 0) or None a TypeError.

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
            if v is None:
                out.append(Verdict(None, "function returned None"))
            elif is_mark(v):  # True or False (numpy's too), or 1 or 0: ALCE's NLI check returns ints
                out.append(Verdict(bool(v)))
            else:  # bool() of "no", a score of 0.3 or a match object is True: every statement would be supported
                raise TypeError(f"FunctionJudge {self.label}: fn must return True, False or None, got {v!r}")
        return out

