"""Fault injection: bad input of every kind is one line on stderr with exit code 2 and nothing
half-written; output folders that lewisrag did not make are never destroyed; a killed index build
resumes to the same bytes.

Most cases call `lewisrag.cli.main` in-process (it maps errors to exit 2 exactly as the console
script does); the kill and hash-seed cases run real subprocesses.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import run_main
from lewisrag.data.io import InputError, read_json
from lewisrag.data.outputs import MARKER, exclusive, made_by, rewritten_dir
from lewisrag.data.records import read_passages, read_qa
from lewisrag.index.dense import DenseBuildConfig, build_dense_index
from lewisrag.training.dpr import DPRTrainConfig, train_dpr

TINY = dict(vocab_size=300, hidden_size=32, layers=1, heads=2, batch_size=8)


run = run_main


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[-1].startswith("error: "), err
    for needle in needles:
        assert needle in lines[-1], (needle, lines[-1])


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def dpr_ckpt(tiny_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("dpr") / "ckpt"
    train_dpr(DPRTrainConfig(steps=3, **TINY), read_qa(tiny_corpus["qa"]), read_passages(tiny_corpus["passages"]), out)
    return out


@pytest.fixture(scope="module")
def bart_dir(tmp_path_factory):
    """A tiny BART generator folder: `train rag` checks --generator's config.json before its data, so the
    cases that name a data error give a real generator."""
    from hf_layouts import bart

    return bart(tmp_path_factory.mktemp("bart"), ["who leads the country", "the capital city is"])


@pytest.fixture(scope="module")
def dense_idx(tiny_corpus, dpr_ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp("idx") / "dense"
    build_dense_index(read_passages(tiny_corpus["passages"]), dpr_ckpt, out)
    return out


@pytest.fixture
def users_folder(tmp_path):
    """A folder of the user's, like a world's data files, that no command may destroy."""
    d = tmp_path / "mine"
    d.mkdir()
    for name in ("train.jsonl", "dev.jsonl", "test.jsonl"):
        (d / name).write_text('{"id": "1"}\n')
    return d


# ---------------------------------------------------------------------------------------------
# never destroy what the user did not make


def test_index_build_refuses_a_users_folder(tiny_corpus, users_folder, monkeypatch, capsys):
    before = snapshot(users_folder)
    code, _, err = run(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder", "bm25",
                       "--out", users_folder)
    assert_one_line_error(code, err, str(users_folder), "--overwrite")
    assert snapshot(users_folder) == before


def test_index_build_refuses_a_file_and_leaves_it_alone(tiny_corpus, tmp_path, monkeypatch, capsys):
    target = tmp_path / "notes.txt"
    target.write_text("keep me")
    code, _, err = run(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder", "bm25",
                       "--out", target, "--overwrite")
    assert_one_line_error(code, err, "notes.txt", "not a folder")
    assert target.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # no notes.txt.old, no .partial


def test_train_dpr_refuses_a_users_folder(tiny_corpus, users_folder, monkeypatch, capsys):
    before = snapshot(users_folder)
    code, _, err = run(monkeypatch, capsys, "train", "dpr", "--train", tiny_corpus["qa"], "--passages",
                       tiny_corpus["passages"], "--out", users_folder, "--steps", 1)
    assert_one_line_error(code, err, str(users_folder))
    assert snapshot(users_folder) == before


def test_train_dpr_refuses_a_gold_id_its_passages_do_not_hold(tiny_corpus, tmp_path, monkeypatch, capsys):
    """A mistyped gold id was dropped: its question left out and counted, or, beside a good id, not
    even counted; eval retrieval, train stitched and compare refuse the same file."""
    rows = [json.loads(line) for line in Path(tiny_corpus["qa"]).read_text().splitlines()]
    for bad in (["country-9999-0"], [rows[2]["gold_passage_ids"][0], "country-9999-0"]):
        rows[2] = {**rows[2], "gold_passage_ids": bad}
        qa = tmp_path / "qa.jsonl"
        qa.write_text("".join(json.dumps(r) + "\n" for r in rows))
        code, _, err = run(monkeypatch, capsys, "train", "dpr", "--train", qa, "--passages", tiny_corpus["passages"],
                           "--out", tmp_path / "dpr", "--steps", 1)
        assert_one_line_error(code, err, f"{qa}:3", "field 'gold_passage_ids'", "'country-9999-0'")
        assert not (tmp_path / "dpr").exists()


def test_a_world_is_not_replaced_by_an_index(tiny_corpus, tmp_path, monkeypatch, capsys):
    code, _, _ = run(monkeypatch, capsys, "world", "--out", tmp_path / "w", "--entities", 40)
    assert code == 0 and made_by(tmp_path / "w") == "world"
    before = snapshot(tmp_path / "w")
    code, _, err = run(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder", "bm25",
                       "--out", tmp_path / "w")
    assert_one_line_error(code, err, "holds a lewisrag world, not an index")
    assert snapshot(tmp_path / "w") == before


def test_reruns_replace_their_own_folder_and_overwrite_never_replaces_a_users(tiny_corpus, users_folder, tmp_path,
                                                                              monkeypatch, capsys):
    """--overwrite replaced any folder once the new output was complete: `--out ~ --overwrite`, with
    the shell expanding ~, replaced a home folder whole. It now replaces lewisrag's outputs only."""
    args = ["index", "build", "--passages", tiny_corpus["passages"], "--encoder", "bm25"]
    for _ in range(2):  # a rerun into lewisrag's own index folder needs no flag
        code, _, err = run(monkeypatch, capsys, *args, "--out", tmp_path / "idx")
        assert code == 0, err
    assert made_by(tmp_path / "idx") == "index"
    before = snapshot(users_folder)
    code, _, err = run(monkeypatch, capsys, *args, "--out", users_folder, "--overwrite")
    assert_one_line_error(code, err, "lewisrag did not write", "'dev.jsonl'", "--overwrite or not")
    assert snapshot(users_folder) == before
    assert run(monkeypatch, capsys, "world", "--out", tmp_path / "w", "--entities", 40)[0] == 0
    code, _, err = run(monkeypatch, capsys, *args, "--out", tmp_path / "w")  # another kind of lewisrag output
    assert_one_line_error(code, err, "holds a lewisrag world", "pass --overwrite")
    code, _, err = run(monkeypatch, capsys, *args, "--out", tmp_path / "w", "--overwrite")
    assert code == 0 and made_by(tmp_path / "w") == "index", err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # nothing left aside


def test_eval_answers_refuses_a_users_folder_before_judging(users_folder, tmp_path, monkeypatch, capsys):
    answers = tmp_path / "answers.jsonl"
    answers.write_text(json.dumps({"user_input": "q", "response": "a", "retrieved_contexts": ["a"], "id": "1"}) + "\n")
    before = snapshot(users_folder)
    for flags in ([], ["--overwrite"]):
        code, _, err = run(monkeypatch, capsys, "eval", "answers", "--answers", answers, "--out", users_folder, *flags)
        assert_one_line_error(code, err, str(users_folder), "lewisrag did not write")
        assert snapshot(users_folder) == before


def test_overwrite_never_deletes_the_commands_own_inputs(tiny_corpus, users_folder, tmp_path, monkeypatch, capsys):
    before = snapshot(users_folder)
    qa = users_folder / "train.jsonl"
    for args in (["train", "dpr", "--train", qa, "--passages", tiny_corpus["passages"], "--steps", 1],
                 ["train", "stitched", "--index", tiny_corpus["passages"], "--generator", users_folder, "--train", qa],
                 ["export", "--model", users_folder / "dev.jsonl", "--index", tiny_corpus["passages"]],
                 ["index", "build", "--passages", qa, "--encoder", "bm25"],
                 ["eval", "answers", "--answers", qa, "--judge", "lexical"],
                 ["calibrate", "--judge", "lexical", "--labels", qa],
                 ["compare", "--run", users_folder]):
        code, _, err = run(monkeypatch, capsys, *args, "--out", users_folder, "--overwrite")
        assert_one_line_error(code, err, str(users_folder), "holds --")
        assert snapshot(users_folder) == before
    out = tmp_path / "questions.jsonl"  # swap's --out file on the questions it scores
    out.write_text('{"id": "1"}\n')
    code, _, err = run(monkeypatch, capsys, "swap", "--model", users_folder, "--index", users_folder, "--questions", out,
                       "--out", out, "--overwrite")
    assert_one_line_error(code, err, "is --questions")
    assert out.read_text() == '{"id": "1"}\n'
    # ... or on a file inside a model or index it reads (a model's weights, an index's manifest)
    inside = users_folder / "dev.jsonl"
    for model, index, where in ((users_folder, tmp_path, "is inside --model"), (tmp_path / "m", users_folder, "is inside --index")):
        code, _, err = run(monkeypatch, capsys, "swap", "--model", model, "--index", index, "--questions", out,
                           "--out", inside, "--overwrite")
        assert_one_line_error(code, err, where)
    assert snapshot(users_folder) == before


