"""`trace-visualize graph`: GraphML for any size, DOT and SVG for graphs small enough to draw.

GraphML is written as a stream (one line per node and edge, no networkx in between), so a
million-node rank set costs memory only for the graph already loaded. Node ids are
`"<rank>:<node id>"`, so several ranks fit one file; every node carries rank, node_id, name,
type and the times and communication attributes it has; every edge a `kind` of "data", "ctrl"
or "data+ctrl".

DOT and SVG are refused beyond `DRAW_LIMIT` nodes: Graphviz's layout grows much faster than
linearly (Chakra's own visualizer takes minutes on 445 nodes), and a drawing of thousands of
boxes is unreadable anyway. The error suggests the filters (select.py) that cut it down.
Styles: box colour and shape by node kind; data dependencies solid, control dependencies dashed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping
from xml.sax.saxutils import escape, quoteattr

from chakra_tools.core.errors import ChakraToolsError, InputError
from chakra_tools.core.commit import atomic_output
from chakra_tools.core.graph import Graph, RankSet
from chakra_tools.core.model import Node, NodeType, format_bytes

from .select import Selection, select

#: the most nodes DOT / SVG output draws; documented in docs/reference/trace-visualize.md
DRAW_LIMIT = 1000
DOT_TIMEOUT_S = 120
FILTER_HINT = ("narrow it with --rank, --ids FIRST:LAST, --step, --kind, --name REGEX or "
               "--around RANK:NODE --radius N, or write GraphML (-o graph.graphml), which has no limit")
INSTALL_HINT = ("Graphviz's `dot` program is not installed: apt-get install graphviz (Debian/Ubuntu), "
                "brew install graphviz (macOS) or conda install graphviz; the DOT text can be "
                "written without it (-o graph.dot)")

#: (fill colour, shape) per node kind
NODE_STYLE: Mapping[NodeType, tuple[str, str]] = {
    NodeType.COMP_NODE: ("#9ecae1", "box"),
    NodeType.COMM_COLL_NODE: ("#fdae6b", "hexagon"),
    NodeType.COMM_SEND_NODE: ("#a1d99b", "cds"),
    NodeType.COMM_RECV_NODE: ("#c7e9c0", "invhouse"),
    NodeType.MEM_LOAD_NODE: ("#dadaeb", "cylinder"),
    NodeType.MEM_STORE_NODE: ("#bcbddc", "cylinder"),
    NodeType.METADATA_NODE: ("#f0f0f0", "note"),
    NodeType.INVALID_NODE: ("#fb6a4a", "octagon"),
}
EDGE_STYLE = {"data": 'style=solid color="#333333"', "ctrl": 'style=dashed color="#999999"',
              "data+ctrl": 'style=bold color="#333333"'}

NODE_KEYS = (("rank", "int"), ("node_id", "long"), ("name", "string"), ("type", "string"),
             ("start_time_micros", "long"), ("duration_micros", "long"), ("comm_type", "string"),
             ("comm_size", "long"), ("pg_name", "string"), ("comm_src", "int"), ("comm_dst", "int"),
             ("comm_tag", "int"))


def graph_edges(g: Graph) -> list[tuple[int, int, str]]:
    """(src, dst, kind) once per pair: a node listed in both data and ctrl deps is "data+ctrl"."""
    kinds: dict[tuple[int, int], str] = {}
    for s, d, k in g.edges():
        kinds[(s, d)] = "data+ctrl" if kinds.get((s, d), k) != k else k
    return [(s, d, k) for (s, d), k in kinds.items()]


def count(view: Mapping[int, Graph]) -> tuple[int, int]:
    """(nodes, edges) of a selection."""
    return sum(len(g) for g in view.values()), sum(len(graph_edges(g)) for g in view.values())


# --------------------------------------------------------------------------------------------
# GraphML
# --------------------------------------------------------------------------------------------

def node_key(rank: int, node_id: int) -> str:
    return f"{rank}:{node_id}"


def _node_data(n: Node, rank: int) -> Iterator[tuple[str, object]]:
    yield "rank", rank
    yield "node_id", n.id
    yield "name", n.name
    yield "type", n.type.name
    yield "start_time_micros", n.start_time_micros
    yield "duration_micros", n.duration_micros
    if n.type.is_comm:
        if n.type is NodeType.COMM_COLL_NODE and n.comm_type is not None:
            yield "comm_type", n.comm_type.name
        yield "comm_size", n.comm_size
        yield "pg_name", n.pg_name
        for k in ("comm_src", "comm_dst", "comm_tag"):
            v = getattr(n, k)
            if v is not None:
                yield k, v


def _graphml_lines(view: Mapping[int, Graph], progress: Callable[[Iterable], Iterable]) -> Iterator[str]:
    yield '<?xml version="1.0" encoding="UTF-8"?>\n'
    yield '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">\n'
    for name, typ in NODE_KEYS:
        yield f'<key id="{name}" for="node" attr.name="{name}" attr.type="{typ}"/>\n'
    yield '<key id="kind" for="edge" attr.name="kind" attr.type="string"/>\n'
    yield '<graph id="chakra" edgedefault="directed">\n'
    for rank in progress(sorted(view)):
        g = view[rank]
        for n in g:
            data = "".join(f'<data key="{k}">{escape(str(v))}</data>' for k, v in _node_data(n, rank))
            yield f"<node id={quoteattr(node_key(rank, n.id))}>{data}</node>\n"
        for s, d, k in graph_edges(g):
            yield (f"<edge source={quoteattr(node_key(rank, s))} target={quoteattr(node_key(rank, d))}>"
                   f'<data key="kind">{k}</data></edge>\n')
    yield "</graph>\n</graphml>\n"


def write_graphml(view: Mapping[int, Graph], path: str | Path, *,
                  progress: Callable[[Iterable], Iterable] = lambda x: x) -> Path:
    """Write the selection as GraphML (any size), atomically."""
    with atomic_output(path, "w") as f:
        for line in _graphml_lines(view, progress):
            f.write(line)
    return Path(path)


# --------------------------------------------------------------------------------------------
# DOT and SVG
# --------------------------------------------------------------------------------------------

def check_drawable(view: Mapping[int, Graph], limit: int = DRAW_LIMIT) -> None:
    """Refuse a drawing beyond `limit` nodes, naming the size and the filters that help."""
    nodes = sum(len(g) for g in view.values())
    if nodes > limit:
        raise InputError(f"the selection has {nodes} nodes; DOT and SVG draw at most {limit} "
                         f"(--max-nodes); {FILTER_HINT}")


def _label(n: Node) -> str:
    text = f"%{n.id} {n.name[:40]}{'…' if len(n.name) > 40 else ''}\\n{n.type.short}"
    if n.type is NodeType.COMM_COLL_NODE and n.comm_type is not None:
        text += f" {n.comm_type.name} {format_bytes(n.comm_size)} pg={n.pg_name or '0'}"
    elif n.type is NodeType.COMM_SEND_NODE:
        text += f" {format_bytes(n.comm_size)} to {n.comm_dst}"
    elif n.type is NodeType.COMM_RECV_NODE:
        text += f" {format_bytes(n.comm_size)} from {n.comm_src}"
    if n.duration_micros:
        text += f" {n.duration_micros}us"
    return text.replace('"', '\\"')


def dot_text(view: Mapping[int, Graph]) -> str:
    """The selection as Graphviz DOT: one cluster per rank, styles by node and edge kind."""
    lines = ["digraph chakra {", "  rankdir=TB;", '  node [style=filled fontname="Helvetica" fontsize=10];',
             '  edge [arrowsize=0.6];']
    for rank in sorted(view):
        lines.append(f'  subgraph "cluster_rank_{rank}" {{')
        lines.append(f'    label="rank {rank}"; color="#cccccc";')
        for n in view[rank]:
            fill, shape = NODE_STYLE.get(n.type, ("#ffffff", "box"))
            lines.append(f'    "{node_key(rank, n.id)}" [label="{_label(n)}" shape={shape} fillcolor="{fill}"];')
        lines.append("  }")
        for s, d, k in graph_edges(view[rank]):
            lines.append(f'  "{node_key(rank, s)}" -> "{node_key(rank, d)}" [{EDGE_STYLE[k]}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_dot(view: Mapping[int, Graph], path: str | Path, *, limit: int = DRAW_LIMIT) -> Path:
    check_drawable(view, limit)
    with atomic_output(path, "w") as f:
        f.write(dot_text(view))
    return Path(path)


def dot_program() -> str | None:
    return shutil.which("dot")


def write_svg(view: Mapping[int, Graph], path: str | Path, *, limit: int = DRAW_LIMIT) -> Path:
    """Render through Graphviz `dot`; an InputError with an install hint when it is missing."""
    check_drawable(view, limit)
    dot = dot_program()
    if dot is None:
        raise InputError(INSTALL_HINT)
    try:
        run = subprocess.run([dot, "-Tsvg"], input=dot_text(view).encode(), capture_output=True,
                             timeout=DOT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise ChakraToolsError(f"{path}: dot took over {DOT_TIMEOUT_S} s; {FILTER_HINT}") from None
    if run.returncode != 0:
        raise ChakraToolsError(f"{path}: dot failed: {run.stderr.decode(errors='replace').strip()[:500]}")
    with atomic_output(path) as f:
        f.write(run.stdout)
    return Path(path)


FORMATS = {"graphml": write_graphml, "dot": write_dot, "svg": write_svg}


def format_of(path: str | Path, explicit: str | None = None) -> str:
    """The output format: given, or from the file name's suffix."""
    fmt = (explicit or Path(path).suffix.lstrip(".")).lower()
    if fmt == "gv":
        fmt = "dot"
    if fmt not in FORMATS:
        raise InputError(f"{path}: unknown graph format {fmt!r}; use .graphml, .dot or .svg (or --format)")
    return fmt


def write_graph(path: str | Path, out: str | Path, selection: Selection | None = None, *,
                fmt: str | None = None, comm_group: str | Path | None = None, max_nodes: int | None = None,
                progress: Callable[[Iterable], Iterable] = lambda x: x) -> dict:
    """`trace-visualize graph`: the selected part of the rank set at `path` written to `out` as
    GraphML (any size), DOT or SVG (at most `max_nodes`, default `DRAW_LIMIT`). Returns what was
    written."""
    fmt = format_of(out, fmt)
    selection = selection or Selection()
    view = select(RankSet.load(path, comm_group), selection)
    nodes, edges = count(view)
    if fmt == "graphml":
        write_graphml(view, out, progress=progress)
    else:
        FORMATS[fmt](view, out, limit=max_nodes if max_nodes is not None else DRAW_LIMIT)
    return {"out": str(out), "format": fmt, "ranks": sorted(view), "nodes": nodes, "edges": edges,
            "selection": selection.describe()}
