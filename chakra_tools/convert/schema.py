"""What the converter takes from a host or device trace: the type and range of every value it
reads, checked once, where the value enters.

A trace is decoded once: msgspec's typed structs (hostet.py, kineto.py) carry the types below,
ranges included, so a document that decodes is one the stages behind the readers can trust.
A document that does not fit them (an old schema, a value of another type or out of range,
anywhere in it) is read with the json module instead, and each record the converter uses is
passed through the checks below, which accept exactly what the typed fields accept and raise an
InputError naming the file and the place (`traceEvents[12] ('aten::mm')`, `node 812`) for the
rest. So both paths make the same records or the same error.

What the stages may assume: ids and thread ids are integers that fit int64; names and
categories are text; times are finite microseconds whose nanoseconds (and the sum of two of
them) fit int64; durations, sizes and element counts are non-negative; ranks fit `MAX_RANK`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Union

import msgspec

from chakra_tools.core.errors import InputError
from chakra_tools.core.model import MAX_RANK

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: the largest time or duration in microseconds: its nanoseconds, and a sum of two, fit int64
#: (as an epoch time, the year 2116)
MAX_US = float(2**62 // 1000)

#: a node id: non-negative int64 (PyTorch counts them from 1; msgspec bounds only int64)
ID_MAX = INT64_MAX
Id = Annotated[int, msgspec.Meta(ge=0, le=ID_MAX)]
#: a signed 64-bit integer: thread and stream ids, correlation and record-function ids
Int64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
#: a size or an element count
Count = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
#: a point in time, microseconds
Micros = Annotated[float, msgspec.Meta(ge=-MAX_US, le=MAX_US)]
#: a duration, microseconds
Duration = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_US)]
#: a thread id: Kineto writes integers, and text for its pseudo threads
Tid = Union[Int64, str]


class Place:
    """Where a record is, for error messages: the file and the record (`node 812 ('aten::mm')`).
    Built only when a check fails."""

    __slots__ = ("path", "record")

    def __init__(self, path: str, record: str):
        self.path, self.record = path, record

    def error(self, key: str, value: Any, want: str) -> InputError:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return InputError(f"{self.path}: {self.record}: {key!r} is {shown}, not {want}")


def is_int(v: Any) -> bool:
    """An int, and not a bool (JSON's true/false are no numbers)."""
    return type(v) is int


def integer(v: Any, place: Place, key: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    """`v` if it is an integer within lo..hi (Int64, Count, Id above)."""
    if type(v) is not int or not lo <= v <= hi:
        raise place.error(key, v, f"an integer in {lo}..{hi}")
    return v


def optional_integer(v: Any, place: Place, key: str, lo: int = INT64_MIN,
                     hi: int = INT64_MAX) -> int | None:
    return None if v is None else integer(v, place, key, lo, hi)


def text(v: Any, place: Place, key: str) -> str:
    if type(v) is not str:
        raise place.error(key, v, "text")
    return v


def tid(v: Any, place: Place, key: str = "tid") -> int | str:
    """A thread id: an Int64 or text (`Tid`)."""
    return v if type(v) is str else integer(v, place, key)


def micros(v: Any, place: Place, key: str, lo: float = -MAX_US) -> float:
    """A finite number within lo..MAX_US microseconds, as a float (`Micros`, `Duration`)."""
    if type(v) is int and lo <= v <= MAX_US:
        return float(v)
    if type(v) is not float or not lo <= v <= MAX_US:  # NaN fails both comparisons
        what = "a duration" if lo == 0 else "a time"
        raise place.error(key, v, f"{what} in microseconds (a finite number in {lo:.4g}..{MAX_US:.4g})")
    return v


def obj(v: Any, place: Place, key: str) -> dict:
    if not isinstance(v, dict):
        raise place.error(key, v, "an object")
    return v


def array(v: Any, place: Place, key: str) -> list:
    if not isinstance(v, list):
        raise place.error(key, v, "a list")
    return v


# --------------------------------------------------------------------------------------------
# collective metadata: host trace attributes (schema >= 1.1.0) and Kineto's `args`, by the
# host trace's names (KINETO_COMM_ARGS maps Kineto's onto them)
# --------------------------------------------------------------------------------------------

def _int_list(hi: int):
    """A check of a list of integers in 0..`hi`, or the text of one (Kineto writes `"[0, 1]"`)."""
    def check(v: Any, place: Place, key: str) -> Any:
        if type(v) is str:  # read later (calls._ints): its numbers are checked here
            for x in re.findall(r"-?\d+", v):
                if len(x.lstrip("-")) > 20 or not 0 <= int(x) <= hi:
                    raise place.error(key, v, f"a list of integers in 0..{hi}")
            return v
        for x in array(v, place, key):
            integer(x, place, key, 0, hi)
        return v
    return check


_rank_list = _int_list(MAX_RANK)  # a process group's ranks
_sizes = _int_list(INT64_MAX)  # split sizes: counts


def _group_name(v: Any, place: Place, key: str) -> Any:
    """torch's name of a process group: text (or the integer of old traces)."""
    return v if type(v) is str else integer(v, place, key)


_COMM_CHECKS = {
    "collective_name": text, "dtype": text, "pg_desc": text,
    "in_msg_nelems": lambda v, p, k: integer(v, p, k, 0, INT64_MAX),
    "out_msg_nelems": lambda v, p, k: integer(v, p, k, 0, INT64_MAX),
    "pg_size": lambda v, p, k: integer(v, p, k, 0, MAX_RANK + 1),
    # -1: the group's ranks are not a strided range (PyTorch writes it for `wait` and for
    # groups it lists only in `Process Group Ranks`)
    "global_rank_start": lambda v, p, k: integer(v, p, k, -1, MAX_RANK),
    "global_rank_stride": lambda v, p, k: integer(v, p, k, -1, MAX_RANK),
    "seq": integer, "pg_name": _group_name, "pg_ranks": _rank_list,
    "in_split_size": _sizes, "out_split_size": _sizes,
}


#: the collective metadata Kineto records in a `record_param_comms` event's (and, from PyTorch
#: 2.1, an NCCL kernel's) `args`, under the names the host trace (schema >= 1.1.0) gives them
KINETO_COMM_ARGS = {
    "Collective name": "collective_name", "In msg nelems": "in_msg_nelems",
    "Out msg nelems": "out_msg_nelems", "dtype": "dtype", "In split size": "in_split_size",
    "Out split size": "out_split_size", "Process Group Name": "pg_name",
    "Process Group Description": "pg_desc", "Group size": "pg_size",
    "Global rank start": "global_rank_start", "Global rank stride": "global_rank_stride",
    "Process Group Ranks": "pg_ranks", "Seq": "seq",
}


def check_comm_attrs(attrs: dict, place: Place, names: dict[str, str] | None = None) -> dict:
    """`attrs` after checking the collective metadata in it (null counts as absent).

    `names` maps the keys of `attrs` onto the host trace's names (Kineto's `args`)."""
    for key, value in attrs.items():
        name = names.get(key) if names is not None else key
        check = _COMM_CHECKS.get(name) if name is not None else None
        if check is not None and value is not None:
            check(value, place, key)
    return attrs


# --------------------------------------------------------------------------------------------
# Kineto's `distributedInfo`
# --------------------------------------------------------------------------------------------

def dist_info(v: Any, path: str) -> dict:
    """A device trace's `distributedInfo`, checked: an object (or absent) whose `world_size`,
    `rank` and `pg_config` groups (`pg_name`, `ranks`, `pg_size`/`group_size`, `pg_desc`) have
    the types the converter reads them as."""
    if v is None:
        return {}
    place = Place(path, "distributedInfo")
    obj(v, place, "distributedInfo")
    for key in ("world_size", "rank"):
        if v.get(key) is not None:
            integer(v[key], place, key, 0, MAX_RANK + 1)
    groups = v.get("pg_config")
    for i, g in enumerate(array(groups, place, "pg_config") if groups is not None else ()):
        process_group(g, Place(path, f"distributedInfo.pg_config[{i}]"))
    return v


def process_group(g: Any, place: Place) -> dict:
    """One process group as Kineto's `pg_config` and the host trace's `## process_group:init ##`
    list describe it: `pg_name`, `ranks` (global), `pg_size`/`group_size`, `pg_desc`."""
    obj(g, place, "process group")
    if g.get("pg_name") is not None:
        _group_name(g["pg_name"], place, "pg_name")
    if g.get("ranks") is not None:
        for r in array(g["ranks"], place, "ranks"):
            integer(r, place, "ranks", 0, MAX_RANK)
    for key in ("pg_size", "group_size"):
        if g.get(key) is not None:
            integer(g[key], place, key, 0, MAX_RANK + 1)
    if g.get("pg_desc") is not None:
        text(g["pg_desc"], place, "pg_desc")
    return g
