"""Question-level distributions for reports: markdown tables and figures.

`distribution_markdown(aggregates)` renders the aggregates of a results.json as the report.md
section "Question-level distributions"; `situations_markdown()` and `situations_figure(path)` render
the worked example of two runs with the same mean and very different failures.
"""

from __future__ import annotations

import os

from lewisrag.data.io import atomic_path
from lewisrag.eval import stats
from lewisrag.eval.reports.i18n import messages, plot_messages
from lewisrag.eval.results import CLAIMS_PREFIX

SITUATION_A = [1.0] * 95 + [0.0] * 5  # 95 questions fully supported, 5 answers fabricated end to end
SITUATION_B = [0.95] * 100  # every answer has 1 unsupported statement in 20


def _share(dist: dict, cut: str, confidence: float) -> str:
    """'5.0% (≤ 9.9%)': the observed share and its one-sided Wilson upper bound."""
    if dist.get(f"share_below_{cut}") is None:
        return "-"
    n = dist["n"]
    k = dist.get(f"count_below_{cut}", round(dist[f"share_below_{cut}"] * n))
    upper = stats.proportion_interval(k, n, confidence, side="upper")[1]
    return f"{k / n:.1%} (≤ {upper:.1%})"


def _num(x) -> str:
    return "-" if x is None else f"{x:.3f}"


CONFIDENCE = 0.95  # of the one-sided upper bounds the tables give each share


def distribution_markdown(aggregates: dict, confidence: float = CONFIDENCE, title: str | None = None, lang: str = "en") -> str:
    """A markdown section from results.json's "aggregates": one row per metric, then not_in_kb.

    Only entries shaped like `stats.score_distribution` output are metric rows; the claim diagnostics
    (claims.*) have their own section (`reports.claims`).

    >>> print(distribution_markdown({"faithfulness": stats.score_distribution(SITUATION_A)}).splitlines()[6])
    | faithfulness | 100 | 0 | 0.950 | 1.000 | 5.0% (≤ 9.9%) | 5.0% (≤ 9.9%) |
    """
    t = messages(lang)
    lines = [f"## {title or t('dist.title')}", "", t("dist.intro", pct=f"{confidence:.0%}"), "",
             *distribution_table(aggregates, confidence, lang)]
    return "\n".join(lines) + "\n"


def distribution_table(aggregates: dict, confidence: float = CONFIDENCE, lang: str = "en") -> list[str]:
    """`distribution_markdown`'s table and not_in_kb line, without its heading: the lines of one
    system's section in a report of several."""
    t = messages(lang)
    lines = [t("dist.cols"), "|---|---:|---:|---:|---:|---:|---:|"]
    for name, d in aggregates.items():
        if isinstance(d, dict) and "share_below_1" in d and not name.startswith(CLAIMS_PREFIX):
            lines.append(f"| {metric_label(name, t)} | {d['n']} | {d.get('nan', 0)} | {_num(d['mean'])} | {_num(d.get('median'))} | "
                         f"{_share(d, '1', confidence)} | {_share(d, '0.5', confidence)} |")
    nkb = aggregates.get("not_in_kb")
    if isinstance(nkb, dict) and nkb.get("n"):
        lines += ["", t("dist.not_in_kb", refused=nkb.get("refused", 0), n=nkb["n"])]
    return lines


def metric_label(name: str, t) -> str:
    """A distribution's row label: the aggregate's key (recall_at_k@5 included), in Chinese its name."""
    base, at, k = name.partition("@")
    if t.lang != "en" and base == "recall_at_k" and k:
        return f"recall@{k}"
    return t.metric(base, spaced=False) + at + k


