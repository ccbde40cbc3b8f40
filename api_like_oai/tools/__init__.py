"""Tool calling: what the model writes -> OpenAI tool calls, and the grammars that constrain it.

Pure code: no Flask, no network. `formats/` holds one small module per native tool-call format,
`parser.py` the incremental parser fed one token's text at a time, `grammar.py` JSON schema -> GBNF.
"""
