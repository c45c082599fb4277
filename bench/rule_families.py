"""Which rule families make TVM programs slower on this CPU (issue 13, "rules that lose on CPU").

For each model (the real-model set of bench/real_models.py and zoo rows), the
pass runs as it did before the default was made safe -- the cost model
trusted, no measurement (check_runtime off, calibrate off, min_gain 0) -- once
with every shipped rule (``all``, gates ignored) and once per family with only
that family's rules plus the algebraic ones they need to line up (commutativity,
associativity, transpose/reshape cancelling, concat/split algebra):

  enlarge       conv-enlarge-1x1: a 1x1 convolution grown to 3x3 (zero-padded
                weights) to merge it with a 3x3 neighbour
  concat-push   element-wise ops and pools moved across a concatenate
                (relu-into-concat, concat-bias-add, concat-batch-norm, ...)
  split-push    element-wise ops moved across a split, and merges of what
                follows a split (relu-over-split, split-bias-add-merge, ...)
  merge         merges of parallel convolutions/dense/matmuls sharing an input
                (conv-merge, dense-merge, *-bias-merge, concat-conv-weights, ...)

Every distinct program is built and timed against opt_level 3 in paired
rounds (bench/real_models.run_variants): the per-round median ratio says which
family's rewrites TVM runs slower. Gates (``avoid cpu`` in rules/default.rules)
are ignored here, so the evidence for them can be re-measured.

    python bench/rule_families.py [--models squeezenet1_1,googlenet,...] [--zoo ...] [--quick]

Writes bench/results/rule_families.json and prints the table.
"""
from __future__ import annotations

import dataclasses
import re
import sys

import zoo_models
import real_models

TRUST = {"check_runtime": "off", "calibrate": "off", "min_gain": 0.0}

#: family -> rule-name pattern (re.fullmatch); every rule belongs to the first family that matches
FAMILIES = {
    "enlarge": r"conv-enlarge-1x1",
    "concat-push": r"(relu|add)-(into|over)-concat|concat-(bias-add|batch-norm|tanh|sigmoid|clip|leaky-relu|erf|"
                   r"max-pool|avg-pool)",
    "split-push": r".*-over-split|split3?-.*-merge",
    "merge": r".*-merge(-.*)?|concat-(conv|dense|matmul)-weights|concat-batch-matmul",
    "to-dense": r"batch-matmul-const-to-dense(-tb)?",
}
#: rules every family run keeps: they only regroup, so a family's rewrites can line up
ALGEBRA = (r"(add|mul)-(comm|assoc)|transpose-.*|reshape-.*|split-concat-.*|concat-split(-3)?|concat\d-group-.*|"
           r"split-split-flatten-.*")


def family_of(name: str) -> str | None:
    for family, pattern in FAMILIES.items():
        if re.fullmatch(pattern, name):
            return family
    return None


def family_rules() -> dict[str, list]:
    """variant name -> the rule list it runs (gates removed)."""
    from relay_eqsat.rewrite import load_rules

    rules = [dataclasses.replace(r, avoid=()) for r in load_rules("default")]
    out = {"all": rules}
    for family in FAMILIES:
        out[family] = [r for r in rules if family_of(r.name) == family or re.fullmatch(ALGEBRA, r.name)]
    return out


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    for name, rules in family_rules().items():
        real_models.VARIANT_OPTIONS[name] = dict(TRUST, rules=rules)
    real_models.VARIANTS = tuple(real_models.VARIANT_OPTIONS)
    if not any(a.startswith("--variants") for a in argv):
        argv += ["--variants", ",".join(["all", *FAMILIES])]
    if not any(a.startswith("--out") for a in argv):
        argv += ["--out", str(zoo_models.RESULTS_DIR / "rule_families.json")]
    if not any(a.startswith("--models") for a in argv):
        argv += ["--models", "squeezenet1_1,shufflenet_v2_x1_0,googlenet,densenet121"]
    if not any(a.startswith("--zoo") for a in argv):
        argv += ["--zoo", "squeezenet,nasrnn,nasnet_a:small"]
    return real_models.main(argv)


if __name__ == "__main__":
    main()
