"""Screening score variance audit — the product's core (never imports streamlit)."""

__version__ = "0.1.0"
