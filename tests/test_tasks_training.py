"""What differs between tasks in training: FEVER's labels as single tokens, labels scored in the RAG
label convention, 3-way and 2-way accuracy, and the --task flag."""

import doctest

import pytest
import torch
from conftest import run_cli

from lewisrag.data.io import InputError
from lewisrag.data.pretrained import load_generator
from lewisrag.data.tasks import LABELS
from lewisrag.training import tasks as TT
from lewisrag.training.configs import check_task
from lewisrag.training.pretrain import SHIPPED_DIR
from lewisrag.training.rag_data import answer_labels


@pytest.fixture()
def generator():
    return load_generator(SHIPPED_DIR / "generator-small")


def test_fever_labels_become_single_tokens_started_from_their_words(generator):
    gen, tok = generator
    before = len(tok)
    pieces = {label: TT.label_ids(tok, label.lower()) for label in LABELS}
    old = gen.get_input_embeddings().weight.detach().clone()
    assert TT.prepare_generator("fever", gen, tok) is True
    assert len(tok) == before + 3 and gen.get_input_embeddings().weight.shape[0] == before + 3
    emb = gen.get_input_embeddings().weight
    for label in LABELS:
        (i,) = TT.label_ids(tok, label)
        assert torch.allclose(emb[i], old[pieces[label]].mean(0))
        assert tok.decode([i]) == label
    assert len({tuple(emb[TT.label_ids(tok, label)[0]].tolist()) for label in LABELS}) == 3  # distinct rows
    assert TT.prepare_generator("fever", gen, tok) is False  # already there: a FEVER checkpoint loads as is
    assert TT.prepare_generator("jeopardy", *load_generator(SHIPPED_DIR / "generator-small")) is False


