"""The reports' languages: every label, heading and sentence template of report.md, report.html, the
plots and the tables `eval answers`, `eval bughunt`, `compare` and `reproduce` print (`cli.` ids beside
the reports' own), in English and Chinese, keyed by message id. `--json` output is never translated.

    t = messages("zh")
    t("md.layers.h")                        # '## 逐题分层'
    t("rep.retrieval.sentence", dense=0.5, bm25=1.0)

A template is `str.format` text: a sentence computed from numbers has its numbers (and their format,
`{dense:.1%}`) as placeholders, and both languages of a message have the same placeholders
(`tests/test_i18n.py` checks). English is the default everywhere and its text is the reports' text as
it was before the catalogue, byte for byte. Chinese uses the vocabulary of the reference chapter
(忠实度, 上下文召回, 答案完整度, 引用召回, 主因, 连带后果, 硬门禁 ...). Messages whose id ends in `_html`
are HTML written by us and go into report.html as they are; every other message is escaped there.

Messages under `js.` are what report.html's script writes; they travel in the page data
(`Messages.js()`), so the page needs nothing but itself. `Messages.text` translates the fixed English
texts that come from the run rather than from the reports (a preset's notes, why a stage was not run,
why a metric is null, a citation check's detail, the lexical judge's reason); any other text from the
run is shown as written.

Plots take their labels from the same catalogue. matplotlib has no CJK glyphs of its own: `cjk_font`
picks an installed CJK family (Noto Sans CJK, Source Han Sans, WenQuanYi ...); without one a plot keeps
its English labels and the Chinese report.md says so (`plot_messages`).
"""

from __future__ import annotations

import contextlib
import functools
import re
import string
import unicodedata
from collections.abc import Iterator

from lewisrag.data.io import InputError

LANGS = ("en", "zh")
HTML_LANG = {"en": "en", "zh": "zh-CN"}  # the page's <html lang>
CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN", "WenQuanYi Micro Hei",
             "WenQuanYi Zen Hei", "Droid Sans Fallback", "AR PL UMing CN", "PingFang SC", "Microsoft YaHei", "SimHei")
LANG_HELP = "Language of report.md, report.html and the plots' labels: en or zh (Chinese)."

