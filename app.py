"""Screening score variance audit — the router.

``streamlit run app.py``: who may see the app (loopback, or a login), the pages of the six steps
(and Drift), the shared sidebar, nothing else. The database is ``$AUDIT_DB`` or
``data/audits.duckdb``; the demo audit is created on the first start so the app opens straight
into it, offline.
"""

import streamlit as st

from ui import state

# an emoji icon is drawn locally (a ":material/…:" icon is fetched from a font host)
st.set_page_config(page_title="Screening score variance audit", page_icon="🎯",
                   layout="wide")
state.access_gate()
state.init_state(router=True)

pages = state.app_pages()
# the sidebar draws the links itself (they carry ?audit=…, so a page switch is one history entry)
pg = st.navigation(list(pages.values()), position="hidden")
state.sidebar(state.get_store(), pages)
state.layout()
pg.run()
