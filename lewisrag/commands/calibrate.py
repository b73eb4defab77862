"""`lewisrag calibrate`: a judge against human labels (κ, miss rate, false-kill rate, disagreements)."""

from __future__ import annotations

from pathlib import Path

import typer

from lewisrag.commands import _llm_options as _llm
from lewisrag.commands import _ui


def calibrate(
    ctx: typer.Context,
    judge: str = typer.Option(..., "--judge", help="Judge spec: lexical | nli:PATH | llm:MODEL | labels:FILE."),
    labels: Path = typer.Option(..., "--labels", help='Human labels (.jsonl/.json/.parquet or hf:NAME[:CONFIG]:SPLIT): '
                                '{"id", "premise", "hypothesis", "supported": bool, "label"?}, the optional "label" '
                                'three-way (entailment, neutral, contradiction), measured where the judge gives one too.'),
    out: Path = typer.Option(None, "--out", help="Also write DIR/calibration.json."),
    batch_size: int = typer.Option(32, "--batch-size", min=1, help="Pairs per judge call."),
    cache_dir: Path = _llm.cache_dir(),
    concurrency: int = _llm.concurrency(),
    llm_base_url: str = _llm.base_url(),
    llm_temperature: float = _llm.temperature(),
    llm_json_mode: bool = _llm.json_mode(),
    timeout: float = _llm.timeout(),
    max_retries: int = _llm.max_retries(),
    confidence: float = typer.Option(0.95, "--confidence", min=0.5, max=0.999, help="Level of the Wilson intervals."),
    show: int = typer.Option(30, "--show", min=0, help="Disagreements listed in the table (0: all); --json and "
                             "--out's calibration.json hold them all (so --json refuses it)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object instead of tables."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Write into --out even if it holds files that are not a "
                                   "calibration lewisrag wrote (replaced once calibration.json is written); never a folder lewisrag did not make."),
) -> None:
    """Measure a judge against human labels before its scores gate anything."""
    from lewisrag.data.io import InputError, write_json
    from lewisrag.data.outputs import check_out_dir, output_dir
    from lewisrag.eval import judges
    from lewisrag.eval.judges import read_labels
    from lewisrag.eval.stats import calibrate as run

    _llm.check(ctx, judge, llm_temperature, llm_json_mode, timeout=timeout, max_retries=max_retries)
    if out is None and overwrite:  # never ignored in silence
        raise InputError("--overwrite", "applies with --out")
    if as_json:  # prints every disagreement: a --show limit would be dropped in silence
        _ui.refuse_given(ctx, ("show",), "limits the table's disagreements; --json prints them all")
    if out is not None:
        check_out_dir(out, "calibration", overwrite=overwrite, inputs={"--labels": labels, "--judge": judges.spec_path(judge),
                                                                       "--cache-dir": cache_dir})
    items = read_labels(labels)
    j = judges.from_spec(judge, cache_dir=cache_dir, concurrency=concurrency, base_url=llm_base_url,
                         temperature=llm_temperature, json_mode=llm_json_mode, timeout=timeout, max_retries=max_retries)
    with _ui.progress() as p:
        task = p.add_task(f"judging with {j.name}", total=len(items), info="")
        result = run(j, items, batch_size, confidence, on_batch=lambda n: p.advance(task, n))
        if (stopped := getattr(j, "run_error", lambda: None)()) is not None:  # an llm endpoint that refused for good
            raise stopped
        if result["n"] == 0:  # a calibration.json with kappa null would read as a measurement; raised here, the bar goes
            reason = result["disagreements"][0]["reason"] if result["disagreements"] else "no verdict"
            raise InputError("--judge", f"{j.name} decided none of the {len(items)} labels of {labels} (the first: "
                             f"{reason}); nothing was measured")
    result["labels"] = str(labels)
    result |= _llm.recorded(judge, llm_temperature, llm_json_mode, timeout, max_retries)
    if out is not None:
        with output_dir(out, "calibration", overwrite=overwrite) as d:
            write_json(d / "calibration.json", result)
    if as_json:
        _ui.print_json(result)
        return
    _render(result, show, out)


def _render(r: dict, show: int, out: Path | None) -> None:
    def rate(name: str) -> str:
        if r[name] is None:
            return "-"
        low, high = r[f"{name}_interval"]
        return f"{r[name]:.1%} [{low:.1%}, {high:.1%}]"

    kappa = "-" if r["kappa"] is None else f"{r['kappa']:.3f}"
    summary = [
        # the human counts are over the decided labels (the rates' denominators), not over every label
        ["labels", f"{r['n'] + r['undecided']}; decided by the judge: {r['n']} ({r['human_supported']} supported, "
                   f"{r['human_unsupported']} unsupported)"],
        ["undecided by the judge", r["undecided"]],
        ["Cohen's kappa", kappa],
        ["agreement", rate("agreement")],
        ["miss rate (unsupported judged supported)", f"{rate('miss_rate')}  {r['misses']}/{r['human_unsupported']}"],
        ["false-kill rate (supported judged unsupported)", f"{rate('false_kill_rate')}  {r['false_kills']}/{r['human_supported']}"],
    ]
    if "three_way" in r:  # neutral against contradiction, which `supported` cannot show
        w = r["three_way"]
        summary.append(["three-way labels (both gave one)", f"{w['n']}: agreement {w['agreement']:.1%}, kappa "
                        + ("-" if w["kappa"] is None else f"{w['kappa']:.3f}")])
    if "llm_temperature" in r:  # the settings the fingerprint is over, readable
        summary.append(["llm judge settings", f"temperature {r['llm_temperature']}, JSON mode {'on' if r['llm_json_mode'] else 'off'}"])
    title = (f"judge {_judge_named(r['judge'])} {str(r['judge']['fingerprint'])[:12]} on {r['labels']} "
             f"({100 * r['confidence']:.4g}% Wilson intervals)")
    _ui.out.print(_ui.table(title, ["measure", "value"], summary))
    every = r["disagreements"]
    listed = every if show == 0 else every[:show]  # rendering 17k rows took longer than judging them
    rows = [[d["id"], d["kind"], _verdict(d["human"], d.get("human_label")), _verdict(d["judge"], d.get("judge_label")),
             d["reason"], d["hypothesis"]] for d in listed]
    title = f"{len(every)} disagreement{'' if len(every) == 1 else 's'}"
    if len(listed) < len(every):
        title += f", the first {len(listed)} (all: --show 0, --json{'' if out is None else f', {out}/calibration.json'})"
    _ui.out.print(_ui.table(title, ["id", "kind", "human", "judge", "reason", "statement"], rows))


def _judge_named(judge: dict) -> str:
    """The judge's name with what made its verdicts: the LLM, the NLI checkpoint (its folder's name; the
    content digest is in --json) or the labels file; the name and a fingerprint alone said none of them."""
    made_by = judge.get("model") or judge.get("model_id", "").partition("@")[0] or judge.get("source")
    return f"{judge['name']} {made_by}" if made_by else judge["name"]


def _verdict(supported: bool | None, label: str | None) -> bool | str | None:
    """A verdict with its three-way label where the row has one: a "label" row's verdicts agree (False | False),
    and what differs, neutral against contradiction, was only in --json. Without one, as it was (undecided: –)."""
    return supported if label is None else f"{supported} ({label})"
