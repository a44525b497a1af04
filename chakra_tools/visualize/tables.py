"""HTML tables of the report's sections (report.py, links.py, whatif.py draw theirs with it)."""

from __future__ import annotations

from html import escape


def html_table(header: list[str], rows: list[list[str]], chart: str | None = None) -> str:
    """A table of escaped header cells and ready HTML cells; `chart` names it for the page's
    script (`data-chart`)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    named = f' data-chart="{chart}"' if chart else ""
    return f"<table{named}><tr>{head}</tr>{body}</table>"
