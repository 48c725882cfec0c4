"""The stream length of every setting of the UniTTA paper's runs, per dataset."""

from __future__ import annotations

__all__ = ["PAPER_STREAM_LENGTHS"]

# Stream length of every setting of the paper's runs: the reference sampler with seed 425 on the full
# test sets (computed with make_stream(*synthetic_labels(dataset), code, sampler="official")); the paper
# prints one run per cell, so its binomial standard error uses these lengths.
PAPER_STREAM_LENGTHS: dict[str, dict[str, int]] = {
    "cifar10-c": {
        "i1i1": 136519, "i1iu": 75660, "i1n1": 129655, "i1nu": 74091, "i111": 150000, "i11u": 75660,
        "iui1": 61275, "iuiu": 30923, "iun1": 61275, "iunu": 30923, "iu11": 61275, "iu1u": 30923,
        "n1i1": 136837, "n1iu": 75660, "n1n1": 115931, "n1nu": 60474, "n111": 150000, "n11u": 75660,
        "nui1": 56801, "nuiu": 30923, "nun1": 48348, "nunu": 33418, "nu11": 61275, "nu1u": 30923,
    },
    "cifar100-c": {
        "i1i1": 110896, "i1iu": 75600, "i1n1": 103957, "i1nu": 58264, "i111": 150000, "i11u": 75600,
        "iui1": 58875, "iuiu": 29703, "iun1": 58875, "iunu": 29703, "iu11": 58875, "iu1u": 29703,
        "n1i1": 84405, "n1iu": 75600, "n1n1": 27804, "n1nu": 14331, "n111": 150000, "n11u": 75600,
        "nui1": 37197, "nuiu": 29703, "nun1": 24937, "nunu": 13183, "nu11": 58875, "nu1u": 29703,
    },
    "imagenet-c": {
        "i1i1": 28360, "i1iu": 76000, "i1n1": 23593, "i1nu": 21618, "i111": 150000, "i11u": 76000,
        "iui1": 58425, "iuiu": 31349, "iun1": 58425, "iunu": 29561, "iu11": 58425, "iu1u": 31349,
        "n1i1": 228845, "n1iu": 76000, "n1n1": 268749, "n1nu": 100398, "n111": 150000, "n11u": 76000,
        "nui1": 132958, "nuiu": 29561, "nun1": 106678, "nunu": 117579, "nu11": 58425, "nu1u": 29561,
    },
}
