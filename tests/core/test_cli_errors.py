"""What a command prints when something goes wrong: one line and a documented exit code, never a
traceback, whatever raised."""

from __future__ import annotations

from typer.testing import CliRunner

from chakra_tools.cli.common import BUG_EXIT
from chakra_tools.cli.replay import app as replay_app
from chakra_tools.cli.visualize import app as visualize_app

runner = CliRunner()


def test_an_output_folder_that_does_not_exist_is_one_line_naming_it(shared_fixtures, tmp_path):
    rankset = shared_fixtures / "astra-sim" / "all_reduce_4npus_1MB"
    out = tmp_path / "no" / "such" / "dir" / "r.json"
    res = runner.invoke(replay_app, [str(rankset), "--out", str(out)])
    assert res.exit_code == 2
    assert "Traceback" not in res.output and str(tmp_path / "no" / "such" / "dir") in res.output
    assert not (tmp_path / "no").exists()


def test_a_bug_is_one_line_that_says_so_with_the_traceback_on_request(shared_fixtures, monkeypatch):
    import chakra_tools.core.stats as stats

    def broken(*a, **k):
        return {}["a key the code forgot"]

    monkeypatch.setattr(stats, "summarize_path", broken)
    path = str(shared_fixtures / "astra-sim" / "all_reduce_4npus_1MB")
    res = runner.invoke(visualize_app, ["summary", path])
    assert res.exit_code == BUG_EXIT
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: internal error (a bug in chakra-tools")
    assert "KeyError" in lines[0] and "CHAKRA_TOOLS_DEBUG=1" in lines[0]
    monkeypatch.setenv("CHAKRA_TOOLS_DEBUG", "1")
    res = runner.invoke(visualize_app, ["summary", path])
    assert isinstance(res.exception, KeyError)  # raised through: the traceback is shown


def test_a_comm_group_file_with_a_member_that_is_not_a_rank_is_refused_by_every_command(shared_fixtures, tmp_path):
    import json
    import shutil

    from chakra_tools.cli.validate import app as validate_app

    src = shared_fixtures / "astra-sim" / "all_reduce_4npus_1MB"
    shutil.copytree(src, tmp_path / "set")
    for members, says in (([0, 1, "x", 3], "member 'x' is not a rank"), ([0, 1, 2**40], "member 1099511627776"),
                          ([0, 1, 1, 3], "rank 1 listed twice"), ({"a": 1}, "expected a list of ranks")):
        (tmp_path / "set" / "comm_group.json").write_text(json.dumps({"1": members}))
        for app, args in ((validate_app, []), (replay_app, [])):
            res = runner.invoke(app, [*args, str(tmp_path / "set")])
            assert res.exit_code == 2, (members, res.output)
            assert says in res.output and "comm_group.json" in res.output and "Traceback" not in res.output


def test_a_node_of_an_unknown_type_is_refused_by_the_replay_as_by_the_reader(tmp_path):
    from google.protobuf.internal.encoder import _VarintBytes

    from chakra_tools.core.etwrite import write_trace
    from chakra_tools.core.framing import iter_frames
    from chakra_tools.core.model import Node, NodeType, make_attrs
    from chakra_tools.core.schema import et_def_pb2 as pb

    path = tmp_path / "t.0.et"
    write_trace(path, [Node(1, "a", NodeType.COMP_NODE, duration_micros=5, attrs=make_attrs(is_cpu_op=False)),
                       Node(2, "b", NodeType.COMP_NODE, (1,), duration_micros=5)])
    with open(path, "rb") as f:
        frames = [b for _, b in iter_frames(f)]
    node = pb.Node.FromString(frames[2])
    node.type = 8  # proto3 keeps an enum value it does not know
    frames[2] = node.SerializeToString()
    path.write_bytes(b"".join(_VarintBytes(len(b)) + b for b in frames))
    for args in ([], ["--no-validate"]):
        res = runner.invoke(replay_app, [str(tmp_path), *args])
        assert res.exit_code == 2 and "node 2 has unknown node type 8" in res.output, res.output
