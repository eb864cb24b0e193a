"""Benchmarks: run the project and its baseline side by side and print ratios."""