def situations_markdown(figure: str | None = None, lang: str = "en") -> str:
    """The worked example: situations A and B have the same mean and opposite failure shapes."""
    t = messages(lang)
    a, b = stats.score_distribution(SITUATION_A), stats.score_distribution(SITUATION_B)
    rows = [(name, d) for name, d in (("A: 95 × 1.0 + 5 × 0.0", a), ("B: 100 × 0.95", b))]
    lines = [t("sit.h"), "", t("sit.intro"), "", t("sit.cols"), "|---|---:|---:|---:|"]
    lines += [f"| {name} | {d['mean']:.2f} | {d['share_below_1']:.0%} | {d['share_below_0.5']:.0%} |" for name, d in rows]
    lines += ["", t("sit.outro")]
    if figure:
        lines += ["", f"![{t('sit.figure')}]({figure})"]
    return "\n".join(lines) + "\n"


def situations_figure(path: str | os.PathLike) -> None:
    """Histograms of situations A and B beside their mean and shares (a PNG at `path`)."""
    # matplotlib loads on first use (~0.4 s): reports.markdown imports this module to write tables only
    # (`lewisrag eval bughunt` draws nothing)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scores = {"A: 95 × 1.0 + 5 × 0.0": SITUATION_A, "B: 100 × 0.95": SITUATION_B}
    dists = {name: stats.score_distribution(s) for name, s in scores.items()}
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for ax, (name, d), color in zip(axes, dists.items(), ("tab:red", "tab:blue")):
        values = sorted(set(scores[name]))  # exact scores, not bins: 0.95 must not straddle a bin edge
        ax.bar(values, [scores[name].count(v) for v in values], 0.03, color=color)
        ax.axvline(d["mean"], color="black", linestyle="--", linewidth=1, label="mean")
        ax.set_xlim(-0.05, 1.05)
        ax.set_xlabel("question-level faithfulness")
        ax.set_ylabel("questions")
        ax.legend(loc="upper left", fontsize=8)
        ax.set_title(f"{name}\nmean {d['mean']:.2f}")
    labels = ["mean", "share < 1", "share < 0.5"]
    width = 0.38
    for i, ((name, d), color) in enumerate(zip(dists.items(), ("tab:red", "tab:blue"))):
        values = [d["mean"], d["share_below_1"], d["share_below_0.5"]]
        xs = [x + (i - 0.5) * width for x in range(3)]
        axes[2].bar(xs, values, width, color=color, label=name.split(":")[0])
        for j, (x, v) in enumerate(zip(xs, values)):
            axes[2].annotate(f"{v:.2f}" if j == 0 else f"{v:.0%}", (x, v), ha="center", va="bottom", fontsize=8)
    axes[2].set_xticks(range(3), labels)
    axes[2].set_ylim(0, 1.15)
    axes[2].set_title("same mean, different shares")
    axes[2].legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)


def histogram_figure(aggregates: dict, path: str | os.PathLike, lang: str = "en") -> None:
    """One question-level histogram per metric of results.json's aggregates (a PNG at `path`), labelled in `lang`."""
    import matplotlib  # loads on first use: see situations_figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = {k: d for k, d in aggregates.items() if isinstance(d, dict) and d.get("histogram", {}).get("counts")}
    if not metrics:
        raise ValueError("no metric in the aggregates has a histogram")
    with plot_messages(lang) as t:
        fig, axes = plt.subplots(1, len(metrics), figsize=(3.2 * len(metrics), 3), squeeze=False)
        for ax, (name, d) in zip(axes[0], metrics.items()):
            _histogram(ax, d, "tab:blue", t("plot.hist_x"), t("plot.hist_y"))
            ax.set_title(t("plot.hist_title", name=metric_label(name, t), n=d["n"], nan=d.get("nan", 0), mean=_num(d["mean"])),
                         fontsize=9)
        fig.tight_layout()
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=100, metadata={"Software": None})
        plt.close(fig)


def _histogram(ax, dist: dict, color: str, xlabel: str = "question-level score", ylabel: str = "questions") -> None:
    edges, counts = dist["histogram"]["edges"], dist["histogram"]["counts"]
    widths = [hi - lo for lo, hi in zip(edges, edges[1:])]
    ax.bar(edges[:-1], counts, widths, align="edge", color=color, edgecolor="white")
    ax.axvline(dist["mean"], color="black", linestyle="--", linewidth=1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
