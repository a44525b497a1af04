"""The visualize stage: `trace-visualize graph | timeline | report | summary`.

Every timed input is first brought into one shape, an `EventSet` (events.py), by a source:
rank sets and replay results (sources.py), captured runs (captured.py). From there:

- timeline.py draws it as Chrome / Perfetto JSON through `chakra_tools.core.chrome_trace`;
- analysis.py computes the report's numbers, report.py + svg.py render the HTML page;
- select.py filters a rank set and drawing.py writes it as GraphML, DOT or SVG.

No torch, no typer here; networkx is not needed at all (GraphML is written directly).
"""