def test_overwrite_never_replaces_part_of_an_input_folder(tiny_corpus, users_folder, tmp_path, monkeypatch, capsys):
    """An --out inside a folder the command reads (a run's world, the model an export reads) is part of
    that input unless the command wrote it there itself; and a file a --judge or
    --stitched-generator spec names is an input like any other."""
    (users_folder / "world").mkdir()
    (users_folder / "world" / "test.jsonl").write_text('{"id": "1"}\n')
    (users_folder / "gen").mkdir()
    (users_folder / "gen" / "config.json").write_text("{}")
    (tmp_path / "run").mkdir()
    before = snapshot(users_folder)
    labels = f"labels:{users_folder / 'train.jsonl'}"
    for args, needle in (
            (["compare", "--run", users_folder, "--out", users_folder / "world"], "is inside --run"),
            (["export", "--model", users_folder, "--index", tiny_corpus["passages"], "--out", users_folder / "world"],
             "is inside --model"),
            (["eval", "answers", "--answers", tiny_corpus["qa"], "--judge", labels, "--out", users_folder], "holds --judge"),
            (["eval", "bughunt", "--judge", labels, "--out", users_folder], "holds --judge"),
            (["calibrate", "--judge", labels, "--labels", tiny_corpus["qa"], "--out", users_folder], "holds --judge"),
            (["compare", "--run", tmp_path / "run", "--stitched-generator", f"hf:{users_folder / 'gen'}", "--out", users_folder],
             "holds --stitched-generator")):
        code, _, err = run(monkeypatch, capsys, *args, "--overwrite")
        assert_one_line_error(code, err, needle)
        assert "--overwrite" not in err
        assert snapshot(users_folder) == before


def test_a_refusal_that_overwrite_cannot_lift_does_not_suggest_it(tiny_corpus, users_folder, tmp_path, monkeypatch,
                                                                    capsys):
    """Without --overwrite, an --out holding the command's own input (or the working directory, or
    home) used to be answered "pass --overwrite to replace it", and --overwrite then only led to a
    second refusal: the message names the refusal that stands instead."""
    before = snapshot(users_folder)
    qa = users_folder / "train.jsonl"
    code, _, err = run(monkeypatch, capsys, "eval", "answers", "--answers", qa, "--judge", "lexical",
                       "--out", users_folder)
    assert_one_line_error(code, err, "holds --answers")
    assert "--overwrite" not in err
    monkeypatch.chdir(users_folder)
    code, _, err = run(monkeypatch, capsys, "world", "--out", users_folder, "--entities", 40)
    assert_one_line_error(code, err, "working directory")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(users_folder))
    code, _, err = run(monkeypatch, capsys, "world", "--out", users_folder, "--entities", 40)
    assert_one_line_error(code, err, "home folder")
    assert "pass --overwrite" not in err
    assert snapshot(users_folder) == before


def test_a_rerun_that_replaces_its_output_keeps_a_file_the_user_added(tiny_corpus, tmp_path, monkeypatch, capsys):
    """An index (like a checkpoint) is replaced whole by a rerun: a file put in its folder since
    the build is refused by name instead of lost, and --overwrite is the way to say it may go."""
    out = tmp_path / "idx"
    build = ["index", "build", "--passages", tiny_corpus["passages"], "--encoder", "bm25", "--out", out]
    assert run(monkeypatch, capsys, *build)[0] == 0
    assert "manifest.json" in json.loads((out / ".lewisrag").read_text())["files"]
    assert run(monkeypatch, capsys, *build)[0] == 0  # a plain rerun over lewisrag's own files
    (out / "notes.txt").write_text("mine")
    code, _, err = run(monkeypatch, capsys, *build)
    assert_one_line_error(code, err, "'notes.txt'", "lewisrag did not write")
    assert (out / "notes.txt").read_text() == "mine"
    assert run(monkeypatch, capsys, *build, "--overwrite")[0] == 0 and not (out / "notes.txt").exists()
    (out / "bm25" / "notes.txt").write_text("mine")  # inside a folder the build wrote: was lost without a word
    code, _, err = run(monkeypatch, capsys, *build)
    assert_one_line_error(code, err, "'bm25/notes.txt'", "lewisrag did not write")
    assert (out / "bm25" / "notes.txt").read_text() == "mine"


def test_the_working_directory_and_home_are_never_replaced(tiny_corpus, users_folder, tmp_path, monkeypatch, capsys):
    before = snapshot(users_folder)
    monkeypatch.chdir(users_folder)
    for out in (".", users_folder, tmp_path):  # `.`, and the folder the shell is in or above it
        code, _, err = run(monkeypatch, capsys, "world", "--out", out, "--entities", 40, "--overwrite")
        assert_one_line_error(code, err, "working directory")
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)  # an empty `.` would be renamed away under the shell (and `.` has no name)
    code, _, err = run(monkeypatch, capsys, "train", "dpr", "--train", tiny_corpus["qa"], "--passages",
                       tiny_corpus["passages"], "--steps", 1, "--out", ".")
    assert_one_line_error(code, err, "working directory")
    assert list(empty.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["empty", "mine"]
    monkeypatch.chdir(tmp_path.parent)
    monkeypatch.setenv("HOME", str(users_folder))
    code, _, err = run(monkeypatch, capsys, "world", "--out", users_folder, "--entities", 40, "--overwrite")
    assert_one_line_error(code, err, "home folder")
    assert snapshot(users_folder) == before


def test_a_folder_holding_a_home_is_never_replaced_whatever_home_says(tiny_corpus, tmp_path, monkeypatch, capsys):
    """`HOME=/tmp/x lewisrag index build ... --out ~ --overwrite`: the shell expanded ~ to the real home
    while lewisrag compared --out with $HOME only, so it replaced the real home folder whole. The
    user database's home, and any folder that holds a home, are refused too."""
    import pwd

    users = tmp_path / "users"
    real_home, fake_home = users / "me", tmp_path / "elsewhere"
    (real_home / ".config").mkdir(parents=True)
    (real_home / ".config" / "settings").write_text("mine")
    fake_home.mkdir()
    monkeypatch.setenv("HOME", str(fake_home))
    fields = list(pwd.getpwuid(os.getuid()))
    fields[5] = str(real_home)  # pw_dir
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: pwd.struct_passwd(fields))
    before = snapshot(users)
    for out in (real_home, users):  # the home, and the folder that holds it
        code, _, err = run(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder",
                           "bm25", "--out", out, "--overwrite")
        assert_one_line_error(code, err, "a home folder or one that holds one", "--overwrite never replaces")
    assert snapshot(users) == before


@pytest.mark.parametrize("where", ["/", "/root", "/usr", "/tmp"])
def test_the_root_and_the_folders_right_under_it_are_never_replaced(where):
    from lewisrag.data import outputs

    with pytest.raises(InputError, match="root"):  # checked, never tried: the check runs before any write
        outputs._check_replaceable(Path(where), "--out")


def test_a_mount_point_and_a_git_repository_are_never_replaced(tiny_corpus, tmp_path, monkeypatch, capsys):
    from lewisrag.data import outputs

    repo, volume = tmp_path / "repo", tmp_path / "volume"
    (repo / ".git").mkdir(parents=True)
    (repo / "code.py").write_text("x = 1")
    (volume / "data").mkdir(parents=True)
    monkeypatch.setattr(outputs.checks.os.path, "ismount", lambda p: Path(p) == volume)
    for out, why in ((repo, "a git repository"), (volume, "a mount point")):
        before = snapshot(out)
        code, _, err = run(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder",
                           "bm25", "--out", out, "--overwrite")
        assert_one_line_error(code, err, why)
        assert snapshot(out) == before and (volume / "data").is_dir()


def test_an_out_that_is_a_symbolic_link_is_refused_and_its_target_kept(tiny_corpus, tmp_path, monkeypatch, capsys):
    """The rename that moves a finished output in replaced the link with a folder (the target kept
    the old output, unseen), and left the link behind as `.link.old`, which broke every later run."""
    build = ["index", "build", "--passages", tiny_corpus["passages"], "--encoder", "bm25", "--out"]
    assert run(monkeypatch, capsys, *build, tmp_path / "real")[0] == 0
    (tmp_path / "link").symlink_to("real")
    before = snapshot(tmp_path / "real")
    code, _, err = run(monkeypatch, capsys, *build, tmp_path / "link")
    assert_one_line_error(code, err, "is a symbolic link", str(tmp_path / "real"))
    assert (tmp_path / "link").is_symlink() and snapshot(tmp_path / "real") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


def test_an_out_through_a_link_and_dotdot_is_checked_where_it_is_written(tmp_path, monkeypatch, capsys):
    """`--out U/L/../data` with L a link: the checks followed the link (the kernel's path), the write
    went to `U/data` (os.path.abspath's), so the user's U/data was replaced unchecked, a git
    repository too. Both now use the one path the kernel reaches."""
    users, elsewhere = tmp_path / "U", tmp_path / "elsewhere" / "deep"
    (users / "data").mkdir(parents=True)
    (users / "data" / "precious.txt").write_text("mine")
    elsewhere.mkdir(parents=True)
    (users / "L").symlink_to(elsewhere)
    code, _, _ = run(monkeypatch, capsys, "world", "--out", users / "L" / ".." / "data", "--entities", 40)
    assert code == 0 and (users / "data" / "precious.txt").read_text() == "mine"
    assert (tmp_path / "elsewhere" / "data" / "world.json").is_file()  # where the kernel put `L/../data`
    (users / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "elsewhere" / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "elsewhere" / "repo" / "main.py").write_text("code")
    code, _, err = run(monkeypatch, capsys, "world", "--out", users / "L" / ".." / "repo", "--entities", 40, "--overwrite")
    assert_one_line_error(code, err, "a git repository")
    assert (tmp_path / "elsewhere" / "repo" / "main.py").read_text() == "code"