# message id -> (English, Chinese)
MESSAGES: dict[str, tuple[str, str]] = {
    # --- shared words -----------------------------------------------------------------------------
    "na": ("n/a", "无"),
    "yes": ("yes", "是"),
    "no": ("no", "否"),
    "end": (".", "。"),
    "sep.clause": ("; ", "；"),
    "sep.list": (", ", "，"),
    "sep.enum": (", ", "、"),  # a list of names
    "sep.and": (" and ", " 和 "),  # before a list's last name (spaced beside a Latin name: `names`)
    "col.system": ("system", "系统"),
    "col.metric": ("metric", "指标"),
    "col.model": ("model", "模型"),
    "col.layer": ("layer", "层"),
    "col.questions": ("questions", "题目数"),
    "col.answer": ("answer", "回答"),
    "col.statement": ("statement", "陈述"),
    "col.status": ("status", "状态"),
    "col.sentences": ("sentences", "句数"),
    "col.of_system": ("{what}: {system}", "{what}：{system}"),  # a count column of one system's answers
    "system.rag_token": ("RAG-Token", "RAG-Token"),
    "system.rag_sequence": ("RAG-Sequence", "RAG-Sequence"),
    "system.closed_book": ("BART (closed book)", "BART（闭卷）"),
    "system.stitched": ("prompt-stitching RAG", "提示拼接 RAG"),
    "split.test": ("test", "测试"),
    "kind.short": ("short", "短"),
    "kind.long": ("long", "长"),
    "kind.join": (" and ", "和"),
    "index.index_a": ("index_a", "索引 A"),
    "index.index_b": ("index_b", "索引 B"),
    # metric names: English as the reports wrote them with spaces (`metric_name`)
    "metric.faithfulness": ("faithfulness", "忠实度"),
    "metric.context_recall": ("context recall", "上下文召回"),
    "metric.answer_completeness": ("answer completeness", "答案完整度"),
    "metric.answer_relevancy": ("answer relevancy", "答案相关性"),
    "metric.on_topic_rate": ("on topic rate", "切题率"),
    "metric.citation_recall": ("citation recall", "引用召回"),
    "metric.citation_precision": ("citation precision", "引用精确率"),
    "metric.recall_at_k": ("recall at k", "recall@k"),
    "metric.exact_match": ("exact match", "精确匹配（EM）"),
    "metric.f1": ("f1", "F1"),
    "metric.rougeL": ("rougeL", "ROUGE-L"),
    # the layers of the diagnosis (keys of diagnose.LAYERS), their verdicts, and what else is blamed
    "layer.retrieval": ("retrieval", "检索"),
    "layer.generation_off_topic": ("generation: off-topic", "生成：答非所问"),
    "layer.generation_distorted": ("generation: distorted", "生成：用歪了"),
    "layer.generation_not_used": ("generation: not used", "生成：没用上"),
    # a primary cause (diagnose.NOT_USED_OR_OFF_TOPIC): faithful and incomplete, relevance not measured
    "layer.generation_not_used_or_off_topic": ("generation: not used or off-topic (relevance not measured)",
                                               "生成：没用上或答非所问（未测答案相关性）"),
    # a primary cause (diagnose.NOT_USED_OR_DISTORTED): incomplete, the judge decided none of its statements
    "layer.generation_not_used_or_distorted": ("generation: not used or distorted (faithfulness undecided)",
                                               "生成：没用上或用歪了（忠实度未判定）"),
    # a primary cause (diagnose.NOT_USED_DISTORTED_OR_OFF_TOPIC): incomplete, neither of the two measured
    "layer.generation_not_used_distorted_or_off_topic": (
        "generation: not used, distorted or off-topic (faithfulness undecided, relevance not measured)",
        "生成：没用上、用歪了或答非所问（忠实度未判定，未测答案相关性）"),
    "layer.citation": ("citation", "引用"),
    "layer.generator_failed": ("generator failed", "生成器失败"),
    # no primary cause: every layer passed, or none was measured (an empty answer, a refused not_in_kb question)
    "layer.none": ("none", "无（没有层失败）"),
    "verdict.pass": ("pass", "通过"),
    "verdict.fail": ("fail", "失败"),
    "verdict.n/a": ("n/a", "不适用"),
    "category.single_doc": ("single_doc", "单文档"),
    "category.multi_doc": ("multi_doc", "多文档综合"),
    "category.not_in_kb": ("not_in_kb", "知识库里没有"),
    "category.distractor": ("distractor", "相似干扰文档"),
    "category.conflict": ("conflict", "新旧文档冲突"),
    # --- reproduce: report.md (experiments/report.py) -------------------------------------------
    "rep.environment": ("Run on {cpu} with torch {torch}, {threads} CPU thread(s), float32 linear layers on the CPU "
                        "through {linear}, device {device}: float results are exact on this configuration only "
                        "(README, Performance).",
                        "运行环境：{cpu}，torch {torch}，{threads} 个 CPU 线程，CPU 上的 float32 线性层由 {linear} 计算，设备 {device}；"
                        "浮点结果只在相同配置下逐位一致（见 README 的 Performance 一节）。"),
    "rep.title": ("# lewisrag reproduce — preset `{preset}`, seed {seed}", "# lewisrag reproduce 复现报告 — 预设 `{preset}`，随机种子 {seed}"),
    "rep.paper_swap": ("paper (§4.5): 2016 index on 2016 leaders 70%, 2018 index on 2018 leaders 68%; mismatched 12% and 4%",
                       "论文（§4.5）：用 2016 年的索引回答 2016 年的领导人为 70%，用 2018 年的索引回答 2018 年的为 68%；"
                       "索引和问题错配时为 12% 和 4%"),
    "rep.paper_table2": ("paper (Table 2, test): Jeopardy Q-BLEU-1 BART 19.7, RAG-Token 22.2, RAG-Sequence 21.4 "
                         "(BLEU-1 15.1, 17.3, 14.7); FEVER 3-way accuracy BART 64.0, RAG 72.5, 2-way BART 81.1, RAG 89.5",
                         "论文（表 2，测试集）：Jeopardy Q-BLEU-1 BART 19.7、RAG-Token 22.2、RAG-Sequence 21.4"
                         "（BLEU-1 为 15.1、17.3、14.7）；FEVER 三分类准确率 BART 64.0、RAG 72.5，二分类 BART 81.1、RAG 89.5"),
    # a hub preset's run (base: the user's own checkpoints and data)
    "rep.run.h": ("## Run: models, data and sizes", "## 本次运行：模型、数据和规模"),
    "rep.run.model": ("- {what}: {path}", "- {what}：{path}"),
    "rep.run.question_encoder": ("question encoder", "问题编码器"),
    "rep.run.context_encoder": ("context encoder (it built the index)", "段落编码器（用它建的索引）"),
    "rep.run.generator": ("generator", "生成器"),
    "rep.run.questions": ("- {what}: {path}, {n} questions", "- {what}：{path}，{n} 道题"),
    "rep.run.train": ("training questions", "训练问题"),
    "rep.run.dev": ("dev questions (they pick the best checkpoint)", "开发集问题（用来挑最佳检查点）"),
    "rep.run.test": ("test questions", "测试问题"),
    "rep.run.questions_a": ("questions about snapshot A", "关于快照 A 的问题"),
    "rep.run.questions_b": ("questions about snapshot B", "关于快照 B 的问题"),
    "rep.run.passages": ("- passages of index {snap}: {path}, {n} indexed", "- 索引 {snap} 的段落：{path}，建了索引的 {n} 篇"),
    "rep.run.training": ("- RAG-Token and RAG-Sequence: {steps} steps, batch size {batch}, K={k} passages per question "
                         "(in training and at test); closed-book BART: {cb_steps} steps, batch size {cb_batch}",
                         "- RAG-Token 和 RAG-Sequence：{steps} 步，批大小 {batch}，每个问题取 K={k} 篇段落（训练和测试都是）；"
                         "闭卷 BART：{cb_steps} 步，批大小 {cb_batch}"),
    "rep.run.cut_steps": ("--steps {n} of the preset's {preset}", "--steps {n}（预设为 {preset}）"),
    "rep.run.cut": ("A shortened run ({cuts}): compare its numbers with runs of the same cut, not with the paper's Table 1.",
                    "这是缩短了的运行（{cuts}）：它的数字只能和同样缩短的运行比较，不能拿去和论文的表 1 比。"),
    "rep.retrieval.h": ("## Retrieval", "## 检索"),
    "rep.retrieval.not_measured": ("Not measured: {why}.", "未测量：{why}。"),
    "rep.retrieval.h_base": ("## Retrieval: a gold passage id in the top k ({split} questions with gold passage ids, index A)",
                             "## 检索：前 k 个段落里有金标段落 id（{split}集中标注了金标段落 id 的问题，索引 A）"),
    "rep.retrieval.answer_h": ("## Retrieval: DPR's top-k accuracy (a top-k passage holds an answer string; {n} short-answer "
                               "test questions, index A)",
                               "## 检索：DPR 的 top-k 准确率（前 k 个段落中有段落含答案字符串；{n} 个短答案测试问题，索引 A）"),
    "rep.retrieval.h_world": ("## Retrieval (test split over snapshot A; test entities never appear in training questions)",
                              "## 检索（测试集，在快照 A 上检索；测试集的实体从不出现在训练问题里）"),
    "rep.retrieval.gold_not_indexed": ("{n} questions whose gold passages all lie outside the indexed passages "
                                       "(`--max-passages`, or not in `--passages`) are left out of these numbers.",
                                       "另有 {n} 个问题的金标段落全都不在已建索引的段落里（被 `--max-passages` 截掉，"
                                       "或不在 `--passages` 中），未计入以上数字。"),
    # the same count where it is every question with gold ids (none measured): "left out of these numbers" named none
    "rep.retrieval.gold_none_indexed": ("The gold passages of all {n} test questions with gold passage ids lie outside the "
                                        "indexed passages (`--max-passages`, or not in `--passages`).",
                                        "标注了金标段落 id 的 {n} 个测试问题，金标段落全都不在已建索引的段落里（被 "
                                        "`--max-passages` 截掉，或不在 `--passages` 中）。"),
    "rep.retrieval.col": ("retriever", "检索器"),
    "rep.retrieval.dpr_given": ("DPR (given pair)", "DPR（给定的编码器对）"),
    "rep.retrieval.dpr_trained": ("DPR (trained here)", "DPR（本次训练）"),
    "rep.retrieval.sentence": ("The dense retriever finds a gold passage in its top 5 for {dense:.1%} of test questions; "
                               "BM25 does for {bm25:.1%}.",
                               "稠密检索器在 {dense:.1%} 的测试问题上把金标段落排进了前 5；BM25 是 {bm25:.1%}。"),
    "rep.t1.h": ("## Open-domain QA (Table 1 style, test split, short answers)", "## 开放域问答（仿论文表 1，测试集，短答案）"),
    "rep.t1.same": ("Every system scores the same exact match ({em}): no system stands out",
                    "每个系统的精确匹配（EM）都一样（{em}）：没有哪个系统更突出"),
    # every system with an exact match ties, another has none (null): not "every system"
    "rep.t1.same_scored": ("Every system with an exact match scores the same ({em}): no system stands out; not measured "
                           "for {others}", "有精确匹配（EM）的系统都一样（{em}）：没有哪个系统更突出；未测量：{others}"),
    "rep.t1.best": ("{name} has the highest exact match ({em})", "{name} 的精确匹配（EM）最高（{em}）"),
    "rep.t1.best_tied": ("{name} share the highest exact match ({em})", "{name} 的精确匹配（EM）并列最高（{em}）"),
    "rep.t1.one": ("{name} has an exact match of {em}", "{name} 的精确匹配（EM）为 {em}"),  # the only system with one
    "rep.t1.gap": (", {gap:+.0f} points against the closed-book BART that reads no documents",
                   "，和不读任何文档的闭卷 BART 相差 {gap:+.0f} 个百分点"),
    # the test questions without an answer, which the evaluate stage drops from every score (results.json's
    # test_unscored): said under Table 1, whose numbers are over fewer questions than the split holds
    "rep.t1.unscored": ("Test questions left out of every QA score, having no reference answer to score against: "
                        "{n} of {total}.",
                        "所有问答得分都不含没有参考答案、无从计分的测试题：{total} 道中的 {n} 道。"),
    # a lead the paired tests on results.json's per-question records do not bear out, or could not test
    "rep.lead.level": ("; the lead over {others} is within noise ({test}; a lead counts at p < {level})",
                       "；领先 {others}的幅度在噪声之内（{test}；p < {level} 才算领先）"),
    # a leader whose higher mean the paired test contradicts: on the shared questions the other scores higher
    "rep.lead.reversed": ("; the lead over {others} is reversed on the paired questions ({test}; a lead counts at p < {level})",
                          "；在配对的题上，{others}反而更高（{test}；p < {level} 才算领先）"),
    "rep.lead.p": ("{name} (p = {p:.3f})", "{name}（p = {p:.3f}）"),
    "rep.lead.untested": ("; the lead over {others} is not tested (results.json holds no per-question scores to pair)",
                          "；对 {others} 的领先未经检验（results.json 里没有可配对的逐题得分）"),
    "rep.test.mcnemar": ("McNemar's exact test, two-sided, over the questions both systems answered",
                         "McNemar 精确检验，双侧，只计两个系统都答了的题"),
    "rep.test.sign_flip": ("the paired sign-flip test, two-sided, over the questions both systems have a score for, "
                           "{resamples:,} sign assignments drawn from seed {seed}",
                           "配对符号翻转检验，双侧，只计两个系统都有得分的题，用种子 {seed} 抽 {resamples:,} 种符号组合"),
    "rep.long.h": ("## Long-form answers (the paper's MS MARCO columns)", "## 长答案（对应论文的 MS MARCO 列）"),
    "rep.long.sentence": ("On {n} long-form questions {name} scores the highest ROUGE-L ({score})",
                          "在 {n} 道长答案题上，{name} 的 ROUGE-L 最高（{score}）"),
    "rep.long.sentence_tied": ("On {n} long-form questions {name} share the highest ROUGE-L ({score})",
                               "在 {n} 道长答案题上，{name} 的 ROUGE-L 并列最高（{score}）"),
    "rep.long.same": ("On {n} long-form questions every system scores the same ROUGE-L ({score})",
                      "在 {n} 道长答案题上，每个系统的 ROUGE-L 都一样（{score}）"),
    "rep.long.same_scored": ("On {n} long-form questions every system with a ROUGE-L scores the same ({score}); not "
                             "measured for {others}", "在 {n} 道长答案题上，有 ROUGE-L 的系统都一样（{score}）；未测量：{others}"),
    "rep.long.one": ("On {n} long-form questions {name} has a ROUGE-L of {score}",
                     "在 {n} 道长答案题上，{name} 的 ROUGE-L 为 {score}"),
    "rep.long.none": ("On {n} long-form questions no system has a ROUGE-L: not measured",
                      "在 {n} 道长答案题上，没有哪个系统有 ROUGE-L：未测量"),
    "rep.long.kinds": (". The models were fine-tuned on {kinds}-answer questions only, so they answer a long-form question "
                       "with a phrase: these columns show what a model trained for one task scores on another (the paper "
                       "fine-tunes one model per dataset)",
                       "。这些模型只在{kinds}答案题上微调过，所以遇到长答案题也只回一个短语：这两列反映的是为一种任务训练的"
                       "模型拿到另一种任务上的得分（论文为每个数据集各微调一个模型）"),
    "rep.swap.h": ("## Knowledge update: swapping the index (§4.5)", "## 知识更新：换索引（§4.5）"),
    "rep.swap.col_index": ("index", "索引"),
    "rep.swap.col_a": ("questions about A", "关于 A 的问题"),
    "rep.swap.col_b": ("questions about B", "关于 B 的问题"),
    "rep.swap.col_n": ("{col} ({n})", "{col}（{n}）"),  # a question set's column and how many questions each cell scores
    "rep.swap.follows": ("follows the index", "跟着索引走"),
    "rep.swap.partly": ("follows the index in part", "部分跟着索引走"),
    "rep.swap.same": ("does not follow the index (the same either way)", "没有跟着索引走（匹配与否都一样）"),
    "rep.swap.ignores": ("does not follow the index", "没有跟着索引走"),
    "rep.swap.system": ("{name} {verdict}: {matched} on matched index and questions against {crossed} on mismatched ones",
                        "{name} {verdict}：索引和问题匹配时 {matched}，错配时 {crossed}"),
    "rep.swap.cells": (" ({cells} short of the README's targets: each matched cell at least 90%, each mismatched at most 5%)",
                       "（{cells} 未达到 README 的目标：每个匹配格至少 90%，每个错配格至多 5%）"),
    "rep.swap.cell": ("{index} on {q} {v}", "{index} 上{q} {v}"),
    "rep.swap.sentence": ("Beside the {paper}: {systems}.", "对照{paper}：{systems}。"),
    "rep.swap.notes": ("What the swap noted about its inputs:", "换索引实验对输入的说明（原文）："),
    "rep.t6.h": ("## Ablations (Table 6 style: test EM by test-time K on the first {n} short-answer test questions; "
                 "trained with K={k})",
                 "## 消融实验（仿论文表 6：测试时取不同 K，在前 {n} 道短答案测试题上的 EM；训练时 K={k}）"),
    "rep.t6.h_no_n": ("## Ablations (Table 6 style: test EM by test-time K; trained with K={k})",
                      "## 消融实验（仿论文表 6：测试时取不同 K 的测试集 EM；训练时 K={k}）"),
    "rep.t6.token": ("RAG-Token (DPR, trained)", "RAG-Token（DPR，联合训练）"),
    "rep.t6.sequence": ("RAG-Sequence (DPR, trained)", "RAG-Sequence（DPR，联合训练）"),
    "rep.t6.frozen": ("RAG-Token, frozen retriever", "RAG-Token，冻结检索器"),
    "rep.t6.bm25": ("RAG-Token, BM25 retriever (swapped in at test time, not retrained)",
                    "RAG-Token，BM25 检索器（仅在测试时换入，未重新训练）"),
    "rep.t6.above": ("above", "高于"),
    "rep.t6.below": ("below", "低于"),
    "rep.t6.level": ("level with", "持平于"),
    "rep.t6.best_k": ("RAG-Token does best at {k}", "RAG-Token 在 {k} 时最好"),
    "rep.t6.flat": ("RAG-Token's EM hardly changes with K ({low}-{high}): the first retrieved passage decides",
                    "RAG-Token 的 EM 几乎不随 K 变化（{low}-{high}）：检索到的第一篇段落说了算"),
    "rep.t6.sentence": ("At K={k} the frozen retriever is {frozen_cmp} the jointly trained one ({frozen} vs {trained}) and "
                        "BM25 is {bm25_cmp} it ({bm25}); {trend}.",
                        "K={k} 时，冻结检索器{frozen_cmp}联合训练的检索器（{frozen} 对 {trained}），BM25 {bm25_cmp}它"
                        "（{bm25}）；{trend}。"),
    "rep.t2.h": ("## Jeopardy question generation and FEVER (Table 2 style, test split)",
                 "## Jeopardy 问题生成与 FEVER 事实核查（仿论文表 2，测试集）"),
    "rep.t2.cols": ("| system | Jeopardy Q-BLEU-1 | Jeopardy BLEU-1 | FEVER 3-way acc | FEVER 2-way acc |",
                    "| 系统 | Jeopardy Q-BLEU-1 | Jeopardy BLEU-1 | FEVER 三分类准确率 | FEVER 二分类准确率 |"),
    "rep.t2.jeopardy": ("Jeopardy: RAG-Token − RAG-Sequence Q-BLEU-1 {d:+.3f} (95% paired bootstrap {d_low:+.3f} to "
                        "{d_high:+.3f}), RAG-Sequence − closed book {e:+.3f} ({e_low:+.3f} to {e_high:+.3f}), over {n} test "
                        "entities",
                        "Jeopardy：Q-BLEU-1 上 RAG-Token − RAG-Sequence 为 {d:+.3f}（95% 配对 bootstrap 区间 {d_low:+.3f} 到 "
                        "{d_high:+.3f}），RAG-Sequence − 闭卷为 {e:+.3f}（{e_low:+.3f} 到 {e_high:+.3f}），共 {n} 个测试实体"),
    "rep.t2.fever": ("FEVER: the majority label is {majority} of the test claims; RAG-Token's first retrieved passage is from "
                     "a gold evidence article for {top1} of the SUPPORTS/REFUTES claims and its top 10 hold one for {top10} "
                     "(paper: 71% and 90%)",
                     "FEVER：多数类标签占测试声明的 {majority}；在 SUPPORTS/REFUTES 的声明里，RAG-Token 检索到的第一篇段落"
                     "出自金标证据条目的占 {top1}，前 10 篇里含出自金标条目的段落的占 {top10}（论文：71% 和 90%）"),
    "rep.t2.swap": ("on the {n} claims whose label snapshot B changes, {name} matches B's labels {b} of the time on index B "
                    "and A's old labels {a} on index A",
                    "在快照 B 改了标签的 {n} 条声明上，{name} 用索引 B 时与 B 的标签一致的比例为 {b}，用索引 A 时与 A 的"
                    "旧标签一致的比例为 {a}"),
    "rep.t2.tail": (". Beside the {paper}.", "。对照{paper}。"),
    "rep.skipped.h": ("## Stages not run", "## 没有运行的阶段"),
    "rep.skipped.item": ("- `{name}`: {why}", "- `{name}`：{why}"),
    "rep.layers.h": ("## Answer layers (retrieval, generation, citation; details in report.html)",
                     "## 回答分层（检索、生成、引用；细节见 report.html）"),
    "rep.layers.same": ("Every system has the same faithfulness ({v}).", "每个系统的忠实度都一样（{v}）。"),
    "rep.layers.same_scored": ("Every system with a faithfulness has the same one ({v}); not measured for {others}.",
                               "有忠实度的系统都一样（{v}）；未测量：{others}。"),
    "rep.layers.one": ("{name} has a faithfulness of {v}.", "{name} 的忠实度为 {v}。"),  # the only system with one
    "rep.layers.best": ("{name} has the most faithful answers ({v} of their statements supported by the passages they read)",
                        "{name} 的回答最忠实（其陈述中有 {v} 能被它读到的段落支持）"),
    "rep.layers.best_tied": ("{name} share the most faithful answers ({v} of their statements supported by the passages "
                             "they read)", "{name} 的回答并列最忠实（其陈述中有 {v} 能被它们读到的段落支持）"),
    "rep.layers.completeness": ("Answer completeness is 0 for every system: it asks whether the answer alone states each "
                                "reference statement, and a short answer (a name, a year) states none of those whole sentences "
                                "under the lexical judge; so the failure layers in report.html lean on \"generation: not used\" "
                                "for correct short answers too.",
                                "每个系统的答案完整度都是 0：它问的是回答本身有没有说出每条参考陈述，而在词汇裁判下，一个短答案"
                                "（一个名字、一个年份）说不出任何一条完整的句子；所以 report.html 的失败层里，答对的短答案也会"
                                "落在“生成：没用上”。"),
    "rep.layers.findings": ("What the scorecard shows:", "评分卡说明了什么："),
    "rep.pos.n": ("- The position probe above reads the first {n} short-answer test questions at each position (Table 1 "
                  "reads them all), so its EM at position 1 need not be Table 1's.",
                  "- 上面的位置探针在每个位置上都只用前 {n} 道短答案测试题（表 1 用了全部），所以它在位置 1 的 EM 不必等于表 1 的。"),
    "rep.pos.all": ("- The position probe above reads every short-answer test question Table 1 reads, but with the gold "
                    "passage put among each question's retrieved passages (in place of the last other one where retrieval "
                    "missed it), so its EM at position 1 need not be Table 1's.",
                    "- 上面的位置探针用的是表 1 用到的全部短答案测试题，但把金标段落放进了每道题检索到的段落里（检索漏掉它时，"
                    "替换掉最后一篇别的段落），所以它在位置 1 的 EM 不必等于表 1 的。"),
    "rep.pos.n_each": ("- The position probes above read the first short-answer test questions, as many at each position: "
                       "{items} (Table 1 reads them all).",
                       "- 上面的位置探针在每个位置上只用前面几道短答案测试题，各系统的题数：{items}（表 1 用了全部）。"),
    "rep.claims.title": ("Claim-level diagnostics (RAGChecker, eval questions)", "陈述级诊断（RAGChecker，评测问题）"),
    "rep.plots.h": ("## Plots", "## 图"),
    "rep.plots.no_cjk": ("", "_没有找到中文字体，图里的标签保留英文；安装 fonts-noto-cjk 或 fonts-wqy-microhei 后重新运行即可。_"),
    # --- plots ----------------------------------------------------------------------------------
    "plot.loss": ("training loss (NLL per answer)", "训练损失（每个答案的 NLL）"),
    "plot.step": ("step", "步数"),
    "plot.dev_em": ("dev exact match", "验证集精确匹配"),
    "plot.em_vs_k": ("test EM vs K retrieved documents", "测试集 EM 与检索文档数 K"),
    "plot.frozen": ("RAG-Token frozen", "RAG-Token 冻结检索器"),
    "plot.bm25": ("RAG-Token BM25", "RAG-Token BM25"),
    "plot.questions_a": ("questions A", "问题 A"),
    "plot.questions_b": ("questions B", "问题 B"),
    "plot.index_a": ("index A", "索引 A"),
    "plot.index_b": ("index B", "索引 B"),
    "plot.posterior": ("RAG-Token p(z | x, y_t)", "RAG-Token p(z | x, y_t)"),
    "plot.posterior_jeopardy": ("RAG-Token p(z | x, y_t), Jeopardy", "RAG-Token p(z | x, y_t)，Jeopardy"),
    "plot.generated_token": ("generated token", "生成的 token"),
    "plot.no_tokens": ("no generated tokens to show", "没有可显示的生成 token"),
    "plot.position_x": ("position of the gold passage in the input", "金标段落在输入中的位置"),
    "plot.position_y": ("exact match", "精确匹配（EM）"),
    "plot.position_title": ("Position probe (Lost in the Middle)", "位置探针（Lost in the Middle）"),
    "plot.hist_title": ("{name}\nn={n}, NaN={nan}, mean {mean}", "{name}\nn={n}，NaN={nan}，均值 {mean}"),
    "plot.hist_x": ("question-level score", "题目级得分"),
    "plot.hist_y": ("questions", "题目数"),
    # --- claim-level diagnostics (reports/claims.py) ---------------------------------------------
    "claims.precision": ("precision", "精确率"),
    "claims.recall": ("recall", "召回率"),
    "claims.f1": ("F1", "F1"),
    "claims.claim_recall": ("claim recall", "陈述召回率"),
    "claims.context_precision": ("context precision", "上下文精确率"),
    "claims.context_utilization": ("context utilization", "上下文利用率"),
    "claims.noise_sensitivity_in_relevant": ("noise sensitivity (relevant)", "噪声敏感度（相关段落）"),
    "claims.noise_sensitivity_in_irrelevant": ("noise sensitivity (irrelevant)", "噪声敏感度（无关段落）"),
    "claims.hallucination": ("hallucination", "幻觉"),
    "claims.self_knowledge": ("self-knowledge", "自身知识"),
    "claims.faithfulness": ("faithfulness", "忠实度"),
    "claims.contradictions": ("contradicted claims", "被否定的陈述"),
    "cl.contradicted": ("{n} of {labelled} ({rate}) by the reference, {context} by a passage",
                        "参考答案否定 {labelled} 条中的 {n} 条（{rate}），检索段落否定 {context} 条"),
    "cl.title": ("Claim-level diagnostics", "陈述级诊断"),
    "cl.column.all": ("all", "全部"),  # the one column of a run without systems
    "cl.intro": ("RAGChecker's diagnostics (Ru et al. 2024) on claims: each claim of the answer is checked against the "
                 "reference (right or wrong) and against each retrieved passage on its own; each reference claim against the "
                 "answer and the passages. Means over questions, with a {pct} percentile bootstrap interval; a question "
                 "whose metric has no denominator (no claims, no reference) is left out, its reason in the record.",
                 "RAGChecker（Ru 等，2024）在陈述层面的诊断：回答的每条陈述都对照参考答案判对错，并逐篇对照每个检索到的"
                 "段落；参考答案的每条陈述则对照回答和各段落。表中是各题的平均值，附 {pct} 区间（百分位 bootstrap）；某个指标"
                 "没有分母（没有陈述、没有参考答案）的题目不计入，原因记在该题的记录里。"),
    "cl.none": ("{head}: no question has a value.", "{head}：没有哪道题有值。"),
    "cl.sentence": ("{head}: {listing}{tails}.", "{head}：{listing}{tails}。"),
    "cl.paren": (" ({inner})", "（{inner}）"),
    "cl.ends": ("{most} {top}, {least} {bottom}", "{most}{top}，{least}{bottom}"),
    # an end a paired test did not set apart from every other column: what it did not, after its names
    "cl.ends_noted": ("{most} {top}{top_note}; {least} {bottom}{bottom_note}", "{most}{top}{top_note}；{least}{bottom}{bottom_note}"),
    "cl.within": (", within noise of {others}", "，与 {others} 的差别在噪声之内"),
    # p < LEVEL, but on the questions both columns have a value for the end is on the other side of them
    "cl.reversed": (", reversed against {others} on the questions both have a value for",
                    "，但只看与 {others} 都有数值的题，高低相反"),
    "cl.untested": (", not tested against {others} (no per-question values to pair)",
                    "，未与 {others} 做配对检验（没有可配对的逐题数值）"),
    "cl.no_pair_differs": ("no two columns differ beyond noise", "任意两列之间的差别都在噪声之内"),
    "cl.of_metric": ("{metric}: {ranking}", "{metric}：{ranking}"),
    "cl.noise_total": ("relevant plus irrelevant: {ranking}", "相关与无关合计：{ranking}"),
    "cl.tested": ("- Highest and lowest are named only where a paired test sets the column apart from every other one "
                  "at p < {level}, in the same direction: the two-sided sign-flip test over the questions both columns have "
                  "a value for ({resamples:,} sign assignments drawn from seed {seed}); a column it does not set apart is said "
                  "to be within noise, one it sets apart the other way round is said to be reversed.",
                  "- 只有配对检验在 p < {level} 下把某列与其余每一列都区分开、且方向一致，才说它最高或最低：检验用双侧符号翻转检验，"
                  "只计两列都有数值的题（用种子 {seed} 抽 {resamples:,} 种符号组合）；区分不开的，说它们的差别在噪声之内；"
                  "区分开了但方向相反的，说高低相反。"),
    "cl.same_scored": ("the same for every column with a value", "有数值的各列都一样"),  # another column has none ("–")
    "cl.same": ("the same for every one", "各列都一样"),
    "cl.highest": ("highest for", "最高："),
    "cl.lowest": ("lowest for", "最低："),
    "cl.least": ("least:", "最低："),
    "cl.the_least": ("the least:", "最少："),
    "cl.most_precise": ("most precise:", "最精确："),
    "cl.most_complete": ("most complete:", "最完整："),
    "cl.uses_most": ("uses the most:", "用得最多："),
    "cl.copies_most": ("copies the most:", "照搬最多："),
    "cl.src.lead": ("; wrong claims come ", "；错误陈述"),
    "cl.src.passages": ("more from the passages than from nowhere", "更多来自段落，而不是凭空编出"),
    "cl.src.nowhere": ("more from nowhere than from the passages", "更多是凭空编出，而不是来自段落"),
    "cl.src.even": ("as much from the passages as from nowhere", "来自段落和凭空编出的一样多"),
    "cl.src.group_many": ("{where} for {items}", "{where}：{items}"),
    "cl.src.group_one": ("{where} {items}", "{where}{items}"),
    "cl.src.item": ("({noise} against {hal})", "（{noise} 对 {hal}）"),
    "cl.src.item_named": ("{who} ({noise} against {hal})", "{who}（{noise} 对 {hal}）"),
    # a second sentence after the first's full stop: spaced in English, not after 。
    "cl.short_answers": (" {what} is 0 in every column: these ask whether the answer itself states "
                         "each reference claim, which a short answer (a name, a year) never does; on short-answer questions "
                         "read precision and the passage-side metrics instead.",
                         "{what}在每一列都是 0：它们问的是回答本身是否说出了每条参考陈述，而短答案"
                         "（一个名字、一个年份）说不出完整的陈述；短答案的问题请看精确率和段落一侧的指标。"),
    "cl.zero.recall": ("Recall", "召回率"),  # then what else is 0 in every column
    "cl.zero.f1": (", and with it F1{and_cu},", "（以及随之的 F1{and_cu}）"),
    "cl.and_cu": (" and context utilization", " 和上下文利用率"),
    "cl.zero.cu": (", and with it context utilization,", "（以及随之的上下文利用率）"),  # F1 not (no value where precision has none)
    "cl.head.prf": ("Precision / recall / F1 (right claims among the answer's; reference claims the answer states)",
                    "精确率 / 召回率 / F1（回答的陈述中正确的比例；参考陈述中被回答说出的比例）"),
    "cl.head.retrieval": ("Claim recall / context precision (reference claims some passage holds; passages holding a "
                          "reference claim)",
                          "陈述召回率 / 上下文精确率（参考陈述中有段落包含的比例；段落中包含参考陈述的比例）"),
    "cl.head.utilization": ("Context utilization (of what the passages hold, how much the answer uses)",
                            "上下文利用率（段落里有的内容，回答用上了多少）"),
    "cl.head.noise": ("Noise sensitivity in relevant / irrelevant passages (a wrong claim copied from a retrieved passage)",
                      "相关 / 无关段落的噪声敏感度（从检索到的段落里照搬来的错误陈述）"),
    "cl.head.hallucination": ("Hallucination (a wrong claim in no passage)", "幻觉（哪篇段落里都没有的错误陈述）"),
    "cl.head.self_knowledge": ("Self-knowledge (a right claim in no passage: from the model's own parameters)",
                               "自身知识（哪篇段落里都没有的正确陈述：来自模型自己的参数）"),
    "cl.head.faithfulness": ("Faithfulness (a claim some passage holds; with hallucination and self-knowledge it makes 1)",
                             "忠实度（有段落包含的陈述；与幻觉、自身知识加起来为 1）"),
    # --- question-level distributions (reports/distributions.py) --------------------------------
    "dist.title": ("Question-level distributions", "题目级分布"),
    "dist.title_eval": ("Score distributions (question level)", "得分分布（题目级）"),
    "dist.intro": ("A mean hides how failures are spread: the shares of questions scoring below 1 and below 0.5 tell "
                   "scattered small slips from whole answers made up. In brackets: the one-sided {pct} upper bound "
                   "(Wilson), the number a threshold like \"≤ 5%\" must be compared with. NaN scores are counted apart, "
                   "never averaged.",
                   "平均值会掩盖失败的分布：得分低于 1 和低于 0.5 的题目比例，能分清是零星的小错还是整段编造。括号里是"
                   "单侧 {pct} 上界（Wilson），“≤ 5%”这样的门槛要拿它来比。NaN 得分单独计数，从不进平均值。"),
    "dist.cols": ("| metric | n | NaN | mean | median | share < 1 | share < 0.5 |",
                  "| 指标 | n | NaN | 均值 | 中位数 | 得分 < 1 的比例 | 得分 < 0.5 的比例 |"),
    "dist.not_in_kb": ("`not_in_kb` questions (asserted apart, never averaged): {refused} of {n} refused; each must.",
                       "知识库里没有（`not_in_kb`）的题目（单独断言，从不进平均值）：{n} 道中 {refused} 道拒答；每道都必须拒答。"),
    "sit.h": ("## Same mean, different failures", "## 平均值相同，失败的样子不同"),
    "sit.intro": ("Situation A: of 100 questions, 95 answers are fully supported and 5 are fabricated end to end. "
                  "Situation B: every one of 100 answers has one unsupported statement in 20. Both average 0.95.",
                  "情形 A：100 个回答里，95 个句句有依据，另外 5 个从头到尾是编的。情形 B：100 个回答个个都在 20 条陈述里"
                  "混了 1 条没有依据的。两种情形的平均值都是 0.95。"),
    "sit.cols": ("| situation | mean | share < 1 | share < 0.5 |", "| 情形 | 均值 | 得分 < 1 的比例 | 得分 < 0.5 的比例 |"),
    "sit.outro": ("Which is worse is a product decision; a gate on the mean alone cannot see the difference, so "
                  "`lewisrag gate` checks both shares, question by question.",
                  "哪种更糟由产品来定；只看平均值的门禁看不出两者的差别，所以 `lewisrag gate` 逐题检查这两个比例。"),
    "sit.figure": ("Situations A and B", "情形 A 与情形 B"),
    # --- eval answers / bughunt: report.md (reports/markdown.py) --------------------------------
    "md.title": ("# lewisrag evaluation", "# lewisrag 评测报告"),
    "md.judge": ("- judge: {name} fingerprint {fingerprint}", "- 裁判：{name}，指纹 {fingerprint}"),
    "md.judge_model": (", model {model}", "，模型 {model}"),
    "md.splitter": ("- splitter: {name} version {version}", "- 拆分器：{name}，版本 {version}"),
    "md.records": ("- records: {n} ({nik} not_in_kb, asserted apart)", "- 记录：{n} 条（其中 {nik} 条是知识库里没有的题目，单独断言）"),
    "md.systems": ("- systems: {n} in this file, each reported apart below (results.json: aggregates.by_system; the pooled "
                   "aggregates beside it mix them): {names}",
                   "- 系统：这个文件里有 {n} 个，下面分别报告（results.json：aggregates.by_system；旁边的总体汇总把它们混在一起）：{names}"),
    "md.null": ("null = could not be computed (see each record's nan_reasons).", "null = 无法计算（原因见每条记录的 nan_reasons）。"),
    "md.layers.h": ("## Layers per question", "## 逐题分层"),
    "md.layers.note": ("Primary cause in **bold**; later failing layers are its consequences.",
                       "**加粗**的是主因；它后面失败的层是它的连带后果。"),
    "md.causes.h": ("## Primary causes", "## 主因"),
    "md.citations.h": ("## Citation rule checks", "## 引用规则核对"),
    "md.citations.note": ("BAD_ID, MISSING_CITATION and QUOTE_NOT_FOUND are hard gates (must be 0); the rest only "
                          "approximate support.",
                          "BAD_ID、MISSING_CITATION 和 QUOTE_NOT_FOUND 是硬门禁（必须为 0）；其余状态只能近似反映有没有支持。"),
    "md.nik.h": ("## not_in_kb questions (must refuse)", "## 知识库里没有的题目（必须拒答）"),
    "md.nik.count": ("{refused} of {n} refused.", "{n} 道中 {refused} 道拒答。"),
    "md.nik.system": ("- {name}: {count}", "- {name}：{count}"),
    "md.nik.system_missed": ("- {name}: {count} {missed}", "- {name}：{count}{missed}"),
    "md.nik.missed": ("Did not refuse: ", "没有拒答："),
    "md.unsupported.h": ("## Unsupported statements", "## 没有支持的陈述"),
    "md.unsupported.reason": ("judge's reason", "裁判给的理由"),
    "md.none": ("None.", "无。"),
    "bh.title": ("# BugHunt sample", "# BugHunt 样例"),
    "bh.question": ("Question: {question}", "问题：{question}"),
    "bh.judge": ("Judge: {name} (fingerprint {fingerprint})", "裁判：{name}（指纹 {fingerprint}）"),
    "bh.granularity.h": ("## Faithfulness moves with granularity", "## 忠实度随拆分粒度变化"),
    "bh.rules.h": ("## Rule checker vs human citation labels", "## 规则核对器对照人工引用标注"),
    "bh.col.faithful": ("faithful", "忠实度"),
    "bh.col.context_recall": ("context recall", "上下文召回"),
    "bh.col.complete": ("complete", "完整度"),
    "bh.col.on_topic": ("on-topic", "切题率"),
    "bh.col.citation_r": ("citation R", "引用召回"),
    "bh.col.citation_p": ("citation P", "引用精确率"),
    "bh.col.primary": ("primary cause", "主因"),
    "bh.col.consequences": ("consequences", "连带后果"),
    "bh.col.split": ("split", "拆法"),
    "bh.col.statements": ("statements", "陈述数"),
    "bh.col.supported": ("supported", "被支持"),
    "bh.col.sentence": ("sentence", "句子"),
    "bh.col.human": ("human", "人工标注"),
    "bh.col.outcome": ("outcome", "结果"),
    "bh.answer.correct": ("correct", "正确"),
    "bh.answer.not_retrieved": ("not_retrieved", "没检索到"),
    "bh.answer.retrieved_not_used": ("retrieved_not_used", "检索到但没用上"),
    "bh.answer.hallucinated": ("hallucinated", "用上了但歪曲（幻觉）"),
    "bh.answer.off_topic": ("off_topic", "答非所问"),
    "bh.answer.misplaced_citations": ("misplaced_citations", "引用错位"),
    "bh.answer.edge": ("edge", "边界样例"),
    "bh.outcome.caught": ("caught", "拦对"),
    "bh.outcome.passed": ("passed", "放对"),
    "bh.outcome.false_block": ("false_block", "误拦"),
    "bh.outcome.missed": ("missed", "漏放"),
    "bh.outcome.unverifiable": ("unverifiable", "无法核对"),
    "level.sentences": ("sentences", "按句拆"),
    "level.atomic": ("atomic", "拆成原子陈述"),
    "level.whole": ("whole", "整段不拆"),
    # --- compare: report.md (experiments/compare.py) --------------------------------------------
    "cmp.title": ("# Original versus prompt-stitching RAG", "# 原始 RAG 与提示拼接 RAG"),
    "cmp.row.forward_passes": ("forward passes / answer", "每个回答的前向次数"),
    "cmp.row.tokens": ("tokens read / answer", "每个回答读入的 token 数"),
    "cmp.row.latency": ("latency s / answer", "每个回答的延迟（秒）"),
    "cmp.row.refused": ("not_in_kb refused", "知识库里没有：拒答数"),
    "cmp.row.failed": ("answers failed (null)", "生成失败的回答（记为 null）"),
    "cmp.row.primary": ("primary failure: {layer}", "主因（{layer}）"),
    "cmp.row.claims": ("claims: {label}", "陈述级：{label}"),
    "cmp.em": ("- Exact match on {n} short-answer test questions: ", "- {n} 道短答案测试题上的精确匹配："),
    "cmp.em.best": ("`{best}` is best with {v:.3f}.", "`{best}` 最好，为 {v:.3f}。"),
    "cmp.em.tie": ("{names} tie at {v:.3f}.", "{names} 并列，都是 {v:.3f}。"),
    "cmp.em.one": ("`{name}` scores {v:.3f}.", "`{name}` 的得分为 {v:.3f}。"),  # the only system with one
    "cmp.em.partial": (" Over the answered questions only: {items} (the rest failed), so those systems are measured on fewer.",
                       "只计有回答的题：{items}（其余生成失败），这些系统的分母更小。"),
    "cmp.gap": ("- The stitched system's EM is {gap:+.3f} from the better Lewis variant (`{better}`): ",
                "- 提示拼接系统的 EM 与较好的 Lewis 变体（`{better}`）相差 {gap:+.3f}："),
    "cmp.gap.one": ("- The stitched system's EM is {gap:+.3f} from the Lewis variant (`{name}`): ",
                    "- 提示拼接系统的 EM 与 Lewis 变体（`{name}`）相差 {gap:+.3f}："),  # the only one compared
    "cmp.gap.tie": ("- The stitched system's EM is {gap:+.3f} from the Lewis variants ({names}), tied: ",
                    "- 提示拼接系统的 EM 与并列的 Lewis 变体（{names}）相差 {gap:+.3f}："),
    "cmp.gap.close": ("within 0.05.", "在 0.05 以内。"),
    "cmp.gap.far": ("more than 0.05 apart; see the layers below for where they differ.",
                    "超过 0.05；差在哪里，看下面的分层。"),
    "cmp.cp": ("- Citation precision (does each cited passage support its sentence): {items}. Lewis models cite implicitly, "
               "from p(z|x,y); the stitched model writes its [n].",
               "- 引用精确率（每个被引段落能否支持它所在的句子）：{items}。Lewis 模型的引用是隐式的，来自 p(z|x,y)；"
               "提示拼接模型自己写出 [n]。"),
    "cmp.pos": ("- Position probe, `{name}`: EM with the gold passage at position {points}{shape}",
                "- 位置探针，`{name}`：金标段落放在各位置时的 EM 为 {points}{shape}"),
    "cmp.pos.plain": (".", "。"),
    "cmp.pos.flat": (" (flat: the marginal over documents ignores their order).", "（是平的：对文档的边缘化与它们的顺序无关）。"),
    "cmp.pos.level": (" (flat: the same wherever the gold passage is).", "（是平的：金标段落放在哪个位置都一样）。"),
    "cmp.pos.unscored": ("no answer scored", "没有可计分的回答"),
    "cmp.pos.first": (" — it answers from whatever passage comes first, so its accuracy rests on the retriever's ranking, not "
                      "on choosing among the passages.",
                      "——排在第一位的是哪篇段落，它就照哪篇回答，所以准确率取决于检索器的排序，而不是在段落之间做选择。"),
    "cmp.pos.middle": (" — lower in the middle than at the ends, the shape Liu et al. (2023) call lost in the middle.",
                       "——中间低、两头高，就是 Liu 等（2023）所说的 lost in the middle。"),
    "cmp.pos.unread": (" Probes whose prompt could not hold the gold passage are left out, not scored as misses: "
                       "each position's EM is over the questions that read it and were answered ({items}).",
                       "提示词放不下金标段落的探针不计入（不算答错）：每个位置的 EM 只算读到了金标段落且有回答的题（{items}）。"),
    "cmp.pos.failed": (" Probes whose answer failed (an error after its retries, or an empty or cut-off reply) are left "
                       "out, not scored as misses: each position's EM is over the answers scored ({items}).",
                       "回答失败（重试后仍出错，或回复为空、被截断）的探针不计入（不算答错）：每个位置的 EM 只算计了分的回答（{items}）。"),
    "cmp.pos.failed_unread": (" Probes whose answer failed (an error after its retries, or an empty or cut-off reply) or "
                              "whose prompt could not hold the gold passage are left out, not scored as misses: each "
                              "position's EM is over the answers scored ({items}).",
                              "回答失败（重试后仍出错，或回复为空、被截断）或提示词放不下金标段落的探针不计入（不算答错）："
                              "每个位置的 EM 只算计了分的回答（{items}）。"),
    "cmp.pos.thin": (" (no shape is read from it: fewer than half of the {n} probes were scored with the gold passage at "
                     "position {positions}).",
                     "（看不出形状：金标段落放在位置 {positions} 时，{n} 个探针中计了分的不到一半）。"),
    "cmp.generator": ("- `{name}` answered through `{generator}` ({n_docs} passages per prompt, prompt {version}): {failed} of "
                      "{answers} answers failed after retries and are scored null with their reason (records' "
                      "`generator_error`).",
                      "- `{name}` 通过 `{generator}` 回答（每个提示词放 {n_docs} 篇段落，提示词版本 {version}）：{answers} 个"
                      "回答中有 {failed} 个在重试后仍然失败，记为 null 并附上原因（记录里的 `generator_error`）。"),
    "cmp.cost": ("- Generator forward passes per answer: {items}. Each pass reads one input: it encodes it, takes one "
                 "decoding step, or runs a whole answer through it teacher-forced. A Lewis model reads each of its K "
                 "passages as its own input: K encoder passes, then RAG-Token K passes per token plus its answer once "
                 "under each passage (for its citations), RAG-Sequence a greedy search per passage plus every distinct "
                 "candidate under every passage (its thorough decoding, §2.5); a stitched model reads them all in one "
                 "input: one encoder pass and one decoder pass per token.",
                 "- 每个回答的生成器前向次数：{items}。每次前向读一个输入：编码它、解码一步，或以教师强制把整个回答过一遍。"
                 "Lewis 模型把 K 篇段落各当作一个输入来读：K 次编码，然后 RAG-Token 每个 token 做 K 次前向，再把回答在每篇段落下"
                 "各过一遍（为了引用）；RAG-Sequence 在每篇段落上各做一次贪心搜索，再把每个不同的候选在每篇段落下各过一遍"
                 "（论文 §2.5 的 thorough decoding）；提示拼接模型把段落放进同一个输入：一次编码，每个 token 一次解码前向。"),
    # --- the tables the commands print (commands/evaluate.py, compare.py, experiments.py) ---------
    # English as the terminal has always shown it; Chinese in the reports' words (dist.cols, md.*, bh.*, rep.*)
    "cli.col.null": ("null", "无法计算"),
    "cli.col.mean": ("mean", "均值"),
    "cli.col.share_below_1": ("share < 1", "得分 < 1 的比例"),
    "cli.col.share_below_0.5": ("share < 0.5", "得分 < 0.5 的比例"),
    "cli.eval.metrics": ("layered metrics (question level)", "分层指标（题目级）"),
    "cli.eval.claims": ("claim-level diagnostics (mean [{pct} interval] n)", "陈述级诊断（均值 [{pct} 区间] n）"),
    "cli.eval.citations": ("citation rule checks", "引用规则核对"),
    "cli.eval.nik": ("not_in_kb: {refused}/{n} refused", "知识库里没有的题目：{n} 道中 {refused} 道拒答"),
    "cli.eval.nik_systems": ("not_in_kb: {refused}/{n} refused; by system: {systems}",
                             "知识库里没有的题目：{n} 道中 {refused} 道拒答；各系统：{systems}"),
    "cli.eval.systems": ("{n} systems in one answers file, each scored apart below (--json: by_system): {names}",
                         "一个回答文件里有 {n} 个系统，下面分别计分（--json：by_system）：{names}"),
    "cli.eval.metrics_of": ("layered metrics (question level): {system}", "分层指标（题目级）：{system}"),
    "cli.eval.usage": ("judge calls {calls}, cache hits {cache_hits}, retries {retries}, failures {failures}, "
                       "tokens {prompt_tokens}+{completion_tokens}, cost {cost}",
                       "裁判调用 {calls} 次，缓存命中 {cache_hits} 次，重试 {retries} 次，失败 {failures} 次，"
                       "token {prompt_tokens}+{completion_tokens}，费用 {cost}"),
    "cli.eval.wrote": ("wrote {files}", "已写入 {files}"),
    "cli.rep.files": ("results: {results}   report: {report}", "结果：{results}   报告：{report}"),
    "cli.note.unmatched_gold": ("note: recall@k not measured on {plain} of the {n} records of {file} with gold_passage_ids: "
                                "their retrieved_contexts are plain strings, without ids to match (give each context an id, "
                                "or retrieved_context_ids); counted as NaN",
                                "注意：{file} 中带 gold_passage_ids 的 {n} 条记录里，有 {plain} 条没有测 recall@k：它们的 "
                                "retrieved_contexts 是纯字符串，没有可匹配的 id（给每个上下文一个 id，或给出 "
                                "retrieved_context_ids）；记为 NaN"),
    "cli.note.undecided": ("note: --judge {spec} decided {decided} of the {judged} statements of {answers}; the {undecided} "
                           "undecided are left out of faithfulness (the first: {reason}; each with its reason in results.json)",
                           "注意：{answers}共有 {judged} 条陈述，--judge {spec} 判定了其中 {decided} 条；没有判定的 {undecided} 条"
                           "不计入忠实度（第一条：{reason}；每条的原因见 results.json）"),
    "cli.note.undecided_references": (
        "note: --judge {spec} decided {decided} of the {judged} checks of the reference statements of {answers} (each "
        "against the contexts and against the answer); the {undecided} undecided are left out of context recall and "
        "answer completeness (the first: {reason}; each with its reason in results.json)",
        "注意：{answers}的参考陈述共有 {judged} 项检查（每条对照上下文、对照回答各一项），--judge {spec} 判定了其中 "
        "{decided} 项；没有判定的 {undecided} 项不计入上下文召回和答案完整度（第一项：{reason}；每项的原因见 results.json）"),
    "cli.note.undecided_citations": (
        "note: of the {judged} cited sentences of {answers}, --judge {spec} decided every check against the cited "
        "passages for {decided}; the {undecided} with an undecided check are left out of citation recall or precision "
        "(the first: {reason}; each with its reason in results.json)",
        "注意：{answers}中有 {judged} 个带引用的句子要对照所引段落检查，--judge {spec} 判定了其中 {decided} 个句子的全部检查；"
        "有检查没判定的 {undecided} 个不计入引用召回或引用精确率（第一个：{reason}；每个的原因见 results.json）"),
    "cli.note.undecided_relevancy": (
        "note: --judge {spec} wrote no questions back for {undecided} of the {judged} answers of {answers} it was asked "
        "about; their answer relevancy is left out (the first: {reason}; each with its reason in results.json)",
        "注意：--judge {spec} 要为{answers}中 {judged} 个回答反推问题，其中 {undecided} 个没有写出，不计入答案相关性"
        "（第一个：{reason}；每个的原因见 results.json）"),
    "cli.note.undecided_claims": (
        "note: --judge {spec} decided {decided} of the {judged} claim checks of {answers}; the {undecided} undecided are "
        "left out of the claim-level diagnostics (the first: {reason}; each with its reason in results.json)",
        "注意：{answers}共有 {judged} 项陈述级检查，--judge {spec} 判定了其中 {decided} 项；没有判定的 {undecided} 项不计入"
        "陈述级诊断（第一项：{reason}；每项的原因见 results.json）"),
    "cli.note.the_answers": ("the answers", "这些回答"),
    "cli.note.the_bughunt_answers": ("the BugHunt answers", "BugHunt 回答"),
    "cli.bh.judge": ("judge: {name}", "裁判：{name}"),
    "cli.bh.answers": ("preset answers", "预设回答"),
    "cli.bh.note": ("Each sentence cites one document, so citation recall = precision: the reference chapter's citation "
                    "correctness.\nFaithfulness joins all contexts and never looks at citations: misplaced citations keep it "
                    "at 1.0.",
                    "每句话只引用一篇文档，所以引用召回 = 引用精确率，也就是参考章节说的引用正确率。\n"
                    "忠实度把所有上下文拼在一起判断，从不看引用：引用错位时它仍然是 1.0。"),
    "cli.bh.granularity": ("faithfulness by granularity", "忠实度随拆分粒度变化"),
    "cli.bh.rules": ("rule checker vs human citation labels", "规则核对器对照人工引用标注"),
    "cli.cmp.title": ("original versus prompt-stitching RAG", "原始 RAG 与提示拼接 RAG"),
    "cli.cmp.generator": ("{name} = {generator}: {answers} answers, {failed} failed (scored null, reasons in results.json); "
                          "{usage}",
                          "{name} = {generator}：{answers} 个回答，{failed} 个失败（记为 null，原因见 results.json）；{usage}"),
    "usage.calls": ("calls", "调用"),
    "usage.cache_hits": ("cache hits", "缓存命中"),
    "usage.retries": ("retries", "重试"),
    "usage.failures": ("failures", "失败"),
    "usage.prompt_tokens": ("prompt tokens", "提示词 token"),
    "usage.completion_tokens": ("completion tokens", "生成 token"),
    "usage.batches": ("batches", "批次"),
    "cli.rep.not_measured": ("gold-passage recall not measured: {why}", "金标段落召回未测量：{why}"),
    "cli.rep.answer_recall": ("retrieval: DPR's top-k accuracy (an answer string in a top-k passage; {n} short-answer test "
                              "questions, index A)",
                              "检索：DPR 的 top-k 准确率（前 k 个段落中有段落含答案字符串；{n} 个短答案测试问题，索引 A）"),
    "cli.rep.retrieval": ("retrieval on the {split} split (snapshot A)", "检索（{split}集，快照 A）"),
    "cli.rep.qa": ("test QA (short answers; long-form ROUGE-L)", "测试集问答（短答案；长答案看 ROUGE-L）"),
    "cli.rep.long_rougeL": ("long ROUGE-L", "长答案 ROUGE-L"),
    "cli.rep.t2": ("Jeopardy question generation and FEVER (test split; paper: Table 2)",
                   "Jeopardy 问题生成与 FEVER（测试集；论文：表 2）"),
    "cli.rep.not_run": ("not run: {name} ({why})", "没有运行：{name}（{why}）"),
    "cli.rep.swap": ("knowledge update: EM by index (paper: matched 70%/68%, mismatched 12%/4%)",
                     "知识更新：各索引上的 EM（论文：匹配时 70%/68%，错配时 12%/4%）"),
    # --- report.html: titles and the page's own text (reports/html.py, assets/page.html) --------
    "html.default_title": ("lewisrag report", "lewisrag 报告"),
    "html.title_eval": ("lewisrag evaluation: judge the statements yourself", "lewisrag 评测：自己来判定每条陈述"),
    "html.title_bughunt": ("BugHunt sample: judge the statements yourself", "BugHunt 样例：自己来判定每条陈述"),
    "html.title_compare": ("Original versus prompt-stitching RAG: judge the statements yourself",
                           "原始 RAG 与提示拼接 RAG：自己来判定每条陈述"),
    "html.system_label": ("system", "系统"),
    "html.preset_label": ("preset answer", "预设回答"),
    "html.heatmap.h": ("Document posteriors per generated token", "每个生成 token 的文档后验"),
    "html.heatmap.hint_html": ("RAG-Token re-weighs the retrieved documents at every token: each column is "
                               "p(z | x, y<sub>i</sub>, y<sub>&lt;i</sub>), so darker cells show which document a token "
                               "leaned on.",
                               "RAG-Token 在每个 token 上都重新给检索到的文档加权：每一列是 "
                               "p(z | x, y<sub>i</sub>, y<sub>&lt;i</sub>)，"
                               "格子越深，这个 token 越依赖那篇文档。"),
    "page.question": ("Question", "问题"),
    "page.system": ("System", "系统"),
    "page.answer": ("Answer as written", "回答原文"),
    "page.judge.h": ("Judge each statement", "逐条判定陈述"),
    "page.judge.hint": ("Can the retrieved passages, read together, support this statement? Ignore which passage it cites:\n"
                        "          faithfulness does not look at citations.",
                        "把检索到的段落合在一起读，能不能支持这条陈述？不用管它引的是哪一篇：忠实度不看引用。"),
    "page.your_faithfulness": ("your faithfulness", "你算的忠实度"),
    "page.agreement": ("agreement with the reference", "和参考判定的一致"),
    "page.passages.h": ("Retrieved passages", "检索到的段落"),
    "page.passages.hint_html": ("In rank order. Dashed border: a gold passage that was <em>not</em> retrieved for this answer.",
                                "按排名排列。虚线框：这次回答<em>没有</em>检索到的金标段落。"),
    "page.revealed.h": ("Reference verdicts and the layers", "参考判定与各层"),
    "page.chain.h": ("Failure chain", "失败落在哪一层"),
    "page.chain.note": ("(red frame = primary cause; later failures are often its consequences)",
                        "（红框 = 主因；后面的失败常常是主因的连带后果）"),
    "page.refs.h": ("Reference statements", "参考陈述"),
    "page.col.id": ("id", "编号"),
    "page.col.statement": ("statement", "陈述"),
    "page.col.in_passages": ("in the passages", "段落中有"),
    "page.col.in_answer": ("in the answer", "回答中有"),
    "page.granularity.h": ("Faithfulness moves with granularity", "忠实度随拆分粒度变化"),
    "page.col.split": ("split", "拆法"),
    "page.col.statements": ("statements", "陈述数"),
    "page.col.supported": ("supported", "被支持"),
    "page.col.faithfulness": ("faithfulness", "忠实度"),
    "page.citations.h": ("Citations per sentence", "逐句引用"),
    "page.col.sentence": ("sentence", "句子"),
    "page.col.cites": ("cites", "引用"),
    "page.col.rule_checker": ("rule checker", "规则核对器"),
    "page.col.supported_title": ("the judge: do the cited passages together support it (ALCE citation recall)",
                                 "裁判：被引段落合在一起能否支持这句话（ALCE 引用召回）"),
    "page.col.judge_supported": ("supported", "有支持"),
    "page.formulas.h": ("How the numbers are computed", "这些数字怎么算"),
    "page.f.faithfulness": ("Faithfulness", "忠实度"),
    "page.f.faithfulness.num": ("answer statements supported by the retrieved passages, joined",
                                "回答中能被（拼在一起的）检索段落支持的陈述数"),
    "page.f.faithfulness.den": ("answer statements", "回答中的陈述总数"),
    "page.f.faithfulness.note": ("— null (not 0) when the answer has no statements. Citations play no part.",
                                 "— 回答拆不出陈述时为 null（不是 0）。和引用无关。"),
    "page.f.context_recall": ("Context recall", "上下文召回"),
    "page.f.context_recall.num": ("reference statements supported by the retrieved passages", "参考陈述中能被检索段落支持的条数"),
    "page.f.context_recall.den": ("reference statements", "参考陈述总数"),
    "page.f.context_recall.note": ("— retrieval; with gold ids, recall@k is the share of the gold passages among the top k.",
                                   "— 检索层；有金标 id 时，recall@k 是金标段落排进前 k 篇的比例。"),
    "page.f.completeness": ("Answer completeness", "答案完整度"),
    "page.f.completeness.num": ("reference statements covered by the answer", "被回答覆盖的参考陈述数"),
    "page.f.completeness.den": ("reference statements", "参考陈述总数"),
    "page.f.completeness.note_html": ("— catches &ldquo;retrieved but not used&rdquo; (a simplified metric, not a ragas one).",
                                      "— 用来抓“检索到但没用上”（简化指标，不是 ragas 的指标）。"),
    "page.f.citation_recall": ("Citation recall (ALCE)", "引用召回（ALCE）"),
    "page.f.citation_recall.def": ("per statement: 1 when it cites at least one passage and the cited passages together entail "
                                   "it, else 0;\n        averaged over statements.",
                                   "按陈述算：至少引了一篇段落，且被引段落合起来能蕴含这条陈述，记 1，否则记 0；再对陈述取平均。"),
    "page.f.citation_precision": ("Citation precision (ALCE)", "引用精确率（ALCE）"),
    "page.f.citation_precision.def_html": ("per citation: 1 when its statement has citation recall 1 and the citation is not "
                                           "irrelevant;\n        irrelevant = it does not support the statement alone <em>and"
                                           "</em> the other citations still do without it.\n        With one citation per "
                                           "statement, recall = precision: the citation correctness.",
                                           "按引用算：所在陈述的引用召回为 1，且这个引用不是“无关”的，记 1。“无关”指它单独"
                                           "支持不了这条陈述，<em>而且</em>去掉它以后，其余引用照样支持得了。每条陈述只带一个"
                                           "引用时，召回 = 精确率，也就是引用正确率。"),
    "page.f.primary": ("Primary cause", "主因"),
    "page.f.primary.def": ("the first failing layer along retrieval → generation (off-topic → distorted → not used) → citation;"
                           "\n        failing layers after it are marked as consequences. Where relevance was not measured, a faithful"
                           "\n        but incomplete answer blames both not used and off-topic.",
                           "沿着 检索 → 生成（答非所问 → 用歪了 → 没用上）→ 引用 的顺序，第一个失败的层；它之后失败的层记为"
                           "连带后果。没测答案相关性时，忠实但不完整的回答同时归咎于“没用上”和“答非所问”。"),
    # --- report.html: what its script writes (assets/report.js; `Messages.js()`) ----------------
    "js.supported": ("supported", "有支持"),
    "js.not_supported": ("not supported", "无支持"),
    "js.undecided": ("undecided", "未判定"),
    "js.judge_info": ("reference judge: {judge} · splitter: {splitter} v{version}", "参考裁判：{judge} · 拆分器：{splitter} v{version}"),
    "js.question_category": ("{question}  ({category})", "{question}（{category}）"),
    "js.empty_answer": ("(empty answer)", "（空回答）"),
    "js.no_questions": ("This run has no questions.", "这次运行里没有题目。"),
    "js.nik_refused": ("Not in the knowledge base: the only right answer is a refusal, and this one refuses. Such questions are "
                       "asserted apart and never enter a mean.",
                       "知识库里没有：唯一正确的回答是拒答，这个回答拒答了。这类题目单独断言，从不进平均值。"),
    "js.nik_not_refused": ("Not in the knowledge base: the only right answer is a refusal, and this one does not refuse. Such "
                           "questions are asserted apart and never enter a mean.",
                           "知识库里没有：唯一正确的回答是拒答，这个回答没有拒答。这类题目单独断言，从不进平均值。"),
    "js.refuses_no_statements": ("The answer refuses: no statements to judge.", "回答拒答了：没有要判定的陈述。"),
    "js.no_statements": ("No statements.", "没有陈述。"),
    "js.cites_passage": ("cites passage {id}", "引用段落 {id}"),
    "js.cites_unknown": ("cites [{id}]: no retrieved passage has that label", "引用 [{id}]：检索到的段落中没有这个编号"),
    "js.you_agree": (" · you agree", " · 你的判定一致"),
    "js.you_differ": (" · you differ", " · 你的判定不同"),
    "js.reference": ("reference: {verdict}{agree}", "参考判定：{verdict}{agree}"),
    "js.score_count": ("{supported} supported / {judged} judged ({left} left)", "有支持 {supported} / 已判定 {judged}（还剩 {left}）"),
    "js.agree": ("{agree} / {decided} agree", "{agree} / {decided} 一致"),
    "js.after_all": ("after all {n} are judged", "全部 {n} 条判完后显示"),
    "js.gold": ("gold", "金标"),
    "js.gold_missing": ("gold, not retrieved", "金标，未检索到"),
    "js.no_text": ("(text not in this run)", "（这次运行里没有这段文字）"),
    "js.nothing_retrieved": ("Nothing was retrieved.", "什么都没有检索到。"),
    "js.card.faithfulness": ("reference faithfulness", "参考忠实度"),
    "js.card.context_recall": ("context recall", "上下文召回"),
    "js.card.answer_completeness": ("answer completeness", "答案完整度"),
    "js.card.citation_recall": ("citation recall", "引用召回"),
    "js.card.citation_precision": ("citation precision", "引用精确率"),
    "js.card.recall_at_k": ("recall@k", "recall@k"),
    "js.card.on_topic_rate": ("on-topic rate", "切题率"),
    "js.card.refused": ("refused", "拒答"),
    "js.yes": ("yes", "是"),
    "js.no": ("no", "否"),
    "js.must_refuse": ("questions not in the knowledge base must be refused", "知识库里没有的题目必须拒答"),
    "js.no_metric": ("no metric", "无指标"),
    "js.primary": ("primary cause", "主因"),
    "js.consequence": ("consequence", "连带后果"),
    "js.fix_first": ("Fix {layer} first.", "先修“{layer}”这一层。"),
    "js.expected": (" This preset answer was written to fail at {layer}.", "这个预设回答是特意写成在“{layer}”这一层失败的。"),
    "js.nik_chain_refused": ("Not in the knowledge base: the answer refused, as it must.", "知识库里没有：回答拒答了，本该如此。"),
    "js.nik_chain_must": ("Not in the knowledge base: the answer had to refuse.", "知识库里没有：回答本该拒答。"),
    "js.all_pass": ("Every layer that could be measured passes.", "能测量的层全部通过。"),
    "js.no_references": ("No reference statements.", "没有参考陈述。"),
    "js.no_sentences": ("No sentences checked.", "没有核对任何句子。"),
    "js.hide": ("Hide reference verdicts", "隐藏参考判定"),
    "js.reveal": ("Reveal reference verdicts and diagnosis", "揭晓参考判定和诊断"),
}

