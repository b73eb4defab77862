"""Statistics that make an evaluation score hold up, each a thin layer over scipy or statsmodels.

    intervals       proportion_interval, sample_size_for_upper_bound   how far the true rate can be
                    mean_interval                                      ... and a mean score (bootstrap)
    paired          mcnemar, paired_bootstrap, sign_flip_test          is system B really better than A
    multiple        holm, bonferroni_confidence                        ... on many checks at once
    distributions   score_distribution                                 the failures a mean hides
    agreement       cohen_kappa, judge_confusion                       how a judge agrees with humans
    calibration     calibrate                                          a judge measured on human labels
    ppi             ppi_mean                                           few human labels, many judge labels

Scores arrive as plain Python lists; a NaN score (a metric that could not be computed) is counted
apart and never averaged. docs/statistics.md explains when to use which.
"""

from lewisrag.eval.stats.agreement import cohen_kappa, judge_confusion
from lewisrag.eval.stats.calibration import calibrate
from lewisrag.eval.stats.distributions import score_distribution
from lewisrag.eval.stats.intervals import mean_interval, proportion_interval, sample_size_for_upper_bound
from lewisrag.eval.stats.multiple import bonferroni_confidence, holm
from lewisrag.eval.stats.paired import mcnemar, paired_bootstrap, sign_flip_test
from lewisrag.eval.stats.ppi import ppi_mean

__all__ = ["bonferroni_confidence", "calibrate", "cohen_kappa", "holm", "judge_confusion", "mcnemar", "mean_interval",
           "paired_bootstrap", "ppi_mean", "proportion_interval", "sample_size_for_upper_bound", "score_distribution",
           "sign_flip_test"]