def test_a_users_folder_named_like_a_replaced_folder_is_kept(tiny_corpus, tmp_path, monkeypatch, capsys):
    """Every replace removed `.NAME.old` first, whoever made it."""
    build = ["index", "build", "--passages", tiny_corpus["passages"], "--encoder", "bm25", "--out", tmp_path / "idx"]
    (tmp_path / ".idx.old").mkdir()
    (tmp_path / ".idx.old" / "notes.txt").write_text("precious")
    code, _, err = run(monkeypatch, capsys, *build)
    assert_one_line_error(code, err, ".idx.old", "not made by lewisrag")
    assert (tmp_path / ".idx.old" / "notes.txt").read_text() == "precious" and not (tmp_path / "idx").exists()
    shutil.rmtree(tmp_path / ".idx.old")
    assert run(monkeypatch, capsys, *build)[0] == 0
    shutil.copytree(tmp_path / "idx", tmp_path / ".idx.old")  # what a rerun killed between its renames leaves
    assert run(monkeypatch, capsys, *build)[0] == 0 and not (tmp_path / ".idx.old").exists()


def test_a_finished_index_named_like_a_builds_staging_folder_is_kept(tiny_corpus, tmp_path, monkeypatch, capsys):
    """A build stages in OUT.partial: building `idx` emptied the user's finished index `idx.partial`."""
    build = ["index", "build", "--passages", tiny_corpus["passages"], "--encoder", "bm25", "--out"]
    assert run(monkeypatch, capsys, *build, tmp_path / "idx.partial")[0] == 0
    before = snapshot(tmp_path / "idx.partial")
    code, _, err = run(monkeypatch, capsys, *build, tmp_path / "idx")
    assert_one_line_error(code, err, "idx.partial", "a finished index")
    assert snapshot(tmp_path / "idx.partial") == before
    assert "staging" not in read_json(tmp_path / "idx.partial" / MARKER)


def test_a_build_killed_as_it_finished_is_rebuilt_not_refused(tiny_corpus, tmp_path, monkeypatch, capsys):
    """Killed between writing its manifest and moving OUT.partial onto OUT, a build left what looked
    like a finished index of the user's at OUT.partial, and every rerun was refused."""
    build = ["index", "build", "--passages", tiny_corpus["passages"], "--encoder", "bm25", "--out", tmp_path / "idx"]
    assert run(monkeypatch, capsys, *build)[0] == 0
    shutil.copytree(tmp_path / "idx", tmp_path / "idx.partial")  # the new build, finished but not moved in
    (tmp_path / "idx").rename(tmp_path / ".idx.old")  # killed between replace_dir's two renames
    marker = read_json(tmp_path / "idx.partial" / MARKER)
    (tmp_path / "idx.partial" / MARKER).write_text(json.dumps({**marker, "staging": True}))
    assert run(monkeypatch, capsys, *build)[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"] and (tmp_path / "idx" / "manifest.json").is_file()


def test_train_rag_overwrite_never_replaces_a_folder_inside_its_inputs(tmp_path):
    from lewisrag.training.rag import RagTrainConfig, train_rag

    index = tmp_path / "idx"
    (index / "sub").mkdir(parents=True)
    (index / "sub" / "part.bin").write_text("the index's own")
    with pytest.raises(InputError, match="is inside --index"):
        train_rag(RagTrainConfig(index=str(index), encoder="", generator="", train=""), index / "sub", overwrite=True)
    assert (index / "sub" / "part.bin").read_text() == "the index's own"


@pytest.mark.parametrize("sig,code,line", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_ctrl_c_and_sigterm_say_so_in_one_line_and_leave_nothing(tmp_path, sig, code, line):
    """typer turned Ctrl-C into exit 130 without a word, and SIGTERM killed the process where it stood
    (staging folders left behind): both now end through the same cleanup, with one line."""
    out = tmp_path / "w"
    proc = subprocess.Popen([sys.executable, "-m", "lewisrag", "world", "--out", str(out), "--entities", "40000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(6)  # imported and building the world, nothing written yet (40,000 entities take half a minute)
    assert proc.poll() is None
    os.killpg(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code and err.strip() == line, (proc.returncode, err)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_ctrl_c_while_the_cli_still_imports_is_one_line(monkeypatch, capsys):
    """The console script imported `lewisrag.cli` before any handler ran: a Ctrl-C in that first
    moment printed a KeyboardInterrupt traceback."""
    from importlib.metadata import entry_points

    import lewisrag.__main__ as entry

    (script,) = entry_points(group="console_scripts", name="lewisrag")
    assert script.value == "lewisrag.__main__:main"

    class CtrlC:  # raises where the import of lewisrag.cli would run
        def find_spec(self, name, path=None, target=None):
            if name == "lewisrag.cli":
                raise KeyboardInterrupt

    monkeypatch.delitem(sys.modules, "lewisrag.cli", raising=False)
    monkeypatch.setattr(sys, "meta_path", [CtrlC(), *sys.meta_path])
    monkeypatch.setattr(sys, "argv", ["lewisrag", "--help"])
    handler = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as e:
            entry.main()
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert e.value.code == 130 and capsys.readouterr().err == "interrupted\n"


class _GoneReader:
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize("stderr", [None, _GoneReader()])
def test_a_stop_while_importing_keeps_its_code_with_stderr_closed(monkeypatch, stderr):
    """`2>&-` (stderr None) raised AttributeError there, a reader gone BrokenPipeError: a traceback and exit 1."""
    import lewisrag.__main__ as entry

    monkeypatch.setattr(sys, "stderr", stderr)
    for code in (130, 143):
        with pytest.raises(SystemExit) as e:
            entry.stop(code)
        assert e.value.code == code


def test_a_world_rerun_killed_while_writing_leaves_the_old_world_whole(tmp_path, monkeypatch):
    """A rerun used to delete world.json and rewrite the files in place: killed halfway, the old world
    was gone and the folder held files of two seeds. Now every file is written beside its old one
    before any is swapped in."""
    from lewisrag.data import world as W

    out = tmp_path / "world"
    W.write_world(W.build_world(seed=0, entities=40), out)
    before = snapshot(out)
    real, written = W.write_jsonl, []

    def killed_on_the_fifth(path, records):
        if len(written) == 4:
            raise KeyboardInterrupt
        written.append(path)
        return real(path, records)

    monkeypatch.setattr(W, "write_jsonl", killed_on_the_fifth)
    with pytest.raises(KeyboardInterrupt):
        W.write_world(W.build_world(seed=1, entities=40), out)
    assert snapshot(out) == before  # and the four new files written before the interrupt are gone
    monkeypatch.undo()
    W.write_world(W.build_world(seed=1, entities=40), out)
    after = snapshot(out)
    assert after != before and not [k for k in after if k.startswith(".") and k != MARKER]


def test_a_world_rerun_keeps_the_users_files_and_refuses_to_overwrite_one(tmp_path, monkeypatch, capsys):
    """A rerun deleted every task file name, and replaced files its marker did not list: the user's
    fever_train.jsonl beside a Chinese world (which writes none) went without a word."""
    out = tmp_path / "w"
    world = ["world", "--out", out, "--entities", 40]
    assert run(monkeypatch, capsys, *world, "--lang", "zh")[0] == 0
    (out / "fever_train.jsonl").write_text("mine")
    (out / "notes").mkdir()
    (out / "notes" / "todo.txt").write_text("mine too")
    assert run(monkeypatch, capsys, *world, "--lang", "zh", "--seed", 1)[0] == 0
    assert (out / "fever_train.jsonl").read_text() == "mine" and (out / "notes" / "todo.txt").read_text() == "mine too"
    code, _, err = run(monkeypatch, capsys, *world)  # English writes fever_train.jsonl: the user's is in the way
    assert_one_line_error(code, err, "fever_train.jsonl", "not written by lewisrag")
    assert (out / "fever_train.jsonl").read_text() == "mine" and read_json(out / "world.json")["lang"] == "zh"
    assert run(monkeypatch, capsys, *world, "--overwrite")[0] == 0
    assert (out / "fever_train.jsonl").read_text() != "mine" and (out / "notes" / "todo.txt").read_text() == "mine too"
    assert "notes" not in read_json(out / MARKER)["files"]


def test_an_evaluation_rerun_refuses_to_overwrite_a_users_file_of_an_output_name(tmp_path, monkeypatch, capsys):
    answers = tmp_path / "answers.jsonl"
    answers.write_text(json.dumps({"id": "q1", "question": "Who?", "answer": "Ann [1].", "contexts": ["Ann leads."]}) + "\n")
    ev = ["eval", "answers", "--answers", answers, "--judge", "lexical", "--out", tmp_path / "e"]
    assert run(monkeypatch, capsys, *ev)[0] == 0
    (tmp_path / "e" / "ragas.jsonl").write_text("mine")
    code, _, err = run(monkeypatch, capsys, *ev, "--export", "ragas")  # before judging, not once the run is written
    assert_one_line_error(code, err, "ragas.jsonl", "not written by lewisrag")
    assert (tmp_path / "e" / "ragas.jsonl").read_text() == "mine"
    assert run(monkeypatch, capsys, *ev)[0] == 0 and (tmp_path / "e" / "ragas.jsonl").read_text() == "mine"

def _rewrite(out: Path, files: dict[str, str], overwrite: bool = False) -> None:
    """One run of a command that rewrites its `out` whole (a world, an evaluation), writing `files`."""
    with rewritten_dir(out, "evaluation", overwrite=overwrite) as d:
        for name, text in files.items():
            (d / name).parent.mkdir(parents=True, exist_ok=True)
            (d / name).write_text(text)


def test_a_rewritten_output_keeps_a_users_file_inside_its_folders(tmp_path):
    """Files the user put inside a folder the output wrote were not carried over by a rerun: the
    marker's "tree" knew them, but only names at the top were moved, so plots/mine.png was lost."""
    out = tmp_path / "e"
    _rewrite(out, {"results.json": "1", "plots/a.png": "a"})
    (out / "plots" / "mine.png").write_text("mine")
    _rewrite(out, {"results.json": "2", "plots/a.png": "b"})
    assert (out / "plots" / "mine.png").read_text() == "mine" and (out / "results.json").read_text() == "2"
    assert "plots/mine.png" not in read_json(out / MARKER)["tree"]  # still the user's, not adopted by the rerun
    _rewrite(out, {"results.json": "3"})  # a run without plots/: the user's file stays, alone in its folder
    assert (out / "plots" / "mine.png").read_text() == "mine" and not (out / "plots" / "a.png").exists()
    _rewrite(out, {"results.json": "4", "plots/a.png": "c"})
    (out / "plots" / "b.png").write_text("mine too")
    with pytest.raises(InputError, match="b.png.*not written by lewisrag"):
        _rewrite(out, {"results.json": "5", "plots/b.png": "new"})
    assert (out / "plots" / "b.png").read_text() == "mine too" and (out / "results.json").read_text() == "4"
    _rewrite(out, {"results.json": "5", "plots/b.png": "new"}, overwrite=True)
    assert (out / "plots" / "b.png").read_text() == "new" and (out / "plots" / "mine.png").read_text() == "mine"
    (out / "figs").write_text("a file of the user's where the new output writes a folder")
    with pytest.raises(InputError, match="figs.*not written by lewisrag"):
        _rewrite(out, {"results.json": "6", "figs/x.png": "x"})


def test_a_second_run_into_an_output_being_rewritten_is_refused(tmp_path):
    """Two reruns into one folder each swapped in a whole folder, and their renames could interleave."""
    out = tmp_path / "e"
    _rewrite(out, {"results.json": "1"})
    with rewritten_dir(out, "evaluation") as d:
        (d / "results.json").write_text("2")
        with pytest.raises(InputError, match="another lewisrag process is writing here"):
            _rewrite(out, {"results.json": "3"})
    assert (out / "results.json").read_text() == "2" and not [p for p in tmp_path.iterdir() if p.name != "e"]
    with pytest.raises(InputError, match="another lewisrag process"), exclusive(tmp_path / "new"):
        _rewrite(tmp_path / "new", {"results.json": "1"})
    assert not (tmp_path / "new").exists()  # a refused first run leaves no folder behind



def test_leftovers_of_a_sigkilled_writer_are_swept_by_the_next_command(tmp_path, monkeypatch, capsys):
    """SIGKILL runs no cleanup: a staging folder and a temporary file stay behind. The next command
    writing there removes them, and leaves those of a live process or another host alone."""
    killed = tmp_path / "killed.py"
    killed.write_text(
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from lewisrag.data.io import atomic_path\n"
        "from lewisrag.data.outputs import staged_dir\n"
        "top = Path(sys.argv[1])\n"
        "with staged_dir(top / 'w', 'world') as tmp, atomic_path(top / 'passages.jsonl') as part:\n"
        "    (tmp / 'entities.jsonl').write_text('half')\n"
        "    part.write_text('half')\n"
        "    print(os.getpid(), flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, str(killed), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    left = sorted(p.name for p in tmp_path.glob(".*"))
    assert len(left) == 2 and left[0].startswith(".passages.jsonl.") and left[1].startswith(".w.tmp."), left
    from lewisrag.data.io import owner_tag

    live = tmp_path / f".w.tmp.{owner_tag()}.abcd1234"  # this test's own process: alive
    elsewhere = tmp_path / f".w.tmp.{int(proc.stdout)}-{'0' * 6}.abcd1234"  # the dead process's id, on another host
    live.mkdir()
    elsewhere.mkdir()
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"id": "d", "title": "T", "text": "one two three"}) + "\n")
    code, _, err = run(monkeypatch, capsys, "chunk", "--docs", docs, "--out", tmp_path / "passages.jsonl")
    assert code == 0, err
    code, _, err = run(monkeypatch, capsys, "world", "--out", tmp_path / "w", "--entities", 40)
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.glob(".*")) == sorted([live.name, elsewhere.name])


def test_chunk_refuses_to_replace_a_file_without_overwrite(tmp_path, monkeypatch, capsys):
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"id": "d", "title": "T", "text": "one two three"}) + "\n")
    out = tmp_path / "passages.jsonl"
    out.write_text("precious\n")
    code, _, err = run(monkeypatch, capsys, "chunk", "--docs", docs, "--out", out)
    assert_one_line_error(code, err, "passages.jsonl", "--overwrite")
    assert out.read_text() == "precious\n"
    code, _, err = run(monkeypatch, capsys, "chunk", "--docs", docs, "--out", docs, "--overwrite")
    assert_one_line_error(code, err, "is --docs")
    code, _, err = run(monkeypatch, capsys, "chunk", "--docs", docs, "--out", out, "--overwrite")
    assert code == 0 and json.loads(out.read_text())["id"].startswith("d"), err
    (tmp_path / "link.jsonl").symlink_to(out)  # the rename would replace the link and leave its target stale
    code, _, err = run(monkeypatch, capsys, "chunk", "--docs", docs, "--out", tmp_path / "link.jsonl", "--overwrite")
    assert_one_line_error(code, err, "is a symbolic link", str(out))
    assert (tmp_path / "link.jsonl").is_symlink()


