"""lewisrag QA metrics as an evaluate module: exact match, token F1 and ROUGE-L (0 to 1).

Chinese and English alike (see lewisrag.scoring.qa): EM and F1 with SQuAD/DPR normalization extended
to CJK characters, ROUGE-L as rouge-score's F-measure without dropping CJK. Each prediction is
scored against its best reference; the module returns the means. A prediction's [n] citation
markers are removed first, as `lewisrag eval answers` does: combined with lewisrag_faithfulness,
the same cited answers serve both modules.
"""

import datasets
import evaluate

from lewisrag.eval.evaluator import answer_text
from lewisrag.scoring import qa

_DESCRIPTION = "Exact match, token F1 and ROUGE-L of answers against one or more references (Chinese and English)."
_KWARGS_DESCRIPTION = """
Args:
    predictions: list of answer strings ([n] citation markers are left out of the scores).
    references: list of lists of acceptable answers, one list per prediction.
Returns:
    exact_match, f1, rougeL: means over the predictions, each in [0, 1] (NaN when there is none).
Example (one exact answer, one Chinese answer with 3 of 4 characters right):
    predictions=["Paris", "返回四二"], references=[["paris"], ["返回四二二"]]
    -> exact_match 0.5; f1 = (1 + 2*1*0.8/1.8) / 2 = 0.944...
"""


class LewisragQA(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("string"),
                                        "references": datasets.Sequence(datasets.Value("string"))}),
        )

    def _compute(self, predictions, references, **unused):
        # `unused`: evaluate.combine passes every module all inputs (e.g. `contexts` for faithfulness)
        if len(predictions) != len(references):
            raise ValueError(f"got {len(predictions)} predictions and {len(references)} reference lists")
        if not predictions:  # a mean over no answer is undefined, not 0.0 (as lewisrag_faithfulness gives it)
            return {"exact_match": float("nan"), "f1": float("nan"), "rougeL": float("nan")}
        n = len(predictions)
        pairs = [(answer_text(p), r) for p, r in zip(predictions, references)]  # "Paris [1]." is "Paris."
        return {
            "exact_match": sum(qa.exact_match(p, r) for p, r in pairs) / n,
            "f1": sum(qa.token_f1(p, r) for p, r in pairs) / n,
            "rougeL": sum(qa.rouge_l(p, r) for p, r in pairs) / n,
        }
