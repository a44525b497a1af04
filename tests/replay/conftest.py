"""Fixtures the replay tests share."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def mlp(shared_fixtures, tmp_path_factory):
    """ASTRA-sim 1.0's MLP_HybridParallel_Data_Model text workload (shared fixtures), converted
    by the front end into 8 ranks with collectives on two dimensions."""
    from chakra_tools.frontends import TextOptions, read_text_workload, text_to_rankset

    out = tmp_path_factory.mktemp("mlp")
    wl = read_text_workload(shared_fixtures / "astra-sim/text_workloads/MLP_HybridParallel_Data_Model.txt")
    rs, _ = text_to_rankset(wl, TextOptions(8, (4, 2)))
    rs.write(out, "mlp", record_world=True)
    return out