# ---------------------------------------------------------------------------------------------
# the bad-input table: one line, exit 2, nothing half-written


def _qa_with_gold(t: Path, qa, gold: str) -> Path:
    """A copy of the QA file whose third question names `gold` as its gold passage."""
    rows = [json.loads(line) for line in Path(qa).read_text().splitlines()]
    rows[2] = {**rows[2], "gold_passage_ids": [gold]}
    (t / "qa_gold.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return t / "qa_gold.jsonl"


def _dir_input(tmp_path):
    (tmp_path / "adir").mkdir()
    return tmp_path / "adir"


BAD_INPUTS = {
    "eval answers: a folder as the answers file": (
        lambda t, c: ["eval", "answers", "--answers", _dir_input(t), "--out", t / "run"], ["adir", "is a folder"]),
    "chunk: a folder as --docs": (
        lambda t, c: ["chunk", "--docs", _dir_input(t), "--out", t / "p.jsonl"], ["adir", "is a folder"]),
    "gate: a folder as --config": (
        lambda t, c: ["gate", "--baseline", c["gate"] / "baseline", "--candidate", c["gate"] / "clean", "--config", _dir_input(t)],
        ["adir"]),
    "eval answers: --out is a file": (
        lambda t, c: ["eval", "answers", "--answers", c["answers"], "--out", c["answers"]], ["answers.jsonl", "not a folder"]),
    "chunk: --out is a folder": (
        lambda t, c: ["chunk", "--docs", c["docs"], "--out", _mkdir(t / "x.jsonl")], ["x.jsonl", "is a folder"]),
    "world: --out below a read-only place": (
        lambda t, c: ["world", "--out", "/proc/lewisrag-test/world", "--entities", 40], ["/proc", "cannot write"]),
    "eval answers: --out below a file": (
        lambda t, c: ["eval", "answers", "--answers", c["answers"], "--out", c["answers"] / "run"], ["answers.jsonl"]),
    "index search: --n-docs -1": (
        lambda t, c: ["index", "search", "--index", c["bm25"], "-q", "leader", "--n-docs", -1], ["--n-docs", "at least 1"]),
    "index search: --n-docs 0": (
        lambda t, c: ["index", "search", "--index", c["bm25"], "-q", "leader", "--n-docs", 0], ["--n-docs", "at least 1"]),
    "index search: an empty query": (
        lambda t, c: ["index", "search", "--index", c["bm25"], "-q", "  "], ["--query", "empty"]),
    "index build: --shard-size 0": (lambda t, c: _build(t, c, "--shard-size", 0), ["--shard-size"]),
    "index build: --batch-size 0": (lambda t, c: _build(t, c, "--batch-size", 0), ["--batch-size"]),
    "index build: more IVF lists than passages": (
        lambda t, c: _build(t, c, "--faiss", "IVF256,Flat"), ["--faiss", "256 inverted lists"]),
    "index build: PQ needs 256 training vectors": (
        lambda t, c: _build(t, c, "--faiss", "IVF2,PQ4"), ["--faiss", "256 centroids"]),
    "index build: an unknown FAISS factory": (lambda t, c: _build(t, c, "--faiss", "Bogus42"), ["--faiss", "Bogus42"]),
    "eval retrieval: --recall-at 0": (
        lambda t, c: ["eval", "retrieval", "--index", c["bm25"], "--questions", c["qa"], "--recall-at", 0], ["--recall-at", "at least 1"]),
    "index build: --faiss with --encoder bm25": (  # used to be ignored in silence
        lambda t, c: ["index", "build", "--passages", c["passages"], "--encoder", "bm25", "--out", t / "i", "--faiss", "HNSW32"],
        ["--faiss", "applies to dense indexes"]),
    "index build: --shard-size with --encoder bm25": (  # used to be ignored in silence
        lambda t, c: ["index", "build", "--passages", c["passages"], "--encoder", "bm25", "--out", t / "i", "--shard-size", 8],
        ["--shard-size", "applies to dense indexes"]),
    "index search: an empty --encoder": (  # used to be read as 'not given'
        lambda t, c: ["index", "search", "--index", c["dense"], "--encoder", "", "who?"], ["--encoder", "is empty"]),
    "index build: an empty --out": (  # Path('') is the current folder
        lambda t, c: ["index", "build", "--passages", c["passages"], "--encoder", "bm25", "--out", ""], ["--out", "is empty"]),
    "train rag: an unknown --train-kinds": (  # used to blame the file's answers ("0 questions with answers")
        lambda t, c: ["train", "rag", "--index", c["dense"], "--encoder", c["dpr"], "--generator", c["generator"], "--train", c["qa"],
                      "--dev", c["qa"], "--out", t / "r", "--train-kinds", "shrot"], ["--train-kinds", "'shrot'"]),
    "train rag: a gold id the index does not hold": (  # used to make the dev hit@k a miss in silence
        lambda t, c: ["train", "rag", "--index", c["dense"], "--encoder", c["dpr"], "--generator", c["generator"],
                      "--train", c["qa"], "--dev", _qa_with_gold(t, c["qa"], "nowhere-1"), "--out", t / "r"],
                     ["qa_gold.jsonl:3", "gold_passage_ids", "'nowhere-1' is not in the index"]),
    "train rag: --task fever with answers that are no labels": (  # trained names as labels, accuracy 0, exit 0
        lambda t, c: ["train", "rag", "--index", c["dense"], "--encoder", c["dpr"], "--generator", c["generator"], "--train", c["qa"],
                      "--dev", c["qa"], "--out", t / "r", "--task", "fever"], ["qa.jsonl:1", "answers[0]", "no FEVER label"]),
    "train rag: --train-kinds keeping too few": (  # used to blame the file's answers ("field 'answers'")
        lambda t, c: ["train", "rag", "--index", c["dense"], "--encoder", c["dpr"], "--generator", c["generator"], "--train", c["qa"],
                      "--dev", c["qa"], "--out", t / "r", "--train-kinds", "long"], ["--train-kinds", "long keeps 0 of"]),
    "eval retrieval: no question has gold passage ids": (  # used to print recall nan over 0 questions, exit 0
        lambda t, c: ["eval", "retrieval", "--index", c["bm25"], "--questions", _qa(t, [{"question": "q?", "answers": ["a"]}])],
        ["qa.jsonl", "gold_passage_ids", "cannot be measured"]),
    "eval retrieval: a gold id the index does not hold": (  # used to count as a miss at every k
        lambda t, c: ["eval", "retrieval", "--index", c["bm25"], "--questions",
                      _qa(t, [{"question": "q?", "answers": ["a"], "gold_passage_ids": ["nowhere-1"]}])],
        ["qa.jsonl:1", "gold_passage_ids", "'nowhere-1' is not in the index"]),
    "eval retrieval: ... named by the file's own field": (  # --qa-fields maps the name: the message uses the file's
        lambda t, c: ["eval", "retrieval", "--index", c["bm25"], "--qa-fields", "gold_passage_ids=pids", "--questions",
                      _qa(t, [{"question": "q?", "answers": ["a"], "pids": ["nowhere-1"]}])],
        ["qa.jsonl:1", "field 'pids'", "'nowhere-1' is not in the index"]),
    "eval retrieval: a bad second index": (  # found before the first is searched
        lambda t, c: ["eval", "retrieval", "--index", c["bm25"], "--index", t / "missing", "--questions", c["qa"]],
        ["missing", "index directory not found"]),
    "eval retrieval: --encoder with BM25 indexes only": (  # used to be ignored
        lambda t, c: ["eval", "retrieval", "--index", c["bm25"], "--questions", c["qa"], "--encoder", c["dpr"]],
        ["--encoder", "is BM25"]),
    "index search: --index is a file": (
        lambda t, c: ["index", "search", "--index", c["qa"], "-q", "leader"], ["is a file; an index is a folder"]),
    "pretrain: --steps 0": (
        lambda t, c: ["pretrain", "--out", t / "g", "--preset", "tiny", "--steps", 0], ["--steps", "positive"]),
    "world: --entities out of range (a usage error)": (
        lambda t, c: ["world", "--out", t / "w", "--entities", 1], ["--entities", "lewisrag world --help"]),
    "world: --out missing (a usage error)": (
        lambda t, c: ["world"], ["Missing option '--out'"]),
    "ask: --n-docs 0": (
        lambda t, c: ["ask", "--model", t / "nothing", "--index", c["dense"], "--n-docs", 0, "who?"], ["--n-docs"]),
    "ask: an empty question": (
        lambda t, c: ["ask", "--model", t / "nothing", "--index", c["dense"], " "], ["question", "is empty"]),
    "index search: index.faiss missing": (
        lambda t, c: ["index", "search", "--index", _damaged(c["dense"], t, "index.faiss", None), "-q", "leader"],
        ["index.faiss", "missing"]),
    "index search: embeddings.npy truncated": (
        lambda t, c: ["index", "search", "--index", _damaged(c["dense"], t, "embeddings.npy", 100), "-q", "leader"],
        ["embeddings.npy"]),
    "index search: index.faiss is garbage": (
        lambda t, c: ["index", "search", "--index", _damaged(c["dense"], t, "index.faiss", b"garbage"), "-q", "leader"],
        ["index.faiss"]),
    "index search: a BM25 file truncated": (
        lambda t, c: ["index", "search", "--index", _damaged(c["bm25"], t, "bm25/params.index.json", 10), "-q", "leader"],
        ["bm25", "cannot read the BM25 index"]),
    "index search: a BM25 params file of the wrong shape": (  # was a TypeError traceback, exit 1
        lambda t, c: ["index", "search", "--index", _damaged(c["bm25"], t, "bm25/params.index.json", b"[]"), "-q", "leader"],
        ["bm25", "cannot read the BM25 index"]),
    "index search: a BM25 vocabulary of the wrong shape": (  # was an AttributeError traceback
        lambda t, c: ["index", "search", "--index", _damaged(c["bm25"], t, "bm25/vocab.index.json", b"[]"), "-q", "leader"],
        ["bm25", "cannot read the BM25 index"]),
    "index search: bm25/ missing": (
        lambda t, c: ["index", "search", "--index", _damaged(c["bm25"], t, "bm25", None), "-q", "leader"],
        ["bm25", "cannot read the BM25 index"]),
    "index search: index.faiss searching by L2": (  # was searched by distance, read as inner products
        lambda t, c: ["index", "search", "--index", _damaged(c["dense"], t, "index.faiss", _same_shape(c["dense"], "l2")),
                      "-q", "leader"], ["index.faiss", "inner product"]),
    "index search: embeddings.npy of float64": (  # was accepted
        lambda t, c: ["index", "search", "--index", _damaged(c["dense"], t, "embeddings.npy", _same_shape(c["dense"], "f64")),
                      "-q", "leader"], ["embeddings.npy", "float64"]),
    "index search: index.faiss of another width": (
        lambda t, c: ["index", "search", "--index", _damaged(c["dense"], t, "index.faiss", _flat_index_bytes(8)), "-q", "leader"],
        ["damaged", "vectors of 8"]),
    "index tune: a BM25 index": (
        lambda t, c: ["index", "tune", "--index", c["bm25"], "--questions", c["qa"]], ["a bm25 index where a dense one"]),
    "index tune: --n-docs past the passages": (  # a 46 GiB allocation's traceback at 99,999
        lambda t, c: ["index", "tune", "--index", _ivf(t, c), "--questions", c["qa"], "--n-docs", 99999],
        ["--n-docs", "must be between 1 and the index's"]),
    "compare: --position-questions -3": (  # read as a slice: the probe ran on all but 3 questions
        lambda t, c: ["compare", "--run", t / "nothing", "--position-questions", -3], ["--position-questions", "greater than or equal to 0"]),
    "swap: --batch-size 0": (
        lambda t, c: ["swap", "--model", t / "nothing", "--index", c["dense"], "--questions", c["qa"], "--batch-size", 0],
        ["--batch-size", "at least 1"]),
    "swap: the same --questions twice": (  # folded into one cell of the matrix, silently
        lambda t, c: ["swap", "--model", t / "nothing", "--index", c["dense"], "--questions", c["qa"], "--questions",
                      f"{c['qa'].parent}/./{c['qa'].name}"], ["--questions", "is given twice (as"]),
    "swap: --num-beams 0": (
        lambda t, c: ["swap", "--model", t / "nothing", "--index", c["dense"], "--questions", c["qa"], "--num-beams", 0],
        ["--num-beams", "at least 1"]),
    "swap: --max-length 0": (
        lambda t, c: ["swap", "--model", t / "nothing", "--index", c["dense"], "--questions", c["qa"], "--max-length", 0],
        ["--max-length", "at least 2"]),
    "train dpr: --init whose config.json has a value of the wrong type": (
        lambda t, c: ["train", "dpr", "--train", c["qa"], "--passages", c["passages"], "--out", t / "d", "--steps", 1,
                      "--batch-size", 2, "--init", _bad_config(c["dpr"], t)], ["config.json", "num_hidden_layers"]),
    # a flag sweep found these: tracebacks, native aborts, hangs, or exit 0 with nonsense
    "index build: HNSW0 (FAISS aborted the process)": (
        lambda t, c: _build(t, c, "--faiss", "HNSW0"), ["--faiss", "HNSW needs at least 1"]),
    "index build: IVF0 (built, then every search failed)": (
        lambda t, c: _build(t, c, "--faiss", "IVF0,Flat"), ["--faiss", "IVF needs at least 1"]),
    "index search: an empty --index": (
        lambda t, c: ["index", "search", "--index", "", "-q", "leader"], ["index"]),
    "index search: --n-docs past the passages": (
        lambda t, c: ["index", "search", "--index", c["dense"], "-q", "leader", "--n-docs", 99999999999],
        ["--n-docs", "must be between 1 and the index's"]),
    "eval retrieval: --recall-at past the passages": (
        lambda t, c: ["eval", "retrieval", "--index", c["bm25"], "--questions", c["qa"], "--recall-at", 99999999999],
        ["--recall-at", "at most the smallest index's"]),
    "index tune: --rerank-depth past the passages": (
        lambda t, c: ["index", "tune", "--index", c["dense"], "--questions", c["qa"], "--n-docs", 2, "--rerank-depth", 99999999999],
        ["--rerank-depth", "passages"]),
    "train dpr: --hidden-size not a multiple of the heads": (
        lambda t, c: ["train", "dpr", "--train", c["qa"], "--passages", c["passages"], "--out", t / "d", "--steps", 1,
                      "--hidden-size", 15], ["--hidden-size", "multiple of the 4 attention heads"]),
    "train dpr: a seed numpy cannot take": (
        lambda t, c: ["train", "dpr", "--train", c["qa"], "--passages", c["passages"], "--out", t / "d", "--steps", 1,
                      "--seed", 99999999999999999999], ["--seed"]),
    "train rag: --eval-questions 0 (dev_em NaN, exit 0)": (
        lambda t, c: ["train", "rag", "--index", c["dense"], "--encoder", c["dpr"], "--generator", c["generator"], "--train", c["qa"],
                      "--dev", c["qa"], "--out", t / "r", "--eval-questions", 0], ["--eval-questions", "at least 1"]),
    "train rag: --max-target-length 1": (
        lambda t, c: ["train", "rag", "--index", c["dense"], "--encoder", c["dpr"], "--generator", c["generator"], "--train", c["qa"],
                      "--dev", c["qa"], "--out", t / "r", "--max-target-length", 1], ["--max-target-length", "at least 2"]),
    "pretrain: --minutes inf (trained without end)": (
        lambda t, c: ["pretrain", "--out", t / "g", "--preset", "tiny", "--minutes", "inf"], ["--minutes", "finite"]),
    "reproduce: more --threads than CPUs (20,004 threads, never ended)": (
        lambda t, c: ["reproduce", "--preset", "tiny", "--out", t / "r", "--threads", 10000], ["--threads", "CPUs here"]),
    "swap: --max-length 1 (empty answers, EM 0)": (
        lambda t, c: ["swap", "--model", t / "nothing", "--index", c["dense"], "--questions", c["qa"], "--max-length", 1],
        ["--max-length", "at least 2"]),
    # flags that used to be ignored in silence under other flags: each is refused, naming itself
    "index search: --encoder with a BM25 index": (
        lambda t, c: ["index", "search", "--index", c["bm25"], "--encoder", c["dpr"], "-q", "who?"],
        ["--encoder", "applies to dense indexes"]),
    "eval retrieval: --swap with a BM25 index": (
        lambda t, c: ["eval", "retrieval", "--index", c["bm25"], "--questions", c["qa"], "--swap"], ["--swap", "dense indexes"]),
    "train stitched: --encoder with a BM25 index": (
        lambda t, c: ["train", "stitched", "--index", c["bm25"], "--generator", c["dpr"], "--train", c["qa"], "--out", t / "s",
                      "--encoder", c["dpr"]], ["--encoder", "dense indexes"]),
    "index build: --batch-size with --reuse-embeddings": (
        lambda t, c: ["index", "build", "--passages", c["passages"], "--encoder", c["dpr"], "--out", t / "i",
                      "--reuse-embeddings", "--batch-size", 8], ["--batch-size", "--reuse-embeddings"]),
    "train dpr: --hidden-size with --init": (
        lambda t, c: ["train", "dpr", "--train", c["qa"], "--passages", c["passages"], "--out", t / "d", "--init", c["dpr"],
                      "--hidden-size", 64], ["--hidden-size", "from scratch"]),
    "train dpr: --lr with --steps 0": (
        lambda t, c: ["train", "dpr", "--init", c["dpr"], "--out", t / "d", "--steps", 0, "--lr", 0.1], ["--lr", "--steps 0"]),
    "train rag: --eval-beams with --eval-every 0": (
        lambda t, c: _rag(t, c, "--eval-every", 0, "--eval-beams", 4), ["--eval-beams", "--eval-every 0"]),
    "train rag: --overwrite with --resume": (lambda t, c: _rag(t, c, "--resume", "--overwrite"), ["--overwrite", "--resume"]),
    "train rag: --eval-beams with --task fever": (
        lambda t, c: _rag(t, c, "--task", "fever", "--eval-beams", 4), ["--eval-beams", "fever"]),
    "train rag: --retriever-lr-scale with --freeze-retriever": (
        lambda t, c: _rag(t, c, "--freeze-retriever", "--retriever-lr-scale", 0.1),
        ["--retriever-lr-scale", "--freeze-retriever"]),
    "train rag: --reindex-every past --steps": (
        lambda t, c: _rag(t, c, "--train-context-encoder", "--steps", 4, "--reindex-every", 10), ["--reindex-every", "never"]),
    "eval answers: --concurrency with the lexical judge": (
        lambda t, c: ["eval", "answers", "--answers", c["answers"], "--out", t / "o", "--concurrency", 8],
        ["--concurrency", "llm judge"]),
    "eval answers: --claim-extractor with --no-claims": (
        lambda t, c: ["eval", "answers", "--answers", c["answers"], "--out", t / "o", "--no-claims", "--claim-extractor", "llm"],
        ["--claim-extractor", "--no-claims"]),
    "eval bughunt: --cache-dir without an llm judge": (
        lambda t, c: ["eval", "bughunt", "--cache-dir", t / "cache"], ["--cache-dir", "llm judge"]),
    "eval bughunt: --overwrite without --out": (lambda t, c: ["eval", "bughunt", "--overwrite"], ["--overwrite", "--out"]),
    "eval bughunt: --lang with --json and no --out": (
        lambda t, c: ["eval", "bughunt", "--json", "--lang", "zh"], ["--lang", "--json"]),
    "calibrate: --overwrite without --out": (
        lambda t, c: ["calibrate", "--judge", "lexical", "--labels", c["qa"], "--overwrite"], ["--overwrite", "--out"]),
    "swap: --overwrite without --out": (
        lambda t, c: ["swap", "--model", t / "nothing", "--index", c["dense"], "--questions", c["qa"], "--overwrite"],
        ["--overwrite", "--out"]),
    "reproduce: --hub-dir with the built-in world's preset": (
        lambda t, c: ["reproduce", "--preset", "tiny", "--out", t / "r", "--hub-dir", t], ["--hub-dir", "--preset tiny"]),
    "pretrain: --set snapshot_b_share=1 (divided by zero once reading began)": (
        lambda t, c: ["pretrain", "--out", t / "g", "--preset", "tiny", "--set", "snapshot_b_share=1"],
        ["snapshot_b_share", "below 1"]),
}


def _build(t, c, *extra) -> list:
    """`lewisrag index build` of the fixtures' passages with their DPR checkpoint, with `extra` flags."""
    return ["index", "build", "--passages", c["passages"], "--encoder", c["dpr"], "--out", t / "i", *extra]


def _ivf(t, c) -> Path:
    """An IVF index of the fixtures' passages (a Flat one has nothing to tune: `index tune` refuses it first)."""
    out = t / "ivf"
    build_dense_index(read_passages(c["passages"]), c["dpr"], out, DenseBuildConfig(factory="IVF2,Flat"))
    return out


def _rag(t, c, *extra) -> list:
    """`lewisrag train rag` on the fixtures, with `extra` flags."""
    return ["train", "rag", "--index", c["dense"], "--encoder", c["dpr"], "--generator", c["generator"], "--train", c["qa"],
            "--dev", c["qa"], "--out", t / "r", *extra]


def _same_shape(index: Path, what: str) -> bytes:
    """index.faiss searching by L2 ("l2") or embeddings.npy as float64 ("f64"), of `index`'s own shape."""
    import io

    import faiss

    vectors = np.load(index / "embeddings.npy")
    if what == "f64":
        buf = io.BytesIO()
        np.save(buf, vectors.astype(np.float64))
        return buf.getvalue()
    l2 = faiss.IndexFlatL2(vectors.shape[1])
    l2.add(vectors.astype(np.float32))
    return faiss.serialize_index(l2).tobytes()


def _flat_index_bytes(dim: int) -> bytes:
    """A FAISS Flat index over 60 vectors of `dim` values, serialized."""
    import faiss

    index = faiss.IndexFlatIP(dim)
    index.add(np.ones((60, dim), np.float32))
    return faiss.serialize_index(index).tobytes()


def _bad_config(dpr: Path, tmp: Path) -> Path:
    """A copy of the DPR checkpoint's context encoder whose config.json has "num_hidden_layers": "one"."""
    copy = tmp / "badcfg"
    shutil.copytree(dpr / "ctx_encoder", copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "num_hidden_layers": "one"}))
    return copy


