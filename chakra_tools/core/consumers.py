"""What one consumer of the format rejects or mis-runs, beyond what every simulator needs.

`core.validate` checks what any simulator needs (ids, dependencies, contract kinds, the attributes
communication needs, process groups, matching collectives and sends). A consumer may refuse more:
`trace-validate --for astra-sim` adds the rules below, each a fact of ASTRA-sim 2.0 (astra-sim
518bd51, REFERENCE §4, docs/reference/trace-validate.md "Checking for ASTRA-sim"). Every rule is a small function
of one node; `RULES[target]` lists them, and the validator runs them on every node (so the
compiled common case is off for a target: it only knows the general checks).

Rules that need the whole rank (dependencies on later nodes) are flags here (`FORWARD_DEPS`) that
the validator reports from what it already tracks. `ADAPTERS[target]` rewrites a node into what
the consumer runs (`trace-convert --for astra-sim`).
"""

from __future__ import annotations

from typing import Callable, Iterator, Mapping

from .model import Attr, CommType, Node, NodeType, make_attr

Problem = tuple[str, str, str]  # severity, code, message
_COMM = frozenset((NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE))
_FALSE = Attr("bool_val", False)
Rule = Callable[[Node, "Mapping[str, tuple[int, ...]] | None"], Iterator[Problem]]

#: collective kinds ASTRA-sim 2.0 simulates with its network model (Workload::issue_comm)
ASTRA_SIMULATED = frozenset((CommType.ALL_REDUCE, CommType.ALL_GATHER, CommType.REDUCE_SCATTER,
                             CommType.ALL_TO_ALL))


def _metadata_node(node: Node, groups) -> Iterator[Problem]:
    """Every issued node goes through Statistics::get_operator_type, which has no case for
    METADATA_NODE and reaches assert(false) (kept in its Release build): the run aborts."""
    if node.type is NodeType.METADATA_NODE:
        yield ("error", "astra-metadata-node",
               "METADATA node: ASTRA-sim 2.0 aborts on it (assert in Statistics::get_operator_type); "
               "write it as a COMP node (trace-convert does unless --metadata-nodes)")


def _invalid_node(node: Node, groups) -> Iterator[Problem]:
    if node.type is NodeType.INVALID_NODE:
        yield ("warning", "astra-invalid-node",
               "INVALID node: ASTRA-sim skips it (its dependents run as if it took no time)")


def _comm_on_cpu(node: Node, groups) -> Iterator[Problem]:
    """Workload::issue_comm throws "Comm node should not be on CPU"."""
    if node.type in _COMM and node.attrs.get("is_cpu_op", _FALSE).value is True:
        yield ("error", "astra-comm-on-cpu",
               "communication node with is_cpu_op true: ASTRA-sim throws 'Comm node should not be on CPU'")


def _collective_kind(node: Node, groups) -> Iterator[Problem]:
    if node.type is not NodeType.COMM_COLL_NODE or "comm_type" not in node.attrs:
        return  # a missing comm_type is the general `missing-comm-type`
    ct = node.comm_type
    if ct is CommType.BROADCAST:
        yield ("warning", "astra-broadcast",
               "BROADCAST: ASTRA-sim has no network model for it and replays its recorded duration")
    elif ct is not None and ct not in ASTRA_SIMULATED:
        yield ("error", "astra-unsupported-collective",
               f"{ct.name}: ASTRA-sim 2.0 simulates only ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER "
               "and ALL_TO_ALL (BROADCAST by duration) and throws 'Unsupported collective comm type' "
               "(trace-convert --for astra-sim writes the nearest kind it runs)")


def _pg_lookup(node: Node, groups) -> Iterator[Problem]:
    """ASTRA-sim looks a non-empty `pg_name` up in the comm-group file (`--comm-group-configuration`);
    without that file every such name is unknown. (With the file, `unknown-pg` is general.)"""
    if node.type not in _COMM or groups is not None:
        return
    pg = node.pg_name
    if pg and pg != "0":
        yield ("error", "astra-no-comm-groups",
               f"pg_name {pg!r} but no comm_group.json: ASTRA-sim cannot find the group")


