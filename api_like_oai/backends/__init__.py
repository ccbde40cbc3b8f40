"""Clients of upstream servers. They know HTTP and the upstream's JSON, nothing of Flask."""
