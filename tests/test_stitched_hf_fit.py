"""`PromptStitchingRAG` over its own `HFGenerator` (the Python API, not `compare --stitched-generator`):
the generator tokenized with truncation=True, so a prompt longer than `max_input_tokens` was cut in
silence (from the tokenizer's side: the last passages mid-way, or the instruction and passage [1]),
and the answer still listed every passage as read. Now the prompt holds the most whole passages that
fit, best first (`fit_passages`, the fitting `compare`'s `HFAnswers.fit` uses), the answer lists those,
and a question whose prompt holds not even its best passage raises `PromptTooLong`, naming it."""

from __future__ import annotations

import pytest

from lewisrag.data.records import Passage
from lewisrag.rag_model.stitched import DEFAULT_INSTRUCTION, HFGenerator, PromptStitchingRAG, StitchSettings, stitch

QUESTION = "Who leads Land1?"
SETTINGS = StitchSettings(k=5, instruction=DEFAULT_INSTRUCTION)  # the question first, the passages after it


@pytest.fixture(scope="module")
def small_gpt():
    """A random GPT-2 of 512 positions, a 300-word tokenizer and five passages of about 30 tokens each."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from lewisrag.training.pretrain_data import train_generator_tokenizer

    passages = [Passage(f"p{i}", f"Land{i}", f"Land{i} is led by Person{i}. " * 3) for i in range(1, 6)]
    tok = train_generator_tokenizer([p.text for p in passages] + [DEFAULT_INSTRUCTION] * 5 + [QUESTION], 300)
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=512)), tok, passages


class Recording(HFGenerator):
    """An HFGenerator that keeps the prompts it was given."""

    seen: list[str] = []

    def __call__(self, prompts):
        self.seen = self.seen + list(prompts)
        return super().__call__(prompts)


def _tokens(tok, text: str) -> int:
    return len(tok(text, verbose=False)["input_ids"])


def _generator(small_gpt, whole: int) -> Recording:
    """A generator that reads exactly the prompt of the best `whole` passages, one token short of `whole` + 1."""
    gpt, tok, passages = small_gpt
    limit = _tokens(tok, stitch(QUESTION, passages[:whole], SETTINGS))
    assert limit < _tokens(tok, stitch(QUESTION, passages[:whole + 1], SETTINGS))
    return Recording(gpt, tok, max_new_tokens=3, max_input_tokens=limit)


def test_a_long_prompt_holds_the_best_passages_whole_and_the_answer_lists_them(small_gpt):
    _, tok, passages = small_gpt
    gen = _generator(small_gpt, 2)
    (a,) = PromptStitchingRAG(None, gen, SETTINGS).answer_with([QUESTION], [passages])
    assert [p.id for p in a.passages] == ["p1", "p2"]  # not five, as if all had been read
    (seen,) = gen.seen
    assert seen == a.prompt == stitch(QUESTION, passages[:2], SETTINGS)  # the instruction, the question, [1] and [2] whole
    assert a.input_tokens == _tokens(tok, seen) <= gen.max_input_tokens  # nothing was cut


def test_a_prompt_that_fits_is_left_whole(small_gpt):
    _, _, passages = small_gpt
    gen = _generator(small_gpt, 2)
    (a,) = PromptStitchingRAG(None, gen, SETTINGS).answer_with([QUESTION], [passages[:2]])
    assert [p.id for p in a.passages] == ["p1", "p2"] and gen.seen == [stitch(QUESTION, passages[:2], SETTINGS)]


def test_fit_is_the_largest_whole_prefix_that_fits(small_gpt):
    """The binary search gives what trying every prefix gives, for every limit between none and all."""
    from lewisrag.rag_model.stitched import PromptTooLong, fit_passages

    gpt, tok, passages = small_gpt
    counts = [_tokens(tok, stitch(QUESTION, passages[:n], SETTINGS)) for n in range(len(passages) + 1)]
    for limit in range(counts[1], counts[-1] + 2):
        gen = HFGenerator(gpt, tok, max_input_tokens=limit)
        brute = max(n for n in range(len(passages) + 1) if counts[n] <= limit)
        assert gen.fit(QUESTION, passages, SETTINGS) == brute == fit_passages(QUESTION, passages, SETTINGS, gen.tokens, limit)
    with pytest.raises(PromptTooLong):
        HFGenerator(gpt, tok, max_input_tokens=counts[1] - 1).fit(QUESTION, passages, SETTINGS)


def test_a_prompt_that_holds_not_even_its_best_passage_raises_naming_the_question(small_gpt):
    from lewisrag.rag_model.stitched import PromptTooLong

    gpt, tok, passages = small_gpt
    gen = _generator(small_gpt, 1)
    long = [Passage("big", "Land1", "Land1 is led by Person1. " * 40), *passages]
    with pytest.raises(PromptTooLong, match=r"the prompt of the question 'Who leads Land1\?' does not hold even its best "
                                            rf"passage within the {gen.max_input_tokens} tokens this generator reads") as e:
        PromptStitchingRAG(None, gen, SETTINGS).answer_with([QUESTION], [long])
    assert e.value.with_best and e.value.tokens == _tokens(tok, stitch(QUESTION, long[:1], SETTINGS))
    question = "Who leads " + "Land1 and " * 100 + "Land2?"
    with pytest.raises(PromptTooLong, match=r"takes \d+ tokens with no passage at all, more than the \d+ this generator reads"):
        PromptStitchingRAG(None, gen, SETTINGS).answer_with([QUESTION, question], [passages, passages])
    assert gen.seen == [] and "\n" not in str(e.value)  # nothing generated, not even for the question that fits


def test_the_input_limit_is_capped_at_the_models_positions(small_gpt):
    """HFGenerator's default max_input_tokens (1024) past a causal LM's 512 positions: a long prompt read
    past them failed with an IndexError inside generate; the limit is now the positions less the answer's
    (as `compare`'s HFAnswers capped it), and PromptStitchingRAG fits whole passages to it."""
    gpt, tok, passages = small_gpt
    gen = HFGenerator(gpt, tok, max_new_tokens=12)
    assert gen.max_input_tokens == 512 - 12
    long = [Passage(p.id, p.title, p.text * 8) for p in passages]  # ~240 tokens each: two fit in 500
    (a,) = PromptStitchingRAG(None, gen, SETTINGS).answer_with([QUESTION], [long])
    assert 1 <= len(a.passages) < 5 and gen.last_input_tokens[0] <= 500
