"""What anefit.fix writes loads in coremltools (external truth). Apart from
test_api_*.py, which also run against an installed wheel without coremltools."""

import os

from conftest import EXAMPLES_DIR

EXAMPLE = os.path.join(EXAMPLES_DIR, "lfm2_shortconv.mlpackage")


def test_fixed_package_loads_in_coremltools(anefit_py, coremltools, tmp_path):
    out = tmp_path / "fixed.mlpackage"
    assert anefit_py.fix(EXAMPLE, out).ok
    spec = coremltools.utils.load_spec(str(out))
    names = {f.name for f in spec.description.input}
    assert {"layers_0_conv_state", "layers_1_conv_state"} <= names
    assert not spec.description.state
