"""What every lesson shares: the cell constructors and the setup cell that makes (or reuses) a run."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Markdown:
    en: str  # the cell in English
    zh: str  # the same cell in Chinese


@dataclass(frozen=True)
class Code:
    source: str  # run as is in both languages
    hidden: bool = False  # source collapsed in Jupyter (an exercise's check: it holds the answer)


def md(en: str, zh: str) -> Markdown:
    return Markdown(en.strip("\n"), zh.strip("\n"))


def code(source: str) -> Code:
    return Code(source.strip("\n"))


def check(source: str) -> Code:
    """An exercise's check cell: it computes the answer, so its source starts collapsed."""
    return Code(source.strip("\n"), hidden=True)


RUN_INTRO = md(
    r"""
## 0. A tiny reproduction to work on

The next cell trains the `tiny` preset once (well under a minute on a laptop CPU) into `lesson_run/` beside
this notebook, or reuses a run you already have: start Jupyter with `LEWISRAG_LESSON_RUN=/path/to/run`,
an absolute path (for instance `$PWD/runs/demo` from the repository's root, the run `make demo` writes: the
notebook runs in `docs/lessons/`, where a relative path would point). From a shell, at the repository's root, the
same run is `.venv/bin/lewisrag reproduce --preset tiny --out docs/lessons/lesson_run`.

The tiny models train for seconds, so their answers are wrong and their scores near zero. The
arithmetic in these lessons holds for any weights, and where a number only means something for a model
that can read, the lesson says so and shows one that can.
""",
    r"""
## 0. 先准备一次小规模复现

下一个单元会用 `tiny` 预设训练一次（笔记本电脑的 CPU 上远不到一分钟），结果放在本笔记本旁边的 `lesson_run/`
目录里；如果你手上已经有一次运行结果，也可以直接复用：启动 Jupyter 前设置
`LEWISRAG_LESSON_RUN=/path/to/run`，要写绝对路径（比如在仓库根目录下写 `$PWD/runs/demo`，即 `make demo`
生成的运行；笔记本在 `docs/lessons/` 里运行，相对路径会从那里算起）。在命令行里做同样的事，是在仓库根目录下运行
`.venv/bin/lewisrag reproduce --preset tiny --out docs/lessons/lesson_run`。

tiny 模型只训练了几秒钟，所以它们的答案是错的，分数也接近零。本课里的计算对任何权重都成立；
哪些数字只有在模型“会读”时才有意义，课上会专门指出，并换一个会读的模型给你看。
""",
)


def setup(title: str) -> Code:
    """The setup cell of lesson `title`: make or reuse the run, and give the lesson its own work folder
    (lessons 3 and 4 both write a baseline.json and a gate.toml: in one folder each would gate the other's)."""
    return code(
        r"""
import json
import os
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm's notebook bars need ipywidgets
import torch
import transformers

from lewisrag.experiments.presets import PRESETS
from lewisrag.experiments.reproduce import reproduce

transformers.utils.logging.disable_progress_bar()  # quiet model loading
given = os.environ.get("LEWISRAG_LESSON_RUN")  # a run of yours, used as it is: a mistyped path trains nothing there
RUN = Path(given or "lesson_run").resolve()
if given and not (RUN / "results.json").is_file():
    raise FileNotFoundError(f"LEWISRAG_LESSON_RUN={given}: no finished run at {RUN} (no results.json); give an "
                            "absolute path, or unset it to train the tiny run into lesson_run/")
if not (RUN / "results.json").is_file():
    reproduce(PRESETS["tiny"], RUN, seed=0, resume=True)  # resumes a run that was interrupted
run_config = json.loads((RUN / "config.json").read_text())
world_lang = run_config["preset"].get("lang", "en")  # the lessons' text (in both languages) describes the English world
if world_lang != "en":
    raise ValueError((f"LEWISRAG_LESSON_RUN={given}" if given else str(RUN))
                     + f": a run of the {world_lang} world (reproduce --lang {world_lang}); the lessons need an English run: "
                     + ("point LEWISRAG_LESSON_RUN at one, or unset it to train the tiny run into lesson_run/" if given
                        else "remove this one, and this cell trains the English tiny run there"))
# torch on the threads the run was made with (tiny: 1): these models are small, and on a busy machine
# more threads wait on each other (under load, lesson 3 once took 4 minutes on 2 threads, 57 s on 1)
torch.set_num_threads(run_config.get("threads") or torch.get_num_threads())
torch.set_grad_enabled(False)  # from here on the lessons only read the models
WORK = Path("lesson_work", "TITLE").resolve()  # what this lesson writes
WORK.mkdir(parents=True, exist_ok=True)
print("run:", RUN, "| preset:", run_config["preset"]["name"], "| threads:", torch.get_num_threads(), "| work:", WORK)
""".replace("TITLE", title)
    )
