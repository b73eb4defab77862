"""Lesson 2: the index hot-swap of Lewis et al. 2020 (section 4.5): one model, two indexes."""

from __future__ import annotations

from common import RUN_INTRO, check, code, md, setup

TITLE = "02_hot_swap"

# exercise 3's commands, one copy for both languages
EX3_COMMANDS = """```
lewisrag train dpr --train RUN/world/train.jsonl --passages RUN/world/passages_a.jsonl --out WORK/dpr \\
                   --hidden-size 32 --layers 1 --vocab-size 1000 --steps 30 --batch-size 16 --seed 1
lewisrag index build --passages RUN/world/passages_b.jsonl --encoder WORK/dpr --out WORK/index_b2
lewisrag swap --model RUN/rag_sequence --index RUN/index_a --index WORK/index_b2 \\
              --questions RUN/world/questions_a.jsonl --questions RUN/world/questions_b.jsonl
```"""

CELLS = [
    md(
        r"""
# Lesson 2 — The hot swap: one model, two indexes

A model that keeps its knowledge in its weights must be retrained when the world changes. Lewis et al.
(2020, §4.5) showed that RAG keeps much of it in the **index** instead: they built one index from the
December 2016 Wikipedia and one from December 2018, asked about 82 world leaders ("Who is {position}?",
e.g. "Who is the President of Peru?") and swapped the index
under the *same* trained model. With the 2016 index it answered 70% of the 2016 leaders and 4% of the
2018 ones; with the 2018 index 68% of the 2018 leaders and 12% of the 2016 ones.

lewisrag's built-in world has the same shape: two snapshots, A and B, whose leaders and populations
differ. In this lesson you

1. look at what changed between the snapshots;
2. load one trained model and two indexes and watch the retrieved passages change under it;
3. compute the swap matrix: every model × every index × both question sets;
4. see the effect clearly with a generator that can read.

**Time:** about 10 minutes.
""",
        r"""
# 第 2 课 —— 索引热替换：一个模型，两个索引

如果模型把知识存放在权重里，世界一变就得重新训练。Lewis 等人（2020，第 4.5 节）表明，RAG 把很大一部分
知识放在了**索引**里：他们分别用 2016 年 12 月和 2018 年 12 月的维基百科各建了一个索引，就 82 位世界领导人提问（“Who is {position}?”，如“Who is the President of Peru?”，即“秘鲁总统是谁？”），并在**同一个**训练好的模型下面替换索引。用 2016 年的索引，模型答对了 70% 的 2016 年领导人，
只答对 4% 的 2018 年领导人；换成 2018 年的索引，答对了 68% 的 2018 年领导人和 12% 的 2016 年领导人。

lewisrag 内置的世界有同样的结构：两个快照 A 和 B，其中领导人和人口数字不同。这一课你将：

1. 看看两个快照之间到底改了什么；
2. 加载一个训练好的模型和两个索引，观察同一个模型检索到的段落如何随索引改变；
3. 算出热替换矩阵：每个模型 × 每个索引 × 两组问题；
4. 换一个会读的生成器，把这个效应看得清清楚楚。

**用时：**约 10 分钟。
""",
    ),
    RUN_INTRO,
    setup(TITLE),
    md(
        r"""
## 1. Two snapshots of one world

Both snapshots have the same passage ids. Passage `<entity>-0` holds the facts that never change
(for a country its capital, currency, language and founding year; for an organisation its field,
headquarters and founding year); `<entity>-1` holds the ones that do (leader or head,
population or members). A few entities also have `<entity>-2`, an archived entry with old facts, the
same in both snapshots. `questions_a.jsonl` and `questions_b.jsonl` ask the *same* questions about the
changed facts; the first is answered by snapshot A, the second by snapshot B.
""",
        r"""
## 1. 同一个世界的两个快照

两个快照的段落 id 完全相同。段落 `<实体>-0` 存放不会变的事实（国家是首都、货币、语言、建立年份；组织是领域、总部、建立年份）；
`<实体>-1` 存放会变的事实（领导人或负责人、人口或成员数）。少数实体还有 `<实体>-2`：一条记着旧事实的存档条目，
在两个快照里完全相同。`questions_a.jsonl` 和 `questions_b.jsonl`
就这些变化了的事实问的是**同样**的问题，前者的答案来自快照 A，后者的来自快照 B。
""",
    ),
    code(
        r"""
from lewisrag.data.records import read_passages, read_qa

world = RUN / "world"
A = {p.id: p for p in read_passages(world / "passages_a.jsonl")}
B = {p.id: p for p in read_passages(world / "passages_b.jsonl")}
changed = [pid for pid in A if A[pid].text != B[pid].text]
print(f"{len(changed)} of {len(A)} passages differ between the snapshots")

questions_a, questions_b = read_qa(world / "questions_a.jsonl"), read_qa(world / "questions_b.jsonl")
qa, qb = questions_a[0], questions_b[0]
pid = qa.gold_passage_ids[0]
print("question:", qa.question, "| answer in A:", qa.answers[0], "| answer in B:", qb.answers[0])
print("A:", A[pid].text)
print("B:", B[pid].text)
"""
    ),
    md(
        r"""
## 2. One model, two indexes

Both indexes were built by the same frozen document encoder, so their vectors live in the space the
question encoder was trained against. Each index records that encoder's fingerprint in its
`manifest.json`, and the model records the fingerprint of the index it was trained with. A model
refuses an index built by another encoder unless you ask for it (`--swap`): the inner products
would compare vectors from two different spaces.
""",
        r"""
## 2. 一个模型，两个索引

两个索引由同一个冻结的文档编码器构建，所以其中的向量和问题编码器训练时面对的是同一个向量空间。每个索引
在 `manifest.json` 里记下了这个编码器的指纹，模型也记下了训练时所用索引的指纹。如果索引是由另一个编码器
构建的，模型会拒绝使用它，除非你明确要求（`--swap`）：否则内积比较的就是两个不同空间里的向量。
""",
    ),
    code(
        r"""
from lewisrag.index.dense import DenseIndex
from lewisrag.training.checkpoint import load_trained

model, tok = load_trained(RUN / "rag_token")
index_a, index_b = DenseIndex.load(RUN / "index_a"), DenseIndex.load(RUN / "index_b")
print("model trained against encoder", model.settings.index_fingerprint)
print("index A encoder", index_a.ctx_fingerprint, "|", len(index_a.passages), "passages")
print("index B encoder", index_b.ctx_fingerprint, "|", len(index_b.passages), "passages")
"""
    ),
    md(
        r"""
Now the same question goes to the same weights, once over each index. The passage ids may be the same
in both; the text the generator reads is not.
""",
        r"""
现在，把同一个问题交给同一组权重，分别在两个索引上各跑一次。检索到的段落 id 可能完全相同，但生成器
读到的文字不同。
""",
    ),
    code(
        r"""
from lewisrag.rag_model.answering import answer_questions

for name, index in [("A", index_a), ("B", index_b)]:
    r = model.retrieve([qa.question], index, tok)
    answer = answer_questions(model, tok, index, [qa.question])[0]
    print(f"index {name}: answer {answer!r}")
    for p, score in zip(r.passages[0], r.doc_scores[0]):
        print(f"   {score:8.3f}  {p.id:22} {p.text[:70]}...")
"""
    ),
    md(
        r"""
## 3. The swap matrix

`swap_matrix` answers every question set from every index with every model and scores exact match;
`lewisrag swap` is the same from a shell:

```
lewisrag swap --model RUN/rag_token --model RUN/rag_sequence --index RUN/index_a --index RUN/index_b \
              --questions RUN/world/questions_a.jsonl --questions RUN/world/questions_b.jsonl
```

We keep the first 40 questions of each set, so the cell stays quick on a bigger run too.
""",
        r"""
## 3. 热替换矩阵

`swap_matrix` 让每个模型在每个索引上回答每一组问题，并按精确匹配（EM）打分；在命令行里等价的命令是
`lewisrag swap`：

```
lewisrag swap --model RUN/rag_token --model RUN/rag_sequence --index RUN/index_a --index RUN/index_b \
              --questions RUN/world/questions_a.jsonl --questions RUN/world/questions_b.jsonl
```

我们每组只取前 40 个问题，这样在规模更大的运行上这个单元也能很快跑完。
""",
    ),
    code(
        r"""
from lewisrag.experiments.swap import swap_matrix

for s in "ab":
    lines = (world / f"questions_{s}.jsonl").read_text(encoding="utf-8").splitlines()[:40]
    (WORK / f"questions_{s}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")

m = swap_matrix([RUN / "rag_token", RUN / "rag_sequence"], [RUN / "index_a", RUN / "index_b"],
                [WORK / "questions_a.jsonl", WORK / "questions_b.jsonl"])
for model_name in m["models"]:
    for index_name in m["indexes"]:
        row = "   ".join(f"{q}: {m['em'][model_name][index_name][q]:.2f}" for q in m["questions"])
        print(f"{model_name:13} reading {index_name}   {row}")
"""
    ),
    md(
        r"""
Read the matrix by its diagonals. If the knowledge lives in the index, the **matched** cells (index A with
questions A, index B with questions B) are high and the **mismatched** ones low: the model's answers
follow the index it reads, and nothing was retrained.

With the `tiny` preset every cell is near 0: its retriever and generator trained for seconds and answer
almost nothing. With a `small` run (`make demo`, about 15 minutes) the matrix is above 0.9 on the
diagonal (0.95–0.99 over all 306 questions of each snapshot, by CPU and thread count: README, docs/performance.md) and 0.00 off it. The next section shows the same effect in seconds.
""",
        r"""
看这个矩阵要看它的对角线。如果知识存放在索引里，那么**匹配**的格子（索引 A 配问题 A、索引 B 配问题 B）
数值高，**不匹配**的格子数值低：模型的答案跟着它读的索引走，而模型本身没有重新训练过。

用 `tiny` 预设时所有格子都接近 0：它的检索器和生成器只训练了几秒钟，几乎什么都答不对。换成 `small`
运行（`make demo`，约 15 分钟），对角线上高于 0.9（对每个快照的全部 306 个问题为 0.95–0.99，随 CPU 和线程数而异，见 README 和 docs/performance.md），非对角线上是 0.00。下一节用几秒钟就能看到同样的效应。
""",
    ),
    md(
        r"""
## 4. The same experiment with a reader that can read

lewisrag ships a small pretrained generator that answers 97% of questions when it is handed the gold
passage. We let BM25 fetch the passages for it (the paper's Table 6 replaces DPR by BM25 the same way): one
`RagModel`, its weights fixed, reading BM25 over snapshot A and then BM25 over snapshot B. The tiny run's
question encoder is carried along, since a `RagModel` is built with one, but unused: BM25 chooses the passages
and its scores give $p(z\mid x)$.
""",
        r"""
## 4. 换一个会读的生成器，再做一次

lewisrag 自带一个小型预训练生成器，只要把金标段落交给它，它能答对 97% 的问题。我们用 BM25 为它取段落
（论文表 6 也是这样用 BM25 替换 DPR 的）：同一个 `RagModel`，权重不变，先读快照 A 上的 BM25 索引，再读快照 B 上的。
tiny 运行的问题编码器虽然跟着一起放进了模型（构造 `RagModel` 需要它），却完全用不上：段落由 BM25 挑选，
$p(z\mid x)$ 也由 BM25 的得分给出。
""",
    ),
    code(
        r"""
from lewisrag.index.bm25 import BM25Index
from lewisrag.rag_model import RagModel, Tokenizers
from lewisrag.scoring.qa import exact_match
from lewisrag.training.pretrain import load_shipped_generator

generator, generator_tok = load_shipped_generator()
reader = RagModel(model.question_encoder, generator, variant="sequence", n_docs=model.n_docs).eval()
reader_tok = Tokenizers(tok.question, generator_tok)
bm25 = {"A": BM25Index.in_memory(list(A.values())), "B": BM25Index.in_memory(list(B.values()))}
sets = {"questions A": questions_a[:40], "questions B": questions_b[:40]}

answers = {}
for name, index in bm25.items():
    for set_name, examples in sets.items():
        preds = answer_questions(reader, reader_tok, None, [ex.question for ex in examples], bm25=index)
        answers[name, set_name] = preds
        em = sum(exact_match(p, ex.answers) for p, ex in zip(preds, examples)) / len(examples)
        print(f"reader on index {name}   {set_name}: EM {em:.2f}")
"""
    ),
    md(
        r"""
Question by question: where the reader gets it right, the same weights give snapshot A's fact when they read A
and snapshot B's when they read B. Where it gets it wrong, it is usually wrong alike on both indexes, with a
fact that did not change between them: exercise 1 asks why.
""",
        r"""
逐题来看：生成器答对的题，同一组权重读 A 时给出快照 A 的事实，读 B 时给出快照 B 的事实。答错的题，通常在两个索引上
错得一模一样，给出的是两个快照之间没有变的事实：练习 1 会问为什么。
""",
    ),
    code(
        r"""
for i in range(4):
    print(questions_a[i].question)
    print(f"   truth in A: {questions_a[i].answers[0]!r:22} reader on A: {answers['A', 'questions A'][i]!r}")
    print(f"   truth in B: {questions_b[i].answers[0]!r:22} reader on B: {answers['B', 'questions B'][i]!r}")
"""
    ),
    md(
        r"""
## What to take away

* Swapping the index updates what a RAG model says without touching a weight, and the mismatched cells
  measure how much it still answers from memory (here, near nothing; in the paper 4–12%).
* The swap is only sound when both indexes come from the document encoder the question encoder was trained
  against: that is why the encoder's fingerprint travels with every index and model.
* The matched cells are bounded by retrieval: a fact the retriever does not find cannot be read.

""",
        r"""
## 本课要点

* 替换索引就能更新 RAG 模型的回答，不用改动任何权重；不匹配的格子则衡量模型还有多少是“凭记忆”在答
  （这里几乎为零；论文中是 4–12%）。
* 只有当两个索引都出自问题编码器训练时所对应的文档编码器，热替换才站得住：这就是为什么每个索引和模型
  都带着编码器的指纹。
* 匹配格子的上限由检索决定：检索器找不到的事实，生成器也读不到。

""",
    ),
    md(
        r"""
## Exercises

Exercises 1 and 2 each have a cell for your work that ends by setting a variable (`ex1`, `ex2`), and below it a
**check** cell, collapsed: it computes the answer itself, so open it only to see how. Run the check after your
work: it says whether your value is right, and left at `None` it only reminds you. A model answer follows each
check, folded.

### Exercise 1

Which questions does the reader miss on the matched index A (questions A, section 4)? Print the BM25 passages
for them (`bm25_retrieve(reader, [question], bm25["A"], reader_tok, reader.n_docs)`, from
`lewisrag.rag_model.bm25_adapter`): is each a retrieval miss (no gold passage among those read) or a reading miss
(the gold passage was read, the answer is still wrong)?
""",
        r"""
## 练习

练习 1 和 2 各有一个给你动手的单元，最后把结果赋给一个变量（`ex1`、`ex2`）；下面是一个折叠起来的**核对**单元：它自己把
答案算出来，所以只有想看算法时才展开它。做完后运行核对单元：它会告诉你结果对不对；变量还是 `None` 时，它只提醒你先作答。
每个核对单元后面都附有参考答案，同样是折叠的。

### 练习 1

在匹配的索引 A 上（问题 A，第 4 节），生成器答错了哪些问题？把它们的 BM25 段落打印出来
（`bm25_retrieve(reader, [question], bm25["A"], reader_tok, reader.n_docs)`，出自 `lewisrag.rag_model.bm25_adapter`）：
每一题是检索没找到（读到的段落里没有金标段落），还是读错了（读到了金标段落，答案仍然错）？
""",
    ),
    code(
        r"""
ex1 = None  # how many of the misses are of each kind: {"retrieval": ..., "reading": ...}
"""
    ),
    check(
        r"""
from lewisrag.rag_model.bm25_adapter import bm25_retrieve

if ex1 is None:
    print("Exercise 1: set ex1, then run this cell again.")
else:
    examples, preds = sets["questions A"], answers["A", "questions A"]
    missed = [(q, p) for q, p in zip(examples, preds) if not exact_match(p, q.answers)]
    read = bm25_retrieve(reader, [q.question for q, _ in missed], bm25["A"], reader_tok, reader.n_docs).passages
    ranks = [next((i + 1 for i, p in enumerate(ps) if p.id in q.gold_passage_ids), None) for (q, _), ps in zip(missed, read)]
    truth = {"retrieval": ranks.count(None), "reading": len(ranks) - ranks.count(None)}
    assert {kind: dict(ex1).get(kind, 0) for kind in truth} == truth, "not yet: look for the gold passage among those read"
    print(f"right: {truth['retrieval']} retrieval and {truth['reading']} reading misses of {len(examples)} questions")
    for (q, pred), ps, rank in zip(missed, read, ranks):
        where = f"gold passage read at rank {rank}" if rank else "gold passage not read"
        print(f"   {q.question!r}: {pred!r} for {q.answers[0]!r}; {where}; rank 1: {ps[0].id}")
"""
    ),
    md(
        r"""
<details><summary>Model answer</summary>

On the tiny run every miss is a reading miss: BM25 finds the entity's changing passage (`<entity>-1`, the gold
one) but ranks it second, behind the entity's static passage (`<entity>-0`), which shares the question's name
words too and gets the larger $p(z\mid x)$; the reader then answers with a fact of that static passage (the check
prints each miss) instead of the changing fact the question asks for. Retrieval did its part; the marginalization
weighted the wrong passage.
</details>

### Exercise 2

Run the reader with `variant="token"` instead of `"sequence"` over the matched cells (index A with questions A,
index B with questions B). Set `ex2` to its two exact matches. Why does mixing passages per token hurt here,
where the top passage is often the *static* passage of the right entity?
""",
        r"""
<details><summary>参考答案</summary>

在 tiny 运行上，每一题都是读错了：BM25 找到了该实体会变的那个段落（`<实体>-1`，即金标段落），却把它排在第二，
排第一的是该实体的静态段落（`<实体>-0`），它同样含有问题里的名称，得到的 $p(z\mid x)$ 更大；生成器于是拿那个静态段落里的
事实来作答（核对单元会逐题打印出来），而不是问题所问的那个会变的事实。检索尽到了本分，是边缘化把权重压在了错误的段落上。
</details>

### 练习 2

让生成器改用 `variant="token"`（原来是 `"sequence"`），在两个匹配的格子上（索引 A 配问题 A、索引 B 配问题 B）再跑一遍，
把 `ex2` 设为它的两个精确匹配率。这里排第一的往往是正确实体的**静态**段落，为什么逐词元混合多个段落反而会出错？
""",
    ),
    code(
        r"""
ex2 = None  # (EM of the RAG-Token reader on index A with questions A, on index B with questions B)
"""
    ),
    check(
        r"""
if ex2 is None:
    print("Exercise 2: set ex2, then run this cell again.")
else:
    token_reader = RagModel(model.question_encoder, generator, variant="token", n_docs=model.n_docs).eval()
    ems = []
    for name in ("A", "B"):
        examples = sets[f"questions {name}"]
        preds = answer_questions(token_reader, reader_tok, None, [q.question for q in examples], bm25=bm25[name])
        ems.append(sum(exact_match(p, q.answers) for p, q in zip(preds, examples)) / len(examples))
        if name == "A":
            wrong = [(q, p) for q, p in zip(examples, preds) if not exact_match(p, q.answers)]
    # as the lesson prints them (two decimals) or as shares or percentages: 0.17, 0.1667 and 16.7 are all 2/12
    assert len(ex2) == 2 and all(abs((float(mine) / 100 if float(mine) > 1 else float(mine)) - em) < 0.005
                                 for mine, em in zip(ex2, ems)), "not yet: check both cells"
    print(f"right: RAG-Token EM {ems[0]:.2f} (A) and {ems[1]:.2f} (B) on {len(examples)} questions each; its misses on A:")
    for q, pred in wrong:
        print(f"   {q.question!r}: {pred!r} for {q.answers[0]!r}")
"""
    ),
    md(
        r"""
<details><summary>Model answer</summary>

On the tiny run RAG-Token answers fewer of the matched questions than RAG-Sequence, and the check prints its
misses. Under RAG-Sequence each passage proposes a whole answer and the candidates compete as wholes (eq. 1), so
every answer comes from one passage, the gold one's whenever it wins. Under RAG-Token the passages compete at
every token (eq. 2), and the static passage, which holds the most prior and lacks the answer, takes a token
wherever its prediction outweighs the gold passage's: besides answers taken from it whole, RAG-Token writes
blends, begun from one passage and continued from another (a name half right, a number with a digit from
another number).
</details>

### Exercise 3

Build an index over snapshot B with another encoder and try `lewisrag swap` with and without `--swap`. Train the new
encoder at the run's width: the tiny preset's DPR is 32 wide, one layer deep, with a vocabulary of 1,000
(`lewisrag/experiments/presets.py`; another run's sizes are in `RUN/dpr/lewisrag_dpr.json`), and at `train dpr`'s
default width of 128 the swap stops on the vectors' length (`dim`) before it gets to the question this exercise asks.
From a shell, with RUN and WORK the folders the setup cell printed:

{EX3_COMMANDS}

Then add `--swap` to the last command. What happens, and why?
""".replace("{EX3_COMMANDS}", EX3_COMMANDS),
        r"""
<details><summary>参考答案</summary>

在 tiny 运行上，RAG-Token 在匹配格子上答对的题比 RAG-Sequence 少，核对单元会把它答错的题打印出来。RAG-Sequence
让每个段落各自提出一个完整的答案，候选答案之间整体比较（式 1），所以每个答案都出自同一个段落，金标段落胜出时就是它的答案。
RAG-Token 则在每个词元上让段落竞争（式 2）：静态段落先验最高却不含答案，只要它对某个词元的预测压过金标段落，这个词元就归它。
于是除了整个照搬静态段落的答案之外，RAG-Token 还会写出“拼接货”：开头取自一个段落，后面接上另一个段落（名字只对一半，
数字里混进了另一个数的某一位）。
</details>

### 练习 3

用另一个编码器为快照 B 建索引，分别带上和不带 `--swap` 试试 `lewisrag swap`。新编码器要按这次运行的宽度训练：tiny 预设的
DPR 宽 32、只有一层、词表 1,000（见 `lewisrag/experiments/presets.py`；其他运行的尺寸写在 `RUN/dpr/lewisrag_dpr.json` 里）；
若用 `train dpr` 默认的宽度 128，热替换会先因向量长度（`dim`）不符而停下，根本走不到本题要问的地方。在命令行里运行下面的命令，
其中 RUN 和 WORK 是准备单元打印出的两个目录：

{EX3_COMMANDS}

然后给最后一条命令加上 `--swap` 再跑一次。会发生什么？为什么？
""".replace("{EX3_COMMANDS}", EX3_COMMANDS),
    ),
    md(
        r"""
<details><summary>Model answer</summary>

Without `--swap` the command refuses before it answers anything (exit code 2): the index was built with a context
encoder of one fingerprint, the model's question encoder was trained against another, and the message offers
`--swap` to search anyway. With `--swap` it runs, but the question vectors and the passage vectors now come from
encoders trained apart: their inner products no longer say which passage is relevant, so retrieval over the new
index is close to arbitrary and its cells fall towards the mismatched ones. The fingerprint check exists because
this failure is silent: nothing crashes, the answers just get worse. On the tiny run every cell is near 0 already,
so compare the passages retrieved (`model.retrieve([question], index, tok, swap=True)`) or use a `small` run.
An encoder of another width is refused one check earlier, on `dim`, and `--swap` does not lift that: a question
vector cannot be multiplied with passage vectors of another length at all.
</details>
""",
        r"""
<details><summary>参考答案</summary>

不带 `--swap` 时，命令在回答任何问题之前就拒绝执行（退出码 2）：索引是用一个指纹的上下文编码器建的，模型的问题编码器
却是对着另一个训练的，报错信息会提示可以加 `--swap` 强行检索。带上 `--swap` 就能跑，但问题向量和段落向量现在出自分开训练的
两个编码器：它们的内积不再能说明哪个段落相关，于是新索引上的检索近乎随意，这些格子的分数会往不匹配格子的水平掉。
之所以要核对指纹，正是因为这种失败是无声的：什么都不会崩溃，只是答案悄悄变差。tiny 运行上所有格子本来就接近 0，所以
请比较检索到的段落（`model.retrieve([question], index, tok, swap=True)`），或者换一次 `small` 运行。
宽度不同的编码器会更早一步、在 `dim` 上被拒绝，而且加 `--swap` 也没用：长度不同的问题向量和段落向量根本无法做内积。
</details>
""",
    ),
]
