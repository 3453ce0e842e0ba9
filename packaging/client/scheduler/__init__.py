"""allot-client's `scheduler`: only its pure core (../../scheduler/core), which the CLI uses for durations.
The server's own scheduler/__init__.py is empty too."""