def _qa(tmp: Path, rows: list[dict]) -> Path:
    path = tmp / "qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _mkdir(p: Path) -> Path:
    p.mkdir()
    return p


def _damaged(index: Path, tmp: Path, name: str, how) -> Path:
    """A copy of `index` whose file `name` is deleted (None), cut to `how` bytes (int) or replaced (bytes)."""
    copy = tmp / "damaged"
    shutil.copytree(index, copy)
    target = copy / name
    if how is None:
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    elif isinstance(how, int):
        target.write_bytes(target.read_bytes()[:how])
    else:
        target.write_bytes(how)
    return copy


@pytest.fixture
def inputs(tiny_corpus, dpr_ckpt, dense_idx, bart_dir, tmp_path):
    bm25 = tmp_path / "bm25"
    from lewisrag.index.bm25 import build_bm25_index

    build_bm25_index(read_passages(tiny_corpus["passages"]), bm25)
    answers = tmp_path / "answers.jsonl"
    answers.write_text(json.dumps({"user_input": "q", "response": "a", "retrieved_contexts": ["a"], "id": "1"}) + "\n")
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"id": "d", "title": "T", "text": "one two three"}) + "\n")
    return {"passages": tiny_corpus["passages"], "qa": tiny_corpus["qa"], "dpr": dpr_ckpt, "dense": dense_idx, "bm25": bm25, "answers": answers,
            "generator": bart_dir, "docs": docs, "gate": Path(__file__).parent / "data" / "gate_runs"}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_and_exit_2(case, inputs, tmp_path, monkeypatch, capsys):
    make_args, needles = BAD_INPUTS[case]
    work = tmp_path / "work"
    work.mkdir()
    args = make_args(work, inputs)
    before = {p.name for p in work.iterdir()}
    code, _, err = run(monkeypatch, capsys, *args)
    assert_one_line_error(code, err, *needles)
    left = {p.name for p in work.iterdir()} - before - {"damaged"}
    assert not left, f"left behind: {left}"  # no output folder, no .partial, no temp files


