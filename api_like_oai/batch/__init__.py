"""OpenAI's Files and Batch APIs over the store seam, and the runner of batches in the background lane.

- models.py: the requests and answers (pydantic; the schema in /openapi.json), pure.
- lines.py: a batch's input lines checked and its result lines written in OpenAI's format, pure.
- files.py: files as store objects (a document, the content as items), a key's index of its files.
- batches.py: a batch as a store object, the queue every instance's runner reads, cancel, list.
- runner.py: claims a batch through the store (one runner per batch), runs its lines through the app
  in-process at the lowest priority, writes each result once, finalizes.
"""
