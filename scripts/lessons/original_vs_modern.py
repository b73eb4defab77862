"""Lesson 3: the original RAG against prompt-stitching RAG: the layered scorecard, the position probe,
the BugHunt traps and the regression gate."""

from __future__ import annotations

from common import RUN_INTRO, check, code, md, setup

TITLE = "03_original_vs_modern"

# The `small` run's figures this lesson quotes, cell for cell as README.md's results table gives them:
# {the row's first cell: {a column's header: the cell}}. The text is formatted from them, and tests/test_lessons.py
# holds each to its row of the README, so that the README's next run cannot leave the lesson quoting the last one.
N_TEST, N_PROBE = "1,046", "200"  # the short-answer test questions, the position probe's questions
README_ROWS = {
    f"EM, short answers ({N_TEST})": {"RAG-Token": "0.967", "RAG-Sequence": "0.967", "prompt-stitching RAG": "0.929"},
    f"position probe ({N_PROBE} questions), gold passage at 1 / 2 / 3(-5)": {"prompt-stitching RAG": "0.93 / 0.01 / 0.000"},
    "generator forward passes per answer (RAG-Token's citation pass and RAG-Sequence's rescoring counted)":
        {"RAG-Token": "36.0", "RAG-Sequence": "56.1", "prompt-stitching RAG": "10.2"},
}
_em, _probe, _passes = README_ROWS.values()
_first, _second, _rest = _probe["prompt-stitching RAG"].split(" / ")  # gold passage at 1, at 2, at 3 (to 5)
SMALL = {  # the same figures by the names the text formats
    "n_test": N_TEST, "n_probe": N_PROBE, "probe_first": _first, "probe_second": _second, "probe_rest": _rest,
    "em_token": _em["RAG-Token"], "em_sequence": _em["RAG-Sequence"], "em_stitched": _em["prompt-stitching RAG"],
    "passes_token": _passes["RAG-Token"], "passes_sequence": _passes["RAG-Sequence"],
    "passes_stitched": _passes["prompt-stitching RAG"],
}

