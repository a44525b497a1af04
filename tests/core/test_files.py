"""core/files.py: every way a small JSON or YAML file can be unreadable ends in one InputError
line naming the file (reproducers minimized from the fuzz harness, tests/fuzz)."""

from __future__ import annotations

import pytest

from chakra_tools.core.errors import InputError
from chakra_tools.core.files import read_json, read_yaml_mapping

DEEP_JSON = '{"1": ' + "[" * 5000 + "]" * 5000 + "}"


def _error(fn, path) -> str:
    with pytest.raises(InputError) as e:
        fn(path)
    message = str(e.value)
    assert message.startswith(str(path)) and "\n" not in message
    return message


def test_deeply_nested_json_is_an_input_error(tmp_path):
    p = tmp_path / "comm_group.json"
    p.write_text(DEEP_JSON)
    assert "nested too deeply" in _error(read_json, p)


def test_deeply_nested_yaml_is_an_input_error(tmp_path):
    p = tmp_path / "net.yml"
    p.write_text("topology: [ Ring ]\nextra: " + "[" * 5000 + "]" * 5000 + "\n")
    assert "nested too deeply" in _error(read_yaml_mapping, p)


def test_non_utf8_yaml_names_the_line(tmp_path):
    p = tmp_path / "net.yml"
    p.write_bytes(b"topology: [ Ring ]\nbandwidth: [ \xff\xfe ]\n")
    assert "line 2: not UTF-8 text (byte 0xff" in _error(read_yaml_mapping, p)


def test_non_utf8_json_names_the_line(tmp_path):
    p = tmp_path / "system.json"
    p.write_bytes(b'{\n"a": "\xc3"}')
    assert "line 2: not UTF-8 text" in _error(read_json, p)


def test_yaml_syntax_error_is_one_line_with_its_place(tmp_path):
    p = tmp_path / "net.yml"
    p.write_text("topology: [ Ring\nnpus_count: [ 4 ]\n")
    assert "line 2 column" in _error(read_yaml_mapping, p)


def test_yaml_value_its_constructor_refuses(tmp_path):
    p = tmp_path / "net.yml"
    p.write_text("topology: [ Ring ]\nwhen: 2024-13-45\n")  # a date that is not one
    assert "not valid YAML" in _error(read_yaml_mapping, p)


def test_chrome_trace_or_replay_result_deeply_nested_or_corrupt_gzip(tmp_path):
    """What trace-visualize reads as a replay result or Chrome trace: same one-line errors."""
    import gzip

    from chakra_tools.core.chrome_trace import load

    p = tmp_path / "result.json"
    p.write_text('{"ranks": ' + "[" * 5000 + "]" * 5000 + "}")
    assert "nested too deeply" in _error(load, p)
    z = bytearray(gzip.compress(b'{"traceEvents": [' + b'{"ph": "X", "ts": 1},' * 200 + b"{}]}", mtime=0))
    z[len(z) // 2] ^= 0xFF
    q = tmp_path / "trace.json.gz"
    q.write_bytes(bytes(z))
    assert "not a Chrome trace JSON file" in _error(load, q)
