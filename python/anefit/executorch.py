"""anefit for ExecuTorch export scripts.

Check every Core ML delegate of a lowered program, then lower again with the
partitioner arguments the check recommends::

    import anefit.executorch as ae
    from executorch.backends.apple.coreml.partition import CoreMLPartitioner

    reports = ae.check_program("model.pte")
    for report in reports:
        print(report.summary())
    partitioner = CoreMLPartitioner(**ae.partitioner_kwargs(reports),
                                    compile_specs=compile_specs)

This module does not import ExecuTorch: it reads the ``.pte`` file itself.
"""

from __future__ import annotations

import ast
import os
from typing import Dict, List, Sequence, Union

from ._core import Report, check, load_delegates

__all__ = ["check_program", "partitioner_kwargs"]

_PARTITIONER = "CoreMLPartitioner"


def check_program(
    path: Union[str, "os.PathLike[str]"],
    chip: str = "any",
    os: str = "any",
    compute_units: str = "cpu_and_ne",
) -> List[Report]:
    """Checks every Core ML delegate of the ExecuTorch program at ``path``, in
    program order (``report.path`` is ``'program.pte#N'``).

    ``chip``, ``os`` and ``compute_units`` are those of :func:`anefit.check`.
    Raises :class:`anefit.InputError` for a malformed program or one without
    a Core ML delegate.
    """
    delegates = load_delegates(path, weights=False)
    if not delegates:
        from ._core import InputError

        raise InputError(f"{_text(path)}: expected a Core ML delegate, found none "
                         "(was the program lowered with CoreMLPartitioner?)")
    return [check(m, chip=chip, os=os, compute_units=compute_units) for m in delegates]


def partitioner_kwargs(reports: Union[Report, Sequence[Report]]) -> Dict[str, object]:
    """The ``CoreMLPartitioner`` arguments the reports recommend, to lower
    again with ``CoreMLPartitioner(**partitioner_kwargs(reports),
    compile_specs=...)``:

    - ``skip_ops_for_coreml_delegation``: the aten ops behind the ops the
      checker puts off the ANE (:attr:`Report.skip_ops_for_coreml_delegation`,
      the default plan of ``anefit split``) and those a finding's remedy names,
      sorted, each once; always given (an empty list when nothing needs to stay
      out);
    - every other argument a finding's ``CoreMLPartitioner`` remedy sets
      (:attr:`Finding.remedies`, the remedies table ``anefit check`` prints for
      a ``.pte``), e.g. ``take_over_mutable_buffer=False`` when a Core ML
      state fails; absent otherwise, so the partitioner's defaults stand.

    Remedies are named for models read from a ``.pte`` (:func:`check_program`);
    a report on a ``.mlpackage`` contributes its skip list only.
    """
    if isinstance(reports, Report):
        reports = [reports]
    kwargs: Dict[str, object] = {}
    skip = set()
    for report in reports:
        skip.update(report.skip_ops_for_coreml_delegation)
        for finding in report.findings:
            for remedy in finding.remedies:
                if remedy["where"] != _PARTITIONER:
                    continue
                for key, value in _arguments(remedy["setting"]).items():
                    if key == "skip_ops_for_coreml_delegation":
                        skip.update(value)
                    else:
                        kwargs[key] = value
    return {"skip_ops_for_coreml_delegation": sorted(skip), **kwargs}


def _arguments(setting: str) -> Dict[str, object]:
    """The keyword arguments of ``CoreMLPartitioner(key=value, ...)``."""
    call = ast.parse(setting, mode="eval").body
    if not isinstance(call, ast.Call):
        return {}
    return {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}


def _text(path: Union[str, "os.PathLike[str]"]) -> str:
    import os as _os

    return _os.fspath(path)
