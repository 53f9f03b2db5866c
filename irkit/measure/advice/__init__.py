"""Performance guidance that proves itself: `irkit-bench advise`.

For the kernels that hold most of a program's time, the evidence (`evidence`: kind, roofline
point, code features; on a GPU resources and counters), hypotheses from rules (`rules`: a
registry, extensible from plugins with `register_rule`), each a concrete pipeline edit
(`edits`), and every hypothesis compiled, checked, guarded against harness exploits
(`guards`) and timed paired against the current pipeline (`engine.advise`). Advice is only
what a measured CI confirms; the rest is listed as refuted, with its CI.
"""

from irkit.measure.advice.edits import Edit
from irkit.measure.advice.engine import AdviceResult, AdviseOptions, Hypothesis, advise
from irkit.measure.advice.evidence import KernelEvidence
from irkit.measure.advice.rules import RULES, Context, Rule, register_rule

__all__ = [
    "RULES",
    "AdviceResult",
    "AdviseOptions",
    "Context",
    "Edit",
    "Hypothesis",
    "KernelEvidence",
    "Rule",
    "advise",
    "register_rule",
]
