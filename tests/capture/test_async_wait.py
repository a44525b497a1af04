"""`Work.wait()` on an asynchronous call (async_op=True, isend/irecv) is annotated at capture
time and converted into the dependency it is: the wait after the call it waits for."""

from __future__ import annotations

import textwrap

from chakra_tools.convert.run import convert, inputs_from_run
from chakra_tools.core.annotations import parse_wait
from chakra_tools.core.model import NodeType
from capture_helpers import LAUNCH_2, host_annotations, run_capture

SCRIPT = textwrap.dedent("""
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(6):
        loss = model(torch.randn(8, 32)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        work = dist.all_reduce(grads, async_op=True)
        x = torch.randn(64, 64) @ torch.randn(64, 64)   # overlapped with the all-reduce
        work.wait()
        buf = torch.zeros(16)
        req = dist.isend(torch.ones(16), 1) if rank == 0 else dist.irecv(buf, 0)
        req.wait()
        opt.step()
    dist.barrier()
    dist.destroy_process_group()
""")


def test_waits_are_annotated_and_converted_into_edges(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    run = run_capture(["-o", "run", "--", *LAUNCH_2, "train.py"], cwd=tmp_path,
                      folder=tmp_path / "run", timeout=240)
    assert run.code == 0, run.stderr[-3000:]
    for rank in (0, 1):
        waits = [parse_wait(n) for n in host_annotations(run.host(rank)) if parse_wait(n)]
        assert sorted(w["waits_for"] for w in waits) == sorted(["all_reduce", "send" if rank == 0 else "recv"] * 2)
    report = convert(inputs_from_run(run.folder), tmp_path / "et", executor="serial")
    for g in report.rankset:
        comm = {n.id: n for n in g if n.type.is_comm}
        waits = [n for n in g if parse_wait(n.name)]
        assert len(waits) == 4  # two captured steps, one wait on each call
        for w in waits:
            waited = [comm[d] for d in w.deps if d in comm]
            assert len(waited) == 1, w  # the call it waits for
            kind = parse_wait(w.name)["waits_for"]
            assert (waited[0].type is NodeType.COMM_COLL_NODE) == (kind == "all_reduce")
