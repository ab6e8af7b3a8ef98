"""Processes that run candidate code: the subprocess runner, the sandbox, the fork server."""