def test_label_log_probs_builds_the_rag_labels_and_ranks_by_likelihood(generator):
    gen, tok = generator
    TT.prepare_generator("fever", gen, tok)
    seen = []

    def score(chunk, labels):  # a model that finds the claim's own label likeliest
        seen.append(labels)
        label = tok.decode(labels[0, 2:3])
        return torch.tensor([0.1 if c.endswith(label) else 2.0 for c in chunk])

    claims = ["x SUPPORTS", "y REFUTES", "z NOT ENOUGH INFO"]
    scores = TT.label_log_probs(score, tok, gen.config.decoder_start_token_id, claims, batch_size=2)
    expected = answer_labels(["SUPPORTS"] * 2, tok, gen.config.decoder_start_token_id, gen.config.pad_token_id, 8)
    assert torch.equal(seen[0], expected)
    acc = TT.fever_accuracy(scores, ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"])
    assert acc["predictions"] == list(LABELS) and acc["acc3"] == 1.0 and acc["acc2"] == 1.0 and acc["n2"] == 2


def test_two_way_accuracy_rules_out_not_enough_info():
    scores = [[-2.0, -3.0, -0.1], [-3.0, -2.0, -0.1], [-1.0, -2.0, -3.0]]
    acc = TT.fever_accuracy(scores, ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"])
    assert acc["predictions"] == ["NOT ENOUGH INFO", "NOT ENOUGH INFO", "SUPPORTS"]
    assert acc["acc3"] == 0.0 and acc["acc2"] == 1.0  # both S/R claims right once NEI is ruled out


def test_unknown_task_is_bad_input(tmp_path):
    with pytest.raises(InputError, match="unknown task"):
        check_task("squad")
    r = run_cli("train", "rag", "--task", "squad", "--index", str(tmp_path), "--encoder", str(tmp_path), "--generator",
                str(tmp_path), "--train", "x.jsonl", "--dev", "x.jsonl", "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "--task" in r.stderr and "Traceback" not in r.stderr and not (tmp_path / "run").exists()


def test_doctests():
    assert doctest.testmod(TT).failed == 0


def test_grouped_examples_train_in_one_batch(tmp_path):
    """A QA file's `group` survives reading and writing, and every batch of a grouped epoch holds
    whole groups (FEVER's minimal pairs), while ungrouped data is shuffled exactly as before."""
    from lewisrag.data.records import QAExample, read_qa
    from lewisrag.data.io import write_jsonl
    from lewisrag.training.rag_data import DataPosition, epoch_order, group_units, next_batch

    exs = [QAExample(f"c{i}", f"claim {i}", ["SUPPORTS" if i % 2 == 0 else "REFUTES"], group=f"g{i // 2}") for i in range(12)]
    write_jsonl(tmp_path / "train.jsonl", [ex.to_dict() for ex in exs])
    back = read_qa(tmp_path / "train.jsonl")
    assert back == exs
    units = group_units(back)
    assert units == [[2 * g, 2 * g + 1] for g in range(6)]
    pos, seen = DataPosition(), []
    for _ in range(6):  # two epochs of three batches
        ids, pos = next_batch(pos, 0, len(exs), 4, units)
        assert sorted(ids) == sorted({i for u in units if set(u) & set(ids) for i in u}), ids
        seen += ids
    assert sorted(seen[:12]) == list(range(12)) and seen[:12] != seen[12:]
    plain = next_batch(DataPosition(), 0, 12, 4)[0]
    assert plain == epoch_order(0, 0, 12)[:4].tolist() and group_units([QAExample("a", "q", ["x"])]) is None


def test_a_group_that_is_not_a_string_is_bad_input(tmp_path):
    from lewisrag.data.records import read_qa
    path = tmp_path / "train.jsonl"
    path.write_text('{"question": "q", "answers": ["SUPPORTS"], "group": "g1"}\n{"question": "r", "answers": ["REFUTES"], "group": 7}\n')
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert "train.jsonl:2: field 'group': expected a string" in str(e.value)


def test_verifier_pretraining_reads_fresh_minimal_pairs_and_saves_a_fever_generator(tmp_path):
    """training.verifier: fresh claims come in adjacent minimal pairs, each read with its passage;
    the label is the target in the RAG convention; a short run saves a generator whose labels are
    single tokens, with its dev measurement on the world's claims read with their gold passages."""
    from lewisrag.data.world import build_world
    from lewisrag.rag_model.settings import RagSettings
    from lewisrag.training.verifier import FreshClaims, VerifierConfig, label_batch, pretrain_verifier, world_claims

    items = FreshClaims(0, RagSettings()).take(40)
    assert items == FreshClaims(0, RagSettings()).take(40)  # seeded
    for (a, la), (b, lb) in zip(items[::2], items[1::2]):
        assert (la, lb) in (("SUPPORTS", "REFUTES"), ("NOT ENOUGH INFO", "NOT ENOUGH INFO"))
        passage_a, claim_a = a.rsplit(" // ", 1)
        passage_b, claim_b = b.rsplit(" // ", 1)
        assert passage_a == passage_b and claim_a != claim_b and len(claim_a.split()) == len(claim_b.split())
        if la == "SUPPORTS":  # the words that differ: the true value is in the passage, the false one is not
            words = [w.strip(".,") for w in passage_a.split()]
            differ = [(x.strip("."), y.strip(".")) for x, y in zip(claim_a.split(), claim_b.split()) if x != y]
            assert all(x in words and y not in words for x, y in differ), (claim_a, claim_b)
    assert {y for _, y in items} == set(LABELS)

    gen, tok = load_generator(SHIPPED_DIR / "generator-small")
    TT.prepare_generator("fever", gen, tok)
    batch = label_batch(items[:4], tok, 192)
    assert batch["labels"][:, 1].tolist() == [TT.label_ids(tok, y)[0] for _, y in items[:4]]

    w = build_world(seed=0, entities=60)
    with pytest.raises(InputError, match="even batch size"):
        VerifierConfig(batch_size=3)
    r = pretrain_verifier(SHIPPED_DIR / "generator-small", tmp_path / "v", VerifierConfig(steps=2, batch_size=4, eval_size=20),
                          w.tasks["fever_dev"], w.passages_a)
    measured = world_claims(w.tasks["fever_dev"], w.passages_a, RagSettings())
    assert measured and all(y != "NOT ENOUGH INFO" for _, y in measured)
    assert r["steps"] == 2 and r["dev_gold_passage"]["n"] == min(20, len(measured))
    saved, saved_tok = load_generator(tmp_path / "v")
    assert all(len(TT.label_ids(saved_tok, label)) == 1 for label in LABELS)
    assert r["config"]["device"] == "auto"  # where reproduce's preset says; on a GPU when one is visible
    with pytest.raises(InputError, match="--device: must be auto, cpu or cuda"):  # before the generator loads
        pretrain_verifier(SHIPPED_DIR / "generator-small", tmp_path / "w", VerifierConfig(steps=2, device="gpu"))
    assert not (tmp_path / "w").exists()


def test_the_fever_swap_refuses_snapshot_files_whose_claims_do_not_pair(tmp_path):
    """The swap pairs fever_test.jsonl and fever_test_b.jsonl line by line; files out of order were
    paired wrongly, or cut short, in silence."""
    import json

    from lewisrag.experiments.presets import get_preset
    from lewisrag.experiments.tasks import fever_evaluate

    world = tmp_path / "world"
    world.mkdir()
    claim = {"question": "x", "answers": ["SUPPORTS"]}
    (world / "fever_test.jsonl").write_text("".join(json.dumps({**claim, "id": i}) + "\n" for i in ("c1", "c2")))
    (world / "fever_test_b.jsonl").write_text("".join(json.dumps({**claim, "id": i}) + "\n" for i in ("c2", "c1")))
    with pytest.raises(InputError, match="claim 'c2' where fever_test.jsonl has 'c1'") as e:
        fever_evaluate(tmp_path, get_preset("tiny"), lambda *a: None)
    assert e.value.field == "id" and e.value.line == 1
    (world / "fever_test_b.jsonl").write_text(json.dumps({**claim, "id": "c1"}) + "\n")
    with pytest.raises(InputError, match="1 claims, fever_test.jsonl has 2"):
        fever_evaluate(tmp_path, get_preset("tiny"), lambda *a: None)
