"""Integration tests use the shared service fixtures of tests/conftest.py."""
