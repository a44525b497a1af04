"""trace-convert onnx | text | generate: the front ends that are not PyTorch traces.

Stage code is imported inside the commands, so `trace-convert --help` imports neither onnx nor
the front ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import handle_errors, print_json


def _dims(text: Optional[str]) -> Optional[tuple[int, ...]]:
    if not text:
        return None
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated integers, got {text!r}") from None


def _write(rankset, out: Path, prefix: str, as_json: bool, extra: dict) -> None:
    from chakra_tools.frontends.builder import write_rankset

    info = {**write_rankset(rankset, out, prefix), **extra}
    if as_json:
        print_json(info)
    else:
        typer.echo(f"wrote {info['ranks']} ranks ({info['nodes']} nodes, {info['groups']} groups, "
                   f"{info['comm_bytes_sent']:,} bytes sent) to {out}/{prefix}.<rank>.et")
        for note in extra.get("notes", []):
            typer.echo(f"note: {note}", err=True)


def onnx_cmd(
    model: Path = typer.Argument(..., help="ONNX model (.onnx); external data need not be present"),
    as_json: bool = typer.Option(False, "--json", help="print the parameter table as JSON"),
    emit: str = typer.Option("table", help="table | text (ASTRA-sim 1.0 workload) | et (rank set)"),
    policy: str = typer.Option("DATA", help="text: DATA, MODEL, HYBRID_DATA_MODEL, HYBRID_MODEL_DATA, "
                               "HYBRID_TRANSFORMER"),
    strategy: str = typer.Option("data", help="et: data | tensor | pipeline | hybrid"),
    npus: int = typer.Option(8, help="et: ranks"),
    tp: int = typer.Option(1, help="et hybrid: tensor parallel degree; text: model group size"),
    pp: int = typer.Option(1, help="et hybrid: pipeline stages"),
    microbatches: int = typer.Option(1, help="et: microbatches per iteration"),
    zero: int = typer.Option(0, help="et data/hybrid: ZeRO stage 0-3"),
    iterations: int = typer.Option(1, help="et: training iterations to unroll"),
    device_name: str = typer.Option("H100", "--device", help="roofline device, or TFLOPS:GBps"),
    efficiency: float = typer.Option(1.0, help="fraction of the device's peak reached"),
    measured: Optional[Path] = typer.Option(None, help="a captured .et whose op times to use"),
    frequency: float = typer.Option(1.0, help="text: NPU clock in GHz (cycles per ns)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="text: file; et: folder"),
) -> None:
    """ONNX model -> ModTrans per-layer parameter table, ASTRA-sim 1.0 text workload, or ET ranks.

    Examples (python examples/workloads/make_onnx_models.py DIR writes small models to try):

        trace-convert onnx model.onnx

        trace-convert onnx model.onnx --emit et --strategy hybrid --npus 8 --tp 2 -o out/onnx
    """
    from chakra_tools.frontends.costs import MeasuredTimes, device
    from chakra_tools.frontends.onnx_model import summarize
    from chakra_tools.frontends import onnx_workload as ow

    summary = summarize(model)
    if emit == "table":
        return _print_table(summary, as_json)
    if emit not in ("text", "et"):
        raise typer.BadParameter(f"--emit must be table, text or et, got {emit!r}")
    times = MeasuredTimes.from_trace(measured) if measured else None
    layers = ow.fold(summary, device(device_name, efficiency), times)
    if emit == "text":
        return _emit_text(ow.to_text_workload(layers, policy, model_parallel=tp,
                                              frequency_ghz=frequency, source=model.name), out)
    if out is None:
        raise typer.BadParameter("--emit et needs --out FOLDER")
    strat = ow.strategy_for(strategy, npus, tp=tp, pp=pp, microbatches=microbatches, zero=zero,
                            iterations=iterations)
    rs = ow.onnx_rankset(layers, strat, source=model.name)
    _write(rs, out, model.stem, as_json, {"strategy": strategy, "notes": summary.notes})


def _emit_text(wl, out: Optional[Path]) -> None:
    from chakra_tools.frontends.textwl import format_text_workload, write_text_workload

    if out is None:
        typer.echo(format_text_workload(wl), nl=False)
        return
    write_text_workload(wl, out)
    typer.echo(f"wrote {len(wl.layers)} layers ({wl.policy}) to {out}")


def _print_table(summary, as_json: bool) -> None:
    if as_json:
        return print_json(summary.to_dict())
    width = max([len(ly.name) for ly in summary.layers] + [5])
    typer.echo(f"{'layer':<{width}}  {'op':<13} {'variables':>12}  {'type':<5} {'bytes':>14} "
               f"{'fwd MFLOP':>11}")
    for ly in summary.layers:
        typer.echo(f"{ly.name:<{width}}  {ly.op:<13} {ly.params:>12,}  {ly.dtype:<5} {ly.bytes:>14,} "
                   f"{ly.flops / 1e6:>11,.1f}")
    total_flops = sum(op.flops for op in summary.ops)
    typer.echo(f"{'total':<{width}}  {str(len(summary.layers)) + ' layers':<13} "
               f"{summary.total_params:>12,}  {'':<5} {summary.total_bytes:>14,} {total_flops / 1e6:>11,.1f}")
    for note in summary.notes:
        typer.echo(f"note: {note}", err=True)


def text_cmd(
    workload: Path = typer.Argument(..., help="ASTRA-sim 1.0 text workload"),
    npus: int = typer.Option(..., help="number of NPUs (ranks) to write"),
    dims: Optional[str] = typer.Option(None, help="NPUs per network dimension, innermost first, "
                                       "e.g. 4,2 (default: one dimension)"),
    frequency: float = typer.Option(1.0, help="NPU clock in GHz: compute columns are cycles"),
    passes: int = typer.Option(1, help="training passes to unroll"),
    out: Path = typer.Option(Path("out"), "--out", "-o", help="output folder"),
    prefix: Optional[str] = typer.Option(None, help="file prefix (default: the workload's name)"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
) -> None:
    """ASTRA-sim 1.0 text workload -> Chakra ET rank set (cycles -> ns, NONE = no communication).

    Example (trace-convert onnx ... --emit text writes such a workload):

        trace-convert text Resnet50_DataParallel.txt --npus 16 -o out/resnet
    """
    from chakra_tools.frontends import TextOptions, read_text_workload, text_to_rankset

    wl = read_text_workload(workload)
    rs, notes = text_to_rankset(wl, TextOptions(npus, _dims(dims), frequency, passes))
    _write(rs, out, prefix or workload.stem, as_json,
           {"policy": wl.policy, "notes": [str(n) for n in notes]})


def generate_cmd(
    config: Optional[Path] = typer.Option(None, help="YAML file of settings (options override it)"),
    layers: Optional[int] = typer.Option(None, help="transformer blocks"),
    hidden: Optional[int] = typer.Option(None, help="hidden size"),
    ffn: Optional[int] = typer.Option(None, help="FFN size (default 4 x hidden)"),
    heads: Optional[int] = typer.Option(None, help="attention heads"),
    seq: Optional[int] = typer.Option(None, help="sequence length"),
    batch: Optional[int] = typer.Option(None, help="global batch, in sequences"),
    vocab: Optional[int] = typer.Option(None, help="vocabulary size"),
    experts: Optional[int] = typer.Option(None, help="experts per MoE layer (0: dense)"),
    top_k: Optional[int] = typer.Option(None, help="experts per token"),
    tp: Optional[int] = typer.Option(None, help="tensor parallel degree"),
    dp: Optional[int] = typer.Option(None, help="data parallel degree"),
    pp: Optional[int] = typer.Option(None, help="pipeline stages"),
    ep: Optional[int] = typer.Option(None, help="expert parallel degree (divides dp)"),
    microbatches: Optional[int] = typer.Option(None, help="microbatches per iteration"),
    zero: Optional[int] = typer.Option(None, help="ZeRO stage 0-3 (3 = FSDP)"),
    iterations: Optional[int] = typer.Option(None, help="iterations to unroll"),
    device_name: Optional[str] = typer.Option(None, "--device", help="roofline device or TFLOPS:GBps"),
    efficiency: Optional[float] = typer.Option(None, help="fraction of peak reached"),
    out: Path = typer.Option(..., "--out", "-o", help="output folder (created)"),
    prefix: str = typer.Option("workload", help="file prefix"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
) -> None:
    """Parameterised transformer training (tp x dp x pp ranks) -> per-rank ET + comm_group.json.

    Say what to generate: a --config file (examples/workloads/ has some), the model's options,
    or both (the options override the file).

    Examples:

        trace-convert generate --config examples/workloads/gpt_8rank.yml -o out/gpt8

        trace-convert generate --layers 24 --hidden 2048 --tp 2 --dp 4 --pp 2 -o out/gpt16
    """
    from chakra_tools.frontends.generate import TransformerConfig, generate

    base = TransformerConfig.from_file(config) if config else TransformerConfig()
    given = {k: v for k, v in dict(layers=layers, hidden=hidden, ffn=ffn, heads=heads, seq=seq,
                                   batch=batch, vocab=vocab, experts=experts, top_k=top_k, tp=tp,
                                   dp=dp, pp=pp, ep=ep, microbatches=microbatches, zero=zero,
                                   iterations=iterations, device=device_name,
                                   efficiency=efficiency).items() if v is not None}
    if config is None and not given:
        raise typer.BadParameter("nothing says what to generate: give --config FILE (examples/workloads/*.yml) "
                                 "or the model's options (--layers, --hidden, --tp, --dp, --pp ...)",
                                 param_hint="--config")
    cfg = TransformerConfig.from_mapping({**base.to_dict(), **given})
    _write(generate(cfg), out, prefix, as_json, {"config": cfg.to_dict()})


def register(app: typer.Typer) -> None:
    """Add the front-end subcommands to the trace-convert app."""
    app.command("onnx")(handle_errors(onnx_cmd))
    app.command("text")(handle_errors(text_cmd))
    app.command("generate")(handle_errors(generate_cmd))
