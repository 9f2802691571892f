"""Tests of the documentation site: every code block runs or is marked as a fragment.

A package (like ``tests/faults``) so that its ``conftest.py`` is imported as
``docs.conftest`` and does not shadow the root ``conftest`` module.
"""
