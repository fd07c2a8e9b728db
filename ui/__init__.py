"""The Streamlit side of the product: session state, the shared sidebar, display formatting.

Pages import from here; ``core`` never does (it never imports streamlit).
"""
