"""The dashboard at /ui: its history (history.py, kept in the store by buckets.py) and the live view
its one event stream sends (live.py). routes/dashboard.py serves the page, the stream and the stop action."""
