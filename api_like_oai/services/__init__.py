"""Use cases: turn a validated request into upstream generations and OpenAI responses."""
