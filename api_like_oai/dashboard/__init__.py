"""The dashboard at /ui: its history (history.py, kept in the store by buckets.py) and the live view
its one event stream sends (live.py). routes/dashboard.py serves the page, the stream and the stop action.

Design notes (moved from DESIGN.md, which points here):

- **The dashboard** (`dashboard/`, `/ui`, static files in `api_like_oai/ui/`): snapshots, not pushes, at most
  once a second per process, from what is kept anyway. `live.Collector` does the I/O from narrow `Sources`
  (every worker's requests, the models, the supervisor, the fleet), then `live.payload`, pure. History is
  additive minute and hour buckets flushed into the seam (`ON CONFLICT ... count + excluded.count`,
  `HINCRBYFLOAT`), so workers and instances add into the same buckets; TTFT bounds are ×1.25 apart so
  percentiles merge by adding. The stream needs a key in `Authorization` (`fetch()`: a key in a URL lands in
  logs); a strict CSP, `textContent` only.
"""
