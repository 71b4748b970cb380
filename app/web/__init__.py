"""The dashboard: server-rendered pages with htmx for the parts that update (see urls.py)."""
