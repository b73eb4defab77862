"""`LexicalJudge`: a deterministic token-support baseline, for English and Chinese alike."""

from __future__ import annotations

import re
import unicodedata

from lewisrag.eval.judges.base import Verdict, digest

_WORD = re.compile(r"[a-z0-9]+(?:[.'][a-z0-9]+)*")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
# Function words carry no claim; leaving them out keeps "the", "是", "的" from propping up a score.
_STOP_EN = frozenset(
    "a an the is are was were be been being of to in on at by for with and or but not no it its this that these "
    "those as from into than then so if do does did has have had will would can could should may might must "
    "there their they he she we you i".split()
)
_STOP_ZH = frozenset("的了是在和与及或也就都而把被对向从之其这那个一有为以")


def content_tokens(text: str) -> list[str]:
    """Lowercased NFKC words and numbers, plus single CJK characters, without function words.

    >>> content_tokens("The API returns HTTP 422.")
    ['api', 'returns', 'http', '422']
    >>> content_tokens("接口返回了 422")
    ['422', '接', '口', '返', '回']
    """
    s = unicodedata.normalize("NFKC", text).lower()
    words = [w for w in _WORD.findall(s) if w not in _STOP_EN]
    chars = [c for c in _CJK.findall(s) if c not in _STOP_ZH]
    # Keep words first, then characters: order only matters for the "missing" list in reasons.
    return words + chars


class LexicalJudge:
    """Supported iff at least `threshold` of the hypothesis' content tokens occur in the premise.

    Content tokens are English/number words and single CJK characters (`content_tokens`); a
    hypothesis with none cannot be judged (Verdict None). A cheap, deterministic floor for a real
    judge: it cannot see negation or paraphrase.

    >>> LexicalJudge().judge([("Login fails with HTTP 422.", "login returns 422"), ("登录失败返回 422", "弹出提示")])
    [Verdict(supported=False, reason='2/3 content tokens in premise (0.67 < 0.75); missing: returns'), Verdict(supported=False, reason='0/4 content tokens in premise (0.00 < 0.75); missing: 弹, 出, 提, 示')]
    """

    name = "lexical"
    version = "1"  # bump when the tokenization or rule changes: it changes scores

    def __init__(self, threshold: float = 0.75):
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold

    @property
    def fingerprint(self) -> str:
        return digest("LexicalJudge", "", {"threshold": self.threshold}, self.version)

    def judge(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        return [self._one(p, h) for p, h in pairs]

    def _one(self, premise: str, hypothesis: str) -> Verdict:
        hyp = content_tokens(hypothesis)
        if not hyp:
            return Verdict(None, "no content tokens in the statement")
        have = set(content_tokens(premise))
        missing = [t for t in dict.fromkeys(hyp) if t not in have]
        share = sum(t in have for t in hyp) / len(hyp)
        ok = share >= self.threshold
        why = f"{sum(t in have for t in hyp)}/{len(hyp)} content tokens in premise ({share:.2f} {'≥' if ok else '<'} {self.threshold})"
        return Verdict(ok, why + (f"; missing: {', '.join(missing)}" if missing else ""))
