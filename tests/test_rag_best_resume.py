"""`train rag`'s best/ agrees with the run that resumed: a new best writes the checkpoint first, so a
kill never leaves best/ newer than the checkpoint (a resumed run that scored that step lower kept a
model and a score its log never had), and a kill between the two writes is mended by the resume. End
to end, dev scores the index best/ carries, not the last re-index's vectors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import one_thread
from test_rag_train import log_lines, make_config, rag_inputs, weights  # noqa: F401  (session fixture)


class Killed(Exception):
    """The kill: raised where the run would die, nothing after it written."""


def scorer(out, scores: dict[int, float], seen: list | None = None):
    """A dev score per step (`scores`), the step told by the log's lines (written after the evaluation;
    a resumed log starts as the checkpoint's). `seen` gets (step, the vectors of the index searched)."""
    from lewisrag.training import rag as R

    real = R.dev_score

    def score(model, tokenizers, index, dev, cfg):
        step = len(log_lines(out)) + 1
        if seen is not None:
            real(model, tokenizers, index, dev, cfg)  # the real search too: the model must accept the index
            seen.append((step, np.array(index.embeddings)))
        return scores[step]

    return score


def best_agrees_with_log(out, summary) -> dict:
    """best/ holds a step whose dev score the log records, and the summary's best is that score."""
    saved = json.loads((out / "best" / "train_config.json").read_text())
    logged = {r["step"]: r.get("dev_em") for r in map(json.loads, log_lines(out))}
    assert logged[saved["step"]] == saved["dev_em"] == summary["best_dev"] == max(v for v in logged.values() if v is not None)
    return saved


KILLED = {3: 0.40, 6: 0.45}  # the run that was killed at step 7
RESUMED = {3: 0.40, 6: 0.35, 8: 0.30}  # the resumed run scores step 6 lower (another machine's rounding)


def test_a_resume_never_finds_best_newer_than_its_checkpoint(rag_inputs, tmp_path, monkeypatch):  # noqa: F811
    """best/ was saved at step 6 (dev 0.45), the checkpoint only at 5: the resume started from step 5 with
    step 3's 0.40, scored step 6 at 0.35 and kept the killed run's best/: train_config.json said step 6,
    dev 0.45, a score the log did not have, and the summary 0.40 of a step-3 model that was gone."""
    from lewisrag.training import rag as R

    cfg, out = make_config(rag_inputs, steps=8, eval_every=3, save_every=5), tmp_path / "run"

    def kill_at_7(step, steps, record):
        if step == 7:
            raise Killed

    with one_thread():
        monkeypatch.setattr(R, "dev_score", scorer(out, KILLED))
        with pytest.raises(Killed):
            R.train_rag(cfg, out, on_progress=kill_at_7)
        resumed_from = json.loads((out / "checkpoint" / "state.json").read_text())["step"]
        monkeypatch.setattr(R, "dev_score", scorer(out, RESUMED))
        summary = R.train_rag(cfg, out, resume=True)
    saved = best_agrees_with_log(out, summary)
    # the checkpoint was written with the new best: the resume went on from step 6, not from 5
    assert resumed_from == 6 and (saved["step"], saved["dev_em"]) == (6, 0.45)