def _single_rank_group(node: Node, groups) -> Iterator[Problem]:
    if node.type is not NodeType.COMM_COLL_NODE or not groups:
        return
    ranks = groups.get(node.pg_name or "")
    if ranks is not None and len(ranks) == 1:
        yield ("warning", "astra-single-rank-group",
               f"collective on group {node.pg_name} of one rank {list(ranks)}: some ASTRA-sim builds "
               "never complete a collective without peers")


RULES: dict[str, tuple[Rule, ...]] = {
    "astra-sim": (_metadata_node, _invalid_node, _comm_on_cpu, _collective_kind,
                  _pg_lookup, _single_rank_group),
}

#: targets whose feeders read the file in order, so that a dependency on a later node holds its
#: node back until the reader gets there (the older feeder looks ahead one window only)
FORWARD_DEPS = frozenset(("astra-sim",))


def rules_for(target: str | None) -> tuple[Rule, ...]:
    """The extra rules of a target (none for None); ValueError naming the known ones."""
    if target is None:
        return ()
    try:
        return RULES[target]
    except KeyError:
        raise ValueError(f"unknown target {target!r} (known: {', '.join(sorted(RULES))})") from None


def check_for(node: Node, rules: tuple[Rule, ...], groups) -> list[Problem]:
    """Every problem the rules find in one node."""
    return [p for rule in rules for p in rule(node, groups)]


# --------------------------------------------------------------------------------------------
# adapting a trace to a consumer (trace-convert --for astra-sim)
# --------------------------------------------------------------------------------------------

#: the kind ASTRA-sim 2.0 runs in place of each kind it cannot simulate, the nearest in what it
#: moves (same `comm_size` convention, docs/reference/trace-convert.md), and a size where the kind has none: a
#: barrier is what ProcessGroupNCCL makes of it, an all-reduce of one float32
ASTRA_NEAREST: dict[CommType, tuple[CommType, int | None]] = {
    CommType.BARRIER: (CommType.ALL_REDUCE, 4),
    CommType.REDUCE: (CommType.ALL_REDUCE, None),
    CommType.GATHER: (CommType.ALL_GATHER, None),
    CommType.SCATTER: (CommType.ALL_GATHER, None),
    CommType.REDUCE_SCATTER_BLOCK: (CommType.REDUCE_SCATTER, None),
}


def for_astra_sim(node: Node) -> Node:
    """The node as ASTRA-sim 2.0 can run it: a collective of a kind it cannot simulate becomes
    the nearest kind it can, its recorded kind kept in `recorded_comm_type`; any other node is
    returned as it is.

    >>> from chakra_tools.core.model import make_attrs
    >>> n = Node(3, "gloo:barrier", NodeType.COMM_COLL_NODE,
    ...          attrs=make_attrs(comm_type=CommType.BARRIER, comm_size=0, is_cpu_op=False))
    >>> m = for_astra_sim(n)
    >>> m.comm_type.name, m.comm_size, m.attr("recorded_comm_type")
    ('ALL_REDUCE', 4, 'BARRIER')
    """
    if node.type is not NodeType.COMM_COLL_NODE or node.comm_type not in ASTRA_NEAREST:
        return node
    kind, size = ASTRA_NEAREST[node.comm_type]
    attrs = {**node.attrs, "comm_type": make_attr("comm_type", int(kind)),
             "recorded_comm_type": make_attr("recorded_comm_type", node.comm_type.name)}
    if size is not None:
        attrs["comm_size"] = make_attr("comm_size", size)
    return node.replace(attrs=attrs)


ADAPTERS: dict[str, Callable[[Node], Node]] = {"astra-sim": for_astra_sim}
