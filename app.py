"""Screening score variance audit — the router.

``streamlit run app.py``: the pages of the six steps (and Drift), the shared sidebar, nothing
else. The database is ``$AUDIT_DB`` or ``data/audits.duckdb``; the demo audit is created on the
first start so the app opens straight into it, offline.
"""

from pathlib import Path

import streamlit as st

from ui import state

st.set_page_config(page_title="Screening score variance audit", page_icon=":material/target:",
                   layout="wide")
state.init_state(router=True)

_here = Path(__file__).resolve().parent
pages = [st.Page(path, title=title, url_path=url)
         for url, (path, title) in state.PAGES.items() if (_here / path).exists()]
# Compare (did the fix work?) comes right after Band
_after_band = next((i + 1 for i, p in enumerate(pages) if p.url_path == "band"), len(pages))
pages.insert(_after_band, st.Page("pages/compare.py", title="Compare", url_path="compare"))
sections = {"Audit": [p for p in pages if p.url_path != "drift"],
            "Over time": [p for p in pages if p.url_path == "drift"]}
pg = st.navigation({name: ps for name, ps in sections.items() if ps})
state.sidebar(state.get_store())
pg.run()
