"""Fault injection: each test breaks a private Redis server under a running worker.

A package (unlike the other test folders) so that its ``conftest.py`` is imported as
``faults.conftest`` and does not shadow the root ``conftest`` module that test files import
helpers from.
"""
