"""Communication that c10d does not record: collective kernels known by their names, and the
library ops outside `torch.distributed` that launch them.

Users run collectives today that never pass through `c10d::` or `record_param_comms`:

* NCCL/RCCL kernels of every generation: `ncclAllReduceRingLLKernel_sum_f32` (NCCL <= 2.7),
  `ncclKernel_AllReduce_RING_LL_Sum_float` (2.8-2.18), `ncclDevKernel_AllReduce_Sum_f16_RING_LL`
  (2.19+), `ncclDevKernel_Generic` (RCCL, recent NCCL: the kind is only in Kineto's metadata);
* PyTorch symmetric memory: host ops `symm_mem::multimem_all_reduce_`, `one_shot_all_reduce`,
  `two_shot_all_reduce_`, `multimem_all_gather_out`, `reduce_scatter_out`... (input tensor
  first, the group's name among the string arguments) and their `*_all_reduce_kernel`s;
* custom all-reduce kernels: vLLM's `_C_custom_ar::all_reduce` op and its
  `cross_device_reduce_1stage` / `_2stage` kernels, TensorRT-LLM's `oneShotAllReduceKernel`.

A kernel whose name says it communicates but matches none of these is reported by name
(`unknown-comm-kernel`), never silently costed as compute.
"""

from __future__ import annotations

import functools
import re

#: NCCL 2.8+ (`ncclKernel_AllReduce_...`, `ncclDevKernel_AllReduce_...`, `ncclDevKernel_Generic`)
_NCCL = re.compile(r"^(?:void\s+)?nccl(?:Dev)?Kernel_([A-Za-z]+)")
#: NCCL <= 2.7 (`ncclAllReduceRingLLKernel_sum_f32`, `ncclSendRecvKernel_copy_i8`)
_NCCL_OLD = re.compile(r"^(?:void\s+)?nccl(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|Send|Recv)"
                       r"[A-Za-z]*Kernel")
#: symmetric memory (`c10d::symmetric_memory::...::multimem_all_reduce_kernel<...>`),
#: vLLM's and TensorRT-LLM's custom all-reduce kernels
_OTHER = (
    (re.compile(r"(?:^|[\s:])(?:multimem_)?(?:one_shot_|two_shot_)?(all_reduce|all_gather|reduce_scatter)"
                r"(?:_kernel|_kernel_\w+)\b"), None),
    (re.compile(r"cross_device_reduce_[12]stage"), "all_reduce"),
    (re.compile(r"(?:one|two)ShotAllReduceKernel|allreduce_prototype"), "all_reduce"),
)
_CAMEL = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
          "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": "all_to_all", "Send": "send",
          "Recv": "recv", "AllToAll": "all_to_all"}
#: a kernel name that says it communicates (checked only for kernels none of the above knows)
_SAYS_COMM = re.compile(r"nccl|rccl|nvshmem|multimem|symmetric_memory|cross_device|all_?reduce|"
                        r"all_?gather|reduce_?scatter|all_?to_?all|sendrecv", re.IGNORECASE)
GENERIC = ""  # a communication kernel whose kind its name does not say


@functools.lru_cache(maxsize=8192)  # a trace has few distinct kernel names, each seen often
def kernel_kind(name: str) -> str | None:
    """The collective a kernel runs: its kind, GENERIC ("") for a communication kernel whose
    name does not say which (`ncclDevKernel_Generic`), None for any other kernel.

    >>> kernel_kind("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)")
    'all_reduce'
    >>> kernel_kind("ncclDevKernel_AllReduce_Sum_f16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)")
    'all_reduce'
    >>> kernel_kind("ncclAllGatherRingLLKernel_copy_i8(ncclColl)"), kernel_kind("ncclDevKernel_Generic")
    ('all_gather', '')
    >>> kernel_kind("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)")
    'all_reduce'
    >>> kernel_kind("void c10d::symmetric_memory::multimem_all_gather_kernel<16>(...)"), kernel_kind("sgemm")
    ('all_gather', None)
    """
    m = _NCCL.match(name) or _NCCL_OLD.match(name)
    if m:
        return _CAMEL.get(m.group(1), GENERIC)
    for pattern, kind in _OTHER:
        m = pattern.search(name)
        if m:
            return kind or m.group(1)
    return None


def is_comm_kernel(name: str) -> bool:
    return kernel_kind(name) is not None


@functools.lru_cache(maxsize=8192)
def says_comm(name: str) -> bool:
    """Whether a kernel's name suggests communication (for those `kernel_kind` does not know)."""
    return _SAYS_COMM.search(name) is not None


# --------------------------------------------------------------------------------------------
# host ops outside c10d
# --------------------------------------------------------------------------------------------

#: op name prefix -> the backend part of the node's name (`symm_mem:all_reduce`, `custom_ar:all_reduce`)
LIBRARIES = {"symm_mem::": "symm_mem", "_C_custom_ar::": "custom_ar"}
LIBRARY_PREFIXES = tuple(LIBRARIES)
_REDUCE_OPS = frozenset(("sum", "avg", "max", "min", "prod", "premul_sum", "mean"))
_SYMM_STRIP = re.compile(r"^(?:multimem_)?(?:one_shot_|two_shot_)?|(?:_out|_)$")


def library_kind(name: str) -> str | None:
    """The collective a library op runs, or None.

    >>> [library_kind(n) for n in ("symm_mem::multimem_all_reduce_", "symm_mem::two_shot_all_reduce_out",
    ...                           "symm_mem::multimem_all_gather_out", "_C_custom_ar::all_reduce",
    ...                           "symm_mem::rendezvous")]
    ['all_reduce', 'all_reduce', 'all_gather', 'all_reduce', None]
    """
    if name.startswith("symm_mem::"):
        base = _SYMM_STRIP.sub("", name[len("symm_mem::"):])
        return base if base in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all") else None
    if name == "_C_custom_ar::all_reduce":
        return "all_reduce"
    return None


def input_index(name: str) -> int:
    """Which argument is the data: vLLM's `all_reduce(int fa, Tensor inp, Tensor! out, ...)`
    has it second, symmetric memory's ops first."""
    return 1 if name.startswith("_C_custom_ar::") else 0


def group_name(values: list) -> str | None:
    """Torch's group name among a symmetric-memory op's arguments: its string argument that is
    not a reduce op (`symm_mem::one_shot_all_reduce(Tensor input, str reduce_op, str group_name)`)."""
    names = [v for v in values if isinstance(v, str) and v and v not in _REDUCE_OPS]
    return names[-1] if names else None
