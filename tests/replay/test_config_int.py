"""ASTRA-sim keeps the remote memory's bandwidth and latency in integers (AnalyticalRemoteMemory:
uint64_t remote_mem_bw, remote_mem_latency), so a memory JSON saying 12.5 GB/s and 800.9 ns runs
at 12 GB/s and 800 ns there; the replayer reads ASTRA-sim config files the same way by default."""

from __future__ import annotations

import json

import pytest

from chakra_tools.core.errors import InputError
from chakra_tools.feed.info import NodeInfo
from chakra_tools.replay.spec import SystemSpec
from chakra_tools.replay.config import load_memory

POOL = {"memory-type": "MEMORY_POOL", "remote-mem-latency": 800.9, "remote-mem-bw": 12.5}


def write(tmp_path, doc):
    path = tmp_path / "mem.json"
    path.write_text(json.dumps(doc))
    return path


def load_info(size: int) -> NodeInfo:
    return NodeInfo(id=1, name="load", type=2, duration_micros=0, is_cpu_op=False, num_ops=0, tensor_size=size,
                    comm_type=None, comm_size=0, comm_src=None, comm_dst=None, comm_tag=None, pg_name="",
                    involved_dim=None)


def test_memory_bandwidth_and_latency_are_whole_numbers_as_in_astra_sim(tmp_path):
    m = load_memory(write(tmp_path, POOL))
    assert (m.bandwidth_gbps, m.latency_ns) == (12.0, 800.0)
    exact = load_memory(write(tmp_path, POOL), exact=True)
    assert (exact.bandwidth_gbps, exact.latency_ns) == (12.5, 800.9)


def test_a_load_takes_latency_plus_size_over_the_integer_bandwidth(tmp_path):
    # 1 MiB at 12 B/ns: 800 + int(1048576 / 12) = 800 + 87381 = 88181 ns (at 12.5: 84686 + 800.9)
    path = write(tmp_path, POOL)
    be = SystemSpec(memory=path).backend(1)
    assert be.memory_ns(0, load_info(1 << 20), 0) == 88_181
    exact = SystemSpec(memory=path, exact_memory=True).backend(1)
    assert exact.memory_ns(0, load_info(1 << 20), 0) == int(800.9 + (1 << 20) / 12.5) == 84_686


def test_a_bandwidth_below_one_is_refused_as_astra_sim_would_divide_by_zero(tmp_path):
    with pytest.raises(InputError, match="mem.json: remote-mem-bw must be at least 1 GB/s"):
        load_memory(write(tmp_path, {**POOL, "remote-mem-bw": 0.5}))
    assert load_memory(write(tmp_path, {**POOL, "remote-mem-bw": 0.5}), exact=True).bandwidth_gbps == 0.5