# Fixed English texts that reach the reports from the run (not from the catalogue), and their Chinese.
KNOWN_TEXTS: dict[str, str] = {
    # presets' notes (experiments/presets.py)
    "smoke test: numbers are not meaningful": "冒烟测试：数字没有意义",
    "the demo: a scratch DPR with self-mined negatives, the shipped generator, gentle RAG fine-tuning":
        "演示：从零训练的 DPR（负例自己挖），随包附带的生成器，温和的 RAG 微调",
    "GPU recipe (Lewis et al. 2020 settings) on local checkpoints and data; --steps/--max-train/--max-passages shorten it":
        "GPU 配方（Lewis 等 2020 的设置），用本地的检查点和数据；--steps/--max-train/--max-passages 可以缩短它",
    # why a stage of the base preset was not run (experiments/base.py)
    "needs the built-in world; the base preset reads --train/--dev/--test and --passages instead":
        "需要内置世界；base 预设改读 --train/--dev/--test 和 --passages",
    "not trained: the given DPR pair (--question-encoder, --context-encoder) is the retriever":
        "不训练：给定的 DPR 编码器对（--question-encoder、--context-encoder）就是检索器",
    "BM25 is only Table 6's ablation row, which needs the built-in world's splits":
        "BM25 只用于表 6 的消融行，那一行需要内置世界的数据划分",
    "used only by the ablations": "只有消融实验用它",
    "Table 6 and Figure 3 need BM25 and the frozen-retriever run over the built-in world":
        "表 6 和图 3 需要在内置世界上跑 BM25 和冻结检索器",
    "the prompt-stitching comparison is built on the built-in world's evaluation set": "提示拼接的对比建立在内置世界的评测集上",
    "no --passages-b": "没有给 --passages-b",
    "needs --passages-b, --questions-a and --questions-b (questions about each snapshot)":
        "需要 --passages-b、--questions-a 和 --questions-b（关于每个快照的问题）",
    "no test question has gold_passage_ids (the hub's QA sets and DPR's .qa.csv have none)": "没有哪道测试题带 gold_passage_ids（hub 上的问答数据集和 DPR 的 .qa.csv 都没有）",
    # a run written before KILT and DPR's files were read says it so
    "no test question has gold_passage_ids (nq_open has none)": "没有哪道测试题带 gold_passage_ids（nq_open 没有）",
    "no test question's gold passage is among the indexed passages": "没有哪道测试题的金标段落在已建索引的段落里",
    # why a metric is null (eval/evaluator.py)
    "not_in_kb: judged on refusal only, never averaged": "知识库里没有：只看是否拒答，从不进平均值",
    "refusal: asserts nothing, never averaged": "拒答：什么也没断言，从不进平均值",
    "no reference answer, reference statements or reference claims": "没有参考答案、参考陈述或参考断言",
    "needs per-statement on-topic labels (not part of the answer format)": "需要逐条陈述的切题标注（回答格式里没有）",
    "judge undecided on every statement's citations": "裁判对每条陈述的引用都没有给出判定",
    "judge undecided on every citation": "裁判对每个引用都没有给出判定",
    "the answer cites nothing": "回答没有引用任何段落",
    "every sentence of the answer only declines: none is asked to cite": "回答的每句话都只是拒答：没有哪句需要引用",
    "retrieved_contexts are plain strings: no ids to match gold_passage_ids": "retrieved_contexts 是纯文本：没有 id 可以和 gold_passage_ids 对照",
    "no reference answer": "没有参考答案",
    # a regex-answered question's F1 and ROUGE-L (experiments/compare.py's PATTERN_REASON)
    "the reference is a pattern (regex_match): F1 and ROUGE-L against it measure nothing":
        "参考答案是正则模式（regex_match）：拿它算 F1 和 ROUGE-L 没有意义",
    "needs an embedder (--embedder) and a judge that writes questions (llm)": "需要嵌入模型（--embedder）和能反推问题的裁判（llm）",
    "no questions generated": "没有反推出问题",
    "no statements in the answer": "回答里没有陈述",
    "no reference statements": "没有参考陈述",
    "the answer has no sentences": "回答里没有句子",
    "not judged": "不判定",  # a not_in_kb answer's statement
    # what `judge undecided on all N ...` names (eval/evaluator.py's _scored)
    "statements in the answer": "回答里的陈述",
    "reference statements": "参考陈述",
    # why a claim-level metric is null (eval/claims.py)
    "no response claims": "回答里没有断言",
    "no reference claims": "没有参考断言",
    "no contexts": "没有检索到上下文",
    "precision or recall is undefined": "精确率或召回率无定义",
    "no reference claim is known to be in a context (undecided verdicts)": "没有哪条参考断言确知在某个上下文里（判定未定）",
    "no reference claim is entailed by any context (no relevant context)": "没有哪条参考断言能被某个上下文蕴含（没有相关上下文）",
    # a citation check's detail (eval/citations.py)
    "no [n] citation": "没有 [n] 引用",
    "no quote, number or Latin word to check": "没有引文、数字或拉丁字母词，规则无从核对",
    # a judge's reason for a verdict (eval/judges/)
    "human label": "人工标注",
    "no label": "没有标注",
    "no content tokens in the statement": "陈述里没有内容词",
}
# Fixed English beginnings of such texts; what follows them is kept as written.
KNOWN_PREFIXES: tuple[tuple[str, str], ...] = (
    ("not in the cited documents: ", "被引文档里没有："),
    ("quote not in the cited documents: ", "引文不在被引文档里："),
    ("cited ids not among the retrieved contexts: ", "引用的编号不在这次检索到的上下文里："),
    ("cited contexts have no text: ", "被引的上下文没有文字："),
    ("no answer: the generator failed: ", "没有回答：生成器失败："),
    ("decompose failed: ", "拆分陈述失败："),
    ("question generation failed: ", "反推问题失败："),
    ("claim extraction failed: ", "抽取断言失败："),
)
# Fixed English sentences with numbers or names in them: each group is passed through `Messages.text` too.
KNOWN_PATTERNS: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"judge undecided on all (\d+) (.+?): (.*)", re.DOTALL), "裁判对全部 {0} 条{1}都没有给出判定：{2}"),
    (re.compile(r"all (\d+) labels it counts are undecided"), "要计数的 {0} 个标签全都未判定"),
    (re.compile(r"the judge returned no statements for (\d+) sentences"), "裁判没有从 {0} 个句子里拆出任何陈述"),
)
# The lexical judge's reason: '5/6 content tokens in premise (0.83 ≥ 0.75); missing: 2018; but the premise lacks
# the number 2018' (`LexicalJudge._one`). No list it names holds a ";", so an ending of another shape is no match
# and the reason is shown as written, never half translated.
_LEXICAL_REASON = re.compile(r"(\d+)/(\d+) content tokens in premise \(([^()]*)\)(?:; missing: ([^;]*))?"
                             r"(?:; but the premise lacks (?:the number ([^;]*?)(?: and the name ([^;]*))?|the name ([^;]*)))?",
                             re.DOTALL)


