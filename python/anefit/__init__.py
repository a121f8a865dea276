"""anefit: will your Core ML model run on the Apple Neural Engine?

Check a model before Core ML compiles it, on any OS, in milliseconds::

    import anefit

    report = anefit.check("model.mlpackage")       # or a .pte, .mlmodel, .mil
    print(report.verdict)                           # 'ane', 'partial', 'no-ane', 'ane-fails'
    for f in report.findings:
        print(f.rule, f.effect, f.op, f.message, f.fix)
    report.raise_for(fail_on="compile-fail")        # a CI gate: raises AneCompileRisk

Run it on the CPU with the reference interpreter, numpy in and out::

    outputs = anefit.run("model.mlpackage", {"x": x})
    session = anefit.Session("model.mlpackage")     # keeps Core ML states between steps
    for token in tokens:
        logits = session.run({"input_ids": token})["logits"]

Rewrite it so the ANE takes it, proven in the interpreter, or split it
between the ANE and the CPU::

    result = anefit.fix("model.mlpackage", "fixed.mlpackage")   # result.ok, .changes
    program = anefit.fix("model.pte", "fixed.pte")      # every Core ML delegate
    plan = anefit.split("model.mlpackage")
    plan.skip_ops_for_coreml_delegation                # for ExecuTorch's CoreMLPartitioner

Measure it where the ANE computes, in fp16, against the fp32 the model
means, on its own weights and on real text::

    report = anefit.check("model.pte", numerics=True)    # report.numerics, ANE-NUM-001
    q = anefit.perplexity("model.pte", "text.txt", "tokenizer.json")
    q["fp32"]["perplexity"], q["fp16"]["perplexity"]

Settle a predicted failure on a Mac: write the bisection kit, run it there,
and read back what it observed::

    anefit.probe("model.pte", "kit")                # then on the Mac: python3 kit/run_probe.py
    report = anefit.check("model.pte", observations="kit/observations.json")
    report.observation["culprits"]

For ExecuTorch programs, :mod:`anefit.executorch` checks every Core ML
delegate of a ``.pte`` and turns the reports into ``CoreMLPartitioner``
arguments.

Every verb of the ``anefit`` command line runs in this process with
``python -m anefit VERB ...``. Errors in the user's input raise
:class:`InputError` (a ``ValueError``) with the one-line message the command
line prints.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional, Sequence, Union

from ._core import (
    AneCompileRisk,
    Feature,
    Finding,
    FixResult,
    Function,
    FunctionReport,
    Gate,
    InputError,
    Model,
    Op,
    OpPlacement,
    ProgramFixResult,
    Report,
    Segment,
    Session,
    SplitPlan,
    __version__,
    baseline_json,
    check,
    compare_baseline,
    fix,
    load,
    load_delegates,
    perplexity,
    probe,
    rules,
    split,
    tokenize,
)

__all__ = [
    "AneCompileRisk",
    "Feature",
    "Finding",
    "FixResult",
    "Function",
    "FunctionReport",
    "Gate",
    "InputError",
    "Model",
    "Op",
    "OpPlacement",
    "ProgramFixResult",
    "Report",
    "Segment",
    "Session",
    "SplitPlan",
    "__version__",
    "baseline_json",
    "check",
    "compare_baseline",
    "fix",
    "load",
    "load_delegates",
    "perplexity",
    "probe",
    "rules",
    "run",
    "split",
    "tokenize",
]

PathLike = Union[str, "os.PathLike[str]"]


def run(
    model: Union[Model, PathLike],
    inputs: Union[Mapping[str, object], Sequence[Mapping[str, object]]],
    steps: Optional[int] = None,
    precision: str = "fp32",
    states: Optional[Mapping[str, object]] = None,
    function: Optional[str] = None,
    threads: int = 0,
    spin: bool = True,
    exact_products: bool = False,
) -> dict:
    """Runs a model on the CPU with the reference interpreter and returns the
    outputs of the last step as ``{name: numpy.ndarray}``.

    ``inputs`` is one ``{name: array}`` used for every step, or a sequence
    of them, one per step. ``steps`` defaults to 1, or to the number of
    per-step inputs; Core ML states (starting at zero, or at ``states``) and
    the values a fixed model's state map carries move from step to step.
    ``precision="fp16"`` rounds every op's float result to fp16 as the ANE
    does. ``threads`` (0: every core), ``spin`` and ``exact_products`` are
    :class:`Session`'s.
    For a host loop that keeps states between calls, use :class:`Session`.
    """
    per_step = None if isinstance(inputs, Mapping) else list(inputs)
    if steps is None:
        steps = len(per_step) if per_step is not None else 1
    if steps < 1:
        raise InputError(f"steps: expected a positive count, found {steps}")
    if per_step is not None and len(per_step) < steps:
        raise InputError(f"inputs: expected {steps} per-step mappings, found {len(per_step)}")
    session = Session(model, function=function, precision=precision,
                      states=dict(states) if states is not None else None, threads=threads,
                      spin=spin, exact_products=exact_products)
    outputs: dict = {}
    for k in range(steps):
        outputs = session.run(dict(per_step[k] if per_step is not None else inputs))
    return outputs