MANIFEST_DAMAGE = [  # (index, the manifest's edit, the field the error must name)
    ("bm25", lambda m: 123, "(top level)"),
    ("bm25", lambda m: {**m, "n_passages": str(m["n_passages"])}, "n_passages"),
    ("bm25", lambda m: {**m, "kind": 5}, "kind"),
    ("bm25", lambda m: {**m, "kind": "dense"}, "dim"),
    ("bm25", lambda m: {**m, "format": 99}, "format"),
    ("dense", lambda m: {**m, "encoder": None}, "encoder"),
    ("dense", lambda m: {**m, "encoder": {"path": 3, "ctx_fingerprint": "x"}}, "encoder.path"),
    ("dense", lambda m: {**m, "search_params": "x"}, "search_params"),
    ("dense", lambda m: {**m, "search_params": {"nprobe": "x"}}, "search_params.nprobe"),
    ("dense", lambda m: {**m, "search_params": {"nprob": 4}}, "search_params.nprob"),  # was set on nothing, in silence
    ("dense", lambda m: {**m, "search_params": {"nprobe": 2.5}}, "search_params.nprobe"),
    # FAISS's own limits: nprobe 0 failed every search with a RuntimeError (`cur_nprobe > 0`), efSearch 0
    # returned no passages, and a value past a C int wraps round
    ("dense", lambda m: {**m, "search_params": {"nprobe": 0}}, "search_params.nprobe"),
    ("dense", lambda m: {**m, "search_params": {"efSearch": 0}}, "search_params.efSearch"),
    ("dense", lambda m: {**m, "search_params": {"quantizer_efSearch": 2**31}}, "search_params.quantizer_efSearch"),
    ("dense", lambda m: {**m, "rerank_depth": -1}, "rerank_depth"),
    ("dense", lambda m: {**m, "rerank_depth": 10**12}, "rerank_depth"),  # a search asked for TiBs of candidates
    ("dense", lambda m: {**m, "metric": "l2"}, "metric"),  # searched by inner product all the same, in silence
]