@pytest.mark.parametrize("where", ["checkpoint", "best"])
def test_a_kill_between_the_checkpoint_and_best_is_consistent_on_resume(rag_inputs, tmp_path, monkeypatch, where):  # noqa: F811
    """Step 6's new best writes checkpoint/ and then best/. Killed in the checkpoint's write: the resume
    redoes step 6 from step 5's checkpoint, and best/ is still step 3's (written before best/ it would be
    step 6's, whatever the resumed run scores). Killed in best/'s: the checkpoint is step 6's, whose
    weights the resume saves as best/, equal to an uninterrupted run's."""
    from lewisrag.training import checkpoint as C
    from lewisrag.training import rag as R

    cfg, out = make_config(rag_inputs, steps=8, eval_every=3, save_every=5), tmp_path / "run"
    save_checkpoint, save_model = C.save_checkpoint, C.save_model

    def dying_checkpoint(path, model, opt, sched, state, *args, **kwargs):
        if state["step"] == 6:
            raise Killed
        return save_checkpoint(path, model, opt, sched, state, *args, **kwargs)

    def dying_best(model, tokenizers, path, train_config=None, index=None):
        if path.name == "best" and train_config["step"] == 6:
            raise Killed
        return save_model(model, tokenizers, path, train_config, index)

    with one_thread():
        monkeypatch.setattr(R, "dev_score", scorer(out, KILLED))
        if where == "checkpoint":
            monkeypatch.setattr(C, "save_checkpoint", dying_checkpoint)
        else:
            monkeypatch.setattr(C, "save_model", dying_best)
        with pytest.raises(Killed):
            R.train_rag(cfg, out)
        monkeypatch.setattr(C, "save_checkpoint", save_checkpoint)
        monkeypatch.setattr(C, "save_model", save_model)
        assert json.loads((out / "best" / "train_config.json").read_text())["step"] == 3
        if where == "checkpoint":
            monkeypatch.setattr(R, "dev_score", scorer(out, RESUMED))
            summary = R.train_rag(cfg, out, resume=True)
            assert best_agrees_with_log(out, summary)["step"] == 3
            return
        monkeypatch.setattr(R, "dev_score", scorer(out, {8: 0.30}))  # step 6 is not scored again
        summary = R.train_rag(cfg, out, resume=True)
        monkeypatch.setattr(R, "dev_score", scorer(tmp_path / "straight", {**KILLED, 8: 0.30}))
        R.train_rag(cfg, tmp_path / "straight")
    assert best_agrees_with_log(out, summary)["step"] == 6
    assert log_lines(out) == log_lines(tmp_path / "straight")
    a, b = weights(out / "best"), weights(tmp_path / "straight" / "best")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_end_to_end_dev_scores_the_index_best_saves(rag_inputs, tmp_path, monkeypatch):  # noqa: F811
    """Step 3 evaluates without re-indexing (every 2 steps): dev searched step 2's vectors while best/index
    held the passages encoded by step 3's encoder, so best/'s dev score was not its retriever's."""
    from lewisrag.index.dense import DenseIndex
    from lewisrag.training import checkpoint as C
    from lewisrag.training import rag as R

    cfg = make_config(rag_inputs, steps=4, eval_every=3, save_every=4, reindex_every=2, train_context_encoder=True)
    out, seen, live = tmp_path / "run", [], {}
    save_checkpoint = C.save_checkpoint

    def keep_live(path, model, opt, sched, state, *args, vectors=None, **kwargs):
        live[state["step"]] = (state["live_index"]["step"], np.array(vectors))  # the vectors training searches
        return save_checkpoint(path, model, opt, sched, state, *args, vectors=vectors, **kwargs)

    monkeypatch.setattr(R, "dev_score", scorer(out, {3: 0.5, 4: 0.1}, seen))
    monkeypatch.setattr(C, "save_checkpoint", keep_live)
    with one_thread():
        R.train_rag(cfg, out)
    assert [step for step, _ in seen] == [3, 4]
    assert json.loads((out / "best" / "train_config.json").read_text())["step"] == 3
    assert np.array_equal(DenseIndex.load(out / "best" / "index").embeddings, seen[0][1])
    # training still searched step 2's re-index after step 3's evaluation; step 4 re-indexed, and dev searched that
    assert live[3][0] == 2 and not np.allclose(live[3][1], seen[0][1])
    assert live[4][0] == 4 and np.array_equal(live[4][1], seen[1][1])
    assert np.array_equal(DenseIndex.load(out / "final" / "index").embeddings, seen[1][1])


@pytest.mark.parametrize("value", ["3", 2])
def test_a_damaged_best_step_is_one_line(rag_inputs, tmp_path, value):  # noqa: F811
    """state.json's best_step (the step of best/, null before any evaluation) is a whole number no later than the step."""
    from lewisrag.data.io import InputError
    from lewisrag.training.rag import train_rag

    cfg, out = make_config(rag_inputs, steps=3, eval_every=1, save_every=3), tmp_path / "run"

    def stop_at_2(step, steps, record):
        if step == 2:
            raise Killed

    with one_thread(), pytest.raises(Killed):
        train_rag(cfg, out, on_progress=stop_at_2)
    file = out / "checkpoint" / "state.json"
    state = json.loads(file.read_text())
    assert state["step"] == state["best_step"] == 1
    file.write_text(json.dumps({**state, "best_step": value}))
    with pytest.raises(InputError, match=f"{file}: field 'best_step'"):
        train_rag(cfg, out, resume=True)
