"""Lesson 1: the two marginalizations of Lewis et al. 2020, by hand on one question, checked against the model."""

from __future__ import annotations

from common import RUN_INTRO, check, code, md, setup

TITLE = "01_marginalization"

CELLS = [
    md(
        r"""
# Lesson 1 — The two marginalizations, by hand

Lewis et al. (2020) treat the retrieved passage as a **latent variable** $z$. The retriever proposes
$K$ passages with probabilities $p(z\mid x)$, the generator reads each one and says how likely the
answer $y$ is, $p(y\mid x,z)$, and the model sums $z$ out. The paper sums it out in two ways:

| | the equation | in words |
|---|---|---|
| **RAG-Sequence** (eq. 1) | $p(y\mid x) \approx \sum_{z} p(z\mid x)\,\prod_i p(y_i\mid x,z,y_{<i})$ | one passage explains the whole answer |
| **RAG-Token** (eq. 2) | $p(y\mid x) \approx \prod_i \sum_{z} p(z\mid x)\,p(y_i\mid x,z,y_{<i})$ | each token may lean on another passage |

In this lesson you take one question and compute, with a few tensor operations:

1. $p(z\mid x)$, the retrieval distribution over the $K$ passages;
2. $p(y_i\mid x,z,y_{<i})$ for every passage and answer token, from the generator's logits;
3. the RAG-Sequence and the RAG-Token likelihood of the answer;
4. the posteriors $p(z\mid x,y)$ and $p(z\mid x,y_i,y_{<i})$: which passage explains the answer;

and you check that your numbers equal the loss the model trains with (`RagModel.loss`).

**Time:** about 10 minutes. **You need:** the `lewisrag` package (`make venv`) and a Jupyter kernel
in its environment.
""",
        r"""
# 第 1 课 —— 亲手算两种边缘化

Lewis 等人（2020）把检索到的段落当作一个**隐变量** $z$。检索器给出 $K$ 个候选段落及其概率
$p(z\mid x)$，生成器逐个阅读这些段落，给出在读到段落 $z$ 时答案 $y$ 的概率 $p(y\mid x,z)$，
最后模型把 $z$ 求和消去。论文给出了两种消去方式：

| | 公式 | 含义 |
|---|---|---|
| **RAG-Sequence**（式 1） | $p(y\mid x) \approx \sum_{z} p(z\mid x)\,\prod_i p(y_i\mid x,z,y_{<i})$ | 整个答案由同一个段落来解释 |
| **RAG-Token**（式 2） | $p(y\mid x) \approx \prod_i \sum_{z} p(z\mid x)\,p(y_i\mid x,z,y_{<i})$ | 每个词元（token）都可以依据不同的段落 |

这一课我们只看一个问题，用几行张量运算依次算出：

1. $p(z\mid x)$：检索器在 $K$ 个段落上的分布；
2. 每个段落、每个答案词元的 $p(y_i\mid x,z,y_{<i})$，直接从生成器的 logits 算出；
3. 答案在 RAG-Sequence 和 RAG-Token 下的似然；
4. 后验 $p(z\mid x,y)$ 和 $p(z\mid x,y_i,y_{<i})$：到底是哪个段落解释了答案；

最后核对：你亲手算出的数和模型训练时用的损失（`RagModel.loss`）完全一致。

**用时：**约 10 分钟。**准备：**安装好 `lewisrag`（`make venv`），并在同一环境里有一个 Jupyter 内核。
""",
    ),
    RUN_INTRO,
    setup(TITLE),
    md(
        r"""
## 1. The model, the index and one question

`load_trained` returns a trained `RagModel` and its two tokenizers: the question encoder's and the
generator's. The index holds snapshot A of the built-in world, encoded once by the frozen document
encoder. We take the first short-answer test question whose gold passage the retriever finds, if there
is one, and otherwise the first short-answer question.
""",
        r"""
## 1. 模型、索引和一个问题

`load_trained` 返回训练好的 `RagModel` 以及它的两个分词器：问题编码器的和生成器的。索引里是内置世界的
快照 A，由冻结的文档编码器一次性编码好。我们挑测试集中第一个“检索器找到了金标段落”的短答案问题；如果
一个都没有，就用第一个短答案问题。
""",
    ),
    code(
        r"""
from lewisrag.data.records import read_qa
from lewisrag.index.dense import DenseIndex
from lewisrag.training.checkpoint import load_trained

model, tok = load_trained(RUN / "rag_token")
index = DenseIndex.load(RUN / "index_a")
K = model.n_docs
questions = [ex for ex in read_qa(RUN / "world" / "test.jsonl") if ex.kind == "short"]


def gold_retrieved(ex):
    return any(p.id in ex.gold_passage_ids for p in model.retrieve([ex.question], index, tok).passages[0])


ex = next((ex for ex in questions if gold_retrieved(ex)), questions[0])
print(ex.question, "->", ex.answers[0], "| gold passage:", ex.gold_passage_ids[0], "| K =", K)
"""
    ),
    md(
        r"""
## 2. Retrieval: $p(z\mid x)$

The question encoder turns $x$ into a vector $q(x)$; every passage $z$ has a vector $d(z)$ stored in the
index. The score of a passage is the inner product $d(z)^\top q(x)$, FAISS returns the $K$ best, and over
those $K$ the model sets $p(z\mid x) = \mathrm{softmax}_z\, d(z)^\top q(x)$.
`model.retrieve` does all of it; we recompute the scores to see that nothing else happens.
""",
        r"""
## 2. 检索：$p(z\mid x)$

问题编码器把 $x$ 变成向量 $q(x)$；每个段落 $z$ 的向量 $d(z)$ 已经存放在索引里。段落的得分就是内积
$d(z)^\top q(x)$，FAISS 返回得分最高的 $K$ 个，模型在这 $K$ 个段落上令
$p(z\mid x) = \mathrm{softmax}_z\, d(z)^\top q(x)$。`model.retrieve` 把这些都做了；我们自己再算一遍
得分，看看其中并没有别的玄机。
""",
    ),
    code(
        r"""
r = model.retrieve([ex.question], index, tok)
q_in = tok.question([ex.question], return_tensors="pt")
q = model.encode_questions(q_in["input_ids"], q_in["attention_mask"])[0]  # (D,) q(x)
d = torch.as_tensor(index.vectors(r.rows))[0]  # (K, D) the stored d(z)
scores = d @ q  # (K,) d(z)·q(x)
assert torch.allclose(scores, r.doc_scores[0], atol=1e-4)

p_z = torch.softmax(r.doc_scores[0], dim=0)  # (K,) p(z|x)
for k, p in enumerate(r.passages[0]):
    print(f"z={k}  d·q={scores[k]:8.3f}  p(z|x)={p_z[k]:.3f}  {p.id:22} {p.text[:50]}...")
"""
    ),
    md(
        r"""
## 3. The generator reads each passage: $p(y\mid x,z)$

The generator (BART) reads one string per passage, `title / text // question`, and never sees two
passages at once. The answer enters as **labels** in transformers' RAG convention: the decoder is fed
the decoder start token, then `<s> answer </s>`, and position $t$ predicts label $t+1$.
""",
        r"""
## 3. 生成器逐个阅读段落：$p(y\mid x,z)$

生成器（BART）为每个段落读入一个字符串 `标题 / 正文 // 问题`，它从来不会同时看到两个段落。答案按照
transformers 中 RAG 的约定写成 **labels**：解码器的输入先是解码起始符，然后是 `<s> 答案 </s>`，
位置 $t$ 预测的是第 $t+1$ 个标签。
""",
    ),
    code(
        r"""
for k, row in enumerate(r.context_input_ids):
    print(f"z={k}:", tok.generator.decode(row, skip_special_tokens=True))


def labels_for(answer, model, tok):
    # (1, T): the decoder start token, then <s> answer </s>
    ids = tok.generator(answer)["input_ids"]
    return torch.tensor([[model.generator.config.decoder_start_token_id, *ids]])


labels = labels_for(ex.answers[0], model, tok)
print("labels:", tok.generator.convert_ids_to_tokens(labels[0]))
"""
    ),
    md(
        r"""
One forward pass gives logits for every (passage, position). Row $k$ of the batch is the generator
reading passage $k$. A log-softmax over the vocabulary and a lookup of each target token give
$\log p(y_i\mid x,z,y_{<i})$; their sum over $i$ is $\log p(y\mid x,z)$.
""",
        r"""
一次前向计算就得到每个（段落，位置）上的 logits，批次中的第 $k$ 行就是生成器在读段落 $k$。对词表做
log-softmax，再取出每个目标词元的那一项，得到 $\log p(y_i\mid x,z,y_{<i})$；对 $i$ 求和就是
$\log p(y\mid x,z)$。
""",
    ),
    code(
        r"""
logits = model(r.context_input_ids, r.context_attention_mask, r.doc_scores, labels=labels).logits  # (K, T, V)
targets = labels[0, 1:]  # (T-1,) position t predicts labels[t + 1]
log_probs = logits[:, :-1].log_softmax(-1)  # (K, T-1, V); the last position would predict padding
log_p_token = log_probs[:, torch.arange(len(targets)), targets]  # (K, T-1) log p(y_i | x, z, y_<i)
log_p_y_given_z = log_p_token.sum(1)  # (K,) log p(y | x, z)
for k in range(K):
    print(f"z={k}  p(y|x,z) = {log_p_y_given_z[k].exp():.3e}")
"""
    ),
    md(
        r"""
## 4. RAG-Sequence (eq. 1)

One passage for the whole answer, then a weighted sum over passages:
$p(y\mid x) = \sum_z p(z\mid x)\,p(y\mid x,z)$. Probabilities like $10^{-13}$ are common, so we add
logs and use `logsumexp` instead of multiplying and summing probabilities.
""",
        r"""
## 4. RAG-Sequence（式 1）

整个答案只用一个段落来生成，再按段落加权求和：$p(y\mid x) = \sum_z p(z\mid x)\,p(y\mid x,z)$。
$10^{-13}$ 这样的概率很常见，所以我们在对数空间里相加，用 `logsumexp` 代替“先连乘再求和”。
""",
    ),
    code(
        r"""
log_p_z = p_z.log()  # (K,)
nll_sequence = -torch.logsumexp(log_p_z + log_p_y_given_z, dim=0)
print(f"RAG-Sequence: -log p(y|x) = {nll_sequence:.4f}")
"""
    ),
    md(
        r"""
## 5. RAG-Token (eq. 2)

A mixture at every token, then a product over tokens:
$p(y\mid x) = \prod_i \sum_z p(z\mid x)\,p(y_i\mid x,z,y_{<i})$.
The only change from RAG-Sequence is *where* the sum over $z$ sits: inside the product instead of outside it.
""",
        r"""
## 5. RAG-Token（式 2）

先在每个词元上做混合，再对所有词元连乘：$p(y\mid x) = \prod_i \sum_z p(z\mid x)\,p(y_i\mid x,z,y_{<i})$。
它和 RAG-Sequence 唯一的区别是对 $z$ 求和的**位置**：放在连乘里面，而不是外面。
""",
    ),
    code(
        r"""
log_p_marginal = torch.logsumexp(log_p_z[:, None] + log_p_token, dim=0)  # (T-1,) log p(y_i | x, y_<i)
nll_token = -log_p_marginal.sum()
print(f"RAG-Token:    -log p(y|x) = {nll_token:.4f}")
"""
    ),
    md(
        r"""
## 6. Check against the model

`RagModel.loss` is what training minimizes. We ask for the paper's plain likelihood (no label
smoothing), which is the model's setting here anyway. This model is a RAG-Token model, so its loss is
eq. 2; eq. 1 we check against `lewisrag/rag_model/marginalize.py`, both its fast path (what training
calls) and its reference (the equation written as plain tensor code).
""",
        r"""
## 6. 和模型核对

训练时最小化的就是 `RagModel.loss`。我们要的是论文里的原始似然（不做标签平滑），这里模型本身也是这么
设置的。这个模型是 RAG-Token 模型，所以它的损失就是式 2；式 1 则和 `lewisrag/rag_model/marginalize.py`
核对：既核对训练时调用的快速实现，也核对把公式直接写成张量代码的参考实现。
""",
    ),
    code(
        r"""
from lewisrag.rag_model import marginalize as M

pad = model.pad_token_id
model_token = model.loss(logits, r.doc_scores, labels, label_smoothing=0.0)[0]
print(f"RAG-Token    by hand {nll_token:.6f}   RagModel.loss {model_token:.6f}")
assert torch.allclose(nll_token, model_token, rtol=1e-5, atol=1e-4)

for name, fn in [("fast path", M.rag_sequence_nll), ("reference", M.rag_sequence_nll_reference)]:
    theirs = fn(logits, r.doc_scores, labels, pad)[0]
    print(f"RAG-Sequence by hand {nll_sequence:.6f}   {name} {theirs:.6f}")
    assert torch.allclose(nll_sequence, theirs, rtol=1e-5, atol=1e-4)
"""
    ),
    md(
        r"""
## 7. The recipe in one function, checked against the RAG-Sequence model

Sections 2–5 fit in a few lines. We apply them to the run's RAG-Sequence model (trained with eq. 1)
and compare with *its* `RagModel.loss`.
""",
        r"""
## 7. 把整个计算写成一个函数，再和 RAG-Sequence 模型核对

第 2 到第 5 节的内容几行就能写完。我们把它用在本次运行训练的 RAG-Sequence 模型（用式 1 训练）上，
并和**这个模型自己的** `RagModel.loss` 比较。
""",
    ),
    code(
        r"""
def by_hand(logits, doc_scores, labels):
    # one question: (-log p(y|x) of RAG-Sequence, of RAG-Token, log p(y_i|x,z,y_<i) as (K, T-1))
    targets = labels[0, 1:]
    log_p_token = logits[:, :-1].log_softmax(-1)[:, torch.arange(len(targets)), targets]  # (K, T-1)
    log_p_z = doc_scores[0].log_softmax(0)  # (K,)
    sequence = -torch.logsumexp(log_p_z + log_p_token.sum(1), dim=0)
    token = -torch.logsumexp(log_p_z[:, None] + log_p_token, dim=0).sum()
    return sequence, token, log_p_token


seq_model, seq_tok = load_trained(RUN / "rag_sequence")
rs = seq_model.retrieve([ex.question], index, seq_tok)
seq_labels = labels_for(ex.answers[0], seq_model, seq_tok)
seq_logits = seq_model(rs.context_input_ids, rs.context_attention_mask, rs.doc_scores, labels=seq_labels).logits
hand_sequence, _, _ = by_hand(seq_logits, rs.doc_scores, seq_labels)
theirs = seq_model.loss(seq_logits, rs.doc_scores, seq_labels, label_smoothing=0.0, exclude_bos_score=False)[0]
print(f"RAG-Sequence model: by hand {hand_sequence:.6f}   RagModel.loss {theirs:.6f}")
assert torch.allclose(hand_sequence, theirs, rtol=1e-5, atol=1e-4)
"""
    ),
    md(
        r"""
## 8. Posteriors: which passage explains the answer?

Bayes' rule turns the prior $p(z\mid x)$ into a posterior once the answer is known:

* RAG-Sequence: $p(z\mid x,y) \propto p(z\mid x)\,p(y\mid x,z)$, one distribution for the whole answer;
* RAG-Token: $p(z\mid x,y_i,y_{<i}) \propto p(z\mid x)\,p(y_i\mid x,z,y_{<i})$, one per token.

`lewisrag ask` prints them for the answer it generates (RAG-Sequence's, and for RAG-Token the mean over
the answer's tokens with the passage each token leaned on), and lesson 3 turns them into *implicit citations*
(`lewisrag/rag_model/implicit_citations.py`): the Lewis models never write `[n]`, but the posteriors say which
passages the answer leaned on. A RAG-Sequence answer cites the one passage with the highest $p(z\mid x,y)$. A
RAG-Token answer cites sentence by sentence: the passages whose per-token posterior, averaged over the
sentence's tokens, is at least `min_share` (0.3), and always the top one.

Look at the first target, `<s>`: it says nothing about the answer, so a generator that has learned to read
predicts it alike from every passage, and its posterior stays at the prior. The tiny generator trained for
seconds and has not learned even that: in the table below its `<s>` row may stray from the prior like any
other row. Section 9 prints the same row for a generator that reads.
""",
        r"""
## 8. 后验：到底是哪个段落解释了答案？

知道答案之后，用贝叶斯公式就能把先验 $p(z\mid x)$ 变成后验：

* RAG-Sequence：$p(z\mid x,y) \propto p(z\mid x)\,p(y\mid x,z)$，整个答案一个分布；
* RAG-Token：$p(z\mid x,y_i,y_{<i}) \propto p(z\mid x)\,p(y_i\mid x,z,y_{<i})$，每个词元一个分布。

`lewisrag ask` 会为它生成的答案打印这些后验（RAG-Sequence 的后验；RAG-Token 则是各词元后验的平均，以及每个
词元依据的段落）；第 3 课会把它们变成**隐式引用**（`lewisrag/rag_model/implicit_citations.py`）：Lewis 的模型从不写 `[n]`，
但后验告诉我们答案依据的是哪些段落。RAG-Sequence 的答案引用 $p(z\mid x,y)$ 最高的那一个段落。RAG-Token 的答案则逐句引用：
把句中各词元的后验取平均，平均值不低于 `min_share`（0.3）的段落都被引用，排第一的段落总会被引用。

注意第一个目标词元 `<s>`：它不携带任何关于答案的信息，学会了阅读的生成器无论读哪个段落都会同样地预测它，所以它的后验
就停在先验上。tiny 生成器只训练了几秒钟，连这一点都还没学会：下表中它的 `<s>` 这一行可能像其他行一样偏离先验。
第 9 节会给一个会读的生成器打印同一行。
""",
    ),
    code(
        r"""
post_sequence = torch.softmax(log_p_z + log_p_y_given_z, dim=0)  # (K,) p(z|x,y)
post_token = torch.softmax(log_p_z[:, None] + log_p_token, dim=0)  # (K, T-1) p(z|x,y_i,y_<i)
print("".ljust(12), *(f"z={k}".rjust(7) for k in range(K)))
for i, t in enumerate(targets):
    print(repr(tok.generator.decode([int(t)])).ljust(12), *(f"{post_token[k, i]:7.3f}" for k in range(K)))
print("p(z|x)".ljust(12), *(f"{v:7.3f}" for v in p_z))
print("p(z|x,y)".ljust(12), *(f"{v:7.3f}" for v in post_sequence))

assert torch.allclose(post_token.T, M.rag_token_doc_posterior(logits, r.doc_scores, labels, pad)[0, :-1], atol=1e-5)
assert torch.allclose(post_sequence, M.rag_sequence_doc_posterior(logits, r.doc_scores, labels, pad)[0], atol=1e-5)
"""
    ),
    md(
        r"""
## 9. The same arithmetic with a reader that can read

With the tiny run every passage gives the answer about the same (tiny) probability, so the posteriors
stay close to the prior. To watch them do their job, swap in the small generator shipped with lewisrag (it
answers 97% of questions when handed the gold passage), and let BM25 fetch the passages, as the paper's
Table 6 does: $p(z\mid x)$ is then the softmax of the BM25 scores. The tiny run's question encoder is carried
along, since a `RagModel` is built with one, but unused: BM25 chooses the passages and its scores give
$p(z\mid x)$. The function `by_hand` does not change. The second table is section 8's, for this reader: its
`<s>` row is the prior, and the answer's own tokens move the posterior onto the passage that holds the answer.
""",
        r"""
## 9. 换一个“会读”的生成器，算法不变

在 tiny 运行里，每个段落给答案的概率都差不多（而且都很小），所以后验几乎等于先验。为了看清后验的作用，
我们把生成器换成 lewisrag 自带的小型预训练生成器（给它金标段落时能答对 97% 的问题），并像论文表 6 那样用 BM25
取段落：此时 $p(z\mid x)$ 是 BM25 得分的 softmax。tiny 运行的问题编码器虽然跟着一起放进了模型（构造 `RagModel`
需要它），却完全用不上：段落由 BM25 挑选，$p(z\mid x)$ 也由 BM25 的得分给出。`by_hand` 函数一行都不用改。
第二张表就是第 8 节那张表，换成了这个生成器：它的 `<s>` 这一行就是先验，而答案自己的词元把后验推到了含有答案的那个段落上。
""",
    ),
    code(
        r"""
from lewisrag.data.records import read_passages
from lewisrag.index.bm25 import BM25Index
from lewisrag.rag_model import RagModel, Tokenizers
from lewisrag.rag_model.bm25_adapter import bm25_retrieve
from lewisrag.training.pretrain import load_shipped_generator

generator, generator_tok = load_shipped_generator()
reader = RagModel(model.question_encoder, generator, variant="token", n_docs=K).eval()
reader_tok = Tokenizers(tok.question, generator_tok)
bm25 = BM25Index.in_memory(read_passages(RUN / "world" / "passages_a.jsonl"))
rb = bm25_retrieve(reader, [ex.question], bm25, reader_tok, K)
"""
    ),
    code(
        r"""
reader_labels = labels_for(ex.answers[0], reader, reader_tok)
reader_logits = reader(rb.context_input_ids, rb.context_attention_mask, rb.doc_scores, labels=reader_labels).logits
_, reader_token, reader_log_p_token = by_hand(reader_logits, rb.doc_scores, reader_labels)
assert torch.allclose(reader_token, reader.loss(reader_logits, rb.doc_scores, reader_labels)[0], rtol=1e-5, atol=1e-4)

prior = rb.doc_scores[0].softmax(0)
posterior = torch.softmax(prior.log() + reader_log_p_token.sum(1), dim=0)
for k, p in enumerate(rb.passages[0]):
    gold = "<- gold" if p.id in ex.gold_passage_ids else ""
    print(f"z={k} {p.id:22} p(z|x)={prior[k]:.3f}  p(y|x,z)={reader_log_p_token[k].sum().exp():.2e}  "
          f"p(z|x,y)={posterior[k]:.3f} {gold}")

reader_post_token = torch.softmax(prior.log()[:, None] + reader_log_p_token, dim=0)  # (K, T-1) p(z|x,y_i,y_<i)
print("\n" + "".ljust(12), *(f"z={k}".rjust(7) for k in range(K)))
for i, t in enumerate(reader_labels[0, 1:]):
    print(repr(reader_tok.generator.decode([int(t)])).ljust(12), *(f"{reader_post_token[k, i]:7.3f}" for k in range(K)))
print("p(z|x)".ljust(12), *(f"{v:7.3f}" for v in prior))
"""
    ),
    md(
        r"""
## 10. Where the two marginalizations part ways

Take two passages and a two-token answer "A B". Passage 1 makes "A" likely and "B" unlikely, passage 2
the other way round, and the retriever likes both equally. RAG-Sequence must explain the whole answer
with one passage; RAG-Token may take "A" from passage 1 and "B" from passage 2. This is the paper's
Jeopardy example, where "The Sun Also Rises" and "A Farewell to Arms" come from different documents.
""",
        r"""
## 10. 两种边缘化在哪里分道扬镳

设想两个段落、一个由两个词元组成的答案“A B”。段落 1 让“A”很可能、“B”不太可能，段落 2 恰好相反，检索器
对两个段落一视同仁。RAG-Sequence 必须用同一个段落解释整个答案；RAG-Token 却可以从段落 1 取“A”，
从段落 2 取“B”。这正是论文里 Jeopardy 的例子：“The Sun Also Rises”和“A Farewell to Arms”来自不同的文档。
""",
    ),
    code(
        r"""
p_token = torch.tensor([[0.9, 0.1],  # passage 1: p("A"), p("B")
                        [0.1, 0.9]])  # passage 2
prior = torch.tensor([0.5, 0.5])
rag_sequence = (prior * p_token.prod(1)).sum()  # sum over z of a product over tokens
rag_token = (prior[:, None] * p_token).sum(0).prod()  # product over tokens of a sum over z
print(f"RAG-Sequence p(y|x) = {rag_sequence:.3f}   RAG-Token p(y|x) = {rag_token:.3f}")
"""
    ),
    md(
        r"""
## Exercises

Each exercise has a cell for your work that ends by setting a variable (`ex1`, `ex2`, ...), and below it a
**check** cell, collapsed: it computes the answer itself, so open it only to see how. Run the check after
your work: it says whether your value is right, and left at `None` it only reminds you. The open questions
have a model answer below the check, folded.

### Exercise 1

Change the table of section 10 so that RAG-Sequence gives the answer a *higher* probability than RAG-Token.
What do the two passages say then?
""",
        r"""
## 练习

每道练习都有一个给你动手的单元，最后把结果赋给一个变量（`ex1`、`ex2`……）；下面是一个折叠起来的**核对**单元：
它自己把答案算出来，所以只有想看算法时才展开它。做完后运行核对单元：它会告诉你结果对不对；变量还是 `None` 时，
它只提醒你先作答。开放性的问题在核对单元下面附有参考答案，同样是折叠的。

### 练习 1

修改第 10 节的概率表，使 RAG-Sequence 给答案的概率**高于** RAG-Token。此时两个段落分别“说”了什么？
""",
    ),
    code(
        r"""
ex1 = None  # your (2, 2) table like p_token in section 10: a row per passage, columns p("A"), p("B")
"""
    ),
    check(
        r"""
if ex1 is None:
    print("Exercise 1: set ex1 to your table, then run this cell again.")
else:
    table = torch.as_tensor(ex1, dtype=torch.float)
    assert table.shape == (2, 2) and ((table >= 0) & (table <= 1)).all(), "ex1: 2 passages x 2 tokens, each in [0, 1]"
    half = torch.tensor([0.5, 0.5])  # section 10's prior
    sequence, token = (half * table.prod(1)).sum(), (half[:, None] * table).sum(0).prod()
    assert sequence > token, f"not yet: RAG-Sequence {sequence:.3f} is not above RAG-Token {token:.3f}"
    print(f"right: RAG-Sequence {sequence:.3f} > RAG-Token {token:.3f}")
"""
    ),
    md(
        r"""
<details><summary>Model answer</summary>

One passage makes the whole answer likely and the other makes all of it unlikely, e.g.
`[[0.9, 0.9], [0.1, 0.1]]`: RAG-Sequence 0.410, RAG-Token 0.250. Each passage tells one consistent story;
RAG-Sequence keeps a passage's tokens together and gains from it, while RAG-Token mixes the passages at every
token and loses that agreement. With the prior at ½, ½ the difference is exactly
$\tfrac14\,(a_1-a_2)(b_1-b_2)$, where $a_z$ and $b_z$ are passage $z$'s probabilities of "A" and "B":
RAG-Sequence is ahead whenever the passage that makes "A" likelier also makes "B" likelier.
</details>

### Exercise 2

Retrieve a single passage (`model.retrieve([ex.question], index, tok, n_docs=1)`), run the model on it as in
section 3 and compute the two losses with `by_hand`. Set `ex2` to the RAG-Sequence loss, the RAG-Token loss and
the generator's own negative log-likelihood of the answer given that passage, $-\log p(y\mid x,z)$. Why are
the three equal?
""",
        r"""
<details><summary>参考答案</summary>

让一个段落使整个答案都很可能，另一个段落使整个答案都不太可能，例如 `[[0.9, 0.9], [0.1, 0.1]]`：RAG-Sequence
为 0.410，RAG-Token 为 0.250。每个段落各自讲了一个前后一致的说法；RAG-Sequence 把同一段落的各个词元绑在一起，
因此得益，而 RAG-Token 在每个词元上都把段落混合一次，丢掉了这种一致性。先验为 ½、½ 时，两者之差恰好是
$\tfrac14\,(a_1-a_2)(b_1-b_2)$，其中 $a_z$、$b_z$ 是段落 $z$ 给“A”和“B”的概率：只要让“A”更可能的那个段落
也让“B”更可能，RAG-Sequence 就胜出。
</details>

### 练习 2

只检索一个段落（`model.retrieve([ex.question], index, tok, n_docs=1)`），像第 3 节那样让模型读它，再用 `by_hand`
算出两种损失。把 `ex2` 设为三个数：RAG-Sequence 损失、RAG-Token 损失，以及生成器读这个段落时答案的负对数似然
$-\log p(y\mid x,z)$。为什么三者相等？
""",
    ),
    code(
        r"""
ex2 = None  # (RAG-Sequence loss, RAG-Token loss, -log p(y|x,z)) with one passage: three numbers
"""
    ),
    check(
        r"""
if ex2 is None:
    print("Exercise 2: set ex2 to your three numbers, then run this cell again.")
else:
    r1 = model.retrieve([ex.question], index, tok, n_docs=1)
    logits1 = model(r1.context_input_ids, r1.context_attention_mask, r1.doc_scores, labels=labels).logits  # (1, T, V)
    sequence1, token1, log_p_token1 = by_hand(logits1, r1.doc_scores, labels)
    truth = [float(sequence1), float(token1), float(-log_p_token1.sum())]
    assert len(ex2) == 3, "ex2: three numbers"
    assert all(abs(float(mine) - t) < 1e-3 for mine, t in zip(ex2, truth)), "not yet: at least one of the three is off"
    print("right: all three are", f"{truth[0]:.4f}")
"""
    ),
    md(
        r"""
<details><summary>Model answer</summary>

With one passage, $p(z\mid x)$ is the softmax of a single score, which is 1: $\log p(z\mid x) = 0$, and each
sum over $z$ has one term. Eq. 1 and eq. 2 then both reduce to $\prod_i p(y_i\mid x,z,y_{<i})$, the generator
reading that passage; the retriever's score no longer matters at all.
</details>

### Exercise 3

How much does the retriever's confidence matter? Replace `rb.doc_scores`, the shipped reader's BM25 scores of
section 9, by zeros (a uniform $p(z\mid x)$) and recompute both of its losses with `by_hand`; the generator's
logits (`reader_logits`) do not change. Set `ex3` to the two new losses. Which of them moves more, and why?
(The tiny model's own scores in section 2 are nearly equal on the tiny run, $p(z\mid x)$ nearly uniform
already, so zeroing them there changes almost nothing.)
""",
        r"""
<details><summary>参考答案</summary>

只有一个段落时，$p(z\mid x)$ 是单个得分的 softmax，恒等于 1：$\log p(z\mid x) = 0$，对 $z$ 的每个求和都只有一项。
式 1 和式 2 于是都退化成 $\prod_i p(y_i\mid x,z,y_{<i})$，也就是生成器读这个段落时的概率；检索器的得分完全不起作用了。
</details>

### 练习 3

检索器有多大把握，究竟有多重要？把第 9 节中自带生成器所用的 BM25 得分 `rb.doc_scores` 换成全零（即均匀的
$p(z\mid x)$），再用 `by_hand` 重算它的两种损失；生成器的 logits（`reader_logits`）不变。把 `ex3` 设为两个新的损失。
哪一个变化更大？为什么？（在 tiny 运行上，第 2 节里 tiny 模型自己的得分几乎相等，$p(z\mid x)$ 本来就近乎均匀，
所以在那里把它们清零几乎什么都不会改变。）
""",
    ),
    code(
        r"""
ex3 = None  # (RAG-Sequence loss, RAG-Token loss) of the shipped reader with zero retrieval scores
"""
    ),
    check(
        r"""
if ex3 is None:
    print("Exercise 3: set ex3 to your two losses, then run this cell again.")
else:
    before = by_hand(reader_logits, rb.doc_scores, reader_labels)[:2]
    after = by_hand(reader_logits, torch.zeros_like(rb.doc_scores), reader_labels)[:2]
    assert len(ex3) == 2, "ex3: two numbers, RAG-Sequence first"
    assert all(abs(float(mine) - float(t)) < 1e-3 for mine, t in zip(ex3, after)), "not yet: recompute with zero scores"
    for name, b, a in zip(("RAG-Sequence", "RAG-Token"), before, after):
        print(f"right: {name:12} {b:.4f} -> {a:.4f}  ({a - b:+.4f})")
    gold = [k for k, p in enumerate(rb.passages[0]) if p.id in ex.gold_passage_ids]
    if gold:  # the passage z* the answer comes from, as a rule
        p_star = rb.doc_scores[0].softmax(0)[gold[0]]
        print(f"gold passage ranked {gold[0] + 1} of {K}: p(z*|x) = {p_star:.3f}, log(K p(z*|x)) = {torch.log(K * p_star):+.4f}")
    print("answer tokens between <s> and </s>:", reader_labels.shape[1] - 3)
"""
    ),
    md(
        r"""
<details><summary>Model answer</summary>

Both rise, RAG-Token by more. The answer's content comes from one passage $z^*$, as a rule the gold one (the check
prints its rank and $p(z^*\mid x)$): only it gives the answer's own tokens any probability. Where a loss depends on
$z^*$ alone it pays $-\log p(z^*\mid x)$, which grows from the BM25 softmax's value to $\log K$: a rise of
$\log\big(K\,p(z^*\mid x)\big)$. RAG-Sequence marginalizes once, over the whole answer, so it rises by that amount,
once. RAG-Token marginalizes at every token with the same prior, so it rises by about that much on each token that
only $z^*$ explains, by nothing on `<s>` (every passage predicts it alike), and by less on tokens such as `</s>`
that the other passages predict too: about $m$ times as much for an answer with $m$ tokens only $z^*$ explains.
The tiny run's answer ("1985") is a single token, so there the two rises are close, RAG-Token's a little larger
for `</s>`; on a multi-token answer RAG-Token moves several times more. The losses fall instead only when the
retriever's confidence was misplaced, $p(z^*\mid x) < 1/K$: it trusted the answer's passage less than a uniform
prior does.
</details>

### Exercise 4

`lewisrag ask` prints the posteriors of the answer a model *generates*, which may differ from the gold one. The
tiny model's generated answers are noise (and the text it prints need not re-encode to the tokens it
generated), so do what `ask` does (`lewisrag/experiments/ask.py`) in Python, with the shipped reader:

```python
generated = reader.generate(rb.context_input_ids, rb.context_attention_mask, rb.doc_scores, n_docs=K,
                            return_evidence=True)
```

`generated.sequences[:1]` is laid out like the labels (the decoder start token, `<s>`, the answer, `</s>`): use it
as the labels, recompute the RAG-Token posteriors $p(z\mid x,y_i,y_{<i})$ of section 8 for the reader, and set
`ex4` to them, a (K, T-1) tensor. The check compares them with `generated.doc_posterior[0]`, the posteriors
the generator computed while decoding (row $t$ for token $t+1$). Then ask a question of your own
(`rb = bm25_retrieve(reader, ["..."], bm25, reader_tok, K)`) and look at which passage each token leaned on.
""",
        r"""
<details><summary>参考答案</summary>

两者都上升，RAG-Token 升得更多。答案的内容来自一个段落 $z^*$，通常就是金标段落（核对单元会打印它的排名和
$p(z^*\mid x)$）：只有它给答案自己的词元像样的概率。损失中只取决于 $z^*$ 的部分要付出 $-\log p(z^*\mid x)$，而这一项从
BM25 softmax 给出的值涨到了 $\log K$：升幅是 $\log\big(K\,p(z^*\mid x)\big)$。RAG-Sequence 只在整个答案上边缘化一次，
所以它就上升这么多，只升一次。RAG-Token 在每个词元上都用同一个先验边缘化一次，所以在每个只能由 $z^*$ 解释的词元上
都大约上升这么多，在 `<s>` 上不变（每个段落都同样地预测它），在 `</s>` 这类其他段落也能预测的词元上升得少一些：
如果答案里有 $m$ 个词元只能由 $z^*$ 解释，升幅大约是 RAG-Sequence 的 $m$ 倍。tiny 运行的答案（“1985”）只有一个词元，
所以在那里两者的升幅很接近，RAG-Token 因为 `</s>` 略大一点；换成多词元的答案，RAG-Token 的变化会大好几倍。
反过来，只有当检索器的把握放错了地方，即 $p(z^*\mid x) < 1/K$、它对含答案段落的信任还不如均匀先验时，损失才会下降。
</details>

### 练习 4

`lewisrag ask` 打印的是模型**自己生成的**答案的后验，这个答案可能和金标答案不同。tiny 模型生成的答案只是噪声（而且它
打印出的文本重新编码后，未必还是它生成的那些词元），所以我们用自带的生成器，在 Python 里做 `ask` 所做的事
（`lewisrag/experiments/ask.py`）：

```python
generated = reader.generate(rb.context_input_ids, rb.context_attention_mask, rb.doc_scores, n_docs=K,
                            return_evidence=True)
```

`generated.sequences[:1]` 的排布和 labels 一样（解码起始符、`<s>`、答案、`</s>`）：把它当作标签，为这个生成器重算
第 8 节的 RAG-Token 后验 $p(z\mid x,y_i,y_{<i})$，并把 `ex4` 设为结果，一个 (K, T-1) 的张量。核对单元会把它和
`generated.doc_posterior[0]` 比较，后者是生成器在解码时算出的后验（第 $t$ 行对应第 $t+1$ 个词元）。然后换一个你自己的问题
（`rb = bm25_retrieve(reader, ["..."], bm25, reader_tok, K)`），看看每个词元依据的是哪个段落。
""",
    ),
    code(
        r"""
ex4 = None  # (K, T-1): p(z|x,y_i,y_<i) of the answer the shipped reader generates, from the labels generated.sequences[:1]
"""
    ),
    check(
        r"""
if ex4 is None:
    print("Exercise 4: set ex4 to your posteriors, then run this cell again.")
else:
    decoded = reader.generate(rb.context_input_ids, rb.context_attention_mask, rb.doc_scores, n_docs=K,
                              return_evidence=True)
    truth = decoded.doc_posterior[0, : decoded.sequences.shape[1] - 1].T  # (K, T-1): row t of doc_posterior is token t+1
    mine = torch.as_tensor(ex4, dtype=truth.dtype)
    assert mine.shape == truth.shape, f"not yet: ex4 has shape {tuple(mine.shape)}, expected (K, T-1) = {tuple(truth.shape)}"
    assert torch.allclose(mine, truth, atol=1e-4), "not yet: the shape is right, the posteriors are not"
    pieces = [reader_tok.generator.decode([int(t)]) for t in decoded.sequences[0, 1:]]
    print("right: the answer", repr(reader_tok.generator.decode(decoded.sequences[0], skip_special_tokens=True)))
    for piece, z in zip(pieces, truth.argmax(0)):
        print(f"   {piece!r:12} leans on z={int(z)} {rb.passages[0][int(z)].id}")
"""
    ),
    md(
        r"""
<details><summary>Model answer</summary>

`ex4` is section 8's `post_token` for the reader: with `labels = generated.sequences[:1]`,
`log_p_token = by_hand(reader(rb.context_input_ids, rb.context_attention_mask, rb.doc_scores, labels=labels).logits, rb.doc_scores, labels)[2]`
and then `torch.softmax(rb.doc_scores[0].log_softmax(0)[:, None] + log_p_token, dim=0)`. `lewisrag ask` prints the
mean of these columns over the answer's real tokens (`<s>` and `</s>` left out) as its posterior, and each
token's most likely passage. The posterior explains the answer that was written, right or wrong: when the
reader answers from a passage that is not the gold one, its tokens lean on that passage, and so would its
implicit citation.
</details>
""",
        r"""
<details><summary>参考答案</summary>

`ex4` 就是这个生成器的第 8 节 `post_token`：令 `labels = generated.sequences[:1]`，
`log_p_token = by_hand(reader(rb.context_input_ids, rb.context_attention_mask, rb.doc_scores, labels=labels).logits, rb.doc_scores, labels)[2]`，
再算 `torch.softmax(rb.doc_scores[0].log_softmax(0)[:, None] + log_p_token, dim=0)`。`lewisrag ask` 把这些列在答案的
真实词元上取平均（不算 `<s>` 和 `</s>`），作为它打印的后验，并列出每个词元最依赖的段落。后验解释的是实际写出来的答案，
不管它对不对：如果生成器依据的不是金标段落，它的词元就会依赖那个段落，隐式引用也会指向那里。
</details>
""",
    ),
]