@pytest.mark.parametrize("kind,edit,field", MANIFEST_DAMAGE)
def test_a_damaged_manifest_is_one_line_naming_its_field(kind, edit, field, tiny_corpus, dense_idx, tmp_path, monkeypatch,
                                                         capsys):
    index = tmp_path / "idx"
    if kind == "dense":
        shutil.copytree(dense_idx, index)
    else:
        assert run(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder", "bm25",
                   "--out", index)[0] == 0
    manifest = index / "manifest.json"
    manifest.write_text(json.dumps(edit(json.loads(manifest.read_text()))))
    code, _, err = run(monkeypatch, capsys, "index", "search", "--index", index, "-q", "who leads")
    assert_one_line_error(code, err, str(manifest), f"field '{field}'")


def test_a_dpr_checkpoint_records_token_limits_its_encoders_hold(tiny_corpus, dpr_ckpt, tmp_path, monkeypatch, capsys):
    """lewisrag_dpr.json's max_length beyond the encoders' positions is named before encoding (it
    failed inside BERT's embeddings, a partial build left behind); one missing gets a limit that fits."""
    ckpt = tmp_path / "dpr"
    shutil.copytree(dpr_ckpt, ckpt)
    meta_file = ckpt / "lewisrag_dpr.json"
    meta = json.loads(meta_file.read_text())
    positions = json.loads((ckpt / "ctx_encoder" / "config.json").read_text())["max_position_embeddings"]
    meta_file.write_text(json.dumps({**meta, "max_length": positions + 1}))
    build = ["index", "build", "--passages", tiny_corpus["passages"], "--encoder", ckpt, "--device", "cpu"]
    code, _, err = run(monkeypatch, capsys, *build, "--out", tmp_path / "idx")
    assert_one_line_error(code, err, str(meta_file), "field 'max_length'", f"context encoder's {positions} positions")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dpr"]  # nothing half-built
    meta_file.write_text(json.dumps({k: v for k, v in meta.items() if k != "max_length"}))
    assert run(monkeypatch, capsys, *build, "--out", tmp_path / "idx")[0] == 0
    built = json.loads((tmp_path / "idx" / "manifest.json").read_text())["build"]["max_length"]
    assert built == min(256, positions)


def test_factory_errors_come_before_encoding(tiny_corpus, dpr_ckpt, tmp_path):
    """A bad factory is refused before a single shard is encoded (nothing to resume from)."""
    calls = []
    with pytest.raises(InputError, match="--faiss"):
        build_dense_index(read_passages(tiny_corpus["passages"]), dpr_ckpt, tmp_path / "i",
                          DenseBuildConfig(factory="IVF1000,Flat"), lambda *a: calls.append(a))
    assert calls == [] and not (tmp_path / "i.partial").exists()



@pytest.mark.parametrize("factory", ["IDMap,Flat", "IDMap2,Flat"])
def test_an_idmap_factory_is_refused_before_encoding(tiny_corpus, dpr_ckpt, tmp_path, factory):
    """IDMap took FAISS's add() and raised a RuntimeError traceback after the whole corpus was encoded."""
    calls = []
    with pytest.raises(InputError, match="leave IDMap out"):
        build_dense_index(read_passages(tiny_corpus["passages"]), dpr_ckpt, tmp_path / "i",
                          DenseBuildConfig(factory=factory), lambda *a: calls.append(a))
    assert calls == []


def test_a_factory_faiss_cannot_fill_is_one_line(monkeypatch, capsys, tiny_corpus, dpr_ckpt, tmp_path):
    """NSG over fewer than 100 vectors failed in FAISS's add(): a RuntimeError traceback, exit 1."""
    code, _, err = run(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder",
                       dpr_ckpt, "--device", "cpu", "--faiss", "NSG32,Flat", "--out", tmp_path / "idx")
    assert_one_line_error(code, err, "--faiss", "could not add", "NSG32,Flat")
    assert not (tmp_path / "idx").exists()


# ---------------------------------------------------------------------------------------------
# state files: a damaged one is rebuilt, not fatal


