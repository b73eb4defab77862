"""Generator pretraining: the tiny preset end to end, text infilling, determinism, and the shipped generator."""

from __future__ import annotations

import doctest
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lewisrag.data.cpu_linear import cpu_linear
from lewisrag.data.io import InputError
from lewisrag.training import pretrain as P
from lewisrag.training import pretrain_data as D
from lewisrag.training.configs import pretrain_preset

LEWISRAG = Path(sys.executable).parent / "lewisrag"


def test_doctests():
    from lewisrag.commands import pretrain as C

    for module in (P, D, C):
        assert doctest.testmod(module).failed == 0


def test_bad_overrides_are_input_errors():
    from lewisrag.commands.pretrain import parse_overrides

    for bad in (["lr"], ["colour=red"], ["steps=5"], ["lr=fast"], ["long_form=maybe"], ["device=cpu"]):
        with pytest.raises(InputError):
            parse_overrides(bad)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 200), ratio=st.floats(0.0, 0.6), lam=st.floats(0.5, 6.0), seed=st.integers(0, 10**6))
def test_mask_spans_cover_the_configured_share(n, ratio, lam, seed):
    spans = D.mask_spans(n, random.Random(seed), ratio, lam)
    covered = sum(length for _, length in spans)
    assert covered <= round(ratio * n)
    assert all(length >= 1 and 0 <= start and start + length <= n for start, length in spans)
    # sorted, and at least one unmasked token between two spans
    assert all(a[0] + a[1] < b[0] for a, b in zip(spans, spans[1:]))
    if round(ratio * n) <= n // 4:  # sparse enough that placing spans never gets stuck
        assert covered == round(ratio * n)
    ids = list(range(10, 10 + n))
    masked = D.infill(ids, spans, mask_id=4)
    assert masked.count(4) == len(spans) and len(masked) == n - covered + len(spans)
    kept = [i for i in ids if not any(s <= i - 10 < s + length for s, length in spans)]
    assert [t for t in masked if t != 4] == kept


def test_denoise_pair_keeps_bos_and_eos():
    ids = [0] + list(range(10, 60)) + [2]
    src, tgt = D.denoise_pair(ids, random.Random(1), 0.3, 3.0, mask_id=4)
    assert tgt == ids and src[0] == 0 and src[-1] == 2 and 4 in src and len(src) < len(ids)


def test_reading_pairs_use_the_rag_generator_format():
    from lewisrag.data.world import fresh_examples

    examples, docs = fresh_examples(random.Random(3), 3)
    src, answer = D.reading_pairs(examples[:1], docs)[0]
    gold = next(p for p in docs if p.id == examples[0].gold_passage_ids[0])
    assert src == f"{gold.title} / {gold.text} // {examples[0].question}" and answer == examples[0].answers[0]


def test_update_examples_are_answered_by_snapshot_b():
    examples, docs = D.fresh_update_examples(random.Random(5), 12)
    by_id = {p.id: p for p in docs}
    assert len(examples) == 12
    for ex in examples:
        assert D.attribute_of(ex.question) in ("leader", "head", "population", "members")
        assert ex.answers[0] in by_id[ex.gold_passage_ids[0]].text


