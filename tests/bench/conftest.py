"""Fixtures shared by the unit tests."""

from _fake_openai import fake_server

__all__ = ["fake_server"]