def test_truncated_plan_is_rebuilt_not_fatal(tiny_corpus, dpr_ckpt, dense_idx, tmp_path):
    passages = read_passages(tiny_corpus["passages"])
    partial = tmp_path / "i.partial"
    partial.mkdir()
    (partial / "plan.json").write_text('{"content_hash": "ab')  # a write cut short
    build_dense_index(passages, dpr_ckpt, tmp_path / "i")
    assert not partial.exists()
    assert np.array_equal(np.load(tmp_path / "i" / "embeddings.npy"), np.load(dense_idx / "embeddings.npy"))


def test_a_users_folder_named_like_a_partial_build_is_not_removed(tiny_corpus, dpr_ckpt, tmp_path):
    partial = tmp_path / "i.partial"
    partial.mkdir()
    (partial / "thesis.tex").write_text("years of work")
    with pytest.raises(InputError, match="not made by lewisrag"):
        build_dense_index(read_passages(tiny_corpus["passages"]), dpr_ckpt, tmp_path / "i")
    assert (partial / "thesis.tex").read_text() == "years of work"


@pytest.mark.parametrize("encoder", ["bm25", "dense"])
def test_a_second_build_into_the_same_index_is_refused_while_the_first_runs(encoder, tiny_corpus, dpr_ckpt, tmp_path,
                                                                             monkeypatch, capsys):
    """Two builds into one --out shared IDX.partial: one's reset removed the other's shards while
    it wrote them. The folder is held (a kernel lock, nothing to clean after a kill); a second
    process is one line, exit 2, and the first one's files are left alone."""
    from lewisrag.data.outputs import exclusive

    out = tmp_path / "idx"
    with exclusive(tmp_path / "idx.partial"):  # what the first build holds while it runs (a separate open: a separate lock)
        (tmp_path / "idx.partial" / "plan.json").write_text("{}")  # the first build's work
        code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder",
                                "bm25" if encoder == "bm25" else dpr_ckpt, "--out", out)
        assert_one_line_error(code, err, "idx.partial", "another lewisrag process is writing here")
        assert (tmp_path / "idx.partial" / "plan.json").read_text() == "{}" and not out.exists()
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder",
                            "bm25" if encoder == "bm25" else dpr_ckpt, "--out", out)
    assert code == 0 and (out / "manifest.json").is_file() and not (tmp_path / "idx.partial").exists(), err


# ---------------------------------------------------------------------------------------------
# smaller items


def test_a_byte_order_mark_is_read(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + json.dumps({"id": "a", "title": "T", "text": "x"}).encode() + b"\n")
    assert [p.id for p in read_passages(f)] == ["a"]
    j = tmp_path / "c.json"
    j.write_bytes(b"\xef\xbb\xbf" + b'{"a": 1}')
    assert read_json(j) == {"a": 1}


def test_questions_whose_gold_ids_are_unknown_are_counted(tiny_corpus, tmp_path):
    qa = read_qa(tiny_corpus["qa"])
    import dataclasses

    stray = [dataclasses.replace(qa[0], id="stray", gold_passage_ids=["no-such-passage"])]
    meta = train_dpr(DPRTrainConfig(steps=1, **TINY), qa + stray, read_passages(tiny_corpus["passages"]), tmp_path / "d")
    assert meta["n_no_gold"] == 1 and meta["n_train"] == len(qa)


def test_bm25_index_bytes_do_not_depend_on_the_hash_seed(tiny_corpus, tmp_path):
    for seed in ("1", "2"):
        subprocess.run([sys.executable, "-m", "lewisrag.cli", "index", "build", "--passages", str(tiny_corpus["passages"]),
                        "--encoder", "bm25", "--out", str(tmp_path / seed)], check=True, capture_output=True,
                       env={**os.environ, "PYTHONHASHSEED": seed})
    assert snapshot(tmp_path / "1") == snapshot(tmp_path / "2")


def test_a_failed_bm25_build_leaves_no_partial_folder(tiny_corpus, tmp_path, monkeypatch):
    """A BM25 build has no resume: its IDX.partial/ was left behind by an error in writing."""
    from lewisrag.index import bm25, store

    def full(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(store, "write_passages", full)
    with pytest.raises(OSError, match="disk full"):
        bm25.build_bm25_index(read_passages(tiny_corpus["passages"]), tmp_path / "idx")
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# kill -9 during an index build, then resume: the same bytes


def test_sigkilled_index_build_resumes_to_identical_files(tiny_corpus, dpr_ckpt, dense_idx, tmp_path):
    """Killed after a random number of encoded shards (seeded), the rerun finishes the same index."""
    out = tmp_path / "killed"
    shards = out.with_name("killed.partial") / "shards"
    cmd = [sys.executable, "-m", "lewisrag.cli", "index", "build", "--passages", str(tiny_corpus["passages"]),
           "--encoder", str(dpr_ckpt), "--out", str(out), "--shard-size", "1", "--batch-size", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    kill_after = random.Random(7).randint(1, 30)  # of 60 shards
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if shards.is_dir() and len(list(shards.glob("*.done"))) >= kill_after:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL and not (out / "manifest.json").exists()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    straight = tmp_path / "straight"
    subprocess.run([*cmd[:-5], str(straight), *cmd[-4:]], env=env, check=True, capture_output=True)
    a, b = snapshot(out), snapshot(straight)
    assert a.keys() == b.keys()
    for name in a:
        if name != "manifest.json":  # it names the output path
            assert a[name] == b[name], name
    assert read_json(out / "manifest.json")["content_hash"] == read_json(straight / "manifest.json")["content_hash"]
    assert MARKER in a


def test_an_error_under_a_progress_display_is_all_of_stderr(inputs, tmp_path, monkeypatch, capsys):
    """Raised while progress bars are shown, the error is still the only line: no unfinished bar and
    no blank line (rich ends a display on a non-terminal with one) above it."""
    code, _, err = run(monkeypatch, capsys, "index", "build", "--passages", inputs["passages"], "--encoder", inputs["dpr"],
                       "--out", tmp_path / "i", "--batch-size", 0)
    assert code == 2 and err.startswith("error: --batch-size") and err.count("\n") == 1, repr(err)


def test_an_output_folder_whose_writing_fails_is_left_as_it_was(tmp_path):
    """A failure inside output_dir (a judge or a disk error after the folder was marked) left a folder
    holding only lewisrag's marker, or half the outputs."""
    from lewisrag.data.outputs import output_dir

    def fail(out: Path) -> None:
        with pytest.raises(OSError, match="disk full"), output_dir(out, "calibration") as d:
            (d / "calibration.json").write_text("{")
            raise OSError("disk full")

    fail(tmp_path / "new")
    assert not (tmp_path / "new").exists() and os.listdir(tmp_path) == []  # no staging folder either
    (tmp_path / "made").mkdir()
    fail(tmp_path / "made")
    assert (tmp_path / "made").is_dir() and not any((tmp_path / "made").iterdir())
    with output_dir(tmp_path / "earlier", "calibration") as d:  # an earlier output: rewritten file by file
        (d / "calibration.json").write_text("{}")
    fail(tmp_path / "earlier")
    assert made_by(tmp_path / "earlier") == "calibration" and (tmp_path / "earlier" / "calibration.json").exists()


def test_a_failed_write_takes_away_the_parent_folders_it_made(tmp_path):
    """`--out a/b/x` made a/ and b/ before writing; a failed write left them behind, empty."""
    from lewisrag.data.io import atomic_path
    from lewisrag.data.outputs import staged_dir

    for writer in (atomic_path, staged_dir):
        with pytest.raises(OSError, match="disk full"), writer(tmp_path / "a" / "b" / "x"):
            raise OSError("disk full")
        assert os.listdir(tmp_path) == [], writer
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "mine.txt").write_text("the user's")
    with pytest.raises(OSError), atomic_path(tmp_path / "a" / "b" / "x"):
        raise OSError("disk full")
    assert os.listdir(tmp_path / "a") == ["mine.txt"]  # b/ went, a/ (which it did not make) stays


def test_an_interrupt_during_an_evaluation_rerun_swap_leaves_one_run_whole(tmp_path, monkeypatch):
    """A rerun renamed its files into its own folder one by one; a Ctrl-C (or SIGTERM, which the
    CLI raises as an exception) between two renames left the new config.json beside the old
    report and results. A rerun now replaces the folder by two renames, which finish before the
    interrupt arrives (and a SIGKILL between them leaves the old run at .run.old)."""
    import signal

    from lewisrag.eval import results as R

    renamed = []
    real = os.replace

    def interrupted_midway(src, dst):  # os.replace everywhere: the writes into the staging folder use it too
        real(src, dst)
        if Path(dst) != out.with_name(".run.old"):
            return
        renamed.append(Path(dst).name)
        os.kill(os.getpid(), signal.SIGINT)  # delivered between the swap's two renames: the old run aside, the new not in

    out = tmp_path / "run"

    def write(tag: str) -> None:
        R.write_run_dir(out, "evaluation", {}, report_md=f"md {tag}", report_html=f"html {tag}", config={"tag": tag})

    monkeypatch.setattr(R, "write_results", lambda path, results: path.write_text("{}"))
    write("old")
    monkeypatch.setattr(R.os, "replace", interrupted_midway)
    with pytest.raises(KeyboardInterrupt):
        write("new")
    assert renamed == [".run.old"]  # the interrupt arrived with the old run aside, the new one not yet in
    assert (out / "report.md").read_text() == "md new" and json.loads((out / "config.json").read_text()) == {"tag": "new"}
