"""Lesson 4: evaluating RAG answers layer by layer: the layers and their order, statements, judges and their
calibration, paired statistics and the gate."""

from __future__ import annotations

from common import check, code, md, setup

TITLE = "04_evaluation"

CELLS = [
    md(
        r"""
# Lesson 4 — Evaluating RAG answers layer by layer

"The answer is wrong" is not yet a diagnosis. A RAG answer can go wrong because the passage it needed was never
retrieved, because it was retrieved and ignored, because the answer says something the passages do not, because
it answers another question, or because it cites the wrong passage. Each has a different fix, and one end-to-end
score mixes them up. In this lesson you

1. score six answers to one question layer by layer (retrieval, generation, citations) and let the evaluator
   name the first layer that failed, in Chinese and in English;
2. see how an answer becomes **statements**, and why the same answer's faithfulness depends on how it is split;
3. meet the **judge** that decides whether a statement is supported, and **calibrate** it against human labels;
4. compare two systems on the same questions the way the regression gate does: **in pairs**.

Everything runs on the CPU, in seconds on the tiny run (about a minute on a `small` one): no LLM, no network.

**Time:** about 15 minutes.
""",
        r"""
# 第 4 课 —— 逐层评测 RAG 的回答

“答错了”还算不上诊断。一个 RAG 回答出错，可能是需要的段落根本没检索到，可能是检索到了却没用上，可能是说了段落里
没有的话，可能是答非所问，也可能是引错了段落。每种错误的修法都不一样，而一个端到端的总分会把它们搅在一起。这一课你将：

1. 给同一个问题的六个回答逐层打分（检索、生成、引用），让评测器指出最先出错的那一层，中文、英文回答都试一遍；
2. 看一个回答怎样被拆成**陈述**，以及为什么同一个回答的忠实度取决于拆法；
3. 认识判断“陈述有没有支持”的**裁判**，并用人工标注给它做**校准**；
4. 像回归门禁那样比较两个系统：同一批题目，**逐题配对**。

全部在 CPU 上运行，tiny 运行几秒钟跑完（`small` 运行约一分钟）：不调用 LLM，也不联网。

**用时：**约 15 分钟。
""",
    ),
    md(
        r"""
## 0. What this lesson reads

Two things, both already on your disk. **BugHunt**, the sample shipped inside lewisrag (`lewisrag/eval/bughunt/`):
one Chinese question, a knowledge base of four documents, six preset answers and a human label on every
sentence. And the **world** of the tiny reproduction the other lessons use: its passages and questions, in English.
This lesson reads no model, so it does not matter that the tiny models cannot read.

The next cell makes that run if it is not there yet (well under a minute), or reuses one you point
`LEWISRAG_LESSON_RUN` at. From a shell, at the repository's root, the same run is
`.venv/bin/lewisrag reproduce --preset tiny --out docs/lessons/lesson_run`.
""",
        r"""
## 0. 本课读什么

两样东西，都已经在你的磁盘上。一是 **BugHunt**，lewisrag 自带的样例（`lewisrag/eval/bughunt/`）：一个中文问题、
一个由四篇文档组成的知识库、六个预设回答，每个句子都有人工标注。二是其他几课共用的那次小规模复现里的**世界**：
它的段落和问题，是英文的。本课不读任何模型，所以 tiny 模型不会“读”也没有关系。

下一个单元会在这次运行还不存在时生成它（远不到一分钟），或者复用 `LEWISRAG_LESSON_RUN` 指向的运行。
在命令行里做同样的事，是在仓库根目录下运行 `.venv/bin/lewisrag reproduce --preset tiny --out docs/lessons/lesson_run`。
""",
    ),
    setup(TITLE),
    md(
        r"""
## 1. Five layers, and the order they fail in

The evaluator (`lewisrag.eval`) scores every answer on each layer separately:

| layer | question it asks | scores |
|---|---|---|
| retrieval | did the needed passages arrive? | recall@k (share of the gold passages in the top k; hit@k: any of them), context recall (share of the reference statements the passages hold) |
| generation: off topic | does the answer address the question? | on-topic rate (human labels) or answer relevancy (needs an LLM and an embedder) |
| generation: distorted | is every statement of the answer supported by the passages? | faithfulness |
| generation: not used | does the answer state the reference statements? | answer completeness |
| citation | does each cited passage support its sentence? | citation recall and precision, and the rule checker |

A layer fails when its score is below its threshold (by default: anything short of complete, and an on-topic
rate under one half). The **diagnosis** then walks the layers in causal order, retrieval → off topic →
distorted → not used → citation, and names the first failure the **primary cause**; the failures after it are
its **consequences**. An answer built on a passage that never arrived will also be incomplete, and probably
unfaithful: fixing the generator would not help.

BugHunt's question: a testing agent found that the Conduit app shows nothing when a login password is wrong,
and asks what the API returns and how the front end should tell the user. One document (REQ-AUTH-03)
answers it; REQ-USER-02, about registration, is a look-alike that also returns 422.
""",
        r"""
## 1. 五个层次，以及它们出错的先后

评测器（`lewisrag.eval`）对每个回答逐层单独打分：

| 层 | 它问什么 | 分数 |
|---|---|---|
| 检索 | 需要的段落检索到了吗？ | recall@k（金标段落落在前 k 篇里的比例；hit@k：只要有一篇就算），上下文召回（参考陈述中能在段落里找到的比例） |
| 生成：答非所问 | 回答针对的是这个问题吗？ | 切题率（人工标注）或答案相关性（需要 LLM 和一个句向量模型） |
| 生成：用歪了 | 回答的每条陈述都有段落支持吗？ | 忠实度 |
| 生成：没用上 | 回答说出参考陈述了吗？ | 答案完整度 |
| 引用 | 每个被引段落能支持它所在的句子吗？ | 引用召回和引用精确率，以及规则核对器 |

某一层的分数低于阈值就算这一层失败（默认：不满分就算失败，切题率则是低于一半）。然后**诊断**按因果顺序
检索 → 答非所问 → 用歪了 → 没用上 → 引用 逐层往下看，把第一个失败的层定为**主因**，排在它后面的失败都算
**连带后果**。一个建立在没检索到的段落上的回答，多半也不完整、也不忠实：这时去修生成器是没有用的。

BugHunt 的问题是这样来的：一个测试智能体发现 Conduit 应用在登录密码输错时没有任何提示，于是去问接口返回什么、
前端该怎么提示用户。能回答它的是 REQ-AUTH-03 这篇文档；讲注册的 REQ-USER-02 长得很像，也返回 422。
""",
    ),
    code(
        r"""
from lewisrag.eval.bughunt import load_bughunt

sample = load_bughunt()
print("question:", sample.question)
for d in sample.docs:
    print(f"  [{d.id}] {d.title}")
print("reference statements (what a complete answer states):")
for rid, text in sample.reference_statements.items():
    print(f"  {rid}: {text}")
"""
    ),
    md(
        r"""
Six preset answers: one correct, five built to fail in one layer each. With BugHunt's human labels as the
judge, here are their scores (recall@5 against the gold document; "-" where a score cannot be computed) and,
below them, each layer's verdict in causal order with the diagnosis:
""",
        r"""
六个预设回答：一个正确，另外五个各自被设计成在某一层出错。以 BugHunt 的人工标注作为裁判，下面是它们的分数
（recall@5 以金标文档为准；无法计算的记为“-”），再下面是按因果顺序排列的各层判定和诊断结果：
""",
    ),
    code(
        r"""
from lewisrag.eval.diagnose import CAUSE_ORDER
from lewisrag.eval.evaluator import evaluate_bughunt

SCORES = ("context_recall", "answer_completeness", "faithfulness", "on_topic_rate",
          "citation_recall", "citation_precision")
HEADS = ("recall@5", "ctx_rec", "complete", "faithful", "on_topic", "cite_R", "cite_P")
LAYERS = [layer.removeprefix("generation_") for layer in CAUSE_ORDER]  # retrieval, off_topic, ...


def show_layers(records):
    # one line of scores per answer, then each layer's verdict in the order failures are blamed
    print(f"{'answer':20}" + "".join(f"{head:>9}" for head in HEADS))
    for r in records:
        m = r["metrics"]
        row = [(m.get("recall_at_k") or {}).get("5")] + [m[key] for key in SCORES]
        print(f"{r['id']:20}" + "".join(f"{'-' if x is None else f'{x:.2f}':>9}" for x in row))
    print(f"\n{'answer':20}" + "".join(f"{layer:>10}" for layer in LAYERS) + "   primary cause")
    for r in records:
        d = r["diagnosis"]
        verdicts = "".join(f"{d['layers'][layer]:>10}" for layer in CAUSE_ORDER)
        built = f"   (built to fail in: {r['expected_primary'] or '-'})" if "expected_primary" in r else ""
        print(f"{r['id']:20}{verdicts}   {d['primary'] or '-'}{built}")


human = evaluate_bughunt(sample).to_json()  # judged by BugHunt's human labels
show_layers(human["records"])
"""
    ),
    md(
        r"""
Every diagnosis names the layer its answer was built to fail in. Read the rows against the order:

* `not_retrieved` fails four layers, but retrieval comes first: REQ-AUTH-03 was not among its passages, so the
  missing facts and the made-up pop-up (a message box saying the username or password is wrong, cited to `[1]`, a
  passage it never retrieved) are consequences. Blaming the generator here would send you to fix the
  wrong component.
* `hallucinated` is faithful on 1 of its 3 statements. It is also incomplete, but an answer that puts invented
  facts where the passage's belong cannot be expected to be complete: "distorted" comes before "not used".
* `misplaced_citations` has faithfulness 1.00: faithfulness joins all the passages and never looks at what a
  sentence cites. Only the citation layer sees that every `[3]` points at the registration document.

### The citation rule checker

Before any judge, a few questions can be answered by string matching alone, for free, on every commit: does a
sentence cite at all (MISSING_CITATION), is every cited id among the passages retrieved for this answer
(BAD_ID), is every verbatim quote (a string in Chinese corner brackets) in the cited passage (QUOTE_NOT_FOUND), is
every number and Latin word there (TOKEN_NOT_FOUND)? A sentence with nothing a rule can test is UNVERIFIABLE. The
first three are facts, not opinions, so the regression gate allows none of them.
""",
        r"""
每个诊断都正好指向它的回答被设计成出错的那一层。对照因果顺序读这两张表：

* `not_retrieved` 有四层失败，但检索排在最前：它检索到的段落里没有 REQ-AUTH-03，所以缺失的事实和编出来的提示框
  （弹出“用户名或密码错误”，还引用了根本没检索到的 `[1]`）都是连带后果。这时若怪罪生成器，就会去修错误的组件。
* `hallucinated` 的 3 条陈述里只有 1 条忠实。它也不完整，但一个拿编造的事实顶替段落内容的回答本来就不可能完整：
  “用歪了”排在“没用上”前面。
* `misplaced_citations` 的忠实度是 1.00：忠实度把所有段落拼在一起判断，从不看句子引的是哪一篇。只有引用这一层
  看得出，每个 `[3]` 指向的都是讲注册的文档。

### 引用规则核对器

在请出任何裁判之前，有几个问题单靠字符串匹配就能回答，不花钱，每次提交都能跑：句子有没有引用（MISSING_CITATION）？
引用的 id 是否在本次检索到的段落里（BAD_ID）？「」里逐字引用的原文是否在被引段落中（QUOTE_NOT_FOUND）？句子里的数字和
拉丁字母单词是否都在那里（TOKEN_NOT_FOUND）？没有任何规则可查的句子记为 UNVERIFIABLE。前三种是事实而不是意见，
所以回归门禁一个也不放过。
""",
    ),
    code(
        r"""
from lewisrag.eval.citations import HARD_GATE_STATUSES, check_answer

docs = sample.doc_texts()
for a in sample.answers:
    checks = check_answer(a.response, docs, set(a.retrieved_ids))
    print(f"{a.name:20}", "  ".join(c.status for _, c in checks))
    for _, c in checks:
        if c.status in HARD_GATE_STATUSES:
            print(f"{'':24}{c.status}: {c.detail}")
edge = next(s for s in sample.edge_sentences if "[" not in s.text)  # BugHunt's one sentence that cites nothing
print("\n" + edge.text, "->", check_answer(edge.text, docs, set(edge.retrieved_ids))[0][1].status)
"""
    ),
    md(
        r"""
The rules are cheap but blunt. `off_topic` passes them all (every sentence is well cited, about registration),
and a rule cannot tell a passage that supports a sentence from one that merely shares its numbers: lesson 3
([section 4](03_original_vs_modern.en.ipynb)) counts where the checker agrees with the human citation labels and
shows its traps. Support needs a judge, section 3.

### The same evaluator on English text

Nothing above is specific to Chinese. Here the evaluator reads one English question of the run's world that
needs two passages, with five answers written from its reference statements, and the lexical judge of section 3
instead of human labels. The wrong answer changes one digit of a number. The question is one whose every reference
statement the judge finds in its own gold passage: the world's questions say "founded" where some passages say
"The country was established in …", and a judge that counts words (section 3) would then fail even the correct
answer's citations.
""",
        r"""
规则便宜，但粗糙。`off_topic` 全部通过（每句话都引得好好的，只不过讲的是注册），而且规则分不清一篇段落是真正支持
一个句子，还是只是和它有相同的数字：第 3 课（[第 4 节](03_original_vs_modern.zh.ipynb)）统计了规则核对器和人工引用标注
在哪些句子上一致，并展示了它的陷阱。要判断“有没有支持”，得靠裁判，见第 3 节。

### 同一个评测器读英文

上面的做法和中文没有任何绑定。下面评测器读的是本次运行的世界里一个需要两篇段落才能回答的英文问题，五个回答都由
它的参考陈述写成，裁判换成第 3 节要讲的词汇裁判，而不是人工标注。出错的那个回答把一个数字改了一位。选题时要求
每条参考陈述都能被这个裁判在它自己的金标段落里找到：世界里的问题说 “founded”，有些段落却写作
“The country was established in …”，而一个只数词语是否出现的裁判（第 3 节）遇到这种题，连正确回答的引用也会判为不成立。
""",
    ),
    code(
        r"""
import re

from lewisrag.data.records import read_passages, read_qa
from lewisrag.eval.evaluator import evaluate_answers
from lewisrag.eval.judges import LexicalJudge
from lewisrag.eval.records import parse_answer

world = {p.id: p for p in read_passages(RUN / "world" / "passages_a.jsonl")}
judge = LexicalJudge()


def own_passage_supports(ex):  # each reference statement is found in its own gold passage, as this judge reads
    pairs = [(world[i].text, s) for i, s in zip(ex.gold_passage_ids, ex.reference_statements, strict=True)]
    return all(v.supported for v in judge.judge(pairs))


ex = next(ex for ex in read_qa(RUN / "world" / "eval.jsonl")
          if ex.category == "multi_doc" and re.search(r"\d", ex.reference_statements[-1]) and own_passage_supports(ex))
gold = [world[i] for i in ex.gold_passage_ids]  # the two passages the answer needs
other = next(p for p in world.values() if p.id not in ex.gold_passage_ids and p.title not in ex.question)
s1, s2 = ex.reference_statements[0], ex.reference_statements[-1]
wrong = re.sub(r"\d", lambda m: str((int(m[0]) + 1) % 10), s2, count=1)  # s2 with its first digit changed
print(ex.question, "\nreference statements:", s1, s2, "\n")

answers = {  # answer: (retrieved passages in rank order, response)
    "correct": (gold + [other], f"{s1} [1] {s2} [2]"),
    "not_retrieved": ([gold[0], other], f"{s1} [1] {s2} [2]"),
    "hallucinated": (gold + [other], f"{s1} [1] {wrong} [2]"),
    "not_used": (gold + [other], f"{s1} [1]"),
    "misplaced": (gold + [other], f"{s1} [2] {s2} [3]"),
}
records = [parse_answer({"id": name, "user_input": ex.question, "response": response,
                         "retrieved_contexts": [p.to_dict() for p in retrieved],
                         "reference_statements": ex.reference_statements, "gold_passage_ids": ex.gold_passage_ids},
                        "lesson", line, {})
           for line, (name, (retrieved, response)) in enumerate(answers.items(), start=1)]
show_layers(evaluate_answers(records, judge).to_json()["records"])
"""
    ),
    md(
        r"""
The same layers in the same order, and four of the five diagnoses name the layer their answer was built to fail
in. The fifth, `not_used`, reads `generation_not_used_or_off_topic`, because the off-topic layer is `n/a`: whether
a statement addresses the question is a human label in BugHunt; for other answers it is answer relevancy, which
needs an LLM judge and a sentence embedder (`lewisrag eval answers --judge llm:MODEL --embedder PATH`). The
evaluator (`lewisrag/eval/diagnose.py`) blames "not used" only on an answer measured to be on topic: a faithful
answer to another question leaves the reference statements uncovered just as well. Where relevance was not
measured, a faithful but incomplete answer may be either, so both layers are blamed. BugHunt's
`retrieved_not_used` is the same kind of answer and is diagnosed `generation_not_used` above only because its
human labels say it is on topic; its `off_topic` answer, just as faithful and incomplete, is diagnosed
`generation_off_topic` because they say it is not.
""",
        r"""
同样的层，同样的顺序；五个诊断里有四个指向的正是回答被设计成出错的那一层。第五个 `not_used` 的诊断是
`generation_not_used_or_off_topic`，因为答非所问这一层是 `n/a`：在 BugHunt 里，一条陈述是否切题是人工标注的；
对别的回答，要用答案相关性来衡量，而它需要 LLM 裁判和一个句向量模型（`lewisrag eval answers --judge llm:MODEL --embedder PATH`）。
评测器（`lewisrag/eval/diagnose.py`）只在回答经衡量确实切题时，才把错归到“没用上”：一个忠实地回答了别的问题的回答，
同样覆盖不到参考陈述。没有衡量切题与否时，一个忠实但不完整的回答两种情况都有可能，于是两层都被列为原因。
BugHunt 的 `retrieved_not_used` 正是这一类回答，上面它被诊断为 `generation_not_used`，只是因为人工标注说它切题；
而同样忠实、同样不完整的 `off_topic` 被诊断为 `generation_off_topic`，是因为标注说它不切题。
""",
    ),
    md(
        r"""
## 2. Statements: what the scores count

Faithfulness is a share of **statements**. lewisrag's default splitter (`split_sentences`) cuts an answer into
sentences and takes the citation markers out of each, keeping what it cites: `[1, 2]` and `[1-2]` cite both, an
abbreviation's dot ("e.g.") ends no sentence, and citations after a full stop belong to the sentence before.
""",
        r"""
## 2. 陈述：分数数的是什么

忠实度是**陈述**中有支持的比例。lewisrag 默认的拆分器（`split_sentences`）把回答按句切开，再把每句里的引用标记
取出来、记下它引了哪些：`[1, 2]` 和 `[1-2]` 都引了两篇，缩写里的点（如 “e.g.”）不算句末，句号后面的引用归前一句。
""",
    ),
    code(
        r"""
from lewisrag.eval.statements import split_sentences

for statement in split_sentences(f"{s1} [1] {wrong} [2] Both figures are estimates, e.g. from a census [1-2]."):
    print(statement.citations, statement.text)
"""
    ),
    md(
        r"""
How finely to split is a choice, and it moves the score. `hallucinated` has one true sentence and two invented
ones; split into sentences, faithfulness is 1 of 3. BugHunt also labels a finer split of the same answer into six
atomic statements (each one fact), and the whole answer as one statement. With the human labels as the judge,
the one answer scores 33.3%, 16.7% or 0%:
""",
        r"""
拆多细是一个选择，而它会改变分数。`hallucinated` 有一句是真的，两句是编的；按句拆，忠实度是 3 条中 1 条。
BugHunt 还给同一个回答的更细拆法（六条原子陈述，每条一个事实）和整段不拆（整个回答算一条陈述）做了标注。
以人工标注为裁判，同一个回答的得分可以是 33.3%、16.7% 或 0%：
""",
    ),
    code(
        r"""
from lewisrag.eval import metrics
from lewisrag.eval.evaluator import bughunt_label_judge
from lewisrag.eval.statements import strip_citations

hallucinated = sample.answer("hallucinated")
contexts = [docs[i] for i in hallucinated.retrieved_ids]
splits = {"sentences": [s.text for s in split_sentences(hallucinated.response)],
          "atomic": [text for text, _ in hallucinated.atomic],
          "whole": [strip_citations(hallucinated.response)]}
for split, statements in splits.items():
    score = metrics.faithfulness(statements, contexts, bughunt_label_judge(sample))
    print(f"{split:10} {len(statements)} statement(s), faithfulness {score:.1%}")
    for s in statements:
        print("     ", s)
"""
    ),
    md(
        r"""
None of the three is wrong; they measure different things (the share of sentences, of facts, of answers with no
invented fact). What is wrong is comparing scores split differently. So every results.json records its
`splitter` (name and version) as well as its judge, and `lewisrag gate` refuses to compare two runs whose
splitter or judge differ.
""",
        r"""
三种拆法都没有错，它们量的是不同的东西（句子的比例、事实的比例、有没有编造任何事实）。错的是拿不同拆法的分数互相比较。
所以每个 results.json 都记下了它的 `splitter`（名称和版本）和裁判，而 `lewisrag gate` 拒绝比较拆分器或裁判不同的两次运行。
""",
    ),
    md(
        r"""
## 3. Judges, and why they must be calibrated

Every generation and citation score asks one question many times: *does this premise support this statement?*
Whatever answers it is the **judge**: human labels, an NLI model, an LLM, or lewisrag's `LexicalJudge`, a
deterministic baseline that needs nothing. It counts how many of the statement's content words (and Chinese
characters, matched in runs of two or more) the premise holds, passes a statement at 75% of them, and fails it
anyway when the premise lacks one of its numbers or one of the names the writing marks as names. Each verdict
comes with its reason:
""",
        r"""
## 3. 裁判，以及为什么必须先校准

生成和引用两层的每个分数，都在反复问同一个问题：*这个前提能支持这条陈述吗？* 回答它的就是**裁判**：人工标注、
NLI 模型、LLM，或者 lewisrag 的 `LexicalJudge`：一个什么都不需要的确定性基线。它数陈述里的实词（中文按字计，
但要在前提中连续出现两个字以上才算）有多少出现在前提里，达到 75% 就判为有支持；但只要前提里缺了陈述中的某个数字，
或者缺了某个从写法上看得出是名字的词，仍然判为没有支持。每个判定都附带理由：
""",
    ),
    code(
        r"""
judge = LexicalJudge()
pairs = [  # (premise, statement)
    ("Tamm became head of state of Valdoria in 2016.", "Tamm became head of state of Valdoria in 2018."),  # number
    ("Ruus became head of state of Valdoria in 2016.", "Tamm is the head of state of Valdoria."),  # name
    ("Ruus became head of state of Valdoria in 2016.", "Ruus has led Valdoria since 2016."),  # paraphrase
    (docs["1"], "前端在登录表单上方用红色列表逐条显示错误。"),
    (docs["1"], "前端会弹出一个 toast，3 秒后自动消失。"),
    (docs["1"], "服务端用 HTTP 422 拒绝这次登录。"),
]
for (premise, statement), v in zip(pairs, judge.judge(pairs)):
    print(f"{'supported' if v.supported else 'NOT supported':14} {statement}\n{'':14} {v.reason}")
"""
    ),
    md(
        r"""
The wrong year and the wrong name fail even though 5 of 6 and 3 of 4 of their words are in the premise: a
share alone would have passed both. The paraphrase ("has led ... since") and the last Chinese sentence (true, but
worded differently from REQ-AUTH-03) fail too: a word-counting judge cannot see that different words say the same
thing.

A judge errs in two ways that cost different things. A **miss** calls an unsupported statement supported: a
hallucination gets through. A **false kill** calls a supported one unsupported: the gate fails for nothing.
Agreement with humans mixes the two, so calibration reports each apart, with a Wilson interval, next to
Cohen's κ (agreement corrected for chance). BugHunt ships 144 human labels, JSON lines
`{"id", "premise", "hypothesis", "supported"}` (the hypothesis is the statement); here are three judges against them (`lewisrag calibrate --judge lexical --labels lewisrag/eval/bughunt/labels.jsonl`
prints the first row with the disagreements):
""",
        r"""
错误的年份和错误的名字都被判为没有支持，尽管它们分别有 6 个词中的 5 个、4 个词中的 3 个在前提里：只看比例的话两句都会通过。
那句换了说法的英文（“has led ... since”）和最后一句中文（内容没错，只是措辞和 REQ-AUTH-03 不同）也没通过：
只会逐词计数的裁判看不出不同的词说的是同一件事。

裁判会犯两种代价不同的错。**漏判**：把没有支持的陈述判成有支持，幻觉就溜过去了。**误杀**：把有支持的陈述判成
没有支持，门禁就会无故失败。和人工的一致率把两者混在一起，所以校准要分别报告这两种错误率，各附一个 Wilson 区间，
再加上 Cohen's κ（扣除偶然一致之后的一致程度）。BugHunt 附带 144 条人工标注，每行一个 JSON 对象
`{"id", "premise", "hypothesis", "supported"}`（hypothesis 就是陈述，premise 是前提，supported 表示是否有支持）；下面拿三个
裁判和它们对照（`lewisrag calibrate --judge lexical --labels lewisrag/eval/bughunt/labels.jsonl` 会打印第一行，
并列出不一致的条目）：
""",
    ),
    code(
        r"""
from importlib import resources

from lewisrag.eval.judges import FunctionJudge
from lewisrag.eval.judges.labels import read_labels
from lewisrag.eval.stats import calibrate

labels = read_labels(resources.files("lewisrag.eval.bughunt") / "labels.jsonl")
print(len(labels), "labels,", sum(label.supported for label in labels), "of them supported\n")


def rate(c, kind):  # e.g. " 18.9% [11.6%, 29.3%]"
    low, high = c[f"{kind}_interval"]
    return f"{c[kind]:6.1%} [{low:.1%}, {high:.1%}]"


judges = {"lexical": LexicalJudge(), "lexical at 0.5": LexicalJudge(threshold=0.5),
          "always yes": FunctionJudge(lambda premise, statement: True)}
print(f"{'judge':16}{'agree':>6}{'kappa':>7}   {'miss rate [95% CI]':24}false-kill rate [95% CI]")
for name, j in judges.items():
    c = calibrate(j, labels)
    print(f"{name:16}{c['agreement']:6.3f}{c['kappa']:7.3f}   {rate(c, 'miss_rate'):24}{rate(c, 'false_kill_rate')}")
"""
    ),
    md(
        r"""
"Always yes" agrees with the humans half of the time and has κ = 0: it knows nothing. The lexical judge never lets
an unsupported statement through here, and pays for it with false kills; lowering its threshold to 0.5 trades
them for misses. Which error matters more is a decision about the product, and the intervals say how well 144
labels pin the rates down (about 70 unsupported statements: an upper bound near 5% even with no miss at all).

What a judge's errors do to an evaluation: score BugHunt again with the lexical judge in place of the labels.
""",
        r"""
“永远说有”和人工的一致率约为一半，κ = 0：它什么都不懂。词汇裁判在这里一次都没有漏判，代价是误杀；把阈值降到 0.5，
就是拿误杀换漏判。哪种错误更要紧，是产品层面的决定；区间则告诉你 144 条标注能把错误率定得多准（没有支持的陈述
大约 70 条：即使一次漏判都没有，上界也接近 5%）。

裁判的错误会把评测带到哪里去？换成词汇裁判，再给 BugHunt 打一次分：
""",
    ),
    code(
        r"""
lexical = evaluate_bughunt(sample, LexicalJudge()).to_json()
print(f"{'answer':20}{'faithfulness':>22}   primary cause (human labels -> lexical judge)")
for h, l in zip(human["records"], lexical["records"]):
    change = f"{h['metrics']['faithfulness']:.2f} -> {l['metrics']['faithfulness']:.2f}"
    print(f"{h['id']:20}{change:>22}   {h['diagnosis']['primary'] or '-'} -> {l['diagnosis']['primary'] or '-'}")
"""
    ),
    md(
        r"""
Faithfulness drops on answers whose sentences the humans call supported, and two diagnoses move: a faithful
answer that left facts out is now "distorted", and the misplaced citations become "not used". A
false kill does not stay in one number; it moves the blame to another layer. That is why a judge is measured on
human labels first, why its fingerprint is recorded with every score, and why the gate refuses to compare scores
from different judges.
""",
        r"""
在人工认为有支持的句子上，忠实度下降了，而且有两个诊断变了：一个内容忠实、只是漏说了事实的回答，现在被判成“用歪了”；
引用错位则变成了“没用上”。误杀不会只影响一个数字，它会把责任推到另一层去。所以裁判要先在人工标注上量一量，
它的指纹要和每个分数一起记下来，而门禁拒绝比较不同裁判打出的分数。
""",
    ),
    md(
        r"""
## 4. Comparing two systems: pair the questions

A change to a RAG system is judged by the same questions answered before and after it. Take retrieval on the
run's world: the baseline is BM25 over its passages; the candidate's chunker keeps only the first 150 characters
of each passage (a chunking change is the kind of edit that quietly loses facts). The questions are the world's
held-out ones (test, dev and eval; train is left out) that name their gold passages. Per question we count whether
**all its gold passages are in the top k** (recall@k = 1), what the gate's retrieval tier counts. That is stricter
than hit@k of section 1's table (a gold passage among the top k), where any one gold passage is enough: at k = 1 a question
that needs two passages can be a hit@1 but never has all its gold in the top 1. The cell prints both.
""",
        r"""
## 4. 比较两个系统：逐题配对

评价对 RAG 系统的一次改动，看的是同一批题目在改动前后的回答。以本次运行的世界里的检索为例：基线是对全部段落做 BM25；
候选的切分器只保留每篇段落的前 150 个字符（改切分正是那种会悄悄丢掉事实的改动）。题目取世界中留出的那几份
（test、dev 和 eval，不含 train）里标明了金标段落的问题。对每道题，我们数的是它的**全部金标段落是否都在前 k 篇里**
（即 recall@k = 1，简称“全部金标命中”），门禁在检索这一层统计的正是这个。它比第 1 节表里的 hit@k（只要前 k 篇里有一篇
金标段落就算）更严：在 k = 1 时，需要两篇段落的问题可以算 hit@1，却永远不会全部金标命中。下面的单元两者都打印。
""",
    ),
    code(
        r"""
from lewisrag.data.records import Passage
from lewisrag.eval import stats
from lewisrag.eval.metrics import recall_at_k
from lewisrag.index.bm25 import BM25Index
from lewisrag.scoring.retrieval import hit_at_k

passages = read_passages(RUN / "world" / "passages_a.jsonl")
questions = [ex for split in ("test", "dev", "eval") for ex in read_qa(RUN / "world" / f"{split}.jsonl")
             if ex.gold_passage_ids]  # the held-out splits (train left out), questions that name their gold passages
CHUNK = 150  # the candidate keeps the first CHUNK characters of each passage
systems = {"baseline": passages, "candidate": [Passage(p.id, p.title, p.text[:CHUNK]) for p in passages]}
top3 = {}  # system -> its top 3 passages per question
for name, indexed in systems.items():
    _, rows = BM25Index.in_memory(indexed).search([q.question for q in questions], k=3)  # (N, 3) rows of `indexed`
    top3[name] = [[indexed[i] for i in row] for row in rows]
recall1 = {name: [recall_at_k([p.id for p in top], q.gold_passage_ids, 1) for top, q in zip(tops, questions)]
           for name, tops in top3.items()}
all_gold = {name: [r == 1.0 for r in scores] for name, scores in recall1.items()}  # all gold passages in the top 1
hit1 = {name: sum(hit_at_k([p.id for p in top], q.gold_passage_ids, 1) for top, q in zip(tops, questions))
        for name, tops in top3.items()}  # any gold passage in the top 1 (section 1's hit@k)

print(len(questions), "test, dev and eval questions with gold passages;",
      sum(len(q.gold_passage_ids) > 1 for q in questions), "of them need more than one")
for name, h in all_gold.items():  # each system on its own
    low, high = stats.proportion_interval(sum(h), len(h))
    print(f"{name:10} all gold in top 1: {sum(h)}/{len(h)} = {sum(h) / len(h):.3f}   "
          f"95% Wilson interval [{low:.3f}, {high:.3f}]   (hit@1, any gold: {hit1[name]:.0f}/{len(h)})")
m = stats.mcnemar(all_gold["baseline"], all_gold["candidate"], alternative="greater")  # in pairs
print(f"\npaired: the candidate lost b = {m['b']} questions and gained c = {m['c']}; "
      f"one-sided exact McNemar p = {m['pvalue']:.4f}")
"""
    ),
    md(
        r"""
On the tiny run's few questions, looked at one system at a time, the two all-gold rates have intervals that
overlap widely, and one might call it noise (on a `small` run's thousands they separate even unpaired: pairing
matters most where questions are few, as in most evaluation sets). Paired, almost every question has all its gold in the top 1 in both systems or in neither; those say
nothing about the change, and McNemar's test ignores them. What is left are the questions where the systems disagree: under "no
difference" each of them is a fair coin flip, and b losses against c gains is then unlikely (you can check the p
value by hand: the chance of b or more heads in b + c flips). The questions differ far more from each other than
the systems do; pairing takes that variation out.

For a score that is not 0/1 (recall@1 is ½ for a question with one of its two gold passages first; faithfulness is
a share) the paired tools are the **paired bootstrap**, which resamples questions with both their scores and gives
the interval of the mean difference (how large the change is), and the **sign-flip test**, which asks whether the
change is more than chance: were there no difference, each question's difference would be as likely to have either
sign, so its p is the share of the 2^n sign assignments whose mean is at least as far from 0 as the one observed
(two-sided, what `paired_bootstrap` reports beside its interval), or, one-sided, at least as far below 0 (the
question "is the candidate lower?", the one the gate asks; `stats.sign_flip_test(a, b, "less")`). With few
questions changed the bootstrap can never draw the other sign and its interval looks surer than it is; the
sign-flip p cannot. Next to them, each system's mean with its own interval, and, since equal means can hide very
different failures, two runs from docs/statistics.md with the same mean:
""",
        r"""
在 tiny 运行那么少的题目上，单独看每个系统，两个“全部金标命中”率的区间大面积重叠，很容易被当成噪声（在 `small` 运行的
数千道题上，不配对的区间也已分开：题目越少，配对越要紧，而多数评测集的题目都不多）。配对之后就清楚了：绝大多数题目要么两个系统
都全部金标命中，要么都没有；这些题对这次改动什么也说明不了，McNemar 检验直接忽略它们。剩下的是两个系统结论不同的题：如果“没有差别”，
每道这样的题都像抛一枚公平的硬币，那么出现 b 次变差对 c 次变好就不太可能（p 值可以手算：b + c 次抛硬币中至少 b 次
正面的概率）。题目之间的差别远大于两个系统之间的差别；配对正是把这部分差别去掉。

对于不是 0/1 的分数（一道需要两篇金标段落的题，若只有一篇排在第一，recall@1 就是 ½；忠实度是一个比例），配对的工具是
**配对 bootstrap**：按题重采样，每题的两个分数一起抽，得到均值之差的区间（变化有多大）；以及**符号翻转检验**：
如果没有差别，每道题的差值取正取负的可能性一样，p 值就是 2^n 种符号组合里，均值离 0 至少和观测值一样远的组合所占的比例
（双侧，`paired_bootstrap` 在区间旁边报告的就是它）；单侧则只数在 0 以下至少这么远的组合（问的是“候选是否更低？”，
门禁问的正是这个问题；`stats.sign_flip_test(a, b, "less")`）。变化的题目很少时，bootstrap 抽不到另一个符号，区间显得比实际更有把握；符号翻转的 p 值不会。旁边列出每个系统各自的均值和区间；另外，
由于均值相同的两次运行可能藏着截然不同的失败，再看 docs/statistics.md 里两次均值相同的运行：
""",
    ),
    code(
        r"""
for name, scores in recall1.items():
    mi = stats.mean_interval(scores)
    print(f"{name:10} mean recall@1 {mi['mean']:.3f}   95% interval [{mi['low']:.3f}, {mi['high']:.3f}]")
pb = stats.paired_bootstrap(recall1["baseline"], recall1["candidate"])
lower = stats.sign_flip_test(recall1["baseline"], recall1["candidate"], "less")  # one-sided: is the candidate lower?
print(f"paired:    mean difference {pb['mean_diff']:+.3f}   95% interval [{pb['low']:+.3f}, {pb['high']:+.3f}]")
print(f"           sign-flip p {pb['pvalue']:.2g} two-sided (paired_bootstrap's), {lower['pvalue']:.3g} one-sided "
      f"({lower['nonzero']} questions changed, {lower['method']})\n")

for situation, scores in {"A": [1.0] * 95 + [0.0] * 5, "B": [0.95] * 100}.items():
    d = stats.score_distribution(scores)
    print(f"situation {situation}: mean {d['mean']:.2f}, share below 1 {d['share_below_1']:.0%}, "
          f"share below 0.5 {d['share_below_0.5']:.0%}")
"""
    ),
    md(
        r"""
The paired interval lies below 0 and both sign-flip p values are small: the candidate is worse, though on the
tiny run the two unpaired intervals overlap. The two-sided p is twice the smaller of the two one-sided ones, here the one-sided
"less". The gate asks the one-sided question and calls a drop significant at p ≤ (1 − confidence) / 2 =
0.025 (`lewisrag/eval/gate/gate.toml`). And a mean
alone hides who paid: in situation A five answers are fabricated outright, in B every answer has one slip.

### The gate runs these tests

`lewisrag gate --baseline B --candidate C` does the same, on two results.json files. Its report starts with a
`pairing` row: the two runs must be comparable (every baseline question found in the candidate, paired by id and
system, with the same text; both scored by the same judge and statement splitter). Then three tiers: **rules** (no
BAD_ID, MISSING_CITATION or QUOTE_NOT_FOUND at all: by default any occurrence fails, and only
`allow_baseline_violations = true` in the gate's config counts just the ones the baseline did not have, as lesson 3
does for BugHunt's deliberately broken answers; no metric unmeasurable more often), **retrieval** (McNemar on all
gold in the top k and, on the mean of recall@k, the one-sided sign-flip test with the bootstrap interval beside it,
as above; and, since retrieval has no judge noise, it fails when the mean falls at all: `max_mean_drop = 0`, the
rule "no lower than the baseline") and **judged metrics** (paired tests on faithfulness and the others, a mean
falling by more than 0.02 failing too, plus cuts at 1.0 and 0.5 that catch a few questions collapsing while the
mean stays put). Lesson 3
([section 5](03_original_vs_modern.en.ipynb)) gates BugHunt's answers: a pass, a broken citation caught, a judge
change refused. Here it gates the two retrievers, each followed by a perfect reader that writes the reference
statements and cites the passage ranked first, scored with the lexical judge. First a candidate that changes
BM25's length normalisation (`b` from 0.75 to 0.3):
""",
        r"""
配对区间整个落在 0 以下，两个符号翻转检验的 p 值也都很小：候选更差，尽管在 tiny 运行上两个不配对的区间是重叠的。双侧 p 值是两个单侧 p 值中较小者的两倍，
这里较小的就是 “less” 方向的单侧 p 值。门禁问的是单侧问题，p ≤ (1 − confidence) / 2 = 0.025 时判定
显著下降（见 `lewisrag/eval/gate/gate.toml`）。而单看均值，看不出代价落在谁身上：情形 A 里有五个回答
从头到尾是编的，情形 B 里每个回答都有一处小错。

### 门禁跑的就是这些检验

`lewisrag gate --baseline B --candidate C` 在两个 results.json 上做同样的事。它的报告先有一行 `pairing`（配对）：
两次运行必须可比（基线的每道题都能在候选里按 id 和系统配上对，题面相同；两者由同一个裁判、同一个陈述拆分器打分）。
然后分三层：**规则**（完全不能出现 BAD_ID、MISSING_CITATION 或 QUOTE_NOT_FOUND：默认出现一次就失败；只有在门禁配置里设
`allow_baseline_violations = true`，才只统计基线中没有的新违规，第 3 课为 BugHunt 那些故意出错的回答就是这样做的；
任何指标无法测量的题目不能变多）、**检索**（对“前 k 篇里有全部金标”做 McNemar 检验，在 recall@k 的均值上做单侧符号翻转检验、
并列出 bootstrap 区间，和上面一样；另外，检索没有裁判噪声，所以均值只要下降就算失败：`max_mean_drop = 0`，即“不低于基线”
这条规则）、**裁判打分的指标**（对忠实度等指标做配对检验，均值下降超过 0.02 也算失败；另在 1.0 和 0.5 两处设切点，抓住均值不动、
却有几道题崩掉的情况）。第 3 课（[第 5 节](03_original_vs_modern.zh.ipynb)）用门禁检查了 BugHunt 的回答：一次通过、
一次抓住错误引用、一次因裁判改变而拒绝比较。这里让门禁检查两个检索器，每个后面接一个完美的阅读器：它照写参考陈述，
并引用排在第一位的段落，用词汇裁判打分。先看一个只改了 BM25 长度归一化（`b` 从 0.75 改成 0.3）的候选：
""",
    ),
    code(
        r"""
from lewisrag.eval.evaluator import EvalConfig
from lewisrag.eval.gate import gate
from lewisrag.eval.results import write_results


def evaluation(name, indexed, b=0.75):
    # retrieve the top 3 of `indexed` with BM25, answer perfectly, score with the lexical judge into WORK/<name>.json
    _, rows = BM25Index.in_memory(indexed, b=b).search([q.question for q in questions], k=3)
    records = [parse_answer({"id": q.id, "user_input": q.question,
                             "response": " ".join(f"{s} [1]" for s in q.reference_statements),
                             "retrieved_contexts": [indexed[i].to_dict() for i in row],
                             "reference_statements": q.reference_statements, "gold_passage_ids": q.gold_passage_ids},
                            name, line, {})
               for line, (q, row) in enumerate(zip(questions, rows), start=1)]
    write_results(WORK / f"{name}.json", evaluate_answers(records, LexicalJudge(), EvalConfig(ks=(1, 3), claims=False)))
    return WORK / f"{name}.json"


def show(report):
    # one line per tier, then every check that did not pass, with its evidence
    print("gate:", "PASSED" if report.passed else "FAILED")
    for tier in dict.fromkeys(c.tier for c in report.checks):
        checks = [c for c in report.checks if c.tier == tier]
        print(f"  {tier:12} {sum(c.verdict == 'pass' for c in checks)} of {len(checks)} checks pass")
        for c in checks:
            if c.verdict != "pass":
                print(f"      {c.verdict}: {c.name}:", *c.evidence.split(" | "), sep="\n          ")


config = WORK / "gate.toml"
config.write_text('[tier3]\nmetrics = ["faithfulness"]\n', encoding="utf-8")  # one judged metric keeps it short
baseline = evaluation("baseline", systems["baseline"])
show(gate(baseline, evaluation("bm25_b03", systems["baseline"], b=0.3), config))
"""
    ),
    md(
        r"""
On the tiny run it passes: some rankings moved, but no question lost a gold passage from its top 1 or its top 3,
so neither mean recall fell (tier 2 tolerates no drop at all), and no judged score fell (on a `small` run's
thousands of questions some do lose one, and the gate fails it: what passes on few questions may not on many). Now the chunking candidate of this section:
""",
        r"""
在 tiny 运行上它通过了：有些排序变了，但没有哪道题的金标段落掉出前 1 篇或前 3 篇，所以两个 recall 均值都没有下降（第二层不容许任何下降），
裁判打分的指标也没有下降（在 `small` 运行的数千道题上，确有题目丢了金标段落，门禁就判它失败：题少时能通过的，题多时未必）。再看本节那个改了切分的候选：
""",
    ),
    code(
        r"""
show(gate(baseline, evaluation("chunked", systems["candidate"]), config))
"""
    ),
    md(
        r"""
Tier 2 fails recall@1 on the numbers you computed by hand above: the same b, c and McNemar p (its "share
below 1" is the share of questions without all their gold in the top 1), the same paired interval and the same
one-sided sign-flip p, since the gate uses the same seed and asks the one-sided question. It fails recall@3 too,
though on the tiny run neither test calls that drop significant (on a `small` run the sign-flip test does): two questions that need two passages lost the one gold passage
they had in their top 3 (McNemar, which counts only all gold in the top k, sees no change), and tier 2 tolerates no
drop of mean retrieval at all (`max_mean_drop = 0`). Tier 3
shows the consequence one layer down: a perfect reader whose passages were cut short writes statements those
passages no longer support. Had only the judged tier been watched, the regression would look like a generator
problem; the layers, and the gate's tiers, point at retrieval.

## What to take away

* Score each layer and blame the first that fails, in causal order; the later failures are its consequences.
* A score is a share of statements, so it depends on the splitter and the judge: record both, compare only
  like with like, and calibrate a judge (misses and false kills apart, with intervals) before it gates anything.
* Compare systems in pairs over the same questions: McNemar for 0/1 scores, a sign-flip test (with a paired bootstrap interval for the size) for means; look
  at the questions that changed, not only at the mean.

""",
        r"""
第二层在 recall@1 上失败，用的正是你上面亲手算出的数字：同样的 b、c 和 McNemar p 值（它的 “share below 1” 就是
前 1 篇里没有全部金标的题目所占的比例），同样的配对区间，同样的单侧符号翻转 p 值，因为门禁用的是同一个随机种子，
问的也是单侧的问题。recall@3 也失败了，尽管在 tiny 运行上两项检验都不认为这次下降显著（在 `small` 运行上符号翻转检验认为显著）：有两道需要两篇段落的题，原本前 3 篇里有其中一篇金标段落，
现在连这一篇也丢了（McNemar 只数“前 k 篇里有全部金标”，看不到这个变化）；而第二层不容许检索的均值有任何下降
（`max_mean_drop = 0`）。第三层则显示了往下一层的连带后果：段落被截短之后，完美的阅读器写出的陈述
不再有那些段落支持。如果只盯着裁判打分那一层，这次回归看起来像是生成器的问题；而逐层的分数和门禁的分层，都指向检索。

## 本课要点

* 逐层打分，并把责任归给按因果顺序第一个失败的层；后面的失败是它的连带后果。
* 分数是陈述中有支持的比例，所以取决于拆分器和裁判：两者都要记录，只比较同一种拆法和裁判下的分数；裁判在用于门禁之前
  要先校准（漏判和误杀分开算，并给出区间）。
* 比较系统要在同一批题目上逐题配对：0/1 分数用 McNemar 检验，均值用符号翻转检验（配对 bootstrap 区间看变化大小）；要看哪些题变了，而不只看均值。

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

In section 2, suppose a splitter cut only the toast sentence of `hallucinated` into its three atomic facts and
left the other two sentences whole. Work out the faithfulness by hand, then check it with `metrics.faithfulness`
(the labels judge knows every statement you need).
""",
        r"""
## 练习

每道练习都有一个给你动手的单元，最后把结果赋给一个变量（`ex1`、`ex2`、`ex3`）；下面是一个折叠起来的**核对**单元：它自己
把答案算出来，所以只有想看算法时才展开它。做完后运行核对单元：它会告诉你结果对不对；变量还是 `None` 时，它只提醒你先作答。
每个核对单元后面都附有参考答案，同样是折叠的。

### 练习 1

在第 2 节，假设某个拆分器只把 `hallucinated` 中讲 toast 的那一句拆成三个原子事实，另外两句保持整句。先手算忠实度，
再用 `metrics.faithfulness` 验证（人工标注裁判认得你需要的每一条陈述）。
""",
    ),
    code(
        r"""
ex1 = None  # the faithfulness of that split: a share (0.25) or a percentage (25)
"""
    ),
    check(
        r"""
if ex1 is None:
    print("Exercise 1: set ex1, then run this cell again.")
else:
    sentences = [s.text for s in split_sentences(hallucinated.response)]
    toast = [text for text, _ in hallucinated.atomic if "toast" in text]  # the toast sentence's three facts
    statements = [sentences[0], *toast, sentences[2]]
    truth = metrics.faithfulness(statements, contexts, bughunt_label_judge(sample))
    assert abs((ex1 / 100 if ex1 > 1 else ex1) - truth) < 1e-3, "not yet: count the statements, then the supported ones"
    print(f"right: {len(statements)} statements, faithfulness {truth:.1%}")
"""
    ),
    md(
        r"""
<details><summary>Model answer</summary>

Five statements: the first sentence (supported), the toast's three facts (none supported) and the sentence about
locking the account (not supported): 1 of 5, 20%. It falls between the sentence split's 33.3% and the atomic
split's 16.7%: the finer the invented part is cut, the more it weighs.
</details>

### Exercise 2

In section 3, add `LexicalJudge(threshold=0.9)` to `judges`. Which error rate moves, and which way? Score BugHunt
with it as in the next cell: which answers' diagnoses change (against the human labels) at 0.9 that did not
change at 0.75?
""",
        r"""
<details><summary>参考答案</summary>

共五条陈述：第一句（有支持）、toast 的三个事实（都没有支持）和锁定账号那一句（没有支持）：5 条中 1 条，20%。它落在按句拆的
33.3% 和按原子事实拆的 16.7% 之间：编造的部分拆得越细，它在分数里的分量就越重。
</details>

### 练习 2

在第 3 节，把 `LexicalJudge(threshold=0.9)` 加进 `judges`。哪种错误率变了，往哪个方向变？像下一个单元那样用它给 BugHunt
打分：与人工标注相比，哪些回答的诊断在阈值 0.75 时没变、到 0.9 时变了？
""",
    ),
    code(
        r"""
ex2 = None  # ("miss_rate" or "false_kill_rate": the one that moves, "up" or "down", {names of the answers})
"""
    ),
    check(
        r"""
if ex2 is None:
    print("Exercise 2: set ex2, then run this cell again.")
else:
    rates = {t: calibrate(LexicalJudge(threshold=t), labels) for t in (0.75, 0.9)}
    moved = {kind: "up" if rates[0.9][kind] > rates[0.75][kind] else "down"
             for kind in ("miss_rate", "false_kill_rate") if rates[0.9][kind] != rates[0.75][kind]}
    primary = {t: {r["id"]: r["diagnosis"]["primary"] for r in evaluate_bughunt(sample, LexicalJudge(threshold=t)).to_json()["records"]}
               for t in (0.75, 0.9)}
    changed = {r["id"] for r in human["records"]
               if primary[0.75][r["id"]] == r["diagnosis"]["primary"] != primary[0.9][r["id"]]}
    kind, way, answers = ex2
    assert kind in moved, f"not yet: the {kind} does not move"
    assert moved[kind] == way, f"not yet: the {kind} moves, but not {way}"
    assert set(answers) == changed, "not yet: the rate is right, the answers are not"
    for t, c in rates.items():
        print(f"lexical at {t}: miss {c['miss_rate']:.1%}, false kill {c['false_kill_rate']:.1%}, kappa {c['kappa']:.3f}")
    print("right:", ", ".join(f"{a}: {primary[0.75][a] or '-'} -> {primary[0.9][a] or '-'}" for a in sorted(changed)))
"""
    ),
    md(
        r"""
<details><summary>Model answer</summary>

A higher threshold makes the judge stricter: it can only call fewer statements supported. So misses cannot rise
(they stay at 0%) and false kills do, from 18.9% to 37.8% of the supported statements, with κ falling from 0.806
to 0.615. At 0.9 the `correct` answer gets a false kill too and is diagnosed "distorted": a judge this strict blames
the one answer that is right, and a gate on its scores would fail changes for nothing.
</details>

### Exercise 3

In section 4, set `CHUNK = 300` and run the section again. On the tiny run retrieval passes, yet the gate fails:
which check fails, on how many questions, and why would the paired mean alone not have caught it?
""",
        r"""
<details><summary>参考答案</summary>

阈值调高，裁判就更严：它只会把更少的陈述判为有支持。所以漏判不可能上升（仍是 0%），误杀则上升，从有支持陈述的 18.9%
升到 37.8%，κ 从 0.806 降到 0.615。阈值为 0.9 时，`correct` 这个回答也被误杀，被诊断成“用歪了”：这么严的裁判会冤枉
唯一正确的回答，以它的分数把关的门禁也会无故拦下改动。
</details>

### 练习 3

在第 4 节，设 `CHUNK = 300`，把这一节重跑一遍。在 tiny 运行上，检索通过了，门禁却失败了：是哪一项检查失败，涉及几道题？
为什么单看配对均值发现不了它？
""",
    ),
    code(
        r"""
ex3 = None  # (the failing check's name as the gate prints it, e.g. "faithfulness < 1", the number of questions it names)
"""
    ),
    check(
        r"""
if ex3 is None:
    print("Exercise 3: set ex3, then run this cell again.")
else:
    cut = [Passage(p.id, p.title, p.text[:300]) for p in passages]  # the candidate with CHUNK = 300
    report = gate(baseline, evaluation("chunked_300", cut), config)
    failed = {c.name: c for c in report.checks if c.verdict == "fail"}
    name, count = ex3
    assert name in failed, f"not yet: {name!r} is not a failing check"
    regressed = failed[name].details.get("regressed", [])
    assert count == len(regressed), f"not yet: {name!r} fails, but not on {count} question(s)"
    print(f"right: {name} fails on {len(regressed)}: {', '.join(regressed)}")
    for c in report.checks:
        if c.tier == "3 judged" and c.name == "faithfulness: paired mean":
            print(f"the paired mean passes: {c.evidence}")
"""
    ),
    md(
        r"""
<details><summary>Model answer</summary>

On the tiny run: `faithfulness < 0.5`, on one question. Its passages, cut at 300 characters, no longer hold most
of what the perfect reader states for it, so its faithfulness falls below one half. One question of the n the gate
pairs (the `n=` in the check cell's last line) can move the paired mean by 1/n at most, less than the 0.02 the gate
allows once n is over 50, and a single changed question can never make the sign-flip test significant (one-sided
p 0.5 at best). The cut at 0.5 lets no question newly fall below it
(`max_regressions = 0`): it is there for exactly this, a few questions collapsing while the mean stays put.
</details>
""",
        r"""
<details><summary>参考答案</summary>

在 tiny 运行上：`faithfulness < 0.5` 失败，涉及一道题。它的段落被截到 300 个字符之后，完美阅读器为它写出的陈述大多已不在
段落里，于是它的忠实度跌到一半以下。门禁配对的题目共 n 道（核对单元最后一行里的 `n=`），其中一道题最多让配对均值变动 1/n，只要 n 超过 50，
就小于门禁容许的 0.02；而只有一道题变化时，符号翻转检验永远不会显著（单侧 p 最小也是 0.5）。0.5 这道切点不允许任何题目新跌到它下面（`max_regressions = 0`）：它正是为这种
情况设的——均值几乎不动，却有几道题崩掉了。
</details>
""",
    ),
]