CELLS = [
    md(
        r"""
# Lesson 3 — Original versus modern RAG

Most RAG systems built today **stitch**: they paste the top-$k$ passages, numbered `[1]`..`[k]`, into one
input and ask the generator for an answer that cites them. The RAG of Lewis et al. (2020) reads every
passage **on its own** and marginalizes over them (lesson 1). In this lesson you

1. see the two kinds of input for one question;
2. score both systems with one evaluator, layer by layer: retrieval, generation, citations, cost;
3. run the **position probe**: does it matter where the gold passage sits?
4. walk through **BugHunt**, six preset answers of which five fail each in a different layer, and the traps
   of checking citations by rule;
5. put a **regression gate** between a baseline and a candidate evaluation, as CI does.

**Time:** about 10 minutes.
""",
        r"""
# 第 3 课 —— 原版 RAG 与现代 RAG

今天搭建的 RAG 系统大多采用**拼接**方式：把前 $k$ 个段落编号为 `[1]`..`[k]`，拼进同一个输入，
让生成器给出带引用的答案。Lewis 等人（2020）的 RAG 则**逐个**阅读段落，再对它们做边缘化（见第 1 课）。
这一课你将：

1. 对同一个问题，看看两种输入长什么样；
2. 用同一个评测器给两种系统逐层打分：检索、生成、引用、开销；
3. 跑一遍**位置探针**：金标段落放在第几个位置，会不会影响答案？
4. 走读 **BugHunt**：六个预设答案，其中五个各自在不同的层次上出错，以及按规则核对引用时会掉进的陷阱；
5. 像 CI 那样，在基线评测和候选评测之间设一道**回归门禁**。

**用时：**约 10 分钟。
""",
    ),
    RUN_INTRO,
    setup(TITLE),
    md(
        r"""
## 1. Two ways to read $K$ passages

Both systems get their passages from the same retriever (DPR over index A). The Lewis model builds one
input per passage; the stitched model (a generator of the same size, fine-tuned on stitched inputs with
the gold passage's number as the citation to write) reads one input holding the top $k$ of them
(`stitch_settings.k`: 3 in the `tiny` and `small` presets, where the Lewis models read $K$ = 3 and 5).
""",
        r"""
## 1. 读 $K$ 个段落的两种方式

两种系统的段落都来自同一个检索器（索引 A 上的 DPR）。Lewis 模型为每个段落单独构造一个输入；提示拼接模型
（同样大小的生成器，在拼接输入上微调过，学会写出金标段落的编号作为引用）只读一个输入，其中包含前 $k$ 个段落
（`stitch_settings.k`：`tiny` 和 `small` 预设里是 3，而 Lewis 模型读 $K$ = 3 和 5 个）。
""",
    ),
    code(
        r"""
from lewisrag.data.records import read_qa
from lewisrag.index.dense import DenseIndex
from lewisrag.rag_model.stitched import stitch
from lewisrag.training.checkpoint import load_trained
from lewisrag.training.stitched_train import load_stitched

model, tok = load_trained(RUN / "rag_token")
index = DenseIndex.load(RUN / "index_a")
stitched, stitched_tok, stitch_settings = load_stitched(RUN / "stitched")
ex = next(ex for ex in read_qa(RUN / "world" / "test.jsonl") if ex.kind == "short")
r = model.retrieve([ex.question], index, tok)

print("Lewis RAG reads", len(r.context_input_ids), "inputs:")
for row in r.context_input_ids:
    print("   ", tok.generator.decode(row, skip_special_tokens=True))
print("Prompt stitching reads 1 input:")
print("   ", stitch(ex.question, r.passages[0][: stitch_settings.k], stitch_settings))
"""
    ),
    md(
        r"""
## 2. One scorecard for both

`compare_run` (from a shell: `lewisrag compare --run RUN --out DIR`) answers the test questions and the
evaluation set with RAG-Token, RAG-Sequence and the stitched system, turns every answer into an evaluator
record and scores all of them with the same judge. The rows, from the top:

* **EM, F1, ROUGE-L** on the short-answer test questions, and **recall@k** of the passages each system read;
* **faithfulness** (are the answer's statements supported by the passages it read?), **context recall**
  (do the passages hold the reference statements?), **answer completeness** (does the answer state them?);
* **citation recall and precision**: the stitched system writes `[n]`; the Lewis models cite
  *implicitly*, from their posteriors (lesson 1, section 8; `lewisrag/rag_model/implicit_citations.py`). A
  RAG-Sequence answer cites the passage with the highest $p(z\mid x,y)$; a RAG-Token answer cites, sentence by
  sentence, every passage whose per-token posterior averaged over the sentence is at least `min_share` (0.3),
  and always the top one;
* **cost**: generator forward passes and tokens read per answer. A Lewis model runs its decoder once per
  passage for every token it writes; RAG-Token then reads its answer once more under each passage for its
  citations, and RAG-Sequence rescores every distinct candidate under every passage;
* refusals on questions the knowledge base cannot answer, the layer each failure is blamed on, and the
  claim-level diagnostics of RAGChecker.

On a bigger run this cell takes longer (about a minute for `small`).
""",
        r"""
## 2. 同一张评分卡

`compare_run`（命令行：`lewisrag compare --run RUN --out DIR`）让 RAG-Token、RAG-Sequence 和提示拼接系统
分别回答测试题和评测集，把每个答案转成评测器的记录，并用同一个裁判打分。评分卡从上到下依次是：

* 简答测试题上的 **EM、F1、ROUGE-L**，以及各系统所读段落的 **recall@k**；
* **忠实度**（答案中的陈述是否有它读到的段落支持？）、**上下文召回**（段落里是否包含参考陈述？）、
  **答案完整度**（答案有没有说出这些参考陈述？）；
* **引用召回与引用精确率**：提示拼接系统自己写 `[n]`；Lewis 模型是**隐式**引用，引用由后验得出（第 1 课第 8 节；
  `lewisrag/rag_model/implicit_citations.py`）。RAG-Sequence 的答案引用 $p(z\mid x,y)$ 最高的那个段落；RAG-Token
  的答案逐句引用：把句中各词元的后验取平均，平均值不低于 `min_share`（0.3）的段落都被引用，排第一的段落总会被引用；
* **开销**：每个答案的生成器前向次数和读入的词元（token）数。Lewis 模型每写一个词元，都要对每个段落各跑一次解码器；
  之后 RAG-Token 为了给出引用，还要在每个段落下把答案整体再读一遍，RAG-Sequence 则要在每个段落下给每个不同的候选答案重新打分；
* 对知识库无法回答的问题是否拒答、每次失败被归咎到哪一层，以及 RAGChecker 的陈述级诊断。

在更大的运行上这个单元会慢一些（`small` 约一分钟）。
""",
    ),
    code(
        r"""
from IPython.display import Image, Markdown, display

from lewisrag.experiments.compare import compare_run, render_markdown

card = compare_run(RUN, WORK / "compare", position_questions=20)
display(Markdown(render_markdown(card)))
"""
    ),
    md(
        r"""
## 3. The position probe

Liu et al. (2023, "Lost in the Middle") found that a reader of one long input uses a relevant passage
best at the start or the end. The probe takes each question's passages, moves the gold passage to
position 1, 2, ... $k$ in turn, and measures exact match at each position.
""",
        r"""
## 3. 位置探针

Liu 等人（2023，“Lost in the Middle”）发现：阅读一个长输入的模型，对放在开头或结尾的相关段落利用得最好。
位置探针把每个问题的金标段落依次挪到第 1、2、……、$k$ 个位置，分别计算精确匹配。
""",
    ),
    code(
        r"""
for name, curve in card["position"].items():
    cells = "   ".join(f"gold at {p}: {em:.2f}" for p, em in zip(curve["positions"], curve["exact_match"]))
    print(f"{name:13} {cells}")
display(Image(filename=str(WORK / "compare" / "position.png")))
"""
    ),
    md(
        r"""
The Lewis curves are flat **by construction**: the marginal is a sum over $z$, and reordering the
passages only reorders the terms of the sum. We can check that on the loss itself, for every ordering of
the passages: the Lewis model's negative log-likelihood of the answer does not move (up to rounding),
while the stitched generator's likelihood of the same answer changes with the order. With the tiny run
the stitched numbers are noise, but they move; a `small` run's stitched model answers from passage `[1]`
whatever it holds (on the README's {n_probe}-question position probe, EM {probe_first} with the gold passage first,
{probe_second} and {probe_rest} elsewhere).
""".format(**SMALL),
        r"""
Lewis 模型的曲线**天生**就是平的：边缘分布是对 $z$ 的求和，调换段落的顺序只是调换求和中各项的顺序。
我们可以直接在损失上验证：对段落的每一种排列，Lewis 模型给答案的负对数似然都不变（只差舍入误差），
而提示拼接生成器给同一个答案的似然却随顺序变化。tiny 运行里提示拼接模型的数字只是噪声，但它们确实在变；
`small` 运行的提示拼接模型则不管 `[1]` 里是什么都照着它答（README 中 {n_probe} 题的位置探针：金标段落放第一位时 EM 为 {probe_first}，放在别处为 {probe_second} 和 {probe_rest}）。
""".format(**SMALL),
    ),
    code(
        r"""
from itertools import permutations

labels = torch.tensor([[model.generator.config.decoder_start_token_id, *tok.generator(ex.answers[0])["input_ids"]]])
stitched_labels = stitched_tok(ex.answers[0], return_tensors="pt")["input_ids"]  # (1, T) the same answer, no citation
k = min(len(r.passages[0]), stitch_settings.k)
for order in map(list, permutations(range(k))):
    lewis = model(r.context_input_ids[order], r.context_attention_mask[order], r.doc_scores[:, order], labels=labels).loss
    prompt = stitched_tok(stitch(ex.question, [r.passages[0][i] for i in order], stitch_settings), return_tensors="pt")
    modern = stitched(**prompt, labels=stitched_labels).loss * stitched_labels.shape[1]  # mean -> sum over tokens
    print(order, f"Lewis NLL {lewis.item():9.4f}   stitched NLL {modern.item():9.4f}")
"""
    ),
    md(
        r"""
## 4. BugHunt: six answers, five failures

BugHunt, the sample shipped in `lewisrag/eval/bughunt/` (in Chinese), follows a testing agent that found the
Conduit app showing nothing when a login password is wrong. It asks the knowledge base what the API
returns and how the front end should tell the user. Of six preset answers one is correct and five each
fail in a different layer (not retrieved, retrieved but not used, hallucinated, off topic, misplaced
citations), and every sentence
carries human labels. With the human labels as the judge, each answer's diagnosis should name the layer
it was built to fail in.
""",
        r"""
## 4. BugHunt：六个答案，五种失败

BugHunt 是 `lewisrag/eval/bughunt/` 里自带的中文样例，讲的是一个测试智能体（Agent）：它发现 Conduit 应用在登录密码输错时
没有任何提示，于是去知识库里查接口返回什么、前端该怎么提示用户。六个预设答案中一个是正确的，另外五个各自
在不同的层次上出错（没检索到、检索到但没用上、用歪了（幻觉）、答非所问、引用错位），每个句子都有人工标注。以人工标注作为裁判时，
每个答案的诊断结果应当正好指向它被设计成出错的那一层。
""",
    ),
    code(
        r"""
from lewisrag.eval.bughunt import load_bughunt, rule_checker_rows, rule_checker_table
from lewisrag.eval.evaluator import evaluate_bughunt
from lewisrag.eval.reports.markdown import bughunt_answer_table

sample = load_bughunt()
print(sample.question)
for d in sample.docs:
    print(f"  [{d.id}] {d.title}: {d.text[:60]}...")
result = evaluate_bughunt(sample).to_json()
display(Markdown("\n".join(bughunt_answer_table(result))))
for a in result["records"]:
    print(f"{a['name']:21} built to fail in: {a['expected_primary'] or 'none':22} diagnosed: {a['diagnosis']['primary'] or 'none'}")
"""
    ),
    md(
        r"""
### The traps of checking citations by rule

A rule checker asks cheap, deterministic questions of each sentence: does it cite at all, is the cited id
among the retrieved passages, are the words it quotes verbatim (in Chinese corner brackets) and its numbers and
Latin words in the cited passage? It runs on every commit, but it
is not a judge of support. Against the human citation labels of the 22 sentences it catches 7 bad
citations and passes 12 good ones; the other three are its traps: a **false block** (a good citation the
rule rejects), a **miss** (a bad citation the rule lets through) and a sentence the rule cannot check at all.
""",
        r"""
### 按规则核对引用的陷阱

规则核对器对每个句子只问一些廉价、确定的问题：有没有引用？引用的 id 是否在检索到的段落里？「」里逐字引用的词，
以及句中的数字和拉丁字母单词，是否都出现在被引段落中？它可以在每次提交时运行，但它并不能判断“是否真的支持”。拿 22 个句子的人工引用标注
来对照，它抓住了 7 个错误引用、放过了 12 个正确引用；剩下三个就是它的陷阱：一次**误拦**（正确的引用被
规则拒绝）、一次**漏放**（错误的引用被规则放行），以及一个规则根本无从核对的句子。
""",
    ),
    code(
        r"""
print(rule_checker_table(sample))
for row in rule_checker_rows(sample):
    if row["outcome"] in ("false_block", "missed", "unverifiable"):
        print(f"\n{row['outcome']}: rule says {row['status']}, human says the citation is {'fine' if row['citation_ok'] else 'wrong'}")
        print("   ", row["sentence"])
        print("   ", row["detail"])
"""
    ),
    md(
        r"""
## 5. The regression gate

`lewisrag gate --baseline B --candidate C` compares two evaluations question by question. Its report starts with
a `pairing` row, whether the two can be compared at all (every baseline question found in the candidate, with the
same text; both scored by the same judge and statement splitter), then come three tiers:

1. **rules** (every commit): no bad citation ids, missing citations or unfound quotes in the candidate; no
   metric unmeasurable on more questions than before;
2. **retrieval** (deterministic): recall@k must not drop, tested in pairs (McNemar; a sign-flip test on the mean);
3. **judged metrics** (noisy): paired tests on faithfulness, completeness, context recall and citations.

It exits 0 when every check passes, 1 when one fails and 2 when the runs cannot be compared. We evaluate
BugHunt's answers with the deterministic lexical judge as the baseline; since these answers break rules
on purpose, tier 1 counts only violations the baseline did not already have (`allow_baseline_violations = true`
below, as `scripts/ci_gate.sh --bughunt` does in CI; by default any occurrence fails).
""",
        r"""
## 5. 回归门禁

`lewisrag gate --baseline B --candidate C` 逐题比较两次评测。它的报告先有一行 `pairing`（配对），检查两次评测能不能比
（基线的每道题都能在候选里找到、题面相同；两者由同一个裁判、同一个陈述拆分器打分），然后分三层检查：

1. **规则**（每次提交都跑）：候选里不能出现错误的引用 id、缺失的引用或找不到的引文；任何指标无法测量的
   题目数都不能比基线多；
2. **检索**（确定性的）：recall@k 不能下降，按题配对检验（McNemar 检验；均值上做符号翻转检验）；
3. **裁判打分的指标**（有噪声）：对忠实度、答案完整度、上下文召回和引用做配对检验。

全部通过时退出码为 0，有检查失败为 1，两次运行无法比较时为 2。我们用确定性的词汇裁判评测 BugHunt 的
答案作为基线；由于这些答案是故意违反规则的，第一层只统计基线中原本没有的违规（下面的
`allow_baseline_violations = true`，CI 中的 `scripts/ci_gate.sh --bughunt` 也是这么做的；默认设置下出现一次就失败）。
""",
    ),
    code(
        r"""
from lewisrag.eval.bughunt import answer_records
from lewisrag.eval.evaluator import evaluate_answers
from lewisrag.eval.gate import gate
from lewisrag.eval.judges import LexicalJudge
from lewisrag.eval.records import parse_answer
from lewisrag.eval.results import write_results


def evaluate(records, name):
    # score answer records with the lexical judge into WORK/<name>.json, as `lewisrag eval answers` does
    parsed = [parse_answer(rec, name, i, {}) for i, rec in enumerate(records, start=1)]
    write_results(WORK / f"{name}.json", evaluate_answers(parsed, LexicalJudge()))
    return WORK / f"{name}.json"


def show(report):
    # one line per tier, then every check that did not pass with its evidence
    print("gate:", "PASSED" if report.passed else "FAILED")
    for tier in dict.fromkeys(c.tier for c in report.checks):
        checks = [c for c in report.checks if c.tier == tier]
        print(f"  {tier:12} {sum(c.verdict == 'pass' for c in checks)} of {len(checks)} checks pass")
        for c in checks:
            if c.verdict != "pass":
                print(f"      {c.verdict}: {c.name}: {c.evidence}")


config = WORK / "gate.toml"
config.write_text("n_resamples = 1000\n[tier1]\nallow_baseline_violations = true\n", encoding="utf-8")
baseline = evaluate(answer_records(sample), "baseline")
show(gate(baseline, evaluate(answer_records(sample), "rerun"), config))
"""
    ),
    md(
        r"""
Now a regression: an edit to the `correct` answer makes it cite `[4]`, a passage that was never
retrieved for it. Nothing else changes.
""",
        r"""
现在制造一次回归：改动 `correct` 这个答案，让它引用 `[4]`，一个根本没有被检索到的段落。其余一切不变。
""",
    ),
    code(
        r"""
records = answer_records(sample)
records[0]["response"] = records[0]["response"].replace("[1]", "[4]")
print(records[0]["id"], "->", records[0]["response"])
show(gate(baseline, evaluate(records, "broken"), config))
"""
    ),
    md(
        r"""
Tier 1 fails on the fact (a cited id that was not retrieved), tier 3 on what it costs (citation recall and
precision), and both name the one answer that changed.

Judged scores move with the judge and the statement splitter. A candidate judged (or split into statements)
differently from its baseline is refused rather than compared (the CLI exits 2), unless you pass `--allow-judge-change`. Here the baseline was judged by the
lexical judge and the candidate by BugHunt's human labels:
""",
        r"""
第一层因为事实本身而失败（引用了一个没有被检索到的 id），第三层因为它造成的损失而失败（引用召回和引用精确率
下降），两者都指出了被改动的那一个答案。

裁判打出的分数会随裁判和陈述拆分器而变。如果候选和基线用的裁判（或拆分器）不同，门禁会直接拒绝比较（命令行退出码为 2），
除非你加上 `--allow-judge-change`。下面的基线用词汇裁判打分，候选则用 BugHunt 的人工标注打分：
""",
    ),
    code(
        r"""
from lewisrag.data.io import InputError

write_results(WORK / "labelled.json", evaluate_bughunt(sample))
try:
    gate(baseline, WORK / "labelled.json", config)
except InputError as e:
    print("refused:", e)
"""
    ),
    md(
        r"""
## What to take away

* Reading passages one at a time and marginalizing makes the Lewis model blind to their order, at the price
  of $K$ decoder passes per token; a stitched reader is cheaper but has to learn where to look.
* Score every layer, not only the final answer: a wrong answer may be a retrieval miss, a reading miss
  or a citation slip, and each has a different fix.
* Rules are cheap and catch the obvious; judges catch more but drift; a gate compares like with like,
  question by question, and refuses to compare otherwise.

""",
        r"""
## 本课要点

* 逐个阅读段落再做边缘化，使 Lewis 模型对段落顺序完全不敏感，代价是每个词元要跑 $K$ 次解码器；提示拼接的读法
  更省，但得自己学会该看哪里。
* 要逐层打分，而不是只看最终答案：一个错误答案可能是检索没找到、阅读出了错，也可能是引用失误，
  每种情况的修法都不一样。
* 规则核对便宜，能抓住明显的错误；裁判能发现更多问题，但会漂移；门禁只在可比的前提下逐题比较，
  不可比时就拒绝比较。

""",
    ),
    md(
        r"""
## Exercises

Each exercise has a cell for your work that ends by setting a variable (`ex1`, `ex2`, `ex3`), and below it a
**check** cell, collapsed: it computes the answer itself, so open it only to see how. Run the check after your
work: it says whether your value is right, and left at `None` it only reminds you. A model answer follows each
check, folded.

### Exercise 1

The cost rows of the scorecard mean the same on any run. A RAG-Token answer costs $K$ encoder passes, $K$ decoder
passes per generated token and $K$ teacher-forced passes of its answer for its citations; a stitched answer one
encoder pass plus one decoder pass per token (`lewisrag/experiments/systems.py`, `lewis_forward_passes`). From the forward passes per answer in section 2's table and $K$
(`model.n_docs`), how many tokens does RAG-Token and how many does the stitched system generate per answer, on
average?

Then, if you have a `small` run (`make demo`: about 15 minutes on a fast 2-core CPU, about 40 on an older one;
see the README), point `LEWISRAG_LESSON_RUN` at it and rerun sections 2 and 3: which system wins on EM, which on
cost, and what does the stitched system's position curve look like?
""",
        r"""
## 练习

每道练习都有一个给你动手的单元，最后把结果赋给一个变量（`ex1`、`ex2`、`ex3`）；下面是一个折叠起来的**核对**单元：它自己
把答案算出来，所以只有想看算法时才展开它。做完后运行核对单元：它会告诉你结果对不对；变量还是 `None` 时，它只提醒你先作答。
每个核对单元后面都附有参考答案，同样是折叠的。

### 练习 1

评分卡里开销那几行在任何运行上含义都一样。RAG-Token 的一个答案要跑 $K$ 次编码器，每生成一个词元再跑 $K$ 次解码器，
最后为了引用在每个段落下把答案整体读一遍，又是 $K$ 次前向；提示拼接的答案跑一次编码器，每个词元跑一次解码器
（`lewisrag/experiments/systems.py`，`lewis_forward_passes`）。根据第 2 节表中每个答案的前向次数和
$K$（`model.n_docs`），算一算：平均每个答案，RAG-Token 生成了多少个词元？提示拼接系统呢？

然后，如果你有一次 `small` 运行（`make demo`：在较快的 2 核 CPU 上约 15 分钟，较老的 CPU 上约 40 分钟；见 README），
把 `LEWISRAG_LESSON_RUN` 指向它，重跑第 2、3 节：EM 上谁赢？开销上谁赢？提示拼接系统的位置曲线是什么形状？
""",
    ),
    code(
        r"""
ex1 = None  # (tokens per answer of RAG-Token, of the stitched system), from the forward-pass row of section 2
"""
    ),
    check(
        r"""
if ex1 is None:
    print("Exercise 1: set ex1, then run this cell again.")
else:
    passes = {name: layer["forward_passes_per_answer"] for name, layer in card["layers"].items()}
    truth = ((passes["rag_token"] - 2 * model.n_docs) / model.n_docs, passes["stitched"] - 1)
    assert len(ex1) == 2 and all(abs(mine - t) < 0.01 for mine, t in zip(ex1, truth)), \
        "not yet: solve passes = K + K * tokens + K, and 1 + tokens"
    print(f"right: RAG-Token {truth[0]:.2f} tokens in {passes['rag_token']:.1f} passes, "
          f"stitched {truth[1]:.2f} tokens in {passes['stitched']:.1f} passes")
"""
    ),
    md(
        r"""
<details><summary>Model answer</summary>

Solve passes $= K + K\cdot$tokens $+ K$ for RAG-Token and passes $= 1 +$ tokens for the stitched system. On the tiny run
every answer has the same length, the most each system may write (the tiny models never learned to stop), and
still the Lewis model makes about twice the stitched model's passes for fewer tokens: it pays $K$ passes per token.

On a `small` run the README's figures ({n_test} short-answer test questions): EM {em_token} for RAG-Token and {em_sequence} for
RAG-Sequence against {em_stitched} for the stitched system, which costs {passes_stitched} forward passes per answer against RAG-Token's {passes_token} and RAG-Sequence's {passes_sequence} (its thorough decoding
rescores every candidate under every passage). Its
position curve falls off a cliff: EM {probe_first} with the gold passage first, {probe_second} and {probe_rest} elsewhere ({n_probe}
questions), while the Lewis curves stay flat. The lesson's probe uses 20 questions, so its steps are coarser.
</details>

### Exercise 2

In section 5, break the `correct` answer differently: drop its first citation
(`records[0]["response"].replace(" [1]", "", 1)`), or cite `[3]` everywhere (`.replace("[1]", "[3]")`; `[3]` was
retrieved, but it is the registration requirement). Which tiers fail for each change?
""".format(**SMALL),
        r"""
<details><summary>参考答案</summary>

RAG-Token 解方程 前向次数 $= K + K\cdot$词元数 $+ K$，提示拼接系统解 前向次数 $= 1 +$ 词元数。在 tiny 运行上，每个答案都一样长，
都写满了各自允许的最大长度（tiny 模型还没学会停下来）；即便如此，Lewis 模型用的前向次数仍是提示拼接模型的两倍左右，
写出的词元却更少：它每个词元都要付出 $K$ 次前向。

在 `small` 运行上，README 给出的数字（{n_test} 道简答测试题）：RAG-Token 的 EM 为 {em_token}，RAG-Sequence 为 {em_sequence}，提示拼接系统为
{em_stitched}；而提示拼接系统每个答案只要 {passes_stitched} 次前向，RAG-Token 要 {passes_token} 次，RAG-Sequence 要 {passes_sequence} 次（它的彻底解码要在每个段落下给每个候选答案重新打分）。它的位置曲线断崖式下跌：金标段落放第一位时 EM 为 {probe_first}，
放在别处为 {probe_second} 和 {probe_rest}（{n_probe} 道题），而 Lewis 模型的曲线始终是平的。本课的探针只用 20 道题，所以台阶更粗。
</details>

### 练习 2

在第 5 节换一种方式破坏 `correct` 这个答案：删掉它的第一个引用（`records[0]["response"].replace(" [1]", "", 1)`），或者
把引用全部改成 `[3]`（`.replace("[1]", "[3]")`；`[3]` 检索到了，但那是注册接口的需求）。每种改动分别让哪几层失败？
""".format(**SMALL),
    ),
    code(
        r"""
ex2 = None  # {"dropped": {tier numbers that fail}, "cited_3": {tier numbers that fail}}, e.g. {"dropped": {2}, ...}
"""
    ),
    check(
        r"""
if ex2 is None:
    print("Exercise 2: set ex2, then run this cell again.")
else:
    edits = {"dropped": lambda text: text.replace(" [1]", "", 1), "cited_3": lambda text: text.replace("[1]", "[3]")}
    failing = {}
    for change, edit in edits.items():
        records = answer_records(sample)
        records[0]["response"] = edit(records[0]["response"])
        report = gate(baseline, evaluate(records, change), config)
        failed = [c for c in report.checks if c.verdict == "fail"]
        failing[change] = ({int(c.tier[0]) for c in failed if c.tier[0].isdigit()}, failed)  # tiers "1 rules", ...
    for change, (tiers, _) in failing.items():
        assert set(ex2[change]) == tiers, f"not yet: {change} makes other tiers fail"
    print("right:")
    for change, (tiers, failed) in failing.items():
        print(f"  {change}: tiers {sorted(tiers)} fail:", "; ".join(f"{c.tier} {c.name}" for c in failed))
"""
    ),
    md(
        r"""
<details><summary>Model answer</summary>

Dropping the citation fails tier 1 on MISSING_CITATION (a fact: a sentence that cites nothing) and tier 3 on
citation recall. Citing `[3]` raises no BAD_ID, since `[3]` was retrieved, but tier 1 still fails, on
QUOTE_NOT_FOUND: the Chinese phrase for "red list", quoted in corner brackets as a verbatim quote, is not in the
registration document. The JSON key "email or password" is in straight double quotes, which the checker does not
hold to the letter (they as often report speech or name a term in other words); its Latin words are checked as
words instead, like the sentence's numbers, and "email", "password" and "invalid" are not in that document either:
TOKEN_NOT_FOUND, a status tier 1 does not gate on. Tier 3 fails on citation recall and precision. Tier 2 passes both times: the passages retrieved did not change.
</details>

### Exercise 3

Turn the last `gate` call around: the human labels as the baseline, the lexical judge as the candidate,
`gate(WORK / "labelled.json", baseline, config, allow_judge_change=True)`. Which checks fail? Do you believe
them? And why does the other order, `gate(baseline, WORK / "labelled.json", config, allow_judge_change=True)`,
pass?
""",
        r"""
<details><summary>参考答案</summary>

删掉引用会让第一层因 MISSING_CITATION 失败（这是事实：一个什么都没引用的句子），第三层因引用召回下降而失败。改引 `[3]`
不会触发 BAD_ID，因为 `[3]` 检索到了；但第一层仍然失败，原因是 QUOTE_NOT_FOUND：用「」逐字引用的「红色列表」不在注册需求文档里。
JSON 键 "email or password" 用的是英文直双引号，核对器不要求它逐字出现（这种引号同样常用来转述别人的话，或换个说法指称一个术语）；
其中的拉丁字母单词改由查数字和拉丁字母单词的那条规则核对，而 “email”“password” 和 “invalid” 也都不在那篇文档里：这是 TOKEN_NOT_FOUND，第一层并不因它拦截。
第三层因引用召回和引用精确率下降而失败。两次第二层都通过：检索到的段落没有变。
</details>

### 练习 3

把最后一次 `gate` 调用反过来：人工标注作基线，词汇裁判作候选，
`gate(WORK / "labelled.json", baseline, config, allow_judge_change=True)`。哪些检查失败了？你相信这些结果吗？
反过来的顺序 `gate(baseline, WORK / "labelled.json", config, allow_judge_change=True)` 为什么通过？
""",
    ),
    code(
        r"""
ex3 = None  # the set of metrics with a failing check, e.g. {"context_recall"}
"""
    ),
    check(
        r"""
if ex3 is None:
    print("Exercise 3: set ex3, then run this cell again.")
else:
    turned = gate(WORK / "labelled.json", baseline, config, allow_judge_change=True)
    failing = {c.name.split()[0].rstrip(":") for c in turned.checks if c.verdict == "fail"}  # "faithfulness: paired mean"
    assert set(ex3) == failing, "not yet: run the gate call and read its failing checks"
    print("right:")
    show(turned)
    print("the other order:", "PASSED" if gate(baseline, WORK / "labelled.json", config, allow_judge_change=True).passed else "FAILED")
"""
    ),
    md(
        r"""
<details><summary>Model answer</summary>

Faithfulness, answer completeness, citation recall and citation precision fail, and the `pairing` row warns that
the judge changed. Do not believe them: the six answers are the same in both runs, only the judge differs. Every
failure is the lexical judge calling supported statements unsupported (its false kills, lesson 4 section 3), and
none is significant: each mean fails on the allowed drop of 0.02 (sign-flip p 0.125 to 0.25: with six questions,
two or three changed cannot reach 0.025), and each failing cut at 0.5 on a single answer, `not_retrieved`, newly
below it. The other order passes because the gate is one-sided (it fails only what got worse) and on BugHunt
the lexical judge scores no answer above the human labels on any metric: it never misses here, it only kills. That is
why the gate refuses a judge change unless told otherwise: the change itself moves the scores.
</details>
""",
        r"""
<details><summary>参考答案</summary>

失败的是忠实度、答案完整度、引用召回和引用精确率，`pairing` 这一行还警告裁判换了。别相信它们：两次运行里的六个答案一字未改，
变的只是裁判。每一项失败都来自词汇裁判把有支持的陈述判成了没有支持（它的误杀，见第 4 课第 3 节），而且没有一项是显著的：
每个均值都是因为超过了容许的 0.02 下降而失败（符号翻转的 p 值在 0.125 到 0.25 之间：六道题里只变了两三道，不可能达到 0.025），
失败的 0.5 切点则都只是因为一个回答 `not_retrieved` 新跌到了它下面。反过来的顺序能通过，是因为门禁是
单侧的（只拦变差的），而在 BugHunt 上，词汇裁判在任何指标上都没有给哪个答案打出比人工标注更高的分：它在这里从不漏判，只会误杀。
这正是门禁默认拒绝跨裁判比较的原因：换裁判本身就会让分数移动。
</details>
""",
    ),
]