def test_tiny_preset_end_to_end_and_deterministic(tmp_path):
    from typer.testing import CliRunner

    from lewisrag.cli import app

    result = CliRunner().invoke(app, ["pretrain", "--preset", "tiny", "--steps", "3", "--out", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    recipe = json.loads((tmp_path / "a" / "recipe.json").read_text())
    assert recipe["steps"] == 3 and recipe["command"].startswith("lewisrag pretrain ")
    assert set(recipe["final"]) == {"em", "n", "by_attribute"} and recipe["final"]["n"] > 0
    generator, tokenizer = P.load_generator(tmp_path / "a")
    assert generator.config.pad_token_id == tokenizer.pad_token_id == 1 and tokenizer.mask_token_id == 4
    assert next(generator.parameters()).dtype.is_floating_point and str(next(generator.parameters()).dtype) == "torch.float32"
    with cpu_linear(None):  # the library the command multiplied through ($LEWISRAG_CPU_LINEAR, else auto's choice)
        again = P.pretrain(pretrain_preset("tiny", steps=3), tmp_path / "b")
    assert again["weights_sha256"] == recipe["weights_sha256"]  # same seed, same kernels, same weights
    other = P.pretrain(pretrain_preset("tiny", steps=3, seed=1), tmp_path / "c")
    assert other["weights_sha256"] != recipe["weights_sha256"]


def test_preset_keeps_its_budget_unless_one_is_given():
    assert pretrain_preset("small").steps == 6000 and pretrain_preset("small", steps=None, minutes=None).steps == 6000
    assert pretrain_preset("small", minutes=2.0).steps is None and pretrain_preset("small", minutes=2.0, steps=None).minutes == 2.0
    assert pretrain_preset("small", steps=7).minutes is None and pretrain_preset("small", lang="zh").lang == "zh"
    assert pretrain_preset("small", lang="zh").steps == 12000 and pretrain_preset("small", lang="en").steps == 6000  # PRETRAIN_LANG_STEPS
    assert pretrain_preset("small", lang="zh", steps=50).steps == 50 and pretrain_preset("small", lang="zh", minutes=1.0).steps is None
    with pytest.raises(ValueError, match="lang"):
        pretrain_preset("small", lang="fr")


def test_chinese_tokenizer_reads_every_world_character_as_one_piece_and_answers_as_in_their_passage():
    """The Chinese vocabulary (pretrain_data.CJK_CHAR): every character of a world's passages,
    questions and answers is one piece, and an answer's pieces are a run of its gold passage's
    pieces, so the generator can copy what it reads."""
    from lewisrag.data.world import build_world
    from lewisrag.rag_model.model import RagSettings, generator_input

    cfg = pretrain_preset("tiny", lang="zh", tokenizer_docs=400)
    tok = D.train_generator_tokenizer(P._tokenizer_corpus(cfg), 4000, "zh")
    w = build_world(seed=3, entities=60, lang="zh")
    texts = [p.title + p.text for p in w.passages_a + w.passages_b]
    texts += [q.question + "".join(q.answers) for qs in w.questions.values() for q in qs]
    chars = {ch for t in texts for ch in t if D.re.fullmatch(D.CJK_CHAR, ch)}
    assert len(chars) > 300 and all(len(tok(ch).input_ids) == 3 for ch in chars)  # <s> piece </s>
    by_id = {p.id: p for p in w.passages_a}
    for q in [q for q in w.questions["test"] if q.kind == "short"]:
        gold = by_id[q.gold_passage_ids[0]]
        read = tok(generator_input(gold.title, gold.text, q.question, RagSettings())).input_ids
        ans = tok(q.answers[0]).input_ids[1:-1]
        assert any(read[i:i + len(ans)] == ans for i in range(len(read))), q.answers[0]
    assert tok.decode(tok(texts[0]).input_ids, skip_special_tokens=True) == texts[0]


def test_chinese_fresh_names_hold_the_look_alike_characters():
    """Look-alike names are world-only; fresh names draw their characters too (lang_zh.FRESH_SYLLABLES),
    so pretraining reads every character a world's names hold."""
    from lewisrag.data import lang_zh
    from lewisrag.data.world import fresh_entities

    names = "".join(e.name for e in fresh_entities(random.Random(0), 3000, "zh"))
    look_alike = set("".join(lang_zh.SIMILAR.values())) - set(lang_zh.SYLLABLES)
    assert look_alike and look_alike <= set(names)


def test_chinese_tiny_pretraining_measures_the_chinese_world(tmp_path):
    recipe = P.pretrain(pretrain_preset("tiny", steps=2, lang="zh"), tmp_path / "zh")
    assert recipe["config"]["lang"] == "zh" and recipe["final"]["n"] > 0
    assert "other" not in recipe["final"]["by_attribute"]  # every Chinese question's attribute was read off its template
    _, tokenizer = P.load_generator(tmp_path / "zh")
    assert len(tokenizer("卡温拉斯").input_ids) == 6


def test_damaged_weights_are_refused(tmp_path):
    P.pretrain(pretrain_preset("tiny", steps=1), tmp_path / "g")
    weights = tmp_path / "g" / P.WEIGHTS
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(InputError, match="sha256"):
        P.load_generator(tmp_path / "g")


@pytest.mark.parametrize("pair, message", [("d_model=0", "at least 1"), ("heads=3", "divisible"),
                                           ("lr=nan", "finite"), ("mask_ratio=-1", "finite"), ("lr=0", "lr must be a positive finite number"),
                                           # passed `lr > 0`: a torch traceback at the first update, exit 3
                                           ("lr=1e40", "lr must be at most 3.4e+37 (AdamW divides it by 1 - beta1 = 0.1 into a float32), got 1e+40"),
                                           # a traceback from the world's builder; a share of 5 trained
                                           ("world_entities=5", "between 40 and"), ("mask_ratio=5", "at most 1"),
                                           # steps with nothing to train: loss stayed 0.0 and .backward() raised
                                           ("qa_start=0.5,denoise_batch_size=0", "without denoising"),
                                           ("qa_start=0.5,denoise_weight=0", "without denoising"),
                                           ("qa_batch_size=0,denoise_batch_size=0", "without denoising"),
                                           ("denoise_weight=-1", "at least 0"),
                                           # built with 261 tokens while recipe.json said 1
                                           ("vocab_size=1", "at least 261"), ("max_source_length=2", "at least 3"),
                                           ("max_target_length=1", "at least 3")])
def test_bad_set_values_exit_2_before_training(pair, message, tmp_path):
    sets = [x for kv in pair.split(",") for x in ("--set", kv)]
    r = subprocess.run([str(LEWISRAG), "pretrain", "--preset", "tiny", *sets, "--out", str(tmp_path / "x")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("error: --set") and message in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1 and not (tmp_path / "x").exists()


@pytest.mark.parametrize("device, message", [("gpu", "must be auto, cpu or cuda[:N], got 'gpu'"),
                                             ("cuda:99", "visible to torch")])  # no GPU, or fewer than 100
def test_a_device_it_cannot_train_on_exits_2_before_training(device, message, tmp_path):
    r = subprocess.run([str(LEWISRAG), "pretrain", "--preset", "tiny", "--device", device, "--out", str(tmp_path / "x")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("error: --device") and message in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1 and not (tmp_path / "x").exists()


def test_unknown_preset_exits_2(tmp_path):
    r = subprocess.run([str(LEWISRAG), "pretrain", "--preset", "huge", "--out", str(tmp_path / "x")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("error:") and "huge" in r.stderr
    assert not (tmp_path / "x").exists()




@pytest.mark.parametrize("name, lang", [("generator-small", "en"), ("generator-small-zh", "zh")])
def test_shipped_generator_loads_verifies_and_reads(name, lang):
    from lewisrag.data.world import fresh_examples

    recipe = json.loads((P.SHIPPED_DIR / name / "recipe.json").read_text())
    assert recipe["command"].startswith("lewisrag pretrain ") and recipe["weights_bytes"] <= 9_000_000
    assert recipe["config"].get("lang", "en") == lang and recipe["final"]["em"] >= 0.9  # recipes before --lang: English
    generator, tokenizer = P.load_shipped_generator(name)
    # the recipe records the model built: BPE stopped short of the zh recipe's 4,000 at 3,308
    assert recipe["config"]["vocab_size"] == generator.config.vocab_size == len(tokenizer)
    examples, docs = fresh_examples(random.Random("test-shipped-generator"), 40, lang)
    short = [ex for ex in examples if ex.kind == "short"][:20]
    result = P.evaluate_reading(generator, tokenizer, short, docs, lang=lang)
    assert result["n"] == 20 and result["em"] >= 0.7, result


# ---------------------------------------------------------------------------------------------
# the shipped generators are what their recipes' command builds


@pytest.mark.parametrize("name, lang", [("generator-small", "en"), ("generator-small-zh", "zh")])
def test_the_recipe_builds_the_shipped_tokenizer(name, lang):
    """The vocabulary is the first thing the build command makes, and every weight depends on its ids.
    Its corpus once held long-form reference statements the model never trained on, and rewording one
    of the evaluator's templates changed the vocabulary: the documented command no longer built the
    shipped generators (727 of 4,000 ids alike)."""
    recipe = json.loads((P.SHIPPED_DIR / name / "recipe.json").read_text())
    cfg = pretrain_preset("small", lang=None if lang == "en" else lang)
    assert {k: v for k, v in recipe["config"].items() if k not in ("vocab_size", "device")} == {
        k: v for k, v in P.asdict(cfg).items() if k not in ("vocab_size", "device")}
    built = D.train_generator_tokenizer(P._tokenizer_corpus(cfg), cfg.vocab_size, lang)
    _, shipped = P.load_shipped_generator(name)
    assert built.get_vocab() == shipped.get_vocab()


def test_long_form_statements_reach_the_vocabulary_only_when_trained_on():
    cfg = pretrain_preset("tiny")
    short = P._tokenizer_corpus(cfg)
    both = P._tokenizer_corpus(P.replace(cfg, long_form=True))
    assert len(both) > len(short) and set(short) < set(both)


def test_a_weight_past_float16_is_refused_not_saved_as_inf(tmp_path, monkeypatch):
    """finite() ran on the float32 model; cast to float16 for saving, a weight past 65504 became inf on
    disk, exit 0, and recipe.json's EM measured weights other than the saved ones."""
    real = P.evaluate_reading

    def huge_after(model, *args, **kwargs):  # a weight past float16 after the last step, finite in float32
        with P.torch.no_grad():
            next(model.parameters()).view(-1)[0] = 1e6
        return real(model, *args, **kwargs)

    monkeypatch.setattr(P, "evaluate_reading", huge_after)
    with pytest.raises(InputError, match=r"field 'save_fp16': a weight is past float16's range"):
        P.pretrain(pretrain_preset("tiny", steps=1), tmp_path / "g")
    assert not (tmp_path / "g").exists()


def _copy_of(name: str, to: Path) -> Path:
    import shutil

    return Path(shutil.copytree(P.SHIPPED_DIR / name, to))


def test_a_tokenizer_swapped_in_from_another_generator_is_refused(tmp_path):
    """Another generator's smaller tokenizer fits the embeddings and read them at EM 0.0: the recipe
    records every file loading reads, not the weights alone."""
    g = _copy_of("generator-small", tmp_path / "g")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (g / f).write_bytes((P.SHIPPED_DIR / "generator-small-zh" / f).read_bytes())
    with pytest.raises(InputError, match=r"tokenizer(_config)?\.json: sha256 does not match recipe\.json"):
        P.load_generator(g, require_recipe=True)


@pytest.mark.parametrize("recipe", ["[]", "{}", '{"weights_sha256": 7}'])
def test_a_damaged_recipe_is_named_not_the_weights(tmp_path, recipe):
    g = _copy_of("generator-small", tmp_path / "g")
    (g / "recipe.json").write_text(recipe)
    with pytest.raises(InputError, match=r"recipe\.json: field 'weights_sha256': no weights sha256 recorded"):
        P.load_generator(g, require_recipe=True)


@pytest.mark.parametrize("name", ["generator-small", "generator-small-zh"])
def test_a_users_file_in_a_copy_of_a_shipped_generator_is_kept(tmp_path, name):
    """The shipped folders' markers once listed no files, so a file a user added beside a copy of one
    was taken for lewisrag's and deleted by the next pretrain into it, without --overwrite."""
    g = _copy_of(name, tmp_path / "g")
    (g / "my_notes.txt").write_text("mine")
    with pytest.raises(InputError, match="my_notes.txt"):
        P.pretrain(pretrain_preset("tiny", steps=1), g)
    assert (g / "my_notes.txt").read_text() == "mine"
