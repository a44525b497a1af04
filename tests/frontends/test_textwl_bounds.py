"""Text workloads (ASTRA-sim 1.0) with numbers no workload has: every count and size read from
the file is bounded before Python's int() sees it (it refuses over 4,300 digits with a
ValueError), and each ends in an InputError naming the file and the line (issue 32; the inputs
are the fuzz harness's, tests/fuzz, written out here)."""

from __future__ import annotations

import math

import pytest

from chakra_tools.core.errors import InputError
from chakra_tools.frontends import TextOptions, parse_text_workload, read_text_workload, text_to_rankset

BIG = "7" * 5000  # past int()'s 4,300-digit limit
ROW = "a -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 64 5"


def _row(**cols: str) -> str:
    """ROW with columns replaced by index (c2 = forward compute, c10 = weight-gradient size...)."""
    toks = ROW.split()
    for key, value in cols.items():
        toks[int(key[1:])] = value
    return " ".join(toks)


@pytest.mark.parametrize("text, message", [
    (f"DATA\n{BIG}\n{ROW}\n", "line 2: the number of layers is a 5000-digit number, more than 16777216"),
    (f"DATA\n99999999999\n{ROW}\n", "line 2: the number of layers is 99999999999, more than 16777216"),
    (f"DATA\n-{BIG}\n{ROW}\n", "line 2: expected the number of layers (1 or more), got '-777777777777"),
    (f"DATA\n1\n{_row(c2=BIG)}\n", "line 3: forward compute is a 5000-digit number, more than 2**53"),
    (f"DATA\n1\n{_row(c4=BIG)}\n", "line 3: forward comm size is a 5000-digit number, more than 2**53"),
    (f"DATA\n1\n{_row(c10=BIG)}\n", "line 3: weight-gradient comm size is a 5000-digit number"),
    (f"DATA\n1\n{_row(c11=BIG)}\n", "line 3: update delay is a 5000-digit number, more than 2**53"),
    (f"DATA\n1\n{_row(c5='-' + BIG)}\n", "line 3: input-gradient compute must not be negative, got a negative "
                                         "5000-digit number"),
    (f"DATA\n1\n{_row(c8='-3')}\n", "line 3: weight-gradient compute must not be negative, got -3"),
    (f"HYBRID_DLRM {BIG}\n2\n{ROW}\n{ROW}\n", "line 1: HYBRID_DLRM needs the index of the last bottom layer (0..0)"),
    (f"HYBRID_DLRM --1\n2\n{ROW}\n{ROW}\n", "line 1: HYBRID_DLRM needs the index of the last bottom layer"),
    (f"DATA model_parallel_NPU_group: 0\n1\n{ROW}\n", "line 1: model_parallel_NPU_group is 0, not a number of NPUs"),
    (f"MODEL model_parallel_NPU_group: -2\n1\n{ROW}\n", "line 1: model_parallel_NPU_group is -2"),
    (f"HYBRID_TRANSFORMER model_parallel_NPU_group: 999999999999999999\n1\n{ROW}\n",
     "line 1: model_parallel_NPU_group is 999999999999999999, not a number of NPUs (1..2147483648)"),
    (f"HYBRID_CUSTOMIZED\n1\n{ROW} HYBRID_CUSTOMIZED\n", "line 3: unknown layer parallelism 'HYBRID_CUSTOMIZED'"),
])
def test_numbers_no_workload_has_are_refused_naming_the_line(tmp_path, text, message):
    path = tmp_path / "wl.txt"
    path.write_text(text)
    with pytest.raises(InputError) as e:
        wl = read_text_workload(path)
        text_to_rankset(wl, TextOptions(npus=4))  # model_parallel_NPU_group 0 was ZeroDivisionError here
    assert str(e.value).startswith(f"wl.txt: {message}"), e.value
    assert len(str(e.value)) < 400  # the number is described, not printed


def test_leading_zeros_are_read_however_many():
    """A number is its digits' value: zeros in front do not count against any bound."""
    zeros = "0" * 5000
    wl = parse_text_workload(f"DATA\n{zeros}1\n{_row(c2=zeros + '5', c10=zeros + '64')}\n", "wl.txt")
    assert len(wl.layers) == 1 and (wl.layers[0].fwd.compute, wl.layers[0].wg.size) == (5, 64)


def test_the_largest_values_still_read():
    top = str(2**53)
    wl = parse_text_workload(f"DATA\n1\n{_row(c2=top, c10=top, c11=top)}\n", "wl.txt")
    assert (wl.layers[0].fwd.compute, wl.layers[0].wg.size, wl.layers[0].update) == (2**53, 2**53, 2**53)


@pytest.mark.parametrize("ghz", [math.nan, math.inf, -1.0, 0.0])
def test_a_clock_that_is_no_frequency_is_refused(ghz):
    wl = parse_text_workload(f"DATA\n1\n{ROW}\n", "wl.txt")
    with pytest.raises(InputError, match="--frequency must be a positive number of GHz"):
        text_to_rankset(wl, TextOptions(npus=2, frequency_ghz=ghz))


@pytest.mark.parametrize("ghz", [1e-7, 1e-300])
def test_a_duration_past_the_trace_s_int64_names_the_layer_line(ghz):
    """2**53 cycles at a slow clock: was a write error naming the output (1e-7) or an
    OverflowError (1e-300, an infinite number of ns)."""
    wl = parse_text_workload(f"DATA\n1\n{_row(c2=str(2**53))}\n", "wl.txt")
    with pytest.raises(InputError) as e:
        text_to_rankset(wl, TextOptions(npus=2, frequency_ghz=ghz))
    assert str(e.value).startswith("wl.txt: line 3: 'a': fwd compute of 9007199254740992 cycles at "), e.value
    assert "more than a trace holds (2**63 - 1)" in str(e.value)
