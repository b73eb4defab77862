"""A second audit of `ask` and `swap` from the user's side: each test is an input that gave a
traceback or a misleading answer."""

from __future__ import annotations

import json

import pytest

from conftest import run_main, write_jsonl
from lewisrag.data.io import InputError
from test_rag_train import rag_inputs, trained_rag  # noqa: F401  (session fixtures)


def _positions(model_dir) -> int:
    return json.loads((model_dir / "best" / "generator" / "config.json").read_text())["max_position_embeddings"]


def test_max_length_past_the_generators_positions_is_refused(rag_inputs, trained_rag, monkeypatch, capsys):  # noqa: F811
    """--max-length 257 on a generator of 256 positions: an answer that had not ended by then was an
    IndexError from BART's position embedding (exit 3, a traceback), after the whole decoding."""
    positions = _positions(trained_rag)
    args = ["--model", trained_rag, "--index", rag_inputs["index"]]
    code, out, err = run_main(monkeypatch, capsys, "ask", *args, "--max-length", positions + 1, "Who leads Kreve?")
    assert code == 2 and out == "", err
    assert err == (f"error: --max-length: {positions + 1} exceeds the generator's {positions} positions "
                   f"(max_position_embeddings), which its decoder reads each decoded token in; must be at most {positions}\n")
    code, _, err = run_main(monkeypatch, capsys, "ask", *args, "--max-length", positions, "--json", "Who leads Kreve?")
    assert code == 0, err  # the last position is still one
    code, out, err = run_main(monkeypatch, capsys, "swap", *args, "--questions", rag_inputs["world"] / "questions_a.jsonl",
                              "--device", "cpu", "--max-length", positions + 1)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"error: --max-length: {positions + 1} exceeds the generator of {trained_rag}'s {positions} positions")


def test_a_question_the_question_encoder_cannot_read_is_said(rag_inputs, trained_rag, tmp_path, monkeypatch, capsys):  # noqa: F811
    """A Chinese question to an English DPR is all [UNK]: every such question got the same passages,
    shown with their priors as if retrieved for it, and nothing said so."""
    from lewisrag.experiments import swap

    args = ["ask", "--model", trained_rag, "--index", rag_inputs["index"], "--json"]
    code, out, err = run_main(monkeypatch, capsys, *args, "谁是瓦尔多利亚的领导人？")
    assert code == 0 and json.loads(out)["passages"], err
    assert err.startswith("note: the question encoder's vocabulary knows no word of the question (each is its unknown "
                          "token, [UNK])"), err
    code, _, err = run_main(monkeypatch, capsys, *args, "Who leads Kreve?")
    assert code == 0 and [s for s in err.splitlines() if "before its end token" not in s] == [], err  # words it knows: no note

    zh = write_jsonl(tmp_path / "zh.jsonl", [{"id": "z1", "question": "谁是领导人？", "answers": ["张三"]},
                                             {"id": "z2", "question": "Who leads 瓦尔多利亚?", "answers": ["张三"]}])
    monkeypatch.setattr(swap, "answer_questions", lambda m, t, i, questions, **kw: [""] * len(questions))
    r = swap.swap_matrix([trained_rag], [rag_inputs["index"]], [zh, rag_inputs["world"] / "questions_a.jsonl"])
    assert r["notes"] == ["zh: the question encoder of trained_rag knows no word of 1 of its 2 questions (each is its "
                          "unknown token): their passages are retrieved for a question without words, the same for each "
                          "(questions in another language than the model's?)"]


def test_knows_no_word_needs_an_unknown_token():
    """A byte-level vocabulary (no unknown token) reads every string: never "knows no word"; a generator
    without position embeddings beyond 8 refuses --max-length 9."""
    from types import SimpleNamespace

    from lewisrag.experiments.ask import check_max_length, knows_no_word

    assert not knows_no_word(SimpleNamespace(unk_token_id=None), "谁")
    with pytest.raises(InputError, match="--max-length"):
        check_max_length(SimpleNamespace(generator=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=8))), 9)
