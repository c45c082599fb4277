"""The rule language (rule *code*; the rule *files* are ``rules/``, installed as
``relay_eqsat.rulesets``): a text language over our operators, TENSAT's format, and application.

The package, by concern::

    language       the S-expression reader and the expression compiler
    patterns       source patterns (and their canonical form) and target templates
    rule           the Rule object
    files          rule files: parsing, loading shipped and user sets, ``avoid`` gating
    matching       Matcher (searching patterns) and joins of multi-pattern matches
    application    application plans, apply_matches, apply_search_matches
    tensat_format  reading TENSAT's rule files
    check          numerical verification of rules (user rules are verified on load)
    instances      concrete instances of a rule's left-hand side, for verifying it

Every public name is importable from ``relay_eqsat.rewrite`` itself.

Rule files (``rules/*.rules``, shipped as package data) hold named rules::

    # a comment runs to the end of the line
    rule dense-merge                       # a name: letters, digits, - _ .
      lhs   (nn.dense ?x ?w1 :* ?a) ; (nn.dense ?x ?w2 :* ?a)
      let   ?s = (split (nn.dense ?x (concatenate ?w1 ?w2 :axis 0) :* ?a)
                        :indices [(dim ?w1 0)] :axis (- (ndim ?x) 1))
      rhs   (tuple_get_item ?s :index 0) ; (tuple_get_item ?s :index 1)
      where (const ?w1) (const ?w2)
      example ?x [2,8] ?w1 [4,8] ?w2 [6,8]

Clauses (each starts a line; a line that starts with no clause keyword, or
one ending inside open brackets, continues the previous clause):

``lhs P1 ; P2 ...``
    Source patterns, one per matched output. Several patterns make a
    multi-pattern rule (TENSAT Algorithm 1): each is searched on its own and
    the Cartesian product of the matches is joined on shared variables; a
    combination where two patterns match the same e-class is skipped.
``rhs T1 ; T2 ...``
    Target templates, one per source pattern; ``Ti`` is merged with the
    class ``Pi`` matched.
``let ?v = T``
    A template instantiated once and usable as ``?v`` in later lets and the
    right-hand sides (to share a node between outputs, e.g. one split).
``where C1 C2 ...``
    Preconditions (expressions, below); all must be true for a match to
    apply. After them, every new node is shape-checked with
    ``ops.infer_type``: a match whose target does not type-check is skipped.
``example BINDINGS``
    Concrete bindings for the verifier (``relay_eqsat.rewrite.check``; it runs
    on every user rule file when loaded, and on the shipped ones in
    tests/test_rules.py): ``?x [2,8]``
    gives a class variable's shape (a variable with ``(const ?x)`` among the
    preconditions becomes a constant), ``?v VALUE`` an attribute variable's
    value, ``?a.key VALUE`` one attribute of a whole-attribute variable.
    A rule may have several examples; every shipped rule needs one. A rule
    without one is verified on instances drawn from its own patterns.
``for $f OP1 OP2 ...``
    The rule is written once for several ops: it stands for one rule per
    ``OPi``, named ``NAME.OPi``, with ``$f`` replaced by ``OPi`` in its other
    clauses (``(erf ?x)``, ``(tanh ?x)``... from ``($f ?x)``).
``phase finish`` / ``phase both``
    When the rule runs: by default (``search``) in the e-graph search only;
    ``finish``: only in the finishing of the extracted program
    (:mod:`relay_eqsat.finishing`: an e-graph of that program saturated with
    these rules alone, and extracted again), for cheap clean-ups whose chains
    are longer than the search's iterations reach and whose every variant of
    the search's e-graph would only fill it; ``both``: in both.
``avoid cpu`` / ``avoid gpu`` / ``avoid avx512`` / ``avoid tuned``
    The rule is not used when optimizing for that kind of device (the
    target's kind: ``llvm``/``c`` are cpu; ``cuda``, ``rocm``, ``vulkan``...
    gpu; avx512 a cpu target whose TVM code uses AVX-512), or, for ``tuned``,
    when the kernels are built under tuning records (the pass's
    ``tuning_records`` or ``tune_trials``): for rewrites
    measured to lose there, or that cannot gain there (the evidence goes in a
    comment beside the clause). The report names the rules left out.
``approx``
    The right side equals the left only to within float32 rounding error
    (TVM's vectorized approximations of exp, tanh, erf, sigmoid, softmax:
    the error measured goes in a comment). Used unless the option ``fast_math`` is off; the
    report names the rules left out.

Patterns (left-hand side)::

    ?x                         a class variable (any e-class)
    (op P... :key LIT ...)     an e-node of ``op`` with exactly these children,
                               whose attribute ``key`` equals ``LIT``
    (op P... :key ?v)          binds attribute ``key``'s value to ``?v``
                               (an *attribute variable*; a repeated ``?v``
                               must be equal)
    (op P... :* ?a)            binds the node's whole attribute set to ``?a``
                               (repeated: the attribute sets must be equal)
    (as ?r P)                  names the class matched by ``P`` as ``?r``
    (constant :value 3.0)      a scalar (0-d) constant of that value (its node
                               carries it: ``TensorGraph.const``), e.g. an
                               exponent, ``(power ?x (constant :value 3.0))``

Templates (right-hand side and lets)::

    ?x                         a bound class (from the LHS or a let)
    (op T... :key EXPR ...)    a new node; attributes are the op's canonical
                               defaults, then the attributes of ``:* ?a``
                               (copied from a matched node), then each
                               ``:key EXPR`` (overrides)

Literals: integers, floats, ``true``/``false``, ``"strings"``, lists
``[1, 1]`` (tuples; commas optional, nesting allowed). Expressions are
literals, variables, or calls ``(fn args...)``:

``(dim ?x i)`` ``(ndim ?x)`` ``(shape ?x)`` ``(dtype ?x)`` ``(const ?x)``
    the type of a class variable (or a let) and whether it is constant;
    inside a template ``%0``, ``%1``... stand for the node's own inputs.
``(attr ?a key)``
    one attribute of a whole-attribute variable.
``+ - * // %`` ``neg`` ``min`` ``max`` ``sum`` ``len``
    arithmetic; ``+ - *`` work element-wise on lists of equal length (or a
    list and a number).
``== != < <= > >=`` ``and`` ``or`` ``not`` ``(if C A B)``
``(list A B ...)`` ``(get L i)`` ``(cat L1 L2)`` ``(set L i V)`` ``(cumsum L)``
``(compose-perm P Q)``  axes of ``transpose(transpose(x, P), Q)``
``(identity-perm P)``   true if ``P`` is ``0, 1, ..., n-1``
``(inverse-perm P)``
``(same-pad ?x ?w SH SW)``  TASO's SAME padding of a convolution (4-tuple)
``(enlarge-pad ?w ?ref)``   pad_width growing a kernel to ``?ref``'s size
``(max-divisor N L)``       the largest divisor of ``N`` that is at most ``L`` (a tile size)

Rules are loaded with ``load_rules(name)`` (a shipped file, through
``importlib.resources``), ``load_rule_file(path)`` or ``parse_rules(text)``.
``load_tensat(text)`` reads TENSAT's format (see its docstring).
"""
from .application import PLACEHOLDER, TYPE_MISMATCH, application_plan, apply_matches, apply_search_matches
from .files import (DEVICE_KINDS, device_kind, load_rule_file, load_rules, parse_rules, rules_for_target, rules_root,
    shipped_rule_files)
from .language import (ExprContext, LitList, RuleSyntaxError, Str, Sym, compile_expr, read_all, read_one, to_text,
    tokenize)
from .matching import Matcher, flat_join, join
from .patterns import Template, canonical_pattern, parse_pattern, parse_template
from .rule import Rule
from .tensat_format import SkippedRule, load_tensat

__all__ = [
    "Rule", "RuleSyntaxError", "Template", "SkippedRule", "Matcher", "ExprContext", "Sym", "Str", "LitList",
    "parse_rules", "load_rules", "load_rule_file", "load_tensat", "shipped_rule_files", "rules_root",
    "DEVICE_KINDS", "device_kind", "rules_for_target",
    "tokenize", "read_all", "read_one", "to_text", "compile_expr",
    "parse_pattern", "parse_template", "canonical_pattern",
    "join", "flat_join", "application_plan", "apply_matches", "apply_search_matches",
    "PLACEHOLDER", "TYPE_MISMATCH",
]