def check_lang(lang: str, flag: str = "--lang") -> str:
    """`lang` if the reports can be written in it, else an InputError naming the flag (exit 2 in the CLI).

    >>> check_lang("zh")
    'zh'
    """
    if lang not in LANGS:
        raise InputError(flag, f"unknown language '{lang}': use {' or '.join(LANGS)}")
    return lang


def placeholders(template: str) -> set[str]:
    """The names a template needs.

    >>> sorted(placeholders("{a:.1%} and {b}"))
    ['a', 'b']
    """
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def _wide(text: str) -> bool:
    """Whether `text` is CJK or full-width (东, （, 。): what Chinese sets without a space beside it."""
    return bool(text) and all(unicodedata.east_asian_width(c) in "WF" for c in text)


class Messages:
    """The catalogue in one language: `t(id, **values)` is the message with its placeholders filled."""

    def __init__(self, lang: str = "en"):
        self.lang = check_lang(lang)
        self._i = LANGS.index(lang)

    @property
    def html_lang(self) -> str:
        return HTML_LANG[self.lang]

    def __call__(self, key: str, **values) -> str:
        text = MESSAGES[key][self._i]
        return text.format(**values) if values else text

    def get(self, key: str, default: str) -> str:
        """The message `key`, or `default` when the catalogue has none (an unknown layer or category)."""
        return MESSAGES[key][self._i] if key in MESSAGES else default

    def word(self, kind: str, value: str) -> str:
        """A value of an enumeration (a layer, verdict, category, split ...) in this language; unknown values as they are.

        >>> Messages("zh").word("layer", "retrieval"), Messages("en").word("layer", "retrieval"), Messages("zh").word("layer", "x")
        ('检索', 'retrieval', 'x')
        """
        return self.get(f"{kind}.{value}", str(value))

    def system(self, name: str) -> str:
        """A reproduce system's display name (RAG-Token, BART (closed book) ...); other names as they are."""
        return self.get(f"system.{name}", name)

    def metric(self, key: str, spaced: bool = True) -> str:
        """A metric's label: in English the key itself (`spaced`: underscores as spaces), in Chinese its name.

        >>> Messages("en").metric("context_recall"), Messages("en").metric("context_recall", False), Messages("zh").metric("context_recall")
        ('context recall', 'context_recall', '上下文召回')
        """
        if self.lang == "en":
            return key.replace("_", " ") if spaced else key
        return self.get(f"metric.{key}", key)

    def join(self, items, sep: str = "sep.list") -> str:
        return self(sep).join(items)

    def names(self, items) -> str:
        """Names as a sentence lists them; Chinese spaces 和 from a Latin name, not from a Chinese one.

        >>> Messages("en").names(["a"]), Messages("en").names(["a", "b", "c"]), Messages("zh").names(["a", "b", "c"])
        ('a', 'a, b and c', 'a、b 和 c')
        >>> Messages("zh").names(["BART（闭卷）", "提示拼接 RAG"]), Messages("zh").names(["F1", "上下文利用率"])
        ('BART（闭卷）和提示拼接 RAG', 'F1 和上下文利用率')
        """
        items = list(items)
        if len(items) == 1:
            return items[0]
        head, last, sep = self.join(items[:-1], "sep.enum"), items[-1], self("sep.and")
        if _wide(sep.strip()):  # 和 keeps its space on a Latin name's side only ("（闭卷） 和" read as a stray space)
            sep = (" " if not _wide(head[-1:]) else "") + sep.strip() + (" " if not _wide(last[:1]) else "")
        return head + sep + last

    def text(self, value) -> str:
        """A fixed English text from the run (`KNOWN_TEXTS`, `KNOWN_PREFIXES`) in this language; others as they are.

        >>> Messages("zh").text("the answer cites nothing"), Messages("zh").text("not in the cited documents: http")
        ('回答没有引用任何段落', '被引文档里没有：http')
        >>> Messages("zh").text("5/6 content tokens in premise (0.83 ≥ 0.75); missing: 2018; but the premise lacks the number 2018")
        '前提里有 5/6 个内容词（0.83 ≥ 0.75）；缺少：2018；但前提里没有数字 2018'
        >>> Messages("zh").text("judge undecided on all 2 reference statements: no content tokens in the statement")
        '裁判对全部 2 条参考陈述都没有给出判定：陈述里没有内容词'
        """
        if self.lang == "en" or not isinstance(value, str):
            return value
        if value in KNOWN_TEXTS:
            return KNOWN_TEXTS[value]
        for en, zh in KNOWN_PREFIXES:  # what follows may be a known text too ("decompose failed: the judge returned ...")
            if value.startswith(en):
                return zh + self.text(value[len(en):])
        for pattern, zh in KNOWN_PATTERNS:
            if m := pattern.fullmatch(value):
                return zh.format(*map(self.text, m.groups()))
        if m := _LEXICAL_REASON.fullmatch(value):
            # its lists are joined with ", ", which no item holds ("1,890" has no space)
            k, n, share, missing, numbers, and_names, names = (g and g.replace(", ", "、") for g in m.groups())
            lacking = [f"数字 {numbers}"] * bool(numbers) + [f"名字 {and_names or names}"] * bool(and_names or names)
            return (f"前提里有 {k}/{n} 个内容词（{share}）" + (f"；缺少：{missing}" if missing else "")
                    + (f"；但前提里没有{'，也没有'.join(lacking)}" if lacking else ""))
        return value

    def js(self) -> dict[str, str]:
        """The messages report.html's script writes, without their `js.` prefix, plus the enumerations it shows
        (layer verdicts, question categories, granularity levels, metric names)."""
        out = {k[3:]: v[self._i] for k, v in MESSAGES.items() if k.startswith("js.")}
        for kind in ("verdict", "category", "level", "metric"):
            out |= {k: v[self._i] for k, v in MESSAGES.items() if k.startswith(kind + ".")}
        if self.lang == "en":  # the page has always shown metric keys as they are
            out = {k: v for k, v in out.items() if not k.startswith("metric.")}
        return out


