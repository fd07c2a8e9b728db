"""Every fault of a rejected file, as a page shows it: one line saying nothing was stored, then
a table of the listed faults (line as a spreadsheet shows it, column, value, problem) and the
count of the rest. Used by the upload panel (Run) and the ratings panel (Drift)."""

from __future__ import annotations

import streamlit as st

from core.errors import AuditError
from core.format import md_cell, md_escape, num
from core.ingest import faults_frame
from core.tables import FileFaults

__all__ = ["show_faults"]


def show_faults(exc: AuditError, *, action: str = "imported", key: str = "import") -> None:
    """``exc`` in full: a :class:`FileFaults` as a table of every listed fault, anything else
    as its one-line reason. ``action`` says what did not happen ("imported", "analysed")."""
    with st.container(key=f"{key}-error"):
        if isinstance(exc, FileFaults):
            st.error(md_escape(f"The file was not {action}, and nothing was stored: "
                               f"{num(exc.total)} fault(s) in {exc.file}. Fix them in the "
                               "export and upload it again."))
            # a static table: the problem text wraps instead of being cut at the cell's edge
            # (its cells are Markdown, so every value is escaped: user text stays literal)
            table = faults_frame(exc).map(md_cell)
            table.columns = [md_cell(c) for c in table.columns]
            st.table(table, hide_index=True)
            if exc.hidden:
                st.caption(f"… and {num(exc.hidden)} more fault(s) not listed (the first "
                           f"{len(exc.faults)} are shown).")
        else:
            st.error(md_escape(f"The file was not {action}, and nothing was stored: {exc}"))
