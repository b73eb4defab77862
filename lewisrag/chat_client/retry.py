"""How long to wait before a retry: bounded exponential backoff with jitter (`backoff_delay`) and a
server's Retry-After (`retry_after_seconds`)."""

from __future__ import annotations

import email.utils
import random
from datetime import datetime, timezone

def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random, retry_after: float | None = None) -> float:
    """Seconds to wait before retry `attempt` (1, 2, ...): base * 2**(attempt - 1) capped at `cap`,
    half of it fixed and half random, so that clients failing together do not retry together. A
    server's Retry-After wins when it is longer, up to the same cap.

    >>> rng = random.Random(0)
    >>> all(0.5 <= backoff_delay(1, 1.0, 5.0, rng) <= 1.0 and 2.0 <= backoff_delay(3, 1.0, 5.0, rng) <= 4.0 for _ in range(100))
    True
    >>> all(2.5 <= backoff_delay(9, 1.0, 5.0, rng) <= 5.0 for _ in range(100))  # 256 s capped at 5
    True
    >>> backoff_delay(1, 1.0, 5.0, rng, retry_after=3600.0)  # Retry-After honoured, capped
    5.0
    """
    full = min(cap, base * 2.0 ** min(attempt - 1, 60))
    delay = full / 2 + rng.uniform(0.0, full / 2)
    return delay if retry_after is None else max(delay, min(retry_after, cap))


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds asked for by a Retry-After header (delta-seconds or an HTTP date); None when absent or unreadable.

    >>> retry_after_seconds("3"), retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT"), retry_after_seconds("soon")
    (3.0, 0.0, None)
    >>> retry_after_seconds("Wed, 21 Oct 99999999999999999999 07:28:00 GMT") is None
    True
    """
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):  # a year past a C long overflows
        return None
    when = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())