@functools.cache
def messages(lang: str = "en") -> Messages:
    """The catalogue in `lang` ("en" or "zh"); an InputError naming --lang for any other."""
    return Messages(lang)


ENGLISH = messages("en")  # the default of functions that take a `Messages`


# --- plots ------------------------------------------------------------------------------------


@functools.cache
def cjk_font() -> str | None:
    """The first family of `CJK_FONTS` that matplotlib finds on this machine, or None.

    matplotlib's font list is a cache written on its first run: a font installed later (apt-get install
    fonts-noto-cjk) is not in it, so the system's font files it lacks are added before giving up."""
    # matplotlib loads on first use: the reports import this module to write text only
    from matplotlib import font_manager

    fm = font_manager.fontManager

    def found() -> str | None:
        installed = {f.name for f in fm.ttflist}
        return next((name for name in CJK_FONTS if name in installed), None)

    if found() is None:
        known = {f.fname for f in fm.ttflist}
        for path in sorted(set(font_manager.findSystemFonts()) - known):
            try:
                fm.addfont(path)
            except (OSError, RuntimeError, ValueError):  # a file FreeType cannot read is no font for us
                continue
    return found()


@contextlib.contextmanager
def plot_messages(lang: str = "en") -> Iterator[Messages]:
    """Draw plots inside this block with the messages it yields: `lang`'s, with a CJK font as matplotlib's
    fallback behind its default family when `lang` is Chinese; English when no CJK font is installed."""
    t = messages(lang)
    if t.lang == "en":
        yield t
        return
    font = cjk_font()
    if font is None:
        yield messages("en")
        return
    import matplotlib  # loads on first use: see cjk_font

    # matplotlib falls back glyph by glyph along font.family: Latin stays in the default face
    with matplotlib.rc_context({"font.family": [*matplotlib.rcParams["font.family"], font]}):
        yield t
