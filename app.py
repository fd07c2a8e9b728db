"""Screening score variance audit — the router.

``streamlit run app.py``: who may see the app (loopback, or a login), the pages of the six steps
(and Drift), the shared sidebar, nothing else. The database is ``$AUDIT_DB`` or
``data/audits.duckdb``; the demo audit is created on the first start so the app opens straight
into it, offline.
"""

from pathlib import Path

import streamlit as st

from ui import state

# an emoji icon is drawn locally (a ":material/…:" icon is fetched from a font host)
st.set_page_config(page_title="Screening score variance audit", page_icon="🎯",
                   layout="wide")
state.access_gate()
state.init_state(router=True)

_here = Path(__file__).resolve().parent
pages = {url: st.Page(path, title=title, url_path=url)
         for url, (path, title) in state.PAGES.items() if (_here / path).exists()}
# "/" opens Freeze too, so that /freeze (a bookmark, a shared link) is a page of its own
home = st.Page(state.PAGES["freeze"][0], title=state.PAGES["freeze"][1], url_path="home",
               default=True)
# the sidebar draws the links itself (they carry ?audit=…, so a page switch is one history entry)
pg = st.navigation([home, *pages.values()], position="hidden")
state.sidebar(state.get_store(), pages)
state.layout()
pg.run()
