"""Processes: children that die with their parent, isolated job runs, the multi-process
supervisor.
"""
